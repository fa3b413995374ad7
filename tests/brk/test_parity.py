"""Parity (issue 14): every brk operation through the CLI (`brk` with its argv), MCP (the official SDK client
over stdio, a real `brk mcp`) and HTTP (the app on a real server on 127.0.0.1), with the same valid and
invalid inputs: identical answers, identical error messages, and the same error class (HTTP status and CLI
exit code). Driven from ``cairn_servers.brk.ops.OPS``: the argv, the query string and the tool call are built from
each operation's declaration, and an operation declared without cases fails
``test_every_operation_has_cases``."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from cairn_servers.brk.cli import main
from cairn_servers.brk.http import create_app, openapi
from cairn_servers.brk.interface import Interface
from cairn_servers.brk.ops import OPS
from cairn_servers.core.errors import InvalidInput, NotFound
from cairn_servers.core.ops import Op

from ..mcp._http import serving
from .conftest import mainnet_store

pytestmark = pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026")
SURFACES = ("cli", "mcp", "http")
ERRORS = {"bad_request": InvalidInput, "not_found": NotFound}


class Case(NamedTuple):
    """Wire arguments (aliases allowed) and the expected outcome: None = an answer, else the error code."""

    args: dict[str, Any]
    error: str | None = None
    surfaces: tuple[str, ...] = SURFACES  # where the input can be spelled (argv cannot say `page: true`)
    priced: bool = False  # on a copy of the store with a daily price series (the store has none)


NO_ARGS = [Case({}), Case({"nope": 1}, "bad_request", ("mcp", "http"))]
GENESIS = "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f"
TX170 = "f4184fc596403b9d638783cf57adfe4c75c605f6356fbc91338530e9831e9e16"  # the first payment between people
PUBKEY9 = ("0411db93e1dcdb8a016b49840f8c53bc1eb68a382e97b1482ecad7b148a6909a5cb2e0eaddfb84ccf9744464f82e160bfa9b8b64f9"
           "d4c03f999b8643f656b412a3")  # block 9's coinbase paid this key (P2PK); it paid block 170's payment
CASES: dict[str, list[Case]] = {
    "get_index_count": NO_ARGS,
    "get_vecid_count": NO_ARGS,
    "get_vec_count": NO_ARGS,
    "get_indexes": NO_ARGS,
    "get_accepted_indexes": NO_ARGS,
    "get_version": NO_ARGS,
    "get_vecids": [Case({}), Case({"page": 1}), Case({"page": "0"}), Case({"page": -1}, "bad_request"),
                   Case({"page": "x"}, "bad_request"), Case({"page": True}, "bad_request", ("mcp",))],
    "get_index_to_vecids": [Case({"index": "tx"}), Case({"i": "date", "page": 0}), Case({"index": "dat"}, "not_found"),
                            Case({"page": 0}, "bad_request"), Case({"index": "tx", "page": "x"}, "bad_request"),
                            Case({"index": "tx", "i": "date"}, "bad_request", ("mcp", "http"))],
    "ids": [Case({}), Case({"index": "tx"}), Case({"index": "week", "page": "0"}), Case({"index": "nope"}, "not_found"),
            Case({"page": "x"}, "bad_request"),
            Case({"search": "number of unspent outputs"}), Case({"search": "fee rate", "index": "tx", "limit": 2}),
            Case({"search": "supply", "limit": "3", "page": "1"}), Case({"search": "xyzzy"}),
            Case({"search": " the "}, "bad_request"), Case({"search": "fee", "limit": 0}, "bad_request"),
            Case({"search": "fee", "index": "nope"}, "not_found")],
    "search_vecids": [Case({"q": "number of unspent outputs"}), Case({"q": "fee rate", "i": "tx", "limit": 2}),
                      Case({"q": "supply", "limit": "3", "page": "1"}), Case({"q": "xyzzy"}),
                      Case({"q": " the "}, "bad_request"), Case({"q": "fee", "limit": 0}, "bad_request"),
                      Case({"q": "fee", "limit": 101}, "bad_request"), Case({"q": "fee", "page": -1}, "bad_request"),
                      Case({"q": "x" * 501}, "bad_request"), Case({"q": "fee", "index": "nope"}, "not_found"),
                      Case({}, "bad_request", ("mcp", "http")), Case({"q": "fee", "nope": 1}, "bad_request", ("mcp", "http"))],
    "get_vecid_to_indexes": [Case({"id": "txid"}), Case({"id": "Supply-BTC"}), Case({"id": "tx_cont"}, "not_found"),
                             Case({}, "bad_request", ("mcp", "http"))],
    "get_vecs": [
        Case({"index": "date", "ids": "date,block_count", "to": 2}),
        Case({"i": "h", "v": "supply_btc", "f": -1}),
        Case({"index": "d", "ids": ["date", "block_count"], "count": 1}),
        Case({"index": "height", "ids": "fee tx_count", "from": "-3", "t": -1}),
        Case({"index": "week", "ids": "date,supply_btc", "from": -2, "format": "csv"}),
        Case({"index": "date", "ids": "block_count", "to": 2, "format": "tsv"}),
        Case({"index": "date", "ids": "block_count,tx_count", "c": 2, "format": "md"}),
        Case({"index": "date", "ids": "block_count", "to": 2, "format": "markdown"}),
        Case({"index": "height", "ids": "fee_sats"}, "not_found"),
        Case({"index": "date", "ids": "close"}, "not_found"),
        Case({"index": "date", "ids": "txid"}, "not_found"),
        Case({"index": "dat", "ids": "supply"}, "not_found"),
        Case({"index": "date", "ids": "supply", "from": "x"}, "bad_request"),
        Case({"index": "date", "ids": "supply", "count": -1}, "bad_request"),
        Case({"index": "date", "ids": " , "}, "bad_request"),
        Case({"ids": "supply"}, "bad_request"),
        Case({"index": "date"}, "bad_request"),
        Case({"index": "date", "ids": "supply", "format": "xml"}, "bad_request"),
        Case({"index": "date", "ids": "supply", "f": 1, "from": 2}, "bad_request", ("mcp", "http")),
        Case({"index": "date", "ids": "supply", "to": [1]}, "bad_request", ("mcp",)),
    ],
    "get_block": [Case({"block": "170"}), Case({"block": GENESIS}), Case({"block": 0, "start": 0}),
                  Case({"block": "590"}, "not_found"), Case({"block": "1" * 64}, "not_found"),
                  Case({"block": "x"}, "bad_request"), Case({"block": 1, "start": 3}, "bad_request"),
                  Case({}, "bad_request", ("mcp", "http"))],
    "get_tx": [Case({"txid": TX170}), Case({"txid": "zz"}, "bad_request"), Case({"txid": "0" * 64}, "not_found"),
               Case({}, "bad_request", ("mcp", "http"))],
    "get_address": [Case({"address": PUBKEY9}), Case({"address": "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa"}),
                    Case({"address": "348dc4a6a27203ca9acb1c9073872fff5c7c837e794c82f1249ffebe11710dcc"}),
                    Case({"address": "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNb"}, "bad_request"),
                    Case({"address": "tb1qw508d6qejxtdg4y5r3zarvary0c5xw7kxpjzsx"}, "bad_request")],
    "get_address_utxos": [Case({"address": PUBKEY9}), Case({"address": "bc1q"}, "bad_request")],
    "get_urpd": [Case({"cohort": "sth"}, "not_found"), Case({"cohort": "all"}, priced=True),
                 Case({"cohort": "class_2009", "height": 170, "per_decade": 100}, priced=True),
                 Case({"cohort": "sth", "date": "2009-01-12"}, priced=True),
                 Case({"cohort": "sth", "height": 590}, "not_found", priced=True), Case({"cohort": "nope"}, "not_found"),
                 Case({"cohort": "lth", "height": "x"}, "bad_request"), Case({"cohort": "lth", "date": "2009-13-01"},
                                                                          "bad_request"),
                 Case({"cohort": "all", "per_decade": 0}, "bad_request"),
                 Case({}, "bad_request", ("mcp", "http"))],
}
# An operation on the CLI only answers as the MCP/HTTP operations it stands for.
SAME_AS = {"ids": lambda args: (
    ("search_vecids", {("q" if k == "search" else k): v for k, v in args.items()}) if "search" in args
    else ("get_index_to_vecids" if "index" in args else "get_vecids", args))}


class Outcome(NamedTuple):
    value: Any = None  # the answer: parsed JSON, or the text (csv/tsv/md, a version)
    error: str | None = None  # the message
    code: str | None = None  # bad_request, not_found (HTTP and CLI; MCP tells a -32602 error from a tool error)


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _cases() -> Iterator[tuple[str, int, Case]]:
    for name, cases in CASES.items():
        for i, case in enumerate(cases):
            yield name, i, case


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return mainnet_store(tmp_path_factory.mktemp("brk_parity"), addresses=True)  # the explorer's indexes too


# -- the three surfaces, spelled from the declarations --------------------------------------------------

def _argv(op: Op, args: dict[str, Any]) -> list[str]:
    """``brk <command> ...`` for wire arguments: positionals, the declared flags (an alias picks the short
    flag), a list as a repeated flag."""
    assert op.cli is not None
    argv = [op.cli]
    for key, value in args.items():
        param = next(p for p in op.params_for("cli") if key in (p.wire, *p.aliases))
        values = value if isinstance(value, list) else [value]
        if param.positional:
            argv += [str(v) for v in values]
            continue
        flags = param.flags or (f"--{param.name.replace('_', '-')}",)
        flag = min(flags, key=len) if key in param.aliases else flags[0]
        for v in values:
            argv += [flag, str(v)]
    return argv


def run_cli(out: Path, op: Op, args: dict[str, Any]) -> Outcome:
    argv = _argv(op, args)
    if op.extra.get("store", True):
        argv += ["--out", str(out)]
    if "render" not in op.extra:
        argv += ["--format", "json"]
    else:  # a table of a date index starts with its date column on the CLI alone
        argv += ["--no-date"]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    if code == 0:
        assert stderr.getvalue() == ""
        value = _parse(stdout.getvalue())
        if op.name == "get_version":  # the CLI prints 0.1.0 as every --version does; the tool keeps v0.1.0
            assert isinstance(value, str) and not value.startswith("v"), value
            value = f"v{value}"
        return Outcome(value)
    assert stdout.getvalue() == "" and stderr.getvalue().startswith("brk: error: "), stderr.getvalue()
    kind = next(k for k, cls in ERRORS.items() if cls.exit_code == code)
    error = stderr.getvalue().removeprefix("brk: error: ").removesuffix("\n")
    # The CLI names its own command where MCP and HTTP name the tool: the rest of the message is the same
    error = re.sub(r"List them with `brk ids --index [^`]+`\.$", "List them with get_index_to_vecids.", error)
    return Outcome(error=error, code=kind)


def run_http(client: httpx.Client, op: Op, args: dict[str, Any]) -> Outcome:
    assert op.http is not None
    method, path = op.http
    params: list[tuple[str, str | int | float | bool | None]] = [
        (k, json.dumps(x) if isinstance(x, bool) else str(x))
        for k, v in args.items() for x in (v if isinstance(v, list) else [v])]
    r = client.request(method, path, params=params)
    assert r.headers["access-control-allow-origin"] == "*" and r.headers["etag"]
    if r.status_code == 200:
        return Outcome(r.json() if r.headers["content-type"].startswith("application/json") else r.text)
    kind = next(k for k, cls in ERRORS.items() if cls.http_status == r.status_code)
    body = r.json()["error"]
    assert body["code"] == kind
    return Outcome(error=body["message"], code=kind)


async def run_mcp(out: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[Outcome]:
    """Every call through one `brk mcp` session of the official SDK client."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.shared.exceptions import MCPError

    server = StdioServerParameters(command=sys.executable, args=["-m", "cairn_servers.brk.cli", "mcp", "--out", str(out)])
    outcomes: list[Outcome] = []
    async with Client(server, cache=None) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert listed == {op.mcp for op in OPS.on("mcp")}
        for tool, args in calls:
            try:
                res = await client.call_tool(tool, args)
            except MCPError as exc:
                assert exc.code == -32602
                outcomes.append(Outcome(error=exc.message, code="bad_request"))
                continue
            text = res.content[0].text  # type: ignore[union-attr]
            outcomes.append(Outcome(error=text) if res.is_error else Outcome(_parse(text)))
    return outcomes


@pytest.fixture(scope="module")
def priced(out: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the store with a close for each day of its blocks (the cohorts' dollar figures, the URPD)."""
    import shutil

    from cairn_servers.brk import prices
    from cairn_servers.brk.compute import compute

    copy = tmp_path_factory.mktemp("brk_parity_priced") / "out"
    shutil.copytree(out, copy)
    prices.save(copy, [(d, 1.0 + d, 1.0 + d, 1.0 + d, 1.0 + d) for d in range(2, 20)])
    compute(copy)
    return copy


@pytest.fixture(scope="module")
def outcomes(out: Path, priced: Path) -> dict[tuple[str, int, str], Outcome]:
    """Every case on every surface its operation (or, for a CLI-only one, the operation it stands for) has."""
    got: dict[tuple[str, int, str], Outcome] = {}
    mcp_calls: dict[Path, list[tuple[tuple[str, int, str], tuple[str, dict[str, Any]]]]] = {out: [], priced: []}
    with serving(create_app(Interface(out))) as url, httpx.Client(base_url=url.removesuffix("/mcp")) as client, \
            serving(create_app(Interface(priced))) as url2, httpx.Client(base_url=url2.removesuffix("/mcp")) as client2:
        for name, i, case in _cases():
            op = OPS[name]
            target, args = SAME_AS[name](case.args) if name in SAME_AS else (name, case.args)
            other = OPS[target]
            store = priced if case.priced else out
            for surface in case.surfaces:
                key = (name, i, surface)
                if surface == "cli" and op.cli is not None:
                    got[key] = run_cli(store, op, case.args)
                elif surface == "http" and other.http is not None:
                    got[key] = run_http(client2 if case.priced else client, other, args)
                elif surface == "mcp" and other.mcp is not None:
                    mcp_calls[store].append((key, (other.mcp, args)))
    for store, calls in mcp_calls.items():
        answers = asyncio.run(asyncio.wait_for(run_mcp(store, [call for _, call in calls]), 120))
        got.update(zip([key for key, _ in calls], answers))
    return got


# -- the checks ----------------------------------------------------------------------------------------

def test_every_operation_has_cases() -> None:
    """A new operation fails here until it has parity cases: an answer on every surface it has (or stands
    for), and at least one refused input."""
    assert set(CASES) == set(OPS.ops), "give every operation in cairn_servers.brk.ops parity cases"
    for name, cases in CASES.items():
        op = OPS[name]
        has = [s for s in SURFACES if getattr(op, s) is not None or (name in SAME_AS and s != "cli")]
        assert has, name
        for surface in has:
            assert any(c.error is None and surface in c.surfaces for c in cases), (name, surface)
        assert any(c.error for c in cases), name


@pytest.mark.parametrize(("name", "i", "case"), list(_cases()), ids=[f"{n}-{i}" for n, i, _ in _cases()])
def test_same_answer_and_same_message_everywhere(outcomes: dict[tuple[str, int, str], Outcome], name: str, i: int,
                                                 case: Case) -> None:
    seen = {surface: outcomes[(name, i, surface)] for surface in SURFACES if (name, i, surface) in outcomes}
    assert len(seen) >= 2 or (len(seen) == 1 and len(case.surfaces) == 1), seen
    if case.error is None:
        assert all(o.error is None for o in seen.values()), seen
        values = [o.value for o in seen.values()]
        assert all(v == values[0] for v in values), seen
    else:
        messages = {o.error for o in seen.values()}
        assert len(messages) == 1 and None not in messages, seen
        assert {o.code for o in seen.values()} - {None} == {case.error}, seen


def test_answers_are_the_documented_ones(outcomes: dict[tuple[str, int, str], Outcome]) -> None:
    """A few answers pinned, so that parity cannot hold by every surface being wrong the same way."""
    def got(name: str, i: int) -> Any:
        return outcomes[(name, i, "mcp" if OPS[name].mcp else "cli")]

    assert got("get_index_count", 0).value == 13
    assert got("get_vecs", 0).value == [["2009-01-03", "2009-01-09"], [1, 14]]
    assert got("get_vecs", 1).value == 29500.0
    assert got("get_vecs", 5).value == "block_count\n1\n14\n"
    assert got("get_vecs", 7).value == "| block_count |\n|---|\n| 1 |\n| 14 |\n"
    assert got("get_vecid_to_indexes", 0).value == ["txindex"]
    assert got("ids", 1).value == outcomes[("get_index_to_vecids", 0, "mcp")].value
    assert got("get_vecs", 8).error is not None and "Did you mean: fee, fee_btc" in got("get_vecs", 8).error
    assert got("get_vecs", 12).error == "from must be an integer, got 'x'."
    assert got("get_vecs", 15).error == "Invalid parameter for 'get_vecs': index: is required"
    assert got("get_vecs", 18).error == ("Invalid parameter for 'get_vecs': from and f name the same parameter; "
                                        "give one")
    assert got("get_vecids", 3).error == "page must be 0 or more, got -1."
    assert got("search_vecids", 0).value[0]["id"] == "utxo_count"
    assert [r["id"] for r in got("search_vecids", 1).value] == ["fee_rate", "fee"]
    assert got("search_vecids", 3).value == []
    assert got("ids", 5).value == got("search_vecids", 0).value
    assert got("get_block", 0).value["txids"][1] == TX170 and got("get_block", 1).value["height"] == 0
    assert got("get_block", 3).error == "Block not found: height 590 is past the tip (589)."
    assert got("get_tx", 0).value["vin"][0]["prevout"]["value"] == 5_000_000_000
    assert got("get_tx", 1).error == "Invalid txid 'zz': give 64 hexadecimal digits."
    stats = got("get_address", 0).value
    assert stats["balance"] == stats["chain_stats"]["funded_txo_sum"] - stats["chain_stats"]["spent_txo_sum"] > 0
    assert got("get_address", 1).value["chain_stats"]["tx_count"] == 0  # genesis pays a key, not this P2PKH
    assert got("get_address", 3).error.startswith("Invalid Bitcoin address '1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNb'")


def test_every_declared_route_and_tool_is_served(out: Path) -> None:
    """The surfaces list exactly the declared operations: OpenAPI has each HTTP route with its parameters
    (aliases included), the CLI each command."""
    spec = openapi()["paths"]
    for op in OPS.on("http"):
        assert op.http is not None
        entry = spec[op.http[1]][op.http[0].lower()]
        names = [p["name"] for p in entry.get("parameters", [])]
        assert names == [n for p in op.params_for("http") for n in (p.wire, *p.aliases)]
    assert [p["name"] for p in spec["/api/vecs/query"]["get"]["parameters"]] == [
        "index", "i", "ids", "v", "from", "f", "to", "t", "count", "c", "format"]
    from cairn_servers.brk.cli import build_parser

    usage = build_parser().format_help()
    for op in OPS.on("cli"):
        assert f"    {op.cli} " in usage or f"    {op.cli}\n" in usage, op.cli
