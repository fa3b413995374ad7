"""Parity (issue 14): every ctx operation gives the same result and the same message on every surface.

For each operation of the registry (cairn_servers/ctx/ops.py: search, get, sources; agent_list and agent_show at
the end of this file) and each Lua tool of the
configuration (an operation built from its script's schema), the same inputs, valid and invalid, go
through:

* the CLI, as a real process: the operation's own command (``ctx search deploy --limit 2``, built from
  the declaration) and ``ctx tool test NAME --param k=v``;
* MCP, through the official SDK client (``mcp`` 2.3.0), over stdio (``ctx serve mcp --stdio``) and over
  Streamable HTTP at ``/mcp``;
* HTTP, on a real server on a free 127.0.0.1 port: the operation's own route (``POST /tools/search``,
  ``GET /tools/sources``, ``POST /tools/find_mentions``).

Results must be identical (the CLI prints a list where the tools answer ``{"results": [...]}``) and so
must error messages: ``ctx search --limit 2000`` and ``POST /tools/search {"limit": 2000}`` both say
``Invalid parameter for 'search': limit: 2000 is greater than the maximum of 1000``. The knowledge base
is the shipped example (a Markdown folder, the ``faq`` Lua connector, the ``find_mentions`` Lua tool).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from cairn_servers.core.ops import Op
from cairn_servers.ctx import config
from cairn_servers.ctx.http import create_app
from cairn_servers.ctx.ops import OPS
from cairn_servers.ctx.store import document_id
from cairn_servers.ctx.tools import Toolbox

from .conftest import serving

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026")

DEPLOY = document_id("filesystem:handbook", "deploy.md")
HINT = "Use YYYY-MM-DD, an ISO 8601 time or unix seconds (years 1 to 9999)."


class Case:
    """One input; ``error`` is the message every surface must give (None: a valid input), ``code`` its
    error code. ``cli``: the command's argv when the input has no spelling built from the declaration
    (the date filters are options on the CLI and nested in ``filters`` for JSON clients)."""

    def __init__(self, args: dict[str, Any], error: str | None = None, code: str = "bad_request",
                 cli: list[str] | None = None) -> None:
        self.args, self.error, self.code, self.cli = args, error, code, cli

    def __repr__(self) -> str:
        return json.dumps(self.args)


def _invalid(op: str, text: str) -> str:
    return f"Invalid parameter for {op!r}: {text}"


CASES: dict[str, list[Case]] = {
    "search": [
        Case({"query": "deploy", "limit": 2}),
        Case({"query": "laptop deploy", "source": ["faq", "filesystem:handbook"], "mode": "keyword"}),
        Case({"query": "deploy", "filters": {"since": "2000-01-01"}},
             cli=["search", "deploy", "--since", "2000-01-01"]),
        Case({"query": "deploy", "limit": 2000}, _invalid("search", "limit: 2000 is greater than the maximum of 1000")),
        Case({"query": "deploy", "limit": 0}, _invalid("search", "limit: 0 is less than the minimum of 1")),
        Case({"query": "deploy", "limit": "many"}, _invalid("search", "limit: expected integer, got string")),
        Case({"query": "deploy", "mode": "fuzzy"},
             _invalid("search", 'mode: "fuzzy" is not one of "keyword", "semantic", "hybrid"')),
        Case({"query": ""}, _invalid("search", 'query: "" is shorter than 1 characters')),
        # at most 256 distinct words (bounded work); the limit itself is answered
        Case({"query": " ".join(f"w{i}" for i in range(300))},
             "The query has 300 distinct words; the limit is 256. Keep the words that matter."),
        Case({"query": " ".join(f"w{i}" for i in range(255)) + " deploy", "limit": 2}),
        Case({"query": '"' + " ".join(["deploy"] * 4097) + '"'},
             "The query's phrases hold 4,097 words; the limit is 4,096. Quote shorter phrases."),
        Case({"query": "deploy", "mode": "semantic"},
             'Embeddings are disabled. Set [embedding] provider = "minilm" (offline, the default of `ctx init`; or '
             '"local", "e5", "openai", "ollama") in ctx.toml, then run `ctx embed pending`.', "embeddings_disabled"),
        Case({"query": "deploy", "source": "nowhere"},
             "Unknown source 'nowhere'. Known sources: filesystem:handbook, script:faq.", "not_found"),
        Case({"query": "deploy", "filters": {"since": "yesterday"}}, f"since 'yesterday' is not a date. {HINT}",
             cli=["search", "deploy", "--since", "yesterday"]),
        # --explain (issue 17): the keyword rank and BM25 of each result's best chunk, the same everywhere
        Case({"query": "deploy laptop", "explain": True, "limit": 3},
             cli=["search", "deploy laptop", "--explain", "--limit", "3"]),
        Case({"query": "deploy", "explain": False}, cli=["search", "deploy"]),
        Case({"query": "deploy", "explain": "yes"}, _invalid("search", "explain: expected boolean, got string"),
             cli=[]),
        Case({"query": "deploy", "explain": True, "mode": "hybrid"},
             'Embeddings are disabled. Set [embedding] provider = "minilm" (offline, the default of `ctx init`; or '
             '"local", "e5", "openai", "ollama") in ctx.toml, then run `ctx embed pending`.', "embeddings_disabled", cli=["search", "deploy", "--explain", "--mode", "hybrid"]),
    ],
    "get": [
        Case({"id": DEPLOY}),
        Case({"id": ""}, _invalid("get", 'id: "" is shorter than 1 characters')),
        Case({"id": "0" * 32}, f"No document with id {'0' * 32!r}. Ids come from `ctx search`; run `ctx sync` if it "
                               "was just added.", "not_found"),
    ],
    "sources": [
        Case({}),
        Case({"colour": "red"}, _invalid("sources", "colour: is not an allowed property (allowed: none)"), cli=[]),
    ],
    # a Lua tool: an operation built from its script's own schema
    "find_mentions": [
        Case({"term": "deploy", "limit": 2}),
        Case({"term": "VPN"}),
        Case({"limit": 2}, _invalid("find_mentions", "term: is required")),
        Case({"term": "x", "mode": "psychic"},
             _invalid("find_mentions", 'mode: "psychic" is not one of "keyword", "semantic", "hybrid"')),
        Case({"term": "x", "limit": 1.5}, _invalid("find_mentions", "limit: expected integer, got number")),
    ],
}
EXIT = {"bad_request": 2, "embeddings_disabled": 2, "not_found": 3}
STATUS = {"bad_request": 400, "embeddings_disabled": 400, "not_found": 404}


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory, ctx_module_backend: str) -> Path:
    """The example knowledge base, on each storage backend in turn (``ctx_module_backend``)."""
    root = tmp_path_factory.mktemp("parity") / "example"
    shutil.copytree(REPO / "examples" / "ctx", root, ignore=shutil.ignore_patterns("data"))
    cfg = root / "ctx.toml"  # keyword only: the cases include the answer without embeddings
    cfg.write_text(cfg.read_text().replace('provider = "minilm"', 'provider = "disabled"', 1))
    r = _ctx("sync", "all", "--config", str(root / "ctx.toml"))
    assert r.returncode == 0, r.stderr
    return root / "ctx.toml"


@pytest.fixture(scope="module")
def box(kb: Path) -> Iterator[Toolbox]:
    toolbox = Toolbox(config.load(kb))
    yield toolbox
    toolbox.close()


@pytest.fixture(scope="module")
def base(kb: Path) -> Iterator[str]:
    with serving(create_app(config.load(kb))) as url:
        yield url


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO / "src"), CTX_OUTPUT_FORMAT="")


def _ctx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", *args], capture_output=True, text=True,
                          env=_env(), timeout=60)


def test_every_operation_has_valid_and_invalid_cases(box: Toolbox) -> None:
    """Declaring an operation (or shipping a Lua tool in the example) without parity cases fails here."""
    assert {op.name for op in OPS.on("mcp")} <= set(box.ops)
    assert sorted(CASES) == sorted(box.ops)
    for name, cases in CASES.items():
        assert any(c.error is None for c in cases) and any(c.error for c in cases), name
    # the operations that are not tools (agents: MCP prompts) have their cases below
    assert sorted(set(OPS.ops) - set(box.ops)) == sorted(AGENT_CASES)
    for name, cases in AGENT_CASES.items():
        assert any(c.error is None for c in cases) and any(c.error for c in cases), name


def test_every_surface_shows_the_same_declaration(box: Toolbox, base: str) -> None:
    listed = {t["name"]: t for t in httpx.get(f"{base}/tools/list").json()["tools"]}
    paths = httpx.get(f"{base}/openapi.json").json()["paths"]

    async def mcp_tools() -> dict[str, Any]:
        async with Client(f"{base}/mcp", cache=None) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    tools = asyncio.run(asyncio.wait_for(mcp_tools(), 60))
    for op in box.ops.values():
        assert op.mcp == op.name and op.http is not None
        method, path = op.http
        schema = op.input_schema("mcp")
        assert tools[op.name].input_schema == listed[op.name]["parameters"] == schema
        assert tools[op.name].description == listed[op.name]["description"] == op.description
        entry = paths[path][method.lower()]
        if method == "POST":
            assert entry["requestBody"]["content"]["application/json"]["schema"] == schema
        else:
            assert [p["name"] for p in entry["parameters"]] == list(schema["properties"])


# ---- the three surfaces ------------------------------------------------------------------------


class Answer:
    """What a surface gave: the JSON a tool answers (``value``) or an error message (and its kind)."""

    def __init__(self, value: Any = None, error: str | None = None, kind: Any = None) -> None:
        self.value, self.error, self.kind = value, error, kind

    def __repr__(self) -> str:
        return f"Answer(value={self.value!r}, error={self.error!r}, kind={self.kind!r})"


def _cli_argv(op: Op, case: Case) -> list[str] | None:
    """The operation's own command for ``case``, spelled from the declaration (None: not on the CLI)."""
    if case.cli is not None:
        return case.cli or None
    if op.cli is None:
        return None
    on_cli = {p.wire: p for p in op.params_for("cli")}
    assert set(case.args) <= set(on_cli), f"{case}: give the CLI spelling (cli=...)"
    argv = [op.cli]
    for wire, value in case.args.items():
        p = on_cli[wire]
        values = value if isinstance(value, list) else [value]
        if p.positional:
            argv += [str(v) for v in values]
        else:
            for v in values:
                argv += [(p.flags or (f"--{p.name.replace('_', '-')}",))[0], str(v)]
    return argv


def _via_cli(argv: list[str], kb: Path) -> Answer:
    r = _ctx(*argv, "--config", str(kb), "--json")
    if r.returncode == 0:
        assert "ctx: error" not in r.stderr, r.stderr  # a Lua tool's log lines may be there
        return Answer(json.loads(r.stdout))
    assert r.stdout == "" and r.stderr.startswith("ctx: error: ") and r.stderr.endswith("\n"), r.stderr
    assert "Traceback" not in r.stderr
    return Answer(error=r.stderr[len("ctx: error: "):-1], kind=r.returncode)


def _tool_test_argv(op: Op, case: Case) -> list[str]:
    """``ctx tool test NAME --param k=v``: a string as it is, anything else as JSON."""
    argv = ["tool", "test", op.name]
    for key, value in case.args.items():
        argv += ["--param", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    return argv


def _via_http(base: str, op: Op, case: Case) -> Answer:
    assert op.http is not None
    method, path = op.http
    if method == "GET":
        r = httpx.get(f"{base}{path}", params=case.args, timeout=30)
    else:
        r = httpx.post(f"{base}{path}", json=case.args, timeout=30)
    assert r.headers["content-type"].startswith("application/json") and "Traceback" not in r.text
    if r.status_code == 200:
        return Answer(r.json())
    err = r.json()["error"]
    return Answer(error=err["message"], kind=(r.status_code, err["code"]))


async def _via_mcp(server: Any, calls: list[tuple[str, Case]]) -> list[Answer]:
    out = []
    async with Client(server, cache=None) as client:
        for name, case in calls:
            try:
                res = await client.call_tool(name, case.args)
            except MCPError as exc:  # a parameter the declaration refuses: JSON-RPC -32602
                out.append(Answer(error=exc.error.message, kind=exc.error.code))
                continue
            text = res.content[0].text if res.content else ""  # type: ignore[union-attr]
            if res.is_error:  # the service refused: an error result
                out.append(Answer(error=text, kind="isError"))
            else:
                assert json.loads(text) == res.structured_content
                out.append(Answer(res.structured_content))
    return out


def _cli_shape(op: Op, value: Any) -> Any:
    """The CLI prints the data itself: the list a tool wraps in its key (``{"results": [...]}``)."""
    key = op.extra.get("key")
    return value[key] if key else value


ALL = [(name, case) for name, cases in CASES.items() for case in cases]


@pytest.fixture(scope="module")
def mcp_answers(kb: Path, base: str) -> dict[str, list[Answer]]:
    stdio = StdioServerParameters(command=sys.executable, env=_env(),
                                  args=["-m", "cairn_servers.ctx.cli", "serve", "mcp", "--stdio", "--config", str(kb)])

    async def both() -> dict[str, list[Answer]]:
        return {"stdio": await _via_mcp(stdio, ALL), "http": await _via_mcp(f"{base}/mcp", ALL)}

    return asyncio.run(asyncio.wait_for(both(), 120))


@pytest.mark.parametrize("index", range(len(ALL)), ids=[f"{n}-{c}" for n, c in ALL])
def test_same_result_and_message_on_every_surface(index: int, box: Toolbox, kb: Path, base: str,
                                                  mcp_answers: dict[str, list[Answer]]) -> None:
    name, case = ALL[index]
    op = box.ops[name]
    http = _via_http(base, op, case)
    mcp = [mcp_answers["stdio"][index], mcp_answers["http"][index]]
    tool_test = _via_cli(_tool_test_argv(op, case), kb)
    argv = _cli_argv(op, case)
    command = _via_cli(argv, kb) if argv else None

    if case.error is None:
        assert http.error is None, http
        assert [a.value for a in mcp] == [http.value, http.value]
        assert tool_test.value == http.value
        if command is not None:
            assert command.value == _cli_shape(op, http.value)
        assert http.value  # a real answer, not an empty one
        return
    answers = [http, *mcp, tool_test] + ([command] if command else [])
    assert [a.error for a in answers] == [case.error] * len(answers), answers
    assert http.kind == (STATUS[case.code], case.code)
    assert tool_test.kind == EXIT[case.code] and (command is None or command.kind == EXIT[case.code])
    refused_by_declaration = case.error.startswith("Invalid parameter for")
    assert all(a.kind == (-32602 if refused_by_declaration else "isError") for a in mcp), mcp


# ---- agents: agent_list, agent_show (MCP prompts, not tools) ------------------------------------
#
# ``ctx agent list|show`` (argv from the declaration, ``--arg k=v``), ``GET /agents`` and
# ``POST /agents/{name}`` (the arguments as the JSON body) give the same JSON and messages; MCP ``prompts/list`` and ``prompts/get``
# (the SDK client, stdio and HTTP) give the same agents, prompt and argument messages. Cases are
# ``{"name": ..., "arguments": {...}}`` for agent_show.

AGENT_CASES: dict[str, list[Case]] = {
    "agent_list": [
        Case({}),
        Case({"verbose": "1"}, _invalid("agent_list", "verbose: is not an allowed property (allowed: none)"),
             cli=[]),
    ],
    "agent_show": [
        Case({"name": "reviewer"}),
        Case({"name": "reviewer", "arguments": {"area": "on-call"}}),
        Case({"name": "oncall", "arguments": {"topic": "deploy"}}),
        Case({"name": "oncall"}, "Agent 'oncall': missing required argument 'topic': what is failing (e.g. deploy, "
                                 "VPN). Arguments: topic (required)."),
        Case({"name": "reviewer", "arguments": {"colour": "red"}},
             "Agent 'reviewer': unknown argument 'colour'. Arguments: area."),
        Case({"name": "nobody"}, "No agent named 'nobody'. Agents: reviewer, oncall.", "not_found"),
    ],
}
AGENTS_ALL = [(name, case) for name, cases in AGENT_CASES.items() for case in cases]


def _agent_cli(op: Op, case: Case, kb: Path) -> Answer | None:
    if case.cli is not None:
        return None
    assert op.cli is not None
    argv = op.cli.split()
    if "name" in case.args:
        argv.append(case.args["name"])
    for key, value in (case.args.get("arguments") or {}).items():
        argv += ["--arg", f"{key}={value}"]
    return _via_cli(argv, kb)


def _agent_http(base: str, op: Op, case: Case) -> Answer:
    assert op.http is not None
    if "name" in case.args:
        assert op.http == ("POST", "/agents/{name}")
        r = httpx.post(f"{base}/agents/{case.args['name']}", json=case.args.get("arguments") or {}, timeout=30)
    else:
        assert op.http[0] == "GET"
        r = httpx.get(f"{base}{op.http[1]}", params=case.args, timeout=30)
    assert r.headers["content-type"].startswith("application/json") and "Traceback" not in r.text
    if r.status_code == 200:
        return Answer(r.json())
    err = r.json()["error"]
    return Answer(error=err["message"], kind=(r.status_code, err["code"]))


async def _agents_via_mcp(server: Any) -> tuple[list[dict[str, Any]], list[Answer]]:
    out = []
    async with Client(server, cache=None) as client:
        prompts = [p.model_dump(exclude_none=True) for p in (await client.list_prompts()).prompts]
        for name, case in AGENTS_ALL:
            if name != "agent_show":
                continue
            try:
                got = await client.get_prompt(case.args["name"], case.args.get("arguments"))
            except MCPError as exc:
                out.append(Answer(error=exc.error.message, kind=exc.error.code))
                continue
            out.append(Answer(got.model_dump(mode="json", exclude_none=True, exclude={"result_type"})))
    return prompts, out


@pytest.fixture(scope="module")
def mcp_agent_answers(kb: Path, base: str) -> dict[str, tuple[list[dict[str, Any]], list[Answer]]]:
    stdio = StdioServerParameters(command=sys.executable, env=_env(),
                                  args=["-m", "cairn_servers.ctx.cli", "serve", "mcp", "--stdio", "--config", str(kb)])

    async def both() -> dict[str, tuple[list[dict[str, Any]], list[Answer]]]:
        return {"stdio": await _agents_via_mcp(stdio), "http": await _agents_via_mcp(f"{base}/mcp")}

    return asyncio.run(asyncio.wait_for(both(), 120))


def _as_prompt(agent: dict[str, Any]) -> dict[str, Any]:
    """What prompts/list says of an agent of ``GET /agents``."""
    out: dict[str, Any] = {"name": agent["name"], "description": agent["description"]}
    args = [{k: v for k, v in a.items() if k != "default" and (v or k == "name")} for a in agent["arguments"]]
    if args:
        out["arguments"] = args
    return out


def _as_prompt_result(resolved: dict[str, Any]) -> dict[str, Any]:
    """What prompts/get answers for an agent ``GET /agents/{name}`` resolved."""
    messages = [{"role": "user", "content": {"type": "text", "text": resolved["system"]}}]
    messages += [{"role": m["role"], "content": {"type": "text", "text": m["content"]}} for m in resolved["messages"]]
    return {"description": resolved["description"], "messages": messages}


@pytest.mark.parametrize("index", range(len(AGENTS_ALL)), ids=[f"{n}-{c}" for n, c in AGENTS_ALL])
def test_agents_same_answer_and_message_on_every_surface(
        index: int, kb: Path, base: str, mcp_agent_answers: dict[str, tuple[list[dict[str, Any]], list[Answer]]]
) -> None:
    name, case = AGENTS_ALL[index]
    op = OPS[name]
    http = _agent_http(base, op, case)
    command = _agent_cli(op, case, kb)
    mcp: list[Answer] = []
    if name == "agent_show":
        position = [i for i, (n, _) in enumerate(AGENTS_ALL) if n == "agent_show"].index(index)
        mcp = [mcp_agent_answers[t][1][position] for t in ("stdio", "http")]

    if case.error is None:
        assert http.error is None and http.value, http
        if command is not None:
            assert command.value == _cli_shape(op, http.value)
        if name == "agent_list":
            listed = [_as_prompt(a) for a in http.value["agents"]]
            assert [mcp_agent_answers[t][0] for t in ("stdio", "http")] == [listed, listed]
        else:
            assert [a.value for a in mcp] == [_as_prompt_result(http.value)] * 2
        return
    answers = [http] + ([command] if command else [])
    assert [a.error for a in answers] == [case.error] * len(answers), answers
    assert http.kind == (STATUS[case.code], case.code)
    assert command is None or command.kind == EXIT[case.code]
    if case.code == "not_found":  # MCP names it in its own words: prompts/get of an unknown prompt
        assert [(a.error, a.kind) for a in mcp] == [(f"Unknown prompt: {case.args['name']!r}", -32602)] * 2
    elif mcp:
        assert [(a.error, a.kind) for a in mcp] == [(case.error, -32602)] * 2


def test_search_explain_is_in_the_answers_that_ask_for_it(base: str, mcp_answers: dict[str, list[Answer]]) -> None:
    """``explain`` (issue 17): present on every result of a search that asked for it, absent otherwise."""
    checked = 0
    for index, (name, case) in enumerate(ALL):
        if name != "search" or case.error is not None:
            continue
        wanted = case.args.get("explain") is True
        for answer in (_via_http(base, OPS["search"], case), mcp_answers["stdio"][index], mcp_answers["http"][index]):
            results = answer.value["results"]
            assert results and all(("explain" in r) == wanted for r in results), (case, answer)
            if wanted:
                checked += 1
                for r in results:
                    e = r["explain"]
                    assert e["keyword"]["rank"] >= 1 and e["keyword"]["bm25"] > 0
                    assert (e["vector"], e["fused"], e["fusion"]) == (None, None, None)
    assert checked == 3
