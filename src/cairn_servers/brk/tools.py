"""brk's MCP server: one tool per operation of ``cairn_servers.brk.ops.OPS`` (names, schemas and validation from
the declarations), plus the server's instructions.

Start-up: the tools are declared after ``initialize`` is answered (``Server.defer_tools``), so ``brk mcp``
imports neither the operations nor ``cairn_servers.core.ops`` before its first reply."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any

    from cairn_servers.brk.interface import Interface
    from cairn_servers.core.ops import Op
    from cairn_servers.mcp.server import ToolContext, ToolHandler

from cairn_servers.brk import version
from cairn_servers.brk.families import sentence
from cairn_servers.mcp.server import Server

INSTRUCTIONS = (
    "Bitcoin datasets computed from a local node's block files (no web access needed). "
    "Vectors, vecs, arrays and datasets mean the same thing here: a column of values. "
    "An index is the timeframe or key a vec is laid out on: height (per block), date (daily, "
    "dateindex 0 = 2009-01-03, 1 = 2009-01-09), week, month, quarter, semester, year, decade, "
    "difficultyepoch, halvingepoch, and txindex/inputindex/outputindex for raw transaction data. "
    "A vecid (id) names a dataset, e.g. tx_count, block_size, supply_btc, hash_rate, fee_rate, close; "
    "suffixes _sum/_avg/_min/_max/_median/_p10.._p90/_cumulative give aggregates per period, and "
    "_btc/_usd give value series in bitcoin or dollars (sats when bare). "
    "Families of ids (examples): " + sentence() + " "
    "Cohort ids are <cohort>_<metric> (sth_sopr, lth_mvrv, utxos_1d_to_1w_old_supply_btc, p2pkh_realized_price): "
    "search_vecids(\"short term holders realized price\") or get_vecids finds them; <cohort>_cost_basis_min, "
    "_cost_basis_pct50 (median) and _cost_basis_max are their cost-basis percentiles, and get_urpd(cohort, "
    "height or date) their supply by creation price (URPD). "
    "Address cohort ids are <addr_cohort>_<metric> by balance band or address type (addrs_1btc_to_10btc_supply_btc, "
    "addrs_over_1btc_addr_count, p2pkh_addrs_realized_price, p2tr_addrs_sopr): search_vecids(\"p2pkh "
    "addresses realized price\") finds them. "
    "Explore before querying: search_vecids(q) finds ids by words (\"realized price\", \"coins unmoved for "
    "10 years\"), or list them with get_indexes, get_vecids or get_index_to_vecids, get_vecid_to_indexes; "
    "then get_vecs(index, ids, from, to, count, format). Negative from/to count from the end "
    "(from=-1 is the latest value). "
    "For single blocks, transactions and addresses (a block explorer): get_block(height or hash), "
    "get_tx(txid), get_address(address: balance, totals, latest txids), get_address_utxos(address). "
    "Prefer these tools over browsing the web for Bitcoin chain data."
)

def build_server(interface: Interface) -> Server:
    """The MCP server of one store: every operation declared for MCP, calling ``interface``."""
    server = Server(name="brk", version=version(), title="brk Bitcoin datasets", instructions=INSTRUCTIONS)
    server.defer_tools(lambda: _declare_tools(server, interface))
    return server


def _declare_tools(server: Server, interface: Interface) -> None:
    from cairn_servers.brk.ops import OPS
    from cairn_servers.core.ops import mcp_tool

    for op in OPS.on("mcp"):
        server.add_tool(mcp_tool(op, _handler(op, interface), structured=False))


def _handler(op: Op, interface: Interface) -> ToolHandler:
    from cairn_servers.brk.ops import answer

    def handle(args: dict[str, Any], ctx: ToolContext) -> Any:
        return answer(op, op.call(interface, args, "mcp"))

    return handle
