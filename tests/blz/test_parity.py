"""Issue 14: every blz operation gives the same answer and the same error message on the CLI and over MCP.

Driven from the registry (cairn_servers.blz.ops.OPS): each operation has cases below, written once as wire
arguments; the CLI argv is derived from the declaration (positional arguments, flags), the MCP call
goes through the official SDK client to a real `blz mcp` over stdio. How MCP reaches an operation:

- ``tool``: the operation's own MCP tool (find, toc, list-sources, lookup, source-add, learn-blz);
- ``find``: `blz search` and `blz get` are `find` with a query / with snippets (their hits / snippets
  must equal find's; error messages must agree after the operation's name);
- ``run-command``: the whitelisted read-only commands (stats, history, list, validate, inspect,
  schema), whose stdout/stderr/exit code must equal `blz COMMAND --text`;
- ``cli-only`` (update, remove): no MCP counterpart by design (the seed keeps writes other
  than source-add off MCP); the CLI answer must equal the operation called on the store directly.

An operation declared without cases here fails :func:`test_every_operation_has_parity_cases`.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from cairn_servers.blz.cli import run
from cairn_servers.blz.limits import WHITELIST
from cairn_servers.blz.ops import OPS
from cairn_servers.blz.store import Store
from cairn_servers.core.errors import CairnError
from cairn_servers.core.ops import Op

from .conftest import DocServer

pytestmark = [pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026"), pytest.mark.timeout(180)]

GUIDE = b"# Guide\n\nIntro words.\n\n## Hooks\n\nHooks let you use state.\nMore hooks text.\n\n## Other\n\nzebra\n"
LIB = b"# Lib\n\n## Install\n\nnpm install lib\n"
NOTES = b"# Hooks overview\n\nAll about hooks.\n\n### Deep hooks\n\nhooks deep inside.\n"

OK, ERR = True, False
MOST_WORDS = " ".join(f"w{i}" for i in range(255))  # 255 distinct words (a 256th is added where used)
TOO_MANY_WORDS = " ".join(f"w{i}" for i in range(257))
# op name -> (route, [(wire arguments, expected to succeed)]). {URL} stands for the test server's lib URL.
CASES: dict[str, tuple[str, list[tuple[dict[str, Any], bool]]]] = {
    "find": ("tool", [
        ({"query": "hooks", "source": "guide", "maxResults": 5}, OK),
        ({"query": "zebra"}, OK),
        ({"snippets": ["GUIDE:7-7"], "contextMode": "all"}, OK),
        ({"snippets": ["guide:7-7"], "linePadding": 1}, OK),  # padding alone: symmetric context
        ({"query": "hooks", "snippets": ["guide:1-2", "guide:11"], "contextMode": "symmetric"}, OK),
        ({"query": "hookz"}, OK),  # typo fallback
        ({"query": "x", "maxResults": 99}, ERR),
        ({"query": "x", "maxResults": 0}, ERR),
        ({"query": "x", "maxResults": "many"}, ERR),
        ({"snippets": ["guide:7"], "contextMode": "most"}, ERR),
        ({"snippets": ["guide:7"], "linePadding": 51}, ERR),
        ({"query": "x", "source": "nope"}, ERR),
        ({"query": "x", "source": "Bad/Alias"}, ERR),
        ({"snippets": ["guide:9-3"]}, ERR),
        ({"snippets": ["guide:900"]}, ERR),
        ({}, ERR),
        # Issue 16: several sources, headingsOnly, headingLevel, maxLines, linesBefore / linesAfter.
        # a query of more than 256 distinct words is refused (the limit itself is answered)
        ({"query": TOO_MANY_WORDS}, ERR),
        ({"query": MOST_WORDS + " hooks"}, OK),
        # a phrase is checked at every position: its words are counted, repeats too (at most 4,096)
        ({"query": '"' + " ".join(["hooks"] * 4097) + '"'}, ERR),
        ({"query": '"' + " ".join(["hooks"] * 40) + '"'}, OK),
        ({"query": "hooks", "source": ["guide", "notes"]}, OK),
        ({"query": "hooks", "source": "guide,notes", "headingLevel": "1-2"}, OK),
        ({"query": "hooks", "source": ["notes", "GUIDE"], "headingLevel": [1, "3-4"]}, OK),
        ({"query": "hooks", "headingLevel": 2, "headingsOnly": True}, OK),
        ({"query": "deep", "headingsOnly": True, "headingLevel": "<=2"}, OK),
        ({"query": "hooks", "headingsOnly": True, "maxResults": 1}, OK),
        ({"snippets": ["guide:7"], "linesAfter": 2, "linesBefore": 1}, OK),
        ({"snippets": ["guide:1-12", "notes:1-7"], "maxLines": 3}, OK),
        ({"snippets": ["guide:7"], "linePadding": 3, "linesBefore": 0, "maxLines": 2}, OK),
        ({"query": "x", "source": ["guide", "nope"]}, ERR),
        ({"query": "x", "source": "guide,Bad/Alias"}, ERR),
        ({"query": "x", "headingLevel": "3-1"}, ERR),
        ({"query": "x", "headingLevel": "0"}, ERR),
        ({"query": "x", "headingLevel": 7}, ERR),
        ({"query": "x", "headingLevel": [2, "h2"]}, ERR),
        ({"snippets": ["guide:7"], "maxLines": 0}, ERR),
        ({"snippets": ["guide:7"], "maxLines": "few"}, ERR),
        ({"snippets": ["guide:7"], "linesAfter": 51}, ERR),
        ({"snippets": ["guide:7"], "linesBefore": -1}, ERR),
        # The query syntax: +required, -excluded, "phrases", title:/heading: terms.
        ({"query": "+zzzqqq +hooks"}, OK),  # a required word nowhere: no hits, never any-term hits
        ({"query": "hooks -deep"}, OK),
        ({"query": "title:hooks"}, OK),
        ({"query": '"hooks let" +state -zebra'}, OK),
        ({"query": '"hooks zebra"'}, OK),  # the any-term fallback, with its note
        ({"query": "hookz -deep"}, OK),  # the typo fallback keeps the exclusion
        ({"query": "-hooks -deep"}, ERR),  # excludes only
        ({"query": "hooks", "source": "tag:nope"}, ERR),  # no source carries the tag
        ({"query": '+"' + " ".join(["hooks"] * 4097) + '"'}, ERR),  # a required phrase counts its words too
        # Durable citations: lines as of a version, sections by anchor.
        ({"snippets": ["guide:7@1", "guide#guide/hooks"]}, OK),
        ({"snippets": ["guide#hooks"], "contextMode": "all"}, OK),
        ({"snippets": ["guide:7@0"]}, ERR),
        ({"snippets": ["guide:7@9"]}, ERR),
        ({"snippets": ["guide#no/such/section"]}, ERR),
        ({"snippets": ["guide#guide/hooks@1"]}, ERR),
    ]),
    "diff": ("tool", [({"source": "guide"}, OK), ({"source": "GUIDE", "since": 1}, OK), ({"source": "ghost"}, ERR),
                      ({"source": "guide", "since": 0}, ERR), ({"source": "guide", "since": 5}, ERR)]),
    "toc": ("tool", [
        ({"source": "guide"}, OK),
        ({"source": "GUIDE", "maxDepth": 1}, OK),
        ({"source": "guide", "tree": True}, OK),
        ({"source": "guide", "filter": "hooks", "maxResults": 1, "page": 1}, OK),
        ({"source": "guide", "maxResults": 1, "page": 3}, OK),
        ({"source": "guide", "maxDepth": 9}, ERR),
        ({"source": "guide", "maxDepth": "deep"}, ERR),
        ({"source": "guide", "maxResults": 1001}, ERR),
        ({"source": "guide", "page": 0}, ERR),
        ({"source": "ghost"}, ERR),
        ({"source": "../etc"}, ERR),
        ({"source": "tag:nope"}, ERR),
        ({"source": "guide,notes"}, OK),  # several sources: one outline after the other
        ({"source": "notes,guide", "filter": "hooks OR other NOT deep", "tree": True, "maxResults": 2, "page": 2}, OK),
        ({"source": "guide,ghost"}, ERR),
    ]),
    "list-sources": ("tool", [({}, OK), ({"filter": "GUI"}, OK), ({"filter": "react"}, OK)]),
    "source-add": ("tool", [
        ({"alias": "lib", "url": "{URL}", "dryRun": True}, OK),  # reports, writes nothing
        ({"alias": "lib", "url": "{URL}", "dryRun": True, "tags": ["web", "docs"], "category": "x",
          "refreshHours": 3, "aliases": ["library"]}, OK),
        ({"alias": "lib", "url": "{URL}", "aliases": ["lib"]}, ERR),  # its own alias
        ({"alias": "lib", "url": "{URL}", "aliases": ["guide"]}, ERR),  # another source's alias
        ({"alias": "lib", "url": "{URL}", "tags": ["Bad Tag"]}, ERR),
        ({"alias": "lib", "url": "{URL}", "refreshHours": 0}, ERR),
        ({"alias": "lib", "url": "{URL}"}, OK),
        ({"alias": "lib", "url": "{URL}"}, ERR),  # exists: Conflict
        ({"alias": "lib", "url": "{URL}", "force": True, "exact": True}, ERR),  # exactly llms.txt: 404
        ({"alias": "Bad/Alias", "url": "{URL}"}, ERR),
        ({"alias": "not-in-the-registry"}, ERR),
        ({"alias": "lib", "url": "{URL}", "dryRun": True}, ERR),  # a dry run conflicts as an add would
        ({"alias": "docs.txt"}, ERR),  # neither an alias nor a domain
        ({"alias": "bun.sh", "exact": True}, ERR),  # a domain is looked into: no exact URL
    ]),
    "learn-blz": ("tool", [({}, OK)]),
    # MCP only (the CLI's is `update`): the declaration called directly agrees (both refresh; unchanged)
    "source-refresh": ("tool", [({"alias": "guide"}, OK), ({"stale": True}, OK), ({}, ERR),
                                ({"alias": "guide", "stale": True}, ERR), ({"alias": "ghost"}, ERR)]),
    "search": ("find", [
        ({"query": "hooks", "source": ["guide"], "maxResults": 5}, OK),
        ({"query": "x", "maxResults": 51}, ERR),
        ({"query": "x", "source": ["nope"]}, ERR),
        ({"query": "hooks", "source": ["guide", "notes"], "headingLevel": "2"}, OK),
        ({"query": "hooks", "source": ["guide,notes"], "headingsOnly": True}, OK),
        ({"query": "hooks", "headingLevel": [1, 3]}, OK),
        ({"query": "x", "headingLevel": "3-1"}, ERR),
        ({"query": "x", "source": ["guide", "nope"]}, ERR),
        ({"query": "hooks -deep +state"}, OK),
        ({"query": "heading:hooks -title:deep"}, OK),
        ({"query": '"hooks zebra"'}, OK),
        ({"query": "-deep -hooks"}, ERR),
        ({"query": "hooks", "source": ["tag:nope"]}, ERR),
    ]),
    "get": ("find", [
        ({"citations": ["guide:7-7"], "linePadding": 2}, OK),
        ({"citations": ["guide:5"], "contextMode": "all"}, OK),
        ({"citations": ["guide:7"], "linePadding": 60}, ERR),
        ({"citations": ["nosuch:1-2"]}, ERR),
        ({"citations": ["guide:7"], "linesAfter": 2}, OK),
        ({"citations": ["guide:1-12"], "maxLines": 4, "linesBefore": 1}, OK),
        ({"citations": ["guide:7"], "maxLines": 0}, ERR),
        ({"citations": ["guide:7"], "linesBefore": 51}, ERR),
        ({"citations": ["guide:5-7@1", "guide#guide/other"]}, OK),
        ({"citations": ["guide:7@x"]}, ERR),
    ]),
    "stats": ("run-command", [({}, OK)]),
    "history": ("run-command", [({}, OK), ({"alias": "guide"}, OK), ({"alias": "Bad/Alias"}, ERR)]),
    "validate": ("run-command", [({}, OK), ({"alias": "guide"}, OK), ({"alias": "ghost"}, ERR)]),
    "inspect": ("run-command", [({"alias": "guide"}, OK), ({"alias": "ghost"}, ERR)]),
    "schema": ("run-command", [({}, OK), ({"name": "toc"}, OK), ({"name": "nope"}, ERR)]),
    "update": ("cli-only", [({"alias": "guide"}, OK), ({}, ERR), ({"alias": "ghost"}, ERR), ({"stale": True}, OK),
                            ({"alias": "guide", "stale": True}, ERR)]),
    "remove": ("cli-only", [({"alias": "ghost"}, ERR)]),
    "lookup": ("tool", [({"query": "react"}, OK), ({}, OK), ({"query": "orm", "category": "database"}, OK),
                        ({"category": "nope"}, ERR), ({"category": "AI"}, ERR),
                        ({"query": TOO_MANY_WORDS}, ERR), ({"query": MOST_WORDS}, OK)]),
}
# run-command reaches `list` too (it is list-sources on the CLI): checked with the run-command cases.
RUN_COMMAND_EXTRA: list[tuple[str, dict[str, Any], bool]] = [("list-sources", {}, OK)]


def test_every_operation_has_parity_cases() -> None:
    assert set(CASES) == {op.name for op in OPS}, "declare parity cases for every operation"
    for op in OPS:
        route, cases = CASES[op.name]
        assert cases, op.name
        if op.mcp is not None:
            assert route == "tool", f"{op.name} is an MCP tool: compare it with the tool itself"
        elif op.cli in WHITELIST:
            assert route == "run-command", f"{op.name} is reachable through run-command"
        assert any(ok for _a, ok in cases) or route == "cli-only" or op.name == "remove", op.name
        if op.name not in ("learn-blz", "lookup", "stats", "list-sources"):
            assert not all(ok for _a, ok in cases), f"{op.name}: give an invalid input too"


def argv_for(op: Op, args: dict[str, Any]) -> list[str]:
    """The command line that passes ``args`` (wire names) to ``op``, from its declaration."""
    assert op.cli is not None
    wires = {p.wire: p for p in op.params_for("cli")}
    assert set(args) <= set(wires), f"{op.name}: not CLI parameters: {set(args) - set(wires)}"
    positional: list[str] = []
    options: list[str] = []
    for wire, value in args.items():
        p = wires[wire]
        if p.positional:
            positional += [str(v) for v in value] if isinstance(value, list) else [str(value)]
            continue
        flag = p.flags[0] if p.flags else f"--{p.name.replace('_', '-')}"
        if isinstance(value, bool):
            assert value, "a CLI flag can only say true"
            options.append(flag)
        elif isinstance(value, list):
            for v in value:
                options += [flag, str(v)]
        else:
            options += [flag, str(value)]
    return [op.cli, *positional, *options]


def cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(argv, out, err)
    return code, out.getvalue(), err.getvalue()


def cli_json(op: Op, args: dict[str, Any]) -> tuple[bool, Any]:
    """(True, the --json answer) or (False, the error message), via `blz` in-process."""
    code, out, err = cli([*argv_for(op, args), "--json"])
    if code == 0:
        assert err == ""
        return True, json.loads(out)
    assert out == "" and err.startswith("blz: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    return False, err[len("blz: error: "):-1]


async def mcp_call(client: Client, name: str, args: dict[str, Any]) -> tuple[bool, Any]:
    """(True, structured content) or (False, the error message: a -32602 error or an isError result)."""
    try:
        res = await client.call_tool(name, args)
    except MCPError as exc:
        return False, exc.message
    text = res.content[0].text  # type: ignore[union-attr]
    if res.is_error:
        return False, text
    assert res.structured_content == json.loads(text)
    return True, res.structured_content


def after_op_name(message: str) -> str:
    """``Invalid parameter for 'search': maxResults: ...`` -> ``maxResults: ...`` (other messages whole)."""
    return re.sub(r"^Invalid parameter for '[a-z-]+': ", "", message)


def added(result: dict[str, Any]) -> dict[str, Any]:
    """A source-add answer without what differs between two adds (the time they took)."""
    return {k: re.sub(r" in \d+ms\b", "", v) if k == "message" else v for k, v in result.items() if k != "elapsedMs"}


async def check_all(params: StdioServerParameters, url: str, root: Path) -> int:
    compared = 0
    async with Client(params, cache=None) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert tools == {op.mcp for op in OPS.on("mcp")} | {"run-command"}
        for op in OPS:
            route, cases = CASES[op.name]
            for raw, ok in cases:
                args = json.loads(json.dumps(raw).replace("{URL}", url))
                if route == "tool" and op.cli is not None:
                    assert op.mcp is not None
                    if op.name == "source-add" and ok:
                        # The same alias both ways: MCP adds it, the CLI removes and adds it again.
                        got_mcp = await mcp_call(client, op.mcp, args)
                        if not args.get("dryRun"):
                            assert cli(["remove", args["alias"], "--json"])[0] == 0
                        got_cli = cli_json(op, args)
                        assert got_mcp[0] and got_cli[0], (got_mcp, got_cli)
                        # MCP answers the seed's fields (op.extra["mcp_fields"]); the CLI the whole result.
                        # (crawl: only when the source was crawled)
                        assert list(got_mcp[1]) == [f for f in op.extra["mcp_fields"] if f != "crawl"]
                        assert added(got_mcp[1]) == added({k: got_cli[1][k] for k in got_mcp[1]})
                        assert {"title", "sections", "sha256"} <= set(got_cli[1])
                        compared += 1
                        continue
                    cli_args = {**args, "registry": True} if op.name == "list-sources" else args
                    got_cli = cli_json(op, cli_args)
                    got_mcp = await mcp_call(client, op.mcp, args)
                    assert got_cli == got_mcp, (op.name, args)
                    assert got_cli[0] is ok, (op.name, args, got_cli)
                elif route == "tool":  # learn-blz, source-refresh: MCP only; the declaration called directly agrees
                    assert op.mcp is not None
                    got_mcp = await mcp_call(client, op.mcp, args)
                    store = Store(root)
                    try:
                        called: tuple[bool, Any] = (True, op.call(store, args, "mcp"))
                    except CairnError as exc:
                        called = (False, exc.message)
                    finally:
                        store.close()
                    assert got_mcp == called and got_mcp[0] is ok, (op.name, args, got_mcp, called)
                elif route == "find":
                    mcp_args = {("snippets" if k == "citations" else k): v for k, v in args.items()}
                    got_cli = cli_json(op, args)
                    got_mcp = await mcp_call(client, "find", mcp_args)
                    assert got_cli[0] is got_mcp[0] is ok, (op.name, args, got_cli, got_mcp)
                    if ok:
                        key = "hits" if op.name == "search" else "snippets"
                        assert got_cli[1][key] == got_mcp[1][key] and got_cli[1][key], (op.name, args)
                    else:
                        assert after_op_name(got_cli[1]) == after_op_name(got_mcp[1]), (got_cli, got_mcp)
                elif route == "run-command":
                    await same_as_run_command(client, op, args, ok)
                else:  # cli-only
                    got_cli = cli_json(op, args)
                    store = Store(root)
                    try:
                        direct: tuple[bool, Any] = (True, op.call(store, args, "cli"))
                    except CairnError as exc:
                        direct = (False, exc.message)
                    finally:
                        store.close()
                    assert got_cli == direct and got_cli[0] is ok, (op.name, args, got_cli)
                compared += 1
        for name, args, ok in RUN_COMMAND_EXTRA:
            await same_as_run_command(client, OPS[name], args, ok)
            compared += 1
    return compared


async def same_as_run_command(client: Client, op: Op, args: dict[str, Any], ok: bool) -> None:
    """`blz COMMAND [OPERAND] --text` and run-command(command, source) agree: stdout, stderr, exit code."""
    assert op.cli is not None and len(args) <= 1
    code, out, err = cli([*argv_for(op, args), "--text"])
    call: dict[str, Any] = {"command": op.cli, **({"source": next(iter(args.values()))} if args else {})}
    done, got = await mcp_call(client, "run-command", call)
    if not done:  # refused before running (an operand that is not an alias or a schema name)
        assert not ok and code == 2 and err == f"blz: error: {got}\n", (call, got, err)
        return
    assert (got["stdout"], got["stderr"], got["exitCode"]) == (out, err, code), call
    assert (code == 0) is ok, (call, code, err)


def test_cli_and_mcp_agree_on_every_operation(tmp_path: Path, data_root: Path, doc_server: DocServer) -> None:
    doc_server.files["/guide/llms.txt"] = GUIDE
    doc_server.files["/lib/llms-full.txt"] = LIB
    doc_server.files["/notes/llms.txt"] = NOTES
    assert cli(["add", "guide", doc_server.url("/guide/llms.txt"), "--exact", "--json"])[0] == 0
    assert cli(["add", "notes", doc_server.url("/notes/llms.txt"), "--exact", "--json"])[0] == 0
    params = StdioServerParameters(command=sys.executable, args=["-m", "cairn_servers.blz.cli", "mcp"],
                                   env={"BLZ_DATA_DIR": str(data_root), "BLZ_MCP_ALLOW_HOSTS": "127.0.0.1"})
    compared = asyncio.run(asyncio.wait_for(check_all(params, doc_server.url("/lib/llms.txt"), data_root), 150))
    assert compared == sum(len(cases) for _route, cases in CASES.values()) + len(RUN_COMMAND_EXTRA)


# Parameters on the command line only (no MCP counterpart to compare with): the CLI answer must equal
# the operation called on the store directly. {MANIFEST} stands for a manifest file the test writes.
CLI_ONLY_PARAMS: dict[str, list[tuple[dict[str, Any], bool]]] = {
    "source-add": [
        ({"manifest": "{MANIFEST}", "dryRun": True}, OK),
        ({"manifest": "{MANIFEST}.missing"}, ERR),
        ({"manifest": "{MANIFEST}", "alias": "x"}, ERR),
        ({"manifest": "{MANIFEST}", "only": ["gone"], "dryRun": True}, OK),
        ({"manifest": "{MANIFEST}", "only": ["nothing,else"]}, ERR),
        ({"alias": "lib", "only": ["lib"]}, ERR),
        ({"alias": "lib", "crawlDelay": 0}, ERR),  # crawl limits without a crawl
        ({"alias": "lib", "maxPageBytes": 1000}, ERR),
    ],
}


def test_every_cli_only_parameter_has_parity_cases() -> None:
    for op in OPS:
        only = {p.wire for p in op.params_for("cli")} - {p.wire for p in op.params_for("mcp")}
        if op.mcp is None or not only or op.name in ("list-sources",):  # list-sources: --registry is MCP's default
            continue
        covered = {k for args, _ok in CLI_ONLY_PARAMS.get(op.name, []) for k in args}
        assert only - {"maxBytes", "timeout"} <= covered, f"{op.name}: parity cases for {only - covered}"


def test_cli_only_parameters_agree_with_the_declaration(tmp_path: Path, data_root: Path,
                                                         doc_server: DocServer) -> None:
    doc_server.files["/lib/llms-full.txt"] = LIB
    manifest = tmp_path / "m.toml"
    manifest.write_text(f'[[source]]\nalias = "lib"\nurl = "{doc_server.url("/lib/llms.txt")}"\n\n'
                        f'[[source]]\nalias = "gone"\nurl = "{doc_server.url("/gone/llms.txt")}"\n')
    for name, cases in CLI_ONLY_PARAMS.items():
        op = OPS[name]
        for raw, ok in cases:
            args = json.loads(json.dumps(raw).replace("{MANIFEST}", str(manifest)))
            code, out, err = cli([*argv_for(op, args), "--json"])
            store = Store(data_root)
            try:
                direct: tuple[bool, Any] = (True, op.call(store, args, "cli"))
            except CairnError as exc:
                direct = (False, exc.message)
            finally:
                store.close()
            if out:  # an answer (with failed entries: a non-zero exit code, and each on stderr)
                got: tuple[bool, Any] = (True, json.loads(out))
                strip = re.compile(r'"elapsedMs": [0-9.]+')
                assert strip.sub("", json.dumps(got[1])) == strip.sub("", json.dumps(direct[1])), (name, args)
            else:
                assert err.startswith("blz: error: ") and err.count("\n") == 1, err
                assert (False, err[len("blz: error: "):-1]) == direct and not ok, (name, args)
            assert direct[0] is ok, (name, args, direct)


def test_argv_is_derived_from_the_declaration() -> None:
    """The helper above reads flags and positionals from the registry: a renamed flag changes the argv."""
    assert argv_for(OPS["toc"], {"source": "lib", "maxDepth": 2, "tree": True}) == ["toc", "lib", "-d", "2", "--tree"]
    assert argv_for(OPS["find"], {"query": "hooks", "snippets": ["a:1", "b:2"]}) == \
        ["find", "hooks", "--snippet", "a:1", "--snippet", "b:2"]
    with pytest.raises(AssertionError, match="not CLI parameters"):
        argv_for(OPS["list-sources"], {"nope": 1})
