"""The sample chain generator: deterministic, valid PoW, every script type, fees that add up."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from cairn_servers.brk.blocks.files import iter_blocks
from cairn_servers.brk.blocks.parser import OUTPUT_TYPES, parse_block
from cairn_servers.brk.indexer import index, open_store
from cairn_servers.brk.sample import COIN, HALVING, write_sample


def test_deterministic(tmp_path: Path) -> None:
    write_sample(tmp_path / "a", 300, seed=5)
    write_sample(tmp_path / "b", 300, seed=5)
    write_sample(tmp_path / "c", 300, seed=6)
    a = (tmp_path / "a" / "blk00000.dat").read_bytes()
    assert a == (tmp_path / "b" / "blk00000.dat").read_bytes()
    assert a != (tmp_path / "c" / "blk00000.dat").read_bytes()


def test_sample_chain_indexes_with_consistent_fees(tmp_path: Path) -> None:
    summary = write_sample(tmp_path / "blocks", 1500, max_file_bytes=500_000)
    assert summary["files"] > 1
    r = index(tmp_path / "blocks", tmp_path / "out")
    assert (r.network, r.height, r.invalid) == ("regtest", 1499, [])
    s = open_store(tmp_path / "out")
    types = np.bincount(s.read("outputindex_to_type"), minlength=len(OUTPUT_TYPES))
    assert all(types > 0), dict(zip(OUTPUT_TYPES, types.tolist()))
    # Coinbase outputs == subsidy + the fees the indexer computed from resolved prevouts.
    first_tx = s.read("height_to_first_txindex").astype(np.int64)
    first_out = s.read("txindex_to_first_outputindex")[first_tx].astype(np.int64)
    n_out = s.read("txindex_to_output_count")[first_tx].astype(np.int64)
    values = s.read("outputindex_to_value")
    coinbase = np.array([values[a:a + n].sum() for a, n in zip(first_out, n_out)], dtype=np.int64)
    heights = np.arange(1500)
    subsidy = (50 * COIN) >> (heights // HALVING)
    fees = s.read("height_to_fee").astype(np.int64)
    assert (coinbase == subsidy + fees).all()
    assert fees[200:].sum() > 0 and (s.read("txindex_to_fee") > 0).sum() > 1000
    # Timestamps rise and span at least six months.
    ts = s.read("height_to_timestamp").astype(np.int64)
    assert (np.diff(ts) > 0).all() and ts[-1] - ts[0] >= 180 * 86400
    # Segwit transactions exist and are lighter than their size.
    w, size = s.read("txindex_to_weight"), s.read("txindex_to_size")
    assert (w < 4 * size).sum() > 100


def test_pow_bip34_and_witness_commitment(tmp_path: Path) -> None:
    write_sample(tmp_path, 250)
    for height, (_, raw) in enumerate(iter_blocks(tmp_path)):
        block = parse_block(raw)
        assert int.from_bytes(block.hash, "little") <= 0x7FFFFF << 232
        assert block.bip34_height == height
        if any(block.tx_segwit):
            script = block.output_script(0, block.tx_outputs[0] - 1)
            assert script[:6] == bytes.fromhex("6a24aa21a9ed")
            level = [bytes(32)] + [block.wtxid(i) for i in range(1, len(block.txids))]
            while len(level) > 1:
                if len(level) % 2:
                    level.append(level[-1])
                level = [hashlib.sha256(hashlib.sha256(level[i] + level[i + 1]).digest()).digest()
                         for i in range(0, len(level), 2)]
            commit = hashlib.sha256(hashlib.sha256(level[0] + bytes(32)).digest()).digest()
            assert script[6:] == commit


# -- Payments to given addresses (`brk sample --pay/--spend/--change`) ----------------------------------

# BIP 173/350 test vectors: address -> output script.
_SEGWIT_VECTORS = {
    "BC1QW508D6QEJXTDG4Y5R3ZARVARY0C5XW7KV8F3T4": "0014751e76e8199196d454941c45d1b3a323f1433bd6",
    "tb1qrp33g0q5c5txsp9arysrx4k6zdkfs4nce4xj0gdcccefvpysxf3q0sl5k7":
        "00201863143c14c5166804bd19203356da136c985678cd4d27a1b8c6329604903262",
    "bc1pw508d6qejxtdg4y5r3zarvary0c5xw7kw508d6qejxtdg4y5r3zarvary0c5xw7kt5nd6y":
        "5128751e76e8199196d454941c45d1b3a323f1433bd6751e76e8199196d454941c45d1b3a323f1433bd6",
    "BC1SW50QGDZ25J": "6002751e",
    "bc1zw508d6qejxtdg4y5r3zarvaryvaxxpcs": "5210751e76e8199196d454941c45d1b3a323",
    "tb1pqqqqp399et2xygdj5xreqhjjvcmzhxw4aywxecjdzew6hylgvsesf3hn0c":
        "5120000000c4a5cad46221b2a187905e5266362b99d5e91c6ce24d165dab93e86433",
    "bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqzk5jj0":
        "512079be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798",
}
_BAD_SEGWIT = [
    "bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqh2y7hd",  # v1, bech32 checksum
    "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kemeawh",  # v0 with a bech32m checksum
    "bc1p38j9r5y49hruaue7wxjce0updqjuyyx0kh56v8s25huc6995vvpql3jow4",  # a character outside the charset
    "BC130XLXVLHEMJA6C4DQV22UAPCTQUPFHLXM9H8Z3K2E72Q4K9HCZ7VQ7ZWS8R",  # witness version 17
    "bc1pw5dgrnzv",  # a 1-byte program
    "bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7v8n0nx0muaewav253zgeav",  # a 41-byte program
    "BC1QR508D6QEJXTDG4Y5R3ZARVARYV98GJ9P",  # a 16-byte v0 program
    "tb1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vq47Zagq",  # mixed case
    "bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7v07qwwzcrf",  # more than 4 bits of padding
    "tb1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vpggkg4j",  # non-zero padding
    "bc1gmk9yu",  # no data
]


def test_address_scripts_follow_the_bips() -> None:
    import pytest

    from cairn_servers.brk.script import address_script
    from cairn_servers.core.errors import InvalidInput

    for address, script in _SEGWIT_VECTORS.items():
        network = "mainnet" if address.lower().startswith("bc1") else "testnet"
        assert address_script(address, network).hex() == script, address
    for address in _BAD_SEGWIT:
        network = "mainnet" if address.lower().startswith("bc1") else "testnet"
        with pytest.raises(InvalidInput, match="Invalid Bitcoin address"):
            address_script(address, network)
    with pytest.raises(InvalidInput, match="for regtest: give a Base58"):
        address_script("bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqzk5jj0", "regtest")


def test_base58_and_regtest_bech32_match_python_bitcoinlib() -> None:
    """Random keys and script hashes, encoded by python-bitcoinlib (another implementation), decode back."""
    import random

    import bitcoin
    import pytest
    from bitcoin.core.script import CScript
    from bitcoin.wallet import CBitcoinAddress

    from cairn_servers.brk.script import address_script
    from cairn_servers.core.errors import InvalidInput

    rng = random.Random(4)
    bitcoin.SelectParams("regtest")
    try:
        for _ in range(50):
            for script in (b"\x76\xa9\x14" + rng.randbytes(20) + b"\x88\xac", b"\xa9\x14" + rng.randbytes(20) + b"\x87",
                           b"\x00\x14" + rng.randbytes(20), b"\x00\x20" + rng.randbytes(32)):
                address = str(CBitcoinAddress.from_scriptPubKey(CScript(script)))
                assert address_script(address, "regtest") == script, address
        bitcoin.SelectParams("mainnet")
        mainnet = str(CBitcoinAddress.from_scriptPubKey(CScript(b"\x76\xa9\x14" + bytes(20) + b"\x88\xac")))
        for bad in (mainnet, mainnet[:-1] + ("2" if mainnet[-1] != "2" else "3")):  # mainnet; a wrong checksum
            with pytest.raises(InvalidInput, match="Invalid Bitcoin address .* for regtest"):
                address_script(bad, "regtest")
    finally:
        bitcoin.SelectParams("mainnet")


def test_payments_and_spends_keep_the_chain_valid(tmp_path: Path) -> None:
    """Payments land at the addresses with the amounts asked, the first N are spent later with change to
    the --change addresses in turn, and the chain still indexes with consistent fees."""
    from cairn_servers.brk.script import address_script
    from cairn_servers.brk.sample import FIRST_PAY

    to = {"bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080": 70_000,  # p2wpkh
          "bcrt1qrp33g0q5c5txsp9arysrx4k6zdkfs4nce4xj0gdcccefvpysxf3qzf4jry": 80_000,  # p2wsh
          "mipcBbFg9gMiCh81Kj8tqqdgoZub1ZJRfn": 90_000,  # p2pkh
          "2MzQwSSnBHWHqSAqtTVQ6v47XtaisrJa1Vc": 100_000}  # p2sh
    change = ["bcrt1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqc8gma6"]  # p2tr
    pay = [(a, v) for a, v in to.items() for _ in range(3)]
    summary = write_sample(tmp_path / "blocks", 160, seed=2, pay=pay, spend=5, change=change)
    assert (summary["payments"], summary["spends"]) == (12, 5)
    scripts = {address_script(a, "regtest"): a for a in [*to, *change]}

    paid: dict[tuple[bytes, int], tuple[int, bytes, int]] = {}  # outpoint -> value, script, height
    spent: dict[tuple[bytes, int], int] = {}  # outpoint -> height
    change_outs = []
    for height, (_, raw) in enumerate(iter_blocks(tmp_path / "blocks")):
        block = parse_block(raw)
        at_in = at_out = 0
        for t, txid in enumerate(block.txids):
            for i in range(at_in, at_in + block.tx_inputs[t]):
                prev = (block.in_prev_txid[i], block.in_prev_vout[i])
                if prev in paid:
                    spent[prev] = height
            for o in range(block.tx_outputs[t]):
                script, value = block.output_script(t, o), block.out_value[at_out + o]
                if script in scripts and scripts[script] in to:
                    paid[(txid, o)] = (value, script, height)
                elif script in scripts:
                    change_outs.append(value)
            at_in += block.tx_inputs[t]
            at_out += block.tx_outputs[t]
    assert sorted((scripts[s], v) for v, s, _ in paid.values()) == sorted(pay)
    heights = sorted(h for _, _, h in paid.values())
    assert heights[0] >= FIRST_PAY and heights[-1] <= 158 and len(set(heights)) == 12  # spread, one per block
    assert len(spent) == 5 and len(change_outs) == 5 and all(v > 0 for v in change_outs)
    first_five = sorted(paid, key=lambda k: paid[k][2])[:5]
    assert sorted(spent) == sorted(first_five)  # the first five paid, each spent in a later block
    assert all(1 <= spent[k] - paid[k][2] <= 12 for k in spent)
    r = index(tmp_path / "blocks", tmp_path / "out")
    assert (r.height, r.invalid) == (159, [])
    s = open_store(tmp_path / "out")
    first_tx = s.read("height_to_first_txindex").astype(np.int64)
    first_out = s.read("txindex_to_first_outputindex")[first_tx].astype(np.int64)
    n_out = s.read("txindex_to_output_count")[first_tx].astype(np.int64)
    values = s.read("outputindex_to_value")
    coinbase = np.array([values[a:a + n].sum() for a, n in zip(first_out, n_out)], dtype=np.int64)
    subsidy = (50 * COIN) >> (np.arange(160) // HALVING)
    assert (coinbase == subsidy + s.read("height_to_fee").astype(np.int64)).all()


def test_without_payments_the_chain_is_unchanged(tmp_path: Path) -> None:
    """Payments draw on a random stream of their own: the rest of a chain with them starts the same."""
    write_sample(tmp_path / "a", 101, seed=5, spread_blocks=120)
    write_sample(tmp_path / "b", 120, seed=5, spread_blocks=120, pay=[("mipcBbFg9gMiCh81Kj8tqqdgoZub1ZJRfn", 1000)])
    a = (tmp_path / "a" / "blk00000.dat").read_bytes()
    assert (tmp_path / "b" / "blk00000.dat").read_bytes()[:len(a)] == a


def test_pay_bad_input_is_explained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cairn_servers.brk.cli import main

    good = "mipcBbFg9gMiCh81Kj8tqqdgoZub1ZJRfn"
    out = tmp_path / "never"
    cases = {
        (f"{good}:x",): f"--pay '{good}:x': expected ADDRESS:SATS or ADDRESS:SATS:COUNT, e.g. bcrt1q...:50000 or "
                        "bcrt1q...:50000:3.",
        (f"{good}:5:0",): f"--pay '{good}:5:0': COUNT must be 1 or more.",
        (f"{good}:0",): f"--pay {good}:0: SATS must be between 1 and 2,100,000,000,000,000.",
        ("1BvBMSEYstWetqTFn5Au4m4GFg7xJaNVN2:5",): "Invalid Bitcoin address '1BvBMSEYstWetqTFn5Au4m4GFg7xJaNVN2' "
                                                   "for regtest: give a Base58 (P2PKH, P2SH) or bech32 (bcrt1...) "
                                                   "address, or a public key in hex.",
        (f"{good}:5", "--spend", "2"): "--spend must be between 0 and the number of payments (1); got 2.",
        (f"{good}:5", "--change", good): "--change needs --spend: change comes from spending paid outputs.",
        (f"{good}:500000000000",): "--pay: the payments up to height 101 add up to 500000000000 sats, more than half "
                                   "of the 10000000000 sats mined and spendable by then; pay less, or write more "
                                   "blocks.",
        (f"{good}:5", "--txs-per-block", "10"): "--pay works on the sparse chain only: drop --txs-per-block.",
    }
    for args, message in cases.items():
        assert main(["sample", "--blocks", "200", "--out", str(out), "--pay", *args]) == 2, args
        assert capsys.readouterr().err == f"brk: error: {message}\n"
    assert main(["sample", "--blocks", "102", "--out", str(out), "--pay", f"{good}:5"]) == 2
    assert capsys.readouterr().err == ("brk: error: --pay needs --blocks 103 or more: coinbases mature after 100 "
                                       "blocks, and a paid output is spent in a later block.\n")
    assert main(["sample", "--blocks", "200", "--out", str(out), "--spend", "1"]) == 2
    assert "--spend and --change need --pay" in capsys.readouterr().err
    assert not out.exists()  # refused before anything was written
