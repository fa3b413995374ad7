"""What each vec id means, in one line: the text id search ranks on (``cairn_servers.brk.idsearch``) and
``/llms.txt`` lists.

An id is composed (``cairn_servers.brk.catalog``): a base series, an optional unit (``_btc``, ``_usd``; a bare
value series is in sats) and, on coarse indexes, an optional statistic (``_sum``, ``_avg``, ...,
``_cumulative``). The definition is composed the same way: the base's line from :data:`BASES` (or from its
pattern: ``supply_<type>``, ``utxo_count_<type>``, ``address_count_<type>``, ``<type>_count``,
``supply_age_<band>``, ``address_count_balance_<band>``), then the unit, then the statistic. An id no rule
explains gets ``None`` from :func:`definition`; a test walks the whole catalogue so none is left out.

Standard library only; the band bounds are read from ``cairn_servers.brk.addresses`` when first needed.
"""

from __future__ import annotations

import functools

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

# Output script types (cairn_servers.brk.layout.OUTPUT_TYPES, and p2pk = p2pk65 + p2pk33).
TYPES = {
    "p2pk65": "P2PK65 (pay to public key, uncompressed 65-byte key)",
    "p2pk33": "P2PK33 (pay to public key, compressed 33-byte key)",
    "p2pk": "P2PK (pay to public key, both key forms)",
    "p2pkh": "P2PKH (pay to public key hash, legacy addresses starting with 1)",
    "p2ms": "P2MS (bare multisig)",
    "p2sh": "P2SH (pay to script hash, addresses starting with 3)",
    "opreturn": "OP_RETURN (data carrier, unspendable)",
    "p2wpkh": "P2WPKH (pay to witness public key hash, native segwit v0, bc1q addresses)",
    "p2wsh": "P2WSH (pay to witness script hash, segwit v0 scripts)",
    "p2tr": "P2TR (pay to taproot, segwit v1, bc1p addresses)",
    "p2a": "P2A (pay to anchor, fee-bumping anchor outputs)",
    "empty": "empty (an empty script)",
    "unknown": "unknown (a non-standard script)",
}

# base id -> what it is. Words an agent would search with are spelled out next to the abbreviations.
BASES = {
    # blocks
    "block_count": "number of blocks mined",
    "block_size": "block size in bytes, serialized with witness data",
    "block_weight": "block weight in weight units",
    "block_vbytes": "block virtual size in vbytes (weight / 4)",
    "block_interval": "seconds between a block's timestamp and the previous block's, the block time",
    "tx_count": "number of transactions",
    "input_count": "number of transaction inputs (coins spent)",
    "output_count": "number of transaction outputs created",
    "fee": "transaction fees paid to miners, in sats",
    "fee_rate": "fee rate in sats per virtual byte (sat/vB): a block's fees over its vsize",
    "coinbase": "coinbase reward paid to the miner: block subsidy plus fees, in sats",
    "subsidy": "block subsidy, the newly issued coins of a block reward without fees, in sats",
    "difficulty": "mining difficulty: how hard it is to find a block",
    "hash_rate": "network hash rate, mining power in hashes per second over the trailing 144 blocks",
    # supply and the UTXO set
    "supply": "circulating supply: every coin mined, minus unspendable OP_RETURN outputs, in sats",
    "utxo_count": "number of unspent transaction outputs, the size of the UTXO set",
    "unspendable_supply": "unspendable supply: value burnt in OP_RETURN outputs, in sats",
    "spent_value": "value spent by a block's inputs, coins moved, in sats",
    # coin age
    "coindays_destroyed": "coin days destroyed (CDD): BTC spent times the days since the coins were created",
    "coinblocks_destroyed": "coin blocks destroyed: BTC spent times the blocks since the coins were created",
    "coindays_created": "coin days created: spendable supply times the days since the previous block",
    "coinblocks_created": "coin blocks created: spendable supply times one block",
    "liveliness": "liveliness: cumulative coin days destroyed / cumulative coin days created",
    "vaultedness": "vaultedness: 1 - liveliness, how much coin age is held unspent",
    # addresses
    "address_count": "number of addresses holding a non-zero balance, funded addresses",
    "new_address_count": "number of new addresses, receiving coins for the first time",
    "empty_address_count": "number of empty addresses, seen before and now holding a zero balance",
    # prices
    "open": "BTC/USD opening price of the period, in US dollars",
    "high": "BTC/USD highest price of the period, in US dollars",
    "low": "BTC/USD lowest price of the period, in US dollars",
    "close": "BTC/USD closing price of the period, the bitcoin price in US dollars",
    "market_cap": "market capitalization: supply times the closing price, in US dollars",
    # realized value
    "realized_cap": "realized capitalization: every coin valued at the closing price of the day it was "
                    "created (last moved), in US dollars",
    "realized_price": "realized price: realized cap / supply, the average price at which coins last moved, "
                      "cost basis in US dollars per BTC",
    "mvrv": "MVRV ratio: market value to realized value, market cap / realized cap",
    "nupl": "NUPL net unrealized profit and loss: 1 - realized cap / market cap",
    "sopr": "SOPR spent output profit ratio: value of the coins spent at the spending day's close / at their "
            "creation day's close",
    "realized_value_destroyed": "realized value of the coins spent, valued at their creation day's close, in "
                                "US dollars",
    "value_destroyed_usd": "value of the coins spent at the spending day's close, in US dollars",
    "supply_in_profit": "supply in profit: coins whose creation day's close is below the current close, "
                        "unrealized profit, in sats",
    "supply_in_loss": "supply in loss: coins whose creation day's close is above the current close, "
                      "unrealized loss, in sats",
    "supply_breakeven": "supply at breakeven: coins whose creation day's close equals the current close, in sats",
}

# Ids that are not series of a base: raw rows, labels, positions.
RAW = {
    "date": "calendar date (UTC, YYYY-MM-DD) of a block, or the first day of a period",
    "first_height": "first block height of the period",
    "blockhash": "block hash, hex",
    "timestamp": "block header timestamp, Unix seconds",
    "bits": "difficulty target in compact form, the header's bits",
    "block_version": "block header version",
    "first_txindex": "txindex of the block's first transaction, the coinbase",
    "first_inputindex": "inputindex of the first input of the block or transaction",
    "first_outputindex": "outputindex of the first output of the block or transaction",
    "txid": "transaction id (txid), hex",
    "height": "block height of the block holding the transaction",
    "tx_version": "transaction version",
    "locktime": "transaction lock time (nLockTime)",
    "tx_size": "transaction size in bytes",
    "tx_weight": "transaction weight in weight units",
    "tx_vsize": "transaction virtual size in vbytes",
    "outputindex": "the output an input spends (its outputindex)",
    "value": "output value in sats",
    "value_btc": "output value in BTC (bitcoin)",
    "type": "output script type code: 0 p2pk65, 1 p2pk33, 2 p2pkh, 3 p2ms, 4 p2sh, 5 opreturn, 6 p2wpkh, "
            "7 p2wsh, 8 p2tr, 9 p2a, 10 empty, 11 unknown",
}

# Ids that are also on txindex, where they are one transaction's.
ON_TXINDEX = {"input_count": "per transaction on txindex", "output_count": "per transaction on txindex",
              "fee": "per transaction on txindex", "fee_rate": "one transaction's fee / vsize on txindex"}

STATS = {
    "sum": "total per period",
    "avg": "average (mean) per period",
    "min": "minimum (lowest) per period",
    "max": "maximum (highest) per period",
    "median": "median per period",
    "p10": "10th percentile per period",
    "p25": "25th percentile per period",
    "p75": "75th percentile per period",
    "p90": "90th percentile per period",
    "cumulative": "cumulative running total since the genesis block",
}
UNITS = {"btc": "in BTC (bitcoin)", "usd": "in US dollars (USD) at the period's close"}
_COHORT_STARTS = ("sth_", "lth_", "utxos_", "p2", "empty_outputs_", "unknown_outputs_", "epoch_", "class_")
_AGE_UNITS = {"d": "day", "w": "week", "m": "month", "y": "year"}


def definition(vec_id: str) -> str | None:
    """The one-line definition of ``vec_id`` (``None`` for an id no rule explains)."""
    if vec_id in RAW:
        return RAW[vec_id]
    if vec_id in ON_TXINDEX:
        return f"{BASES[vec_id]}; {ON_TXINDEX[vec_id]}"
    base, stat = vec_id, ""
    for name in STATS:
        if vec_id.endswith("_" + name) and _base(vec_id[:-len(name) - 1]) is not None:
            base, stat = vec_id[:-len(name) - 1], name
            break
    text = _base(base)
    if text is None:
        return None
    return f"{text}; {STATS[stat]}" if stat else text


@functools.lru_cache(maxsize=512)  # a few hundred bases and unit variants: bounded by the code, not the data
def _base(name: str) -> str | None:
    """A base id's line, with its unit (``supply_btc``: the supply's line, in BTC)."""
    if name in BASES:
        return BASES[name]
    market = _market()
    if name in market:
        return market[name]
    mined = _mining_line(name)
    if mined is not None:
        return mined
    for unit, words in UNITS.items():
        if name.endswith("_" + unit):
            text = _pattern(name[:-len(unit) - 1])
            if text is not None:
                return text.replace("in sats", words) if "in sats" in text else f"{text}, {words}"
    return _pattern(name)


def _pattern(name: str) -> str | None:
    if name in BASES:
        return BASES[name]
    if name.startswith(("addrs_", "p2")):
        from cairn_servers.brk.addrcohorts import definition as addr_cohort_line  # address cohorts

        line = addr_cohort_line(name)
        if line is not None:
            return line
    if name.startswith(_COHORT_STARTS):
        from cairn_servers.brk.cohorts import definition as cohort_line  # UTXO cohorts, with their formulas

        line = cohort_line(name)
        if line is not None:
            return line
    if name in _mining():
        return _mining()[name]
    if name.startswith("supply_age_"):
        band = _age_band(name.removeprefix("supply_age_"))
        return None if band is None else f"supply by coin age, coins last moved {band} ago (HODL wave), in sats"
    if name.startswith("address_count_balance_"):
        band = _balance_bands().get(name.removeprefix("address_count_balance_"))
        return None if band is None else f"number of addresses with a balance of {band}"
    for prefix, line in (("supply_", "supply held in {} outputs, in sats"),
                         ("utxo_count_", "number of unspent {} outputs (UTXOs)"),
                         ("address_count_", "number of {} addresses holding a non-zero balance")):
        if name.startswith(prefix) and name.removeprefix(prefix) in TYPES:
            return line.format(TYPES[name.removeprefix(prefix)])
    kind = name.removesuffix("_count")
    if name.endswith("_count") and kind in TYPES:
        return f"number of outputs of type {TYPES[kind]} created"
    return None


def _age_band(band: str) -> str | None:
    """``1y_2y`` -> ``1 year to 2 years``, ``lt_1d`` -> ``less than 1 day``, ``gt_10y`` -> ``more than 10 years``."""
    low, _, high = band.partition("_")
    words = {"lt": "less than", "gt": "more than"}
    if low in words:
        span = _age(high)
        return None if span is None else f"{words[low]} {span}"
    a, b = _age(low), _age(high)
    return None if a is None or b is None else f"{a} to {b}"


def _age(text: str) -> str | None:
    number, unit = text[:-1], _AGE_UNITS.get(text[-1:])
    if not number.isdigit() or unit is None:
        return None
    return f"{number} {unit}{'' if number == '1' else 's'}"


@functools.lru_cache(maxsize=1)
def _market() -> dict[str, str]:
    """The market series' lines (``cairn_servers.brk.market``, standard library at import)."""
    from cairn_servers.brk.market import DEFINITIONS

    return DEFINITIONS


@functools.lru_cache(maxsize=1)
def _mining() -> dict[str, str]:
    """The mining series' lines (``cairn_servers.brk.mining``, standard library at import)."""
    from cairn_servers.brk.mining import DEFINITIONS

    return DEFINITIONS


def _mining_line(name: str) -> str | None:
    """A mining series' or a pool's line."""
    if name in _mining():
        return _mining()[name]
    if "pool" in name or "_blocks_mined" in name or "_dominance" in name:
        from cairn_servers.brk.mining import definition

        return definition(name)
    return None


@functools.lru_cache(maxsize=1)
def _balance_bands() -> dict[str, str]:
    """Band name -> its range in BTC, from the bounds the address pass uses."""
    from cairn_servers.brk.addresses import BALANCE_BANDS

    def btc(sats: int) -> str:
        return f"{sats / 1e8:,.8f}".rstrip("0").rstrip(".")

    out = {}
    for i, (name, low) in enumerate(BALANCE_BANDS):
        high = BALANCE_BANDS[i + 1][1] if i + 1 < len(BALANCE_BANDS) else None
        if high is None:
            out[name] = f"{btc(low)} BTC or more"
        elif low == 0:
            out[name] = f"less than {btc(high)} BTC"
        else:
            out[name] = f"{btc(low)} to {btc(high)} BTC"
    return out


def undefined(ids: Iterable[str]) -> list[str]:
    """The ids :func:`definition` cannot explain (a test keeps this empty over the whole catalogue)."""
    return [vec_id for vec_id in ids if definition(vec_id) is None]
