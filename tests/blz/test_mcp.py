"""`blz mcp` spawned over stdio and driven by the official MCP Python SDK client (mcp 2.3.0)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import mcp_types as t
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from cairn_servers.blz import sources
from cairn_servers.blz.store import Store

from .conftest import DocServer

pytestmark = [pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026"), pytest.mark.timeout(120)]

GUIDE = "# Guide\n\nIntro words.\n\n## Hooks\n\nHooks let you use state.\nMore hooks text.\n\n## Other\n\nzebra\n"
TOOLS = {"find", "toc", "diff", "list-sources", "lookup", "source-add", "source-refresh", "run-command", "learn-blz"}


def seeded(tmp_path: Path, data_root: Path) -> StdioServerParameters:
    doc = tmp_path / "docs" / "guide.txt"
    doc.parent.mkdir()
    doc.write_text(GUIDE)
    store = Store(data_root)
    sources.add(store, "guide", str(doc))
    store.close()
    return StdioServerParameters(command=sys.executable, args=["-m", "cairn_servers.blz.cli", "mcp"],
                                 env={"BLZ_DATA_DIR": str(data_root), "BLZ_MCP_ALLOW_HOSTS": "127.0.0.1"})


def data(res: t.CallToolResult) -> Any:
    assert not res.is_error, res.content
    body = json.loads(res.content[0].text)  # type: ignore[union-attr]
    assert res.structured_content == body
    return body


async def exercise(params: StdioServerParameters, http: DocServer, secret: str) -> list[Any]:
    seen: list[Any] = []
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    async with Client(params, cache=None) as client:
        assert client.server_info is not None and client.server_info.name == "blz"
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        props = tools["find"].input_schema["properties"]
        # The seed's parameters, plus the search controls of issue 16 (names as upstream BLZ's where it has them).
        assert set(props) == {"query", "snippets", "source", "contextMode", "linePadding", "maxResults",
                              "headingsOnly", "headingLevel", "maxLines", "linesBefore", "linesAfter"}
        assert set(props["source"]["type"]) == {"string", "array"}
        assert props["maxResults"]["maximum"] == 50 and props["linePadding"]["maximum"] == 50

        found = data(await client.call_tool("find", {"query": "hooks", "source": "guide", "maxResults": 5}))
        hit = found["hits"][0]
        assert set(hit) == {"alias", "lines", "headingPath", "snippet", "score", "sourceUrl", "anchor", "version"}
        assert (hit["alias"], hit["lines"], hit["headingPath"], hit["score"]) == ("guide", "5-9", ["Guide", "Hooks"], 100.0)
        assert found["executed"] == {"searched": True, "retrievedSnippets": False} and found["snippets"] == []
        seen.append(found)

        # Omitting source searches every installed source.
        assert data(await client.call_tool("find", {"query": "zebra"}))["hits"][0]["lines"] == "10-12"

        got = data(await client.call_tool("find", {"snippets": ["GUIDE:7-7"], "contextMode": "all"}))
        assert got["snippets"] == [{"alias": "guide", "lines": "5-9", "headingPath": ["Guide", "Hooks"],
                                    "content": "## Hooks\n\nHooks let you use state.\nMore hooks text.\n"}]
        assert got["executed"] == {"searched": False, "retrievedSnippets": True}
        pad = data(await client.call_tool("find", {"snippets": ["guide:7-7"], "contextMode": "symmetric",
                                                   "linePadding": 1}))
        assert pad["snippets"][0]["lines"] == "6-8"

        with pytest.raises(MCPError) as bad:
            await client.call_tool("find", {"query": "x", "maxResults": 99})
        assert "maxResults" in str(bad.value)
        missing = await client.call_tool("find", {"query": "x", "source": "nope"})
        assert missing.is_error and "No source named 'nope'" in missing.content[0].text  # type: ignore[union-attr]

        listed = data(await client.call_tool("list-sources", {"filter": "GUI"}))["sources"]
        assert [(s["alias"], s["kind"]) for s in listed][0] == ("guide", "installed")
        assert all(s["kind"] == "registry" for s in listed[1:])  # installed first, then candidates
        assert listed[0]["metadata"]["totalLines"] == GUIDE.count("\n")
        reg = data(await client.call_tool("list-sources", {"filter": "react"}))["sources"]
        assert reg[0]["kind"] == "registry" and reg[0]["suggestedCommand"] == "blz add react"
        seen.append(listed)

        http.files["/lib/llms-full.txt"] = b"# Lib\n\n## Install\n\nnpm install lib\n"
        added = data(await client.call_tool("source-add", {"alias": "lib", "url": http.url("/lib/llms.txt")},
                                            progress_callback=on_progress))
        assert added["url"] == http.url("/lib/llms-full.txt") and added["message"].startswith("Added lib (2 headings, 5 lines) in ")
        assert reports and reports[-1][0] == len(http.files["/lib/llms-full.txt"])
        assert data(await client.call_tool("find", {"query": "npm", "source": "lib"}))["hits"][0]["alias"] == "lib"
        dup = await client.call_tool("source-add", {"alias": "lib", "url": http.url("/lib/llms.txt")})
        assert dup.is_error and "already exists" in dup.content[0].text  # type: ignore[union-attr]

        stats = data(await client.call_tool("run-command", {"command": "stats"}))
        assert stats["exitCode"] == 0 and stats["stdout"].startswith("Total sources: 2\n") and stats["stderr"] == ""
        inspect = data(await client.call_tool("run-command", {"command": "inspect", "source": "guide"}))
        assert inspect["exitCode"] == 0 and "alias: guide" in inspect["stdout"]
        seen.append(inspect)
        nosrc = data(await client.call_tool("run-command", {"command": "inspect", "source": "ghost"}))
        assert nosrc["exitCode"] == 3 and "No source named 'ghost'" in nosrc["stderr"]
        with pytest.raises(MCPError):
            await client.call_tool("run-command", {"command": "remove", "source": "guide"})

        learn = data(await client.call_tool("learn-blz", {}))
        assert learn["flags"]["contextMode"] == ["none", "symmetric", "all"]
        assert learn["flags"]["source"] == ["guide", "lib"] and learn["prompts"][0]["name"] == "discover-docs"

        templates = (await client.list_resource_templates()).resource_templates
        assert [tp.uri_template for tp in templates] == ["blz://sources/{alias}"]
        meta = json.loads((await client.read_resource("blz://sources/guide")).contents[0].text)  # type: ignore[union-attr]
        assert meta["alias"] == "guide" and meta["totalLines"] == GUIDE.count("\n") and meta["headings"] == 3
        assert meta["url"] == "file://<local>/docs/guide.txt"
        seen.append(meta)
        registry = json.loads((await client.read_resource("blz://registry")).contents[0].text)  # type: ignore[union-attr]
        assert {"alias", "url", "description", "category"} <= set(registry[0])
        with pytest.raises(MCPError):
            await client.read_resource("blz://sources/ghost")

        prompt = await client.get_prompt("discover-docs", {"technologies": "guide,bun,zzz"})
        text = prompt.messages[0].content.text  # type: ignore[union-attr]
        assert "guide: installed" in text and "source-add(alias='bun')" in text and "zzz: not installed" in text
    return seen


def test_every_tool_resource_and_prompt_through_the_sdk(tmp_path: Path, data_root: Path, doc_server: DocServer) -> None:
    params = seeded(tmp_path, data_root)
    seen = asyncio.run(asyncio.wait_for(exercise(params, doc_server, str(tmp_path)), 90))
    dumped = json.dumps(seen)
    assert str(tmp_path) not in dumped and str(data_root) not in dumped
