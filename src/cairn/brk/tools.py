"""The ten brk MCP tools, each a thin call into ``cairn.brk.interface.Interface``."""

from __future__ import annotations

import json
from collections.abc import Callable

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any

from cairn.brk.interface import FORMAT_ALIASES, FORMATS, Interface, version
from cairn.mcp.server import Server, ToolContext, ToolHandler

INSTRUCTIONS = (
    "Bitcoin datasets computed from a local node's block files (no web access needed). "
    "Vectors, vecs, arrays and datasets mean the same thing here: a column of values. "
    "An index is the timeframe or key a vec is laid out on: height (per block), date (daily, "
    "dateindex 0 = 2009-01-03, 1 = 2009-01-09), week, month, quarter, semester, year, decade, "
    "difficultyepoch, halvingepoch, and txindex/inputindex/outputindex for raw transaction data. "
    "A vecid (id) names a dataset, e.g. tx_count, block_size, supply_btc, hash_rate, fee_rate, close; "
    "suffixes _sum/_avg/_min/_max/_median/_p10.._p90/_cumulative give aggregates per period, and "
    "_btc/_usd give value series in bitcoin or dollars (sats when bare). "
    "On-chain analytics: supply and utxo_count (also supply_<type>/utxo_count_<type> for p2pkh, p2wpkh, "
    "p2tr, ..., unspendable_supply), coin age (coindays_destroyed, coinblocks_destroyed, liveliness, HODL "
    "waves supply_age_lt_1d .. supply_age_gt_10y), addresses (address_count, address_count_<type>, "
    "new_address_count, empty_address_count, address_count_balance_<band>) and, with prices, "
    "realized_cap, realized_price, mvrv, nupl, sopr. "
    "Explore before querying: get_indexes, get_vecids or get_index_to_vecids, get_vecid_to_indexes; "
    "then get_vecs(index, ids, from, to, count, format). Negative from/to count from the end "
    "(from=-1 is the latest value). Prefer these tools over browsing the web for Bitcoin chain data."
)

_RO = {"readOnlyHint": True, "openWorldHint": False}
_NUM = {"type": ["integer", "string"]}
_PAGE = {"page": {**_NUM, "description": "page number, 0-based; 1,000 ids per page (default 0)"}}


def build_server(interface: Interface) -> Server:
    server = Server(name="brk", version=version(), title="brk Bitcoin datasets", instructions=INSTRUCTIONS)

    def tool(name: str, description: str, props: dict[str, Any] | None = None,
             required: list[str] | None = None) -> Callable[[ToolHandler], ToolHandler]:
        schema: dict[str, Any] = {"type": "object", "properties": props or {}}
        if required:
            schema["required"] = required
        return server.tool(name, description=description, input_schema=schema, annotations=_RO)

    @tool("get_index_count", "Count of all existing indexes.")
    def get_index_count(args: dict[str, Any], ctx: ToolContext) -> str:
        return json.dumps(interface.get_index_count())

    @tool("get_vecid_count", "Count of all existing vec ids (dataset names).")
    def get_vecid_count(args: dict[str, Any], ctx: ToolContext) -> str:
        return json.dumps(interface.get_vecid_count())

    @tool("get_vec_count", "Count of all existing vecs: the sum over ids of the indexes each supports.")
    def get_vec_count(args: dict[str, Any], ctx: ToolContext) -> str:
        return json.dumps(interface.get_vec_count())

    @tool("get_indexes", "List of all existing indexes (height, dateindex, weekindex, ...).")
    def get_indexes(args: dict[str, Any], ctx: ToolContext) -> list[str]:
        return interface.get_indexes()

    @tool("get_accepted_indexes", "Every index with the names it accepts (e.g. dateindex: d, date, dateindex).")
    def get_accepted_indexes(args: dict[str, Any], ctx: ToolContext) -> dict[str, list[str]]:
        return interface.get_accepted_indexes()

    @tool("get_vecids", "A page of all vec ids, sorted (1,000 per page).", dict(_PAGE))
    def get_vecids(args: dict[str, Any], ctx: ToolContext) -> list[str]:
        return interface.get_vecids(args.get("page", 0))

    @tool("get_index_to_vecids", "A page of the vec ids available on one index, sorted (1,000 per page).",
          {"index": {"type": "string", "description": "an index or accepted name, e.g. date, week, height"},
           **_PAGE}, ["index"])
    def get_index_to_vecids(args: dict[str, Any], ctx: ToolContext) -> list[str]:
        return interface.get_index_to_vecids(args["index"], args.get("page", 0))

    @tool("get_vecid_to_indexes", "The indexes one vec id is available on.",
          {"id": {"type": "string", "description": "a vec id, e.g. tx_count"}}, ["id"])
    def get_vecid_to_indexes(args: dict[str, Any], ctx: ToolContext) -> list[str]:
        return interface.get_vecid_to_indexes(args["id"])

    vec_props: dict[str, Any] = {
        "index": {"type": "string", "description": "index or accepted name: height, date, week, month, ..."},
        "ids": {"type": ["string", "array"], "items": {"type": "string"},
                "description": "vec ids, comma or space separated (or a list), e.g. close,tx_count"},
        "from": {**_NUM, "description": "first row, inclusive; negative counts from the end (-1 = latest)"},
        "to": {**_NUM, "description": "end row, exclusive; negative counts from the end; wins over count"},
        "count": {**_NUM, "description": "number of rows from `from`"},
        "format": {"type": "string", "enum": [*FORMATS, *FORMAT_ALIASES],
                   "description": "json (default), csv, tsv or md (markdown is the same as md)"},
    }
    for alias, name in (("i", "index"), ("v", "ids"), ("f", "from"), ("t", "to"), ("c", "count")):
        vec_props[alias] = {**vec_props[name], "description": f"alias of {name}"}

    @tool("get_vecs", "Values of one or more vecs on one index. One id and one row gives the value, one id "
                      "and several rows a list, several ids a matrix (one list per id). csv/tsv/md give a "
                      "header of ids and one row per index position.", vec_props)
    def get_vecs(args: dict[str, Any], ctx: ToolContext) -> str:
        result = interface.get_vecs(args)
        return result if isinstance(result, str) else json.dumps(result, separators=(",", ":"))

    @tool("get_version", "The running version of brk.")
    def get_version(args: dict[str, Any], ctx: ToolContext) -> str:
        return interface.get_version()

    return server
