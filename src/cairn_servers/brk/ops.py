"""brk's operations, declared once: the MCP tools (``cairn_servers.brk.tools``), the /api/vecs routes and OpenAPI
(``cairn_servers.brk.http``) and the query commands of the CLI (``cairn_servers.brk.cli_serve``) are generated from ``OPS``.

Each operation is a typed function whose first argument is the :class:`~cairn_servers.brk.interface.Interface`
and whose docstring's ``:param`` lines describe the parameters on every surface. Wire names that
clients use (``from``, ``id``, the one-letter aliases ``i``/``v``/``f``/``t``/``c``) are declared in
``params``; ``extra={"store": False}`` marks the operations the CLI answers without opening a store.

Numbers are accepted as integers or as strings (``"from": "-1"``, ``"page": "0"``), as the tools always
did; the Interface checks them with one message on every surface (``from must be an integer, got 'x'.``).

``get_vecs`` returns :class:`~cairn_servers.brk.interface.Vecs` (columns); :func:`render_vecs`, registered as
its ``extra["render"]``, is the one renderer the three adapters use for json, csv, tsv and md
(:func:`answer`).

Start-up: ``brk mcp`` imports this module before answering ``initialize``; it imports only
``cairn_servers.core.ops`` and ``cairn_servers.brk.interface`` (both standard library only at module level).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any, Literal

    from cairn_servers.core.ops import Op

from cairn_servers.brk.interface import Interface, Vecs, normalize_format, version
from cairn_servers.core.ops import Registry

OPS = Registry("brk")
_NO_STORE = {"store": False}  # the CLI answers these without an output directory


@OPS.op(mcp="get_index_count", cli="index-count", http="GET /api/vecs/index-count", extra=_NO_STORE)
def get_index_count(iface: Interface | None) -> int:
    """Count of all existing indexes."""
    return Interface.get_index_count()


@OPS.op(mcp="get_vecid_count", cli="id-count", http="GET /api/vecs/id-count")
def get_vecid_count(iface: Interface) -> int:
    """Count of all existing vec ids (dataset names)."""
    return iface.get_vecid_count()


@OPS.op(mcp="get_vec_count", cli="vec-count", http="GET /api/vecs/vec-count")
def get_vec_count(iface: Interface) -> int:
    """Count of all existing vecs: the sum over ids of the indexes each supports."""
    return iface.get_vec_count()


@OPS.op(mcp="get_indexes", http="GET /api/vecs/indexes", extra=_NO_STORE)
def get_indexes(iface: Interface | None) -> list[str]:
    """List of all existing indexes (height, dateindex, weekindex, ...)."""
    return Interface.get_indexes()


@OPS.op(mcp="get_accepted_indexes", cli="indexes", http="GET /api/vecs/accepted-indexes", extra=_NO_STORE)
def get_accepted_indexes(iface: Interface | None) -> dict[str, list[str]]:
    """Every index with the names it accepts (e.g. dateindex: d, date, dateindex)."""
    return Interface.get_accepted_indexes()


_PAGE = {"flags": ("--page",), "metavar": "N"}


@OPS.op(mcp="get_vecids", http="GET /api/vecs/ids", params={"page": _PAGE})
def get_vecids(iface: Interface, page: int | str = 0) -> list[str]:
    """A page of all vec ids, sorted (1,000 per page).

    :param page: page number, 0-based; 1,000 ids per page
    """
    return iface.get_vecids(page)


@OPS.op(mcp="get_index_to_vecids", http="GET /api/vecs/index-to-ids",
        params={"index": {"aliases": ("i",)}, "page": _PAGE})
def get_index_to_vecids(iface: Interface, index: str, page: int | str = 0) -> list[str]:
    """A page of the vec ids available on one index, sorted (1,000 per page).

    :param index: an index or accepted name, e.g. date, week, height
    :param page: page number, 0-based; 1,000 ids per page
    """
    return iface.get_index_to_vecids(index, page)


# search_vecids' limits are checked by the search (cairn_servers.brk.idsearch), not by the schema: `brk ids
# --search` then refuses a bad value with the very message the tool and the route give.
@OPS.op(mcp="search_vecids", http="GET /api/vecs/search", params={"index": {"aliases": ("i",)}, "page": _PAGE})
def search_vecids(iface: Interface, q: str, index: str | None = None, limit: int | str = 10,
                  page: int | str = 0) -> list[dict[str, Any]]:
    """Vec ids found by words, best first: ranked by the words of each id and of its one-line definition
    ("long term holder realized price", "coins unmoved for 10 years", "fee rate median"). Abbreviations
    and their words are the same (utxo, mvrv, sopr, nupl, lth, sth, tx, btc, usd, avg, ...). Each result
    is {id, definition, indexes}. No match is an empty list.

    :param q: words describing the data (up to 500 characters)
    :param index: only ids available on this index (an index or accepted name, e.g. date)
    :param limit: results per page (1-100)
    :param page: page number, 0-based
    """
    from cairn_servers.brk.idsearch import search

    return search(iface, q, index, limit, page)


@OPS.op(cli="ids", params={"index": {"flags": ("--index",)}, "page": _PAGE,
                           "search": {"flags": ("--search",), "metavar": "WORDS"},
                           "limit": {"flags": ("--limit",), "metavar": "N"}})
def ids(iface: Interface, index: str | None = None, page: int | str = 0, search: str | None = None,
        limit: int | str | None = None) -> list[str] | list[dict[str, Any]]:
    """Vec ids, sorted, 1,000 per page: all of them, or with --index, those available on that index.
    With --search, the ids found by words instead, best first, with their definitions and indexes.

    :param index: only the ids available on this index
    :param page: page number, 0-based; 1,000 ids per page (with --search, --limit per page)
    :param search: words describing the data, e.g. "realized price", "median cost basis"; ranked by the words of each id and its definition
    :param limit: with --search, results per page (1-100, default 10)
    """
    if search is not None:  # the same answer as search_vecids (the parity tests compare them)
        from cairn_servers.brk.idsearch import search as find

        return find(iface, search, index, 10 if limit is None else limit, page)
    if limit is not None:
        from cairn_servers.core.errors import InvalidInput

        raise InvalidInput("--limit goes with --search; list every id with --page.")
    return iface.get_index_to_vecids(index, page) if index is not None else iface.get_vecids(page)


@OPS.op(mcp="get_vecid_to_indexes", cli="vecid-indexes", http="GET /api/vecs/id-to-indexes",
        params={"vec_id": {"wire": "id", "positional": True, "metavar": "ID"}})
def get_vecid_to_indexes(iface: Interface, vec_id: str) -> list[str]:
    """The indexes one vec id is available on.

    :param vec_id: a vec id, e.g. tx_count
    """
    return iface.get_vecid_to_indexes(vec_id)


def render_vecs(vecs: Vecs) -> str:
    """``get_vecs``' answer as text in the format asked for: compact JSON of :meth:`Vecs.value`, or csv / tsv /
    md with a header row of ids and one row per index position (ending with a newline; a missing value is
    an empty cell). Through :func:`cairn_servers.core.output.render_columns`, the column-wise fast path (``str``
    per column rather than the cell-by-cell CSV writer: 2-3x faster on the 100,000-cell answers brk is
    benchmarked on; vec values, numbers, dates and hex, never need quoting)."""
    if vecs.format == "json":
        import json

        return json.dumps(vecs.value(), separators=(",", ":"))
    from cairn_servers.core.output import render_columns

    text = render_columns(vecs.ids, vecs.columns, vecs.format)
    if vecs.format != "md" and not any(vecs.columns):  # no rows: the header line alone
        return text
    return text + "\n"


@OPS.op(mcp="get_vecs", cli="query", http="GET /api/vecs/query",
        params={"index": {"aliases": ("i",), "flags": ("--index", "-i")},
                "ids": {"aliases": ("v",), "flags": ("--ids", "-v")},
                "from_": {"wire": "from", "aliases": ("f",), "flags": ("--from", "-f"), "metavar": "ROW"},
                "to": {"aliases": ("t",), "flags": ("--to", "-t"), "metavar": "ROW"},
                "count": {"aliases": ("c",), "flags": ("--count", "-c"), "metavar": "N"},
                "format": {"flags": ("--format",)}},
        extra={"render": render_vecs})
def get_vecs(iface: Interface, index: str, ids: str | list[str], from_: int | str | None = None,
             to: int | str | None = None, count: int | str | None = None,
             format: Literal["json", "csv", "tsv", "md", "markdown"] = "json") -> Vecs:
    """Values of one or more vecs on one index.

    One id and one row gives the value, one id and several rows a list, several ids a matrix (one list
    per id). csv/tsv/md give a header of ids and one row per index position.

    :param index: index or accepted name: height, date, week, month, ...
    :param ids: vec ids, comma or space separated (or a list), e.g. close,tx_count; cohort ids are <cohort>_<metric>, e.g. sth_realized_price, utxos_1btc_to_10btc_supply_btc, lth_cost_basis_pct50 (a search of the ids by words finds them)
    :param from_: first row, inclusive; negative counts from the end (-1 = latest)
    :param to: end row, exclusive; negative counts from the end; wins over count
    :param count: number of rows from `from`
    :param format: json (default), csv, tsv or md (markdown is the same as md)
    """
    result = iface.get_vecs(index, ids, from_, to, count)
    result.format = normalize_format(format)
    return result


@OPS.op(mcp="get_version", cli="version", http="GET /version",
        extra={**_NO_STORE, "cli_value": lambda v: v.removeprefix("v")})  # the CLI says 0.1.0, as --version
def get_version(iface: Interface | None) -> str:
    """The running version of brk."""
    return version()


def answer(op: Op, result: Any) -> Any:
    """What an adapter sends for ``op``'s result: its renderer's text (``extra["render"]``: ``get_vecs``), or
    the data itself."""
    render = op.extra.get("render")
    return result if render is None else render(result)


# -- the block explorer (cairn_servers.brk.esplora; the Esplora-compatible routes are in brk.esplora_http) ------

@OPS.op(mcp="get_block", cli="block", http="GET /api/explorer/block",
        params={"block": {"positional": True, "metavar": "HEIGHT|HASH"}, "start": {"flags": ("--start",),
                                                                                  "metavar": "N"}})
def get_block(iface: Interface, block: str | int, start: int | str = 0) -> dict[str, Any]:
    """One block of the chain, by height or hash: its id (hash), height, time, size, weight, transaction
    count, merkle root, previous block, difficulty, ..., and 25 of its txids from `start` (0, 25, 50, ...).

    :param block: a height (0 = genesis) or a block hash (64 hexadecimal digits)
    :param start: the first txid listed: a multiple of 25
    """
    from cairn_servers.brk.esplora import PAGE, parse_int

    ex = iface.explorer
    ex.refresh()
    height = ex.height_of(block)
    first = parse_int(start, "start index")
    if first % PAGE:
        from cairn_servers.core.errors import InvalidInput

        raise InvalidInput(f"Invalid start index {first}: it must be a multiple of {PAGE}.")
    result = ex.block(height)
    result["txids"] = ex.block_txids(result["id"])[first:first + PAGE]
    return result


@OPS.op(mcp="get_tx", cli="tx", http="GET /api/explorer/tx", params={"txid": {"positional": True, "metavar": "TXID"}})
def get_tx(iface: Interface, txid: str) -> dict[str, Any]:
    """One transaction by txid: its inputs (with the outputs they spend: value, script, address), its
    outputs, size, weight, fee and the block that confirmed it (Esplora's transaction object).

    :param txid: the transaction id, 64 hexadecimal digits
    """
    return iface.explorer.get_tx(txid)


@OPS.op(mcp="get_address", cli="address", http="GET /api/explorer/address",
        params={"address": {"positional": True, "metavar": "ADDRESS"}})
def get_address(iface: Interface, address: str) -> dict[str, Any]:
    """An address's totals and latest transactions: outputs received and spent (count and sats), the
    balance (received - spent, in sats), its transaction count and its 25 newest txids, newest first.

    :param address: a Bitcoin address (1..., 3..., bc1...), a public key in hex (pay-to-public-key
        outputs), or a script hash (the SHA-256 of an output script, 64 hexadecimal digits)
    """
    ex = iface.explorer
    result = ex.address(address)
    stats = result["chain_stats"]
    result["balance"] = stats["funded_txo_sum"] - stats["spent_txo_sum"]
    result["txids"] = ex.address_txids(address)
    return result


@OPS.op(mcp="get_address_utxos", cli="address-utxos", http="GET /api/explorer/address-utxos",
        params={"address": {"positional": True, "metavar": "ADDRESS"}})
def get_address_utxos(iface: Interface, address: str) -> list[dict[str, Any]]:
    """The unspent outputs of an address, oldest first: txid, vout, value (sats) and the block that
    confirmed each.

    :param address: a Bitcoin address, a public key in hex, or a script hash (64 hexadecimal digits)
    """
    return iface.explorer.utxos(address)


# -- UTXO cohorts (cairn_servers.brk.urpd) ---------------------------------------------------------------------

@OPS.op(mcp="get_urpd", cli="urpd", http="GET /api/cohorts/urpd",
        params={"cohort": {"positional": True, "metavar": "COHORT"},
                "height": {"flags": ("--height",), "metavar": "N"},
                "date": {"flags": ("--date",), "metavar": "YYYY-MM-DD"},
                "per_decade": {"flags": ("--per-decade",), "metavar": "N"}})
def get_urpd(iface: Interface, cohort: str, height: int | str | None = None, date: str | None = None,
             per_decade: int | str = 10) -> dict[str, Any]:
    """URPD, the UTXO realized price distribution: a UTXO cohort's supply by creation price (each coin at its
    creation day's close) at one height, in log-spaced price buckets. Gives {cohort, height, date, close,
    supply, supply_btc, realized_cap, buckets: [{price_floor, supply, supply_btc, utxo_count, realized_cap}]},
    cheapest first, only the non-empty buckets; price_floor 0 holds the coins created before the first close.
    Needs prices (brk price import).

    :param cohort: all, or a UTXO cohort id: sth, lth, utxos_1d_to_1w_old, utxos_over_1btc, p2pkh, class_2009, ...
    :param height: the block height (default: the tip)
    :param date: instead of a height, a day (YYYY-MM-DD): its last block
    :param per_decade: price buckets per decade, 1-1000 (10: each 26% wide; 100: 2.3%)
    """
    from cairn_servers.brk.urpd import urpd

    return urpd(iface.out, cohort, height, date, per_decade)
