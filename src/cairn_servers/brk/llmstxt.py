"""``GET /llms.txt``: the HTTP API, the MCP tools, the indexes and the ids of a store in Markdown, for
agents (the llms.txt convention: a title, a one-paragraph summary, then sections of links and notes).

Everything is generated: the routes from the OpenAPI description (itself built from the operations in
``cairn_servers.brk.ops``), the tools from the same operations, the families from
``cairn_servers.brk.families``, the indexes from the catalog, and every id the store serves with its
one-line definition (``cairn_servers.brk.definitions``); only the statistic variants (``_avg``, ...) are
folded into one list of suffixes, the mining pools' ids into a few patterns and the list of pools, and the UTXO
cohorts' ids into one pattern per metric and the list of cohorts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from cairn_servers.brk.interface import Interface

SUMMARY = ("Bitcoin datasets (vecs) computed from a node's block files: block statistics, supply and the UTXO "
           "set, coin age, HODL waves, UTXO cohorts, addresses, prices and realized value, miner revenue and pools, on every "
           "timeframe (index). Read-only JSON over HTTP, and the same operations as MCP tools at POST /mcp.")


def render(interface: Interface, paths: dict[str, Any]) -> str:
    """The Markdown of ``/llms.txt`` for the store ``interface`` serves; ``paths``: the OpenAPI paths of the
    HTTP API (``cairn_servers.brk.http.openapi``)."""
    from cairn_servers.brk.catalog import ACCEPTED, INDEXES
    from cairn_servers.brk.definitions import STATS, definition
    from cairn_servers.brk.families import FAMILIES
    from cairn_servers.brk.ops import OPS

    lines = ["# brk", "", f"> {SUMMARY}", "",
             "Find an id with `GET /api/vecs/search?q=WORDS` (or the MCP tool `search_vecids`), then read it "
             "with `GET /api/vecs/query?index=INDEX&ids=ID&from=-10` (negative rows count from the end). "
             "The full description: [/openapi.json](/openapi.json).", "",
             "## HTTP API", ""]
    for path, methods in paths.items():
        for method, entry in methods.items():
            params = entry.get("parameters", [])
            names = ", ".join(f"`{p['name']}`" + ("" if p.get("required") else "?") for p in params
                              if not str(p.get("description", "")).startswith("alias of "))
            link = path if "{" in path else quote(path)
            lines.append(f"- [{method.upper()} {path}]({link}): {_line(entry.get('summary', ''))}"
                         + (f" Parameters: {names}." if names else ""))
    lines += ["", "## MCP tools (POST /mcp, Streamable HTTP)", ""]
    for op in OPS.on("mcp"):
        params = ", ".join(p.wire for p in op.params_for("mcp"))
        lines.append(f"- `{op.mcp}({params})`: {_line(op.summary)}")
    lines += ["", "## Indexes", ""]
    lines += [f"- `{index}` (also {', '.join(f'`{n}`' for n in ACCEPTED[index] if n != index)})"
              for index in INDEXES]
    lines += ["", "## Families of ids", ""]
    for name, examples, what in FAMILIES:
        lines.append(f"- {name}: {', '.join(f'`{e}`' for e in examples)}; {what}")
    catalogue = interface.id_indexes()
    variants = tuple(f"_{s}" for s in STATS)
    lines += ["", "## Statistic suffixes (coarse indexes)", "",
              "A base id `X` on a coarse index (date, week, ..., halvingepoch) also has:"]
    lines += [f"- `X_{s}`: {text}" for s, text in STATS.items()]
    lines += ["", f"## Ids ({len(catalogue):,} in this store, statistic variants folded)", "",
              "Each with the indexes it is on; \"every period\" = the date indexes (dateindex .. decadeindex), "
              "difficultyepoch and halvingepoch.", ""]
    from cairn_servers.brk.mining import POOL_PATTERNS, all_pool_ids, slugs

    from cairn_servers.brk import addrcohorts, cohorts

    pooled = all_pool_ids() | cohorts.all_ids() | addrcohorts.all_ids()
    for vec_id in sorted(catalogue):
        if vec_id in pooled or vec_id.endswith(variants) and vec_id.rsplit("_", 1)[0] in catalogue:
            continue
        lines.append(f"- `{vec_id}` ({_where(catalogue[vec_id])}): {definition(vec_id) or ''}")
    if any(vec_id in pooled for vec_id in catalogue):  # a few patterns, not 1,300 lines
        lines += ["", "Mining pools, folded (height, every period; `<pool>` is one of the pools below):", ""]
        lines += [f"- pattern `{pattern}`: {text}" for pattern, text in POOL_PATTERNS]
        lines += ["", "Pools: " + ", ".join(f"`{slug}`" for slug in slugs()) + "."]
    if "sth_supply" in catalogue:
        lines += ["", "UTXO cohorts, folded (height, every date index; `_supply`, `_supply_btc`, `_utxo_count` on every "
                  "period; the others need prices; `<cohort>` is one of the cohorts below):", ""]
        lines += [f"- pattern `{pattern}`: {text}" for pattern, text in cohorts.patterns()]
        lines += ["", "Cohorts: " + ", ".join(f"`{c}`" for c in cohorts.COHORTS) + "."]
    if "p2pkh_addrs_supply" in catalogue:
        lines += ["", "Address cohorts, folded (height, every date index; `_supply`, `_supply_btc`, `_addr_count` on "
                  "every period; the others need prices; `<addr_cohort>` is one of the cohorts below):", ""]
        lines += [f"- pattern `{pattern}`: {text}" for pattern, text in addrcohorts.patterns()]
        lines += ["", "Address cohorts: " + ", ".join(f"`{c}`" for c in addrcohorts.COHORTS) + "."]
    return "\n".join(lines) + "\n"


def _where(indexes: tuple[str, ...]) -> str:
    """The indexes of an id, the usual runs named: ``height, every period, txindex``."""
    from cairn_servers.brk.dates import DATE_INDEXES, HEIGHT_INDEXES

    names = list(indexes)
    for run, name in ((HEIGHT_INDEXES, "every period"), (DATE_INDEXES, "every date index")):
        at = next((i for i in range(len(names) - len(run) + 1) if tuple(names[i:i + len(run)]) == run), None)
        if at is not None:
            names[at:at + len(run)] = [name]
            break
    return ", ".join(names)


def _line(text: Any) -> str:
    line = " ".join(str(text).split())
    return line if not line or line.endswith(".") else line + "."
