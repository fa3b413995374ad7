"""`blz toc` and the MCP `toc` tool: a source's outline with citations, by depth, filter and page."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp_types as t
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from cairn_servers.blz import sources
from cairn_servers.blz.cli import build_parser, run
from cairn_servers.blz.schemas import SCHEMAS
from cairn_servers.blz.store import Store

from .conftest import blz

pytestmark = [pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026"), pytest.mark.timeout(120)]

# 14 lines: H1 > (H2 Install > H3 npm, H3 yarn), H2 [Hooks](link) > H3 useState, H2 Other hooks.
# The fenced "# not a heading" line must not appear in the outline.
DOC = """# Lib
Intro.
## Install
### npm
npm i lib
### yarn
```sh
# not a heading
```
## [Hooks](https://example.com/hooks#x)
### useState
State.
## Other hooks
Last.
"""

OUTLINE = [(1, "Lib", "1-14"), (2, "Install", "3-9"), (3, "npm", "4-5"), (3, "yarn", "6-9"),
           (2, "Hooks", "10-12"), (3, "useState", "11-12"), (2, "Other hooks", "13-14")]


@pytest.fixture
def lib(tmp_path: Path, data_root: Path) -> Path:
    path = tmp_path / "docs" / "lib.txt"
    path.parent.mkdir()
    path.write_text(DOC)
    store = Store(data_root)
    sources.add(store, "lib", str(path))
    store.close()
    return path


def toc(*argv: str) -> dict[str, Any]:
    code, out, err = blz("toc", *argv, "--json")
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def test_outline_levels_paths_and_citations(lib: Path) -> None:
    got = toc("lib")
    assert [(e["level"], e["text"], e["lines"]) for e in got["entries"]] == OUTLINE
    assert all(e["citation"] == f"lib:{e['lines']}" for e in got["entries"])
    assert got["entries"][5]["headingPath"] == ["Lib", "Hooks", "useState"]  # link target left out
    assert (got["total"], got["hasMore"], got["page"], got["depth"], got["filter"]) == (7, False, 1, None, None)
    # Each citation is the heading's whole section, exactly what `get` returns.
    code, out, _ = blz("get", got["entries"][1]["citation"], "--json")
    assert json.loads(out)["snippets"][0]["content"].splitlines() == DOC.splitlines()[2:9]


def test_depth_filter_and_pagination(lib: Path) -> None:
    assert [e["text"] for e in toc("lib", "--depth", "2")["entries"]] == ["Lib", "Install", "Hooks", "Other hooks"]
    assert [e["text"] for e in toc("lib", "-d", "1")["entries"]] == ["Lib"]
    hooks = toc("lib", "--filter", "HOOKS")
    assert [e["text"] for e in hooks["entries"]] == ["Hooks", "Other hooks"] and hooks["total"] == 2
    assert [e["text"] for e in toc("lib", "-f", "hooks other")["entries"]] == ["Other hooks"]  # every word
    assert toc("lib", "-f", "example.com")["total"] == 0  # link targets are not heading text
    deep = toc("lib", "-f", "use", "-d", "2")
    assert deep["entries"] == [] and deep["total"] == 0  # useState is H3
    pages = [toc("lib", "-n", "3", "--page", str(n)) for n in (1, 2, 3, 4)]
    assert [[e["text"] for e in p["entries"]] for p in pages] == [
        ["Lib", "Install", "npm"], ["yarn", "Hooks", "useState"], ["Other hooks"], []]
    assert [p["hasMore"] for p in pages] == [True, True, False, False] and {p["total"] for p in pages} == {7}


def test_text_and_tree_rendering(lib: Path) -> None:
    code, out, _ = blz("toc", "lib", "-d", "2", "--text")
    assert code == 0
    assert out.splitlines() == ["lib:1-14   Lib", "lib:3-9    Lib > Install", "lib:10-12  Lib > Hooks",
                                "lib:13-14  Lib > Other hooks", "(1-4 of 4 headings)"]
    code, out, _ = blz("toc", "lib", "--tree", "--text", "-n", "4")
    assert out.splitlines() == ["# Lib  lib:1-14", "  ## Install  lib:3-9", "    ### npm  lib:4-5",
                                "    ### yarn  lib:6-9", "(1-4 of 7 headings; more: --page 2)"]
    # JSON with --tree nests the page's entries; jsonl and the text stay flat.
    nested = toc("lib", "--tree", "-n", "5")
    assert nested["tree"] is True and len(nested["entries"]) == 1
    top = nested["entries"][0]
    assert [c["text"] for c in top["children"]] == ["Install", "Hooks"]
    assert [c["text"] for c in top["children"][0]["children"]] == ["npm", "yarn"] and top["children"][1]["children"] == []
    code, out, _ = blz("toc", "lib", "--tree", "--jsonl", "-n", "3")
    assert [json.loads(x)["text"] for x in out.splitlines()] == ["Lib", "Install", "npm"]
    code, out, _ = blz("toc", "lib", "-f", "zebra", "--text")
    assert code == 0 and out == "No headings matching 'zebra' in lib (0 in all).\n"
    code, out, _ = blz("toc", "lib", "-n", "2", "--jsonl")
    assert [json.loads(x)["text"] for x in out.splitlines()] == ["Lib", "Install"]


def test_bad_input_and_unknown_alias(lib: Path) -> None:
    code, _, err = blz("toc", "ghost")
    assert code == 3 and err == "blz: error: No source named 'ghost'. Installed: lib. Add it with `blz add ghost`.\n"
    # One message per parameter on every surface (cairn_servers.core.ops): it names the wire name (maxDepth for
    # -d, maxResults for -n) and the rule.
    for argv, word in ((["-d", "0"], "maxDepth: 0 is less than the minimum of 1"),
                       (["-d", "7"], "maxDepth: 7 is greater than the maximum of 6"),
                       (["-n", "0"], "maxResults: 0 is less than the minimum of 1"),
                       (["-n", "1001"], "maxResults: 1001 is greater than the maximum of 1000"),
                       (["--page", "0"], "page: 0 is less than the minimum of 1")):
        code, out, err = blz("toc", "lib", *argv)
        assert code == 2 and out == "" and word in err and "Traceback" not in err, argv
    code, _, err = blz("toc", "../etc")
    assert code == 2 and "Invalid alias" in err


def test_reads_the_stored_outline_not_the_file(lib: Path, data_root: Path) -> None:
    """toc never parses the source again: with its stored file gone it still answers from the index."""
    for stored in (data_root / "sources" / "lib").iterdir():
        stored.unlink()
    assert [e["text"] for e in toc("lib")["entries"]] == [text for _lv, text, _l in OUTLINE]


def test_cli_process(lib: Path, data_root: Path) -> None:
    env = dict(os.environ, BLZ_DATA_DIR=str(data_root))
    env.pop("BLZ_OUTPUT_FORMAT", None)
    cmd = [sys.executable, "-m", "cairn_servers.blz.cli", "toc"]
    done = subprocess.run([*cmd, "lib", "--depth", "2", "--filter", "hooks"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)  # piped: JSON
    assert [e["citation"] for e in body["entries"]] == ["lib:10-12", "lib:13-14"]
    done = subprocess.run([*cmd, "lib", "--tree", "--text", "-d", "2"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.splitlines()[1] == "  ## Install  lib:3-9"
    done = subprocess.run([*cmd, "nope"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 3 and "No source named 'nope'" in done.stderr and done.stdout == ""


def _data(res: t.CallToolResult) -> Any:
    assert not res.is_error, res.content
    body = json.loads(res.content[0].text)  # type: ignore[union-attr]
    assert res.structured_content == body
    return body


def test_mcp_toc_over_stdio(lib: Path, data_root: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "cairn_servers.blz.cli", "mcp"],
                                   env={"BLZ_DATA_DIR": str(data_root)})

    async def go() -> None:
        async with Client(params, cache=None) as client:
            tool = next(x for x in (await client.list_tools()).tools if x.name == "toc")
            props = tool.input_schema["properties"]
            assert set(props) == {"source", "maxDepth", "filter", "maxResults", "page", "tree"}  # upstream's names
            assert tool.input_schema["required"] == ["source"] and props["maxDepth"]["maximum"] == 6
            assert tool.output_schema == SCHEMAS["toc"]

            got = _data(await client.call_tool("toc", {"source": "lib"}))
            assert [(e["level"], e["text"], e["lines"]) for e in got["entries"]] == OUTLINE
            assert got["url"] == "file://<local>/docs/lib.txt"  # no local path leaks

            page = _data(await client.call_tool("toc", {"source": "LIB", "maxDepth": 3, "maxResults": 2, "page": 2}))
            assert [e["citation"] for e in page["entries"]] == ["lib:4-5", "lib:6-9"]
            assert (page["total"], page["hasMore"]) == (7, True)
            hooks = _data(await client.call_tool("toc", {"source": "lib", "filter": "hooks", "maxDepth": 2}))
            assert [e["headingPath"] for e in hooks["entries"]] == [["Lib", "Hooks"], ["Lib", "Other hooks"]]
            # The citation reads the section through find.
            got = _data(await client.call_tool("find", {"snippets": [hooks["entries"][0]["citation"]]}))
            assert got["snippets"][0]["content"] == "## [Hooks](https://example.com/hooks#x)\n### useState\nState."

            missing = await client.call_tool("toc", {"source": "ghost"})
            assert missing.is_error and "No source named 'ghost'" in missing.content[0].text  # type: ignore[union-attr]
            nested = _data(await client.call_tool("toc", {"source": "lib", "tree": True, "maxDepth": 2}))
            assert nested["tree"] is True and [e["text"] for e in nested["entries"]] == ["Lib"]
            assert [c["citation"] for c in nested["entries"][0]["children"]] == ["lib:3-9", "lib:10-12", "lib:13-14"]

            for bad in ({"source": "lib", "maxDepth": 9}, {"source": "lib", "maxResults": 0}, {"maxDepth": 1},
                        {"source": "lib", "page": 0}, {"source": "lib", "extra": 1}):
                with pytest.raises(MCPError):
                    await client.call_tool("toc", bad)

    asyncio.run(go())


def test_tool_lists_name_every_tool(data_root: Path) -> None:
    """`blz --help` (the mcp line), the README's `blz mcp` line and learn-blz list the same tools as the server."""
    from cairn_servers.blz.tools import build_server

    tools = set(build_server().tools)
    assert "toc" in tools
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    mcp_help = next(str(c.help) for c in sub._choices_actions if c.dest == "mcp")  # type: ignore[attr-defined]
    assert {name.strip() for name in mcp_help.split("stdio:")[1].split(",")} == tools
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    line = next(x for x in readme.splitlines() if x.startswith("blz mcp "))
    assert {name.strip() for name in line.split("stdio MCP server:")[1].split(",")} == tools


# -- several sources, and a filter with OR / NOT -------------------------------------------------

ONE = "# One\n\n## Hooks\n\nx\n\n## Effects\n\ny\n\n### Class effects\n\nz\n"
TWO = "# Two\n\n## Hooks in two\n\nx\n\n## Routing\n\ny\n"


async def _toc_over_mcp(params: StdioServerParameters) -> dict[str, Any]:
    async with Client(params, cache=None) as client:
        res = await client.call_tool("toc", {"source": "tag:web", "filter": "hooks OR routing", "tree": True})
        assert not res.is_error, res.content
        assert res.structured_content == json.loads(res.content[0].text)  # type: ignore[union-attr]
        out: dict[str, Any] = res.structured_content
        return out


def test_toc_over_several_sources_with_a_boolean_filter(tmp_path: Path, data_root: Path) -> None:
    for name, text in (("one", ONE), ("two", TWO)):
        (tmp_path / f"{name}.txt").write_text(text)
        assert blz("add", name, str(tmp_path / f"{name}.txt"), "--tag", "web")[0] == 0

    def cites(*argv: str) -> list[str]:
        code, out, err = blz("toc", *argv, "--json")
        assert code == 0, err
        return [e["citation"] for e in json.loads(out)["entries"]]

    assert cites("one,two") == ["one:1-13", "one:3-6", "one:7-13", "one:11-13", "two:1-9", "two:3-6", "two:7-9"]
    assert cites("two,one", "-d", "1") == ["two:1-9", "one:1-13"]  # in the order given
    code, out, _ = blz("toc", "tag:web", "-n", "3", "--page", "2", "--json")  # a page across both
    data = json.loads(out)
    assert [e["citation"] for e in data["entries"]] == ["one:11-13", "two:1-9", "two:3-6"]
    assert (data["alias"], data["sources"], data["total"], data["hasMore"]) == (None, ["one", "two"], 7, True)
    assert [e["alias"] for e in data["entries"]] == ["one", "two", "two"]
    assert "alias" not in json.loads(blz("toc", "one", "--json")[1])["entries"][0]  # one source: as before
    # the filter: words all in the heading; OR between groups; NOT leaves a word out
    assert cites("one,two", "-f", "hooks") == ["one:3-6", "two:3-6"]
    assert cites("one,two", "-f", "hooks two") == ["two:3-6"]
    assert cites("one,two", "-f", "hooks OR routing") == ["one:3-6", "two:3-6", "two:7-9"]
    assert cites("one", "-f", "effects NOT class") == ["one:7-13"]
    assert cites("one", "-f", "effects AND class") == ["one:11-13"]
    code, out, _ = blz("toc", "one,two", "-f", "nothing OR nowhere", "--text")
    assert out == "No headings matching 'nothing OR nowhere' in one, two (0 in all).\n"
    code, _, err = blz("toc", "one,ghost")
    assert code == 3 and "No source named 'ghost'" in err
    # --tree nests within each source only
    code, out, _ = blz("toc", "one,two", "-d", "2", "--tree", "--json")
    tree = json.loads(out)["entries"]
    assert [(e["alias"], e["text"], [c["text"] for c in e["children"]]) for e in tree] == [
        ("one", "One", ["Hooks", "Effects"]), ("two", "Two", ["Hooks in two", "Routing"])]
    # over MCP: the same answer, valid against the tool's outputSchema
    params = StdioServerParameters(command=sys.executable, args=["-m", "cairn_servers.blz.cli", "mcp"],
                                   env={"BLZ_DATA_DIR": str(data_root)})
    got = asyncio.run(asyncio.wait_for(_toc_over_mcp(params), 60))
    code, out, _ = blz("toc", "tag:web", "-f", "hooks OR routing", "--tree", "--json")
    assert got == json.loads(out) and [e["alias"] for e in got["entries"]] == ["one", "two", "two"]
