"""Source freshness (refreshHours, stale and ageHours in list, `blz update --stale`), tags and other
names (`--tag/--category/--alias` on add, `-s tag:NAME` on search, find and toc), on the command line
and over MCP.

A source's age is the time since it was last fetched or checked; the tests make a source old by
writing an older check time into its row, as a check days ago would have left it."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from cairn_servers.blz.cli import run

from .conftest import DocServer, blz, js

pytestmark = [pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026"), pytest.mark.timeout(120)]

GUIDE = b"# Guide\n\n## Hooks\n\nHooks let you use state.\n\n## Async\n\nasync effects run later.\n"
LIB = b"# Lib\n\n## Install\n\nnpm install lib; async setup.\n"
NOTES = b"# Notes\n\n## Async notes\n\nasync notes here.\n"


def age(root: Path, alias: str, hours: float) -> None:
    """Make ``alias`` last checked ``hours`` ago."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - hours * 3600))
    db = sqlite3.connect(root / "blz.db")
    try:
        db.execute("UPDATE sources SET checked_at = ?, fetched_at = ? WHERE alias = ?", (stamp, stamp, alias))
        db.commit()
    finally:
        db.close()


def listed(alias: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in js("list")["sources"] if s["alias"] == alias)
    return found


@pytest.fixture
def served(doc_server: DocServer, data_root: Path) -> DocServer:
    doc_server.files.update({"/guide/llms.txt": GUIDE, "/lib/llms.txt": LIB, "/notes/llms.txt": NOTES})
    assert blz("add", "guide", doc_server.url("/guide/llms.txt"), "--exact", "--tag", "web,Docs",
               "--category", "frontend")[0] == 0
    assert blz("add", "lib", doc_server.url("/lib/llms.txt"), "--exact", "--tag", "web",
               "--refresh-hours", "2")[0] == 0
    assert blz("add", "notes", doc_server.url("/notes/llms.txt"), "--exact", "--refresh-hours", "48")[0] == 0
    return doc_server


def test_list_shows_tags_category_and_freshness(served: DocServer) -> None:
    guide = listed("guide")
    assert (guide["tags"], guide["category"], guide["refreshHours"], guide["stale"]) == (["web", "docs"], "frontend",
                                                                                          24, False)
    assert 0.0 <= guide["ageHours"] < 0.1
    lib = listed("lib")
    assert (lib["tags"], lib["category"], lib["refreshHours"]) == (["web"], None, 2)
    assert js("add", "x", served.url("/lib/llms.txt"), "--exact", "--tag", "a", "--category", "c",
              "--refresh-hours", "5", "--dry-run")["tags"] == ["a"]  # a dry run reports them, writes nothing
    assert "x" not in {s["alias"] for s in js("list")["sources"]}


def test_stale_follows_each_sources_refresh_hours(served: DocServer, data_root: Path) -> None:
    age(data_root, "guide", 25)  # default 24 h: stale
    age(data_root, "lib", 1.5)  # 2 h: not yet
    age(data_root, "notes", 30)  # 48 h: not yet
    assert [(listed(a)["stale"], listed(a)["ageHours"]) for a in ("guide", "lib", "notes")] == \
        [(True, 25.0), (False, 1.5), (False, 30.0)]
    code, out, _ = blz("list", "--text")
    guide_line = next(line for line in out.splitlines() if line.startswith("guide"))
    assert guide_line.endswith("[web, docs]  (stale: checked 25.0 h ago; refresh every 24 h; blz update --stale)")
    assert "stale" not in next(line for line in out.splitlines() if line.startswith("lib"))
    age(data_root, "lib", 3)
    assert listed("lib")["stale"]


def test_update_stale_refreshes_only_the_stale_sources(served: DocServer, data_root: Path) -> None:
    assert js("update", "--stale") == {"results": []}  # all fresh: nothing requested
    before = len(served.requests)
    assert before == 3
    age(data_root, "guide", 25)
    age(data_root, "notes", 49)
    served.files["/guide/llms.txt"] = GUIDE + b"\n## New\n\nnew section.\n"
    done = js("update", "--stale")["results"]
    assert [(r["alias"], r["status"]) for r in done] == [("guide", "updated"), ("notes", "unchanged")]
    assert sorted(p for _m, p, _h in served.requests[before:]) == ["/guide/llms.txt", "/notes/llms.txt"]
    assert not listed("guide")["stale"] and not listed("notes")["stale"] and listed("notes")["ageHours"] < 0.1
    # an update keeps the source's tags, category and refresh interval
    guide = listed("guide")
    assert (guide["tags"], guide["category"], guide["metadata"]["headings"]) == (["web", "docs"], "frontend", 4)
    # a stale source that fails is reported; the others still update
    age(data_root, "guide", 30)
    age(data_root, "lib", 30)
    del served.files["/guide/llms.txt"]
    code, out, err = blz("update", "--stale", "--json")
    assert code == 3 and err.startswith("blz: error: guide: ")
    assert [(r["alias"], r["status"]) for r in json.loads(out)["results"]] == [("guide", "failed"), ("lib", "unchanged")]


def test_bad_settings_are_refused(served: DocServer) -> None:
    url = served.url("/lib/llms.txt")
    code, _, err = blz("add", "y", url, "--tag", "Bad Tag!")
    assert code == 2 and err == ("blz: error: Invalid tag 'bad tag!': use 1-64 characters from a-z 0-9 _ -, starting "
                                 "with a letter or digit (e.g. --tag frontend).\n")
    code, _, err = blz("add", "y", url, "--refresh-hours", "0")
    assert code == 2 and "refreshHours: 0 is less than the minimum of 1" in err
    code, _, err = blz("add", "y", url, "--category", " ")
    assert code == 2 and err == ("blz: error: Invalid category ' ': give 1-64 printable characters (e.g. --category "
                                 "frontend).\n")
    assert js("add", "y", url, "--category", "Web  Framework", "--dry-run")["category"] == "Web Framework"
    code, _, err = blz("update", "guide", "--stale")
    assert code == 2 and "Name one source to update, or use --all or --stale" in err
    assert "y" not in {s["alias"] for s in js("list")["sources"]}


def test_tag_selects_sources_in_search_find_and_toc(served: DocServer) -> None:
    def aliases(*argv: str) -> set[str]:
        return {h["alias"] for h in js(*argv)["hits"]}

    assert aliases("search", "async") == {"guide", "lib", "notes"}
    assert aliases("search", "async", "-s", "tag:web") == {"guide", "lib"}
    assert aliases("search", "async", "-s", "TAG:docs") == {"guide"}
    assert aliases("search", "async", "-s", "tag:docs,notes") == {"guide", "notes"}
    assert aliases("find", "async", "-s", "tag:web") == {"guide", "lib"}
    code, _, err = blz("search", "async", "-s", "tag:nope")
    assert code == 3 and err == ("blz: error: No source is tagged 'nope' (source: tag:nope). Tags: docs, web. Tag a "
                                 "source with `blz add ALIAS URL --tag nope --force`.\n")
    assert js("toc", "tag:docs")["alias"] == "guide"
    assert js("toc", "tag:web")["sources"] == ["guide", "lib"]  # several sources: see test_toc.py


def test_other_names_resolve_everywhere_a_source_is_named(served: DocServer) -> None:
    url = served.url("/lib/llms.txt")
    assert js("add", "lib", url, "--exact", "--force", "--alias", "library,lb", "--tag", "web")["aliases"] == \
        ["library", "lb"]
    assert listed("lib")["aliases"] == ["library", "lb"]
    assert {h["alias"] for h in js("search", "async", "-s", "library")["hits"]} == {"lib"}
    assert {h["alias"] for h in js("find", "async", "-s", "lb,notes")["hits"]} == {"lib", "notes"}
    got = js("get", "lb:3-5")["snippets"][0]
    assert (got["alias"], got["lines"], got["headingPath"]) == ("lib", "3-5", ["Lib", "Install"])
    assert js("toc", "library")["alias"] == "lib"
    code, _, err = blz("add", "library", url)  # a new source cannot take another's other name
    assert code == 4 and err == "blz: error: 'library' is another name of 'lib'. Pick another alias, or use 'lib'.\n"
    code, _, err = blz("add", "x", url, "--alias", "guide")
    assert code == 4 and err == "blz: error: 'guide' already names the source 'guide'; pick another name for --alias.\n"
    code, _, err = blz("add", "x", url, "--alias", "lb")
    assert code == 4 and "'lb' already names the source 'lib'" in err
    code, _, err = blz("add", "x", url, "--alias", "x")
    assert code == 2 and err == "blz: error: --alias x is the source's own alias; give other names.\n"
    code, _, err = blz("add", "x", url, "--alias", "Bad/Name")
    assert code == 2 and "Bad/Name" in err
    # an update keeps them; removing the source frees them
    assert js("update", "lib")["results"][0]["status"] == "unchanged" and listed("lib")["aliases"] == ["library", "lb"]
    assert blz("remove", "lib")[0] == 0
    code, _, err = blz("search", "async", "-s", "library")
    assert code == 3 and "No source named 'library'" in err


async def _over_mcp(params: StdioServerParameters, url: str) -> None:
    async with Client(params, cache=None) as client:
        props = {t.name: t for t in (await client.list_tools()).tools}["source-add"].input_schema["properties"]
        assert {"tags", "category", "refreshHours"} <= set(props)
        added = await client.call_tool("source-add", {"alias": "lib", "url": url, "exact": True, "tags": ["web"],
                                                      "refreshHours": 6, "aliases": ["library"]})
        assert not added.is_error, added.content
        found = json.loads((await client.call_tool("find", {"query": "async", "source": "tag:web"})).content[0].text)  # type: ignore[union-attr]
        assert {h["alias"] for h in found["hits"]} == {"guide", "lib"}
        toc = json.loads((await client.call_tool("toc", {"source": "tag:docs"})).content[0].text)  # type: ignore[union-attr]
        assert toc["alias"] == "guide"
        other = json.loads((await client.call_tool("find", {"query": "npm", "source": "library",
                                                            "snippets": ["library:3-3"]})).content[0].text)  # type: ignore[union-attr]
        assert [h["alias"] for h in other["hits"]] == ["lib"] and other["snippets"][0]["alias"] == "lib"
        res = await client.call_tool("list-sources", {})
        listed = {s["alias"]: s for s in json.loads(res.content[0].text)["sources"]}  # type: ignore[union-attr]
        assert (listed["lib"]["tags"], listed["lib"]["refreshHours"], listed["lib"]["stale"]) == (["web"], 6, False)
        assert listed["guide"]["stale"] is True and listed["guide"]["ageHours"] == 30.0


def test_over_mcp(doc_server: DocServer, data_root: Path) -> None:
    doc_server.files.update({"/guide/llms.txt": GUIDE, "/lib/llms.txt": LIB})
    assert blz("add", "guide", doc_server.url("/guide/llms.txt"), "--exact", "--tag", "web,docs")[0] == 0
    age(data_root, "guide", 30)
    params = StdioServerParameters(command=sys.executable, args=["-m", "cairn_servers.blz.cli", "mcp"],
                                   env={"BLZ_DATA_DIR": str(data_root), "BLZ_MCP_ALLOW_HOSTS": "127.0.0.1"})
    asyncio.run(asyncio.wait_for(_over_mcp(params, doc_server.url("/lib/llms.txt")), 60))


# -- MCP source-refresh: the same guards as source-add ------------------------------------------

async def _refresh(params: StdioServerParameters) -> list[tuple[bool, str]]:
    out: list[tuple[bool, str]] = []
    async with Client(params, cache=None) as client:
        for args in ({"alias": "guide"}, {"alias": "local"}, {"stale": True}):
            res = await client.call_tool("source-refresh", args)
            out.append((res.is_error, res.content[0].text))  # type: ignore[union-attr]
    return out


def test_source_refresh_is_guarded_like_source_add(doc_server: DocServer, data_root: Path, tmp_path: Path) -> None:
    doc_server.files["/guide/llms.txt"] = GUIDE
    local = tmp_path / "local" / "llms.txt"
    local.parent.mkdir()
    local.write_bytes(LIB)
    # The user adds both from the command line (a loopback server, a local file): allowed there.
    assert blz("add", "guide", doc_server.url("/guide/llms.txt"), "--exact")[0] == 0
    assert blz("add", "local", str(local))[0] == 0
    age(data_root, "guide", 30)
    age(data_root, "local", 30)
    requests = len(doc_server.requests)
    base = {"BLZ_DATA_DIR": str(data_root)}
    cmd = [sys.executable, "-m", "cairn_servers.blz.cli", "mcp"]
    # An agent may not make blz read either: no request reaches the server, the file is not read.
    refused = asyncio.run(asyncio.wait_for(_refresh(StdioServerParameters(command=cmd[0], args=cmd[1:],
                                                                           env=base)), 60))
    assert refused[0][0] and refused[0][1].startswith("Refused to connect to 127.0.0.1")
    assert "BLZ_MCP_ALLOW_HOSTS" in refused[0][1]
    assert refused[1][0] and refused[1][1].startswith("Local files cannot be added over MCP")
    stale = json.loads(refused[2][1])["results"]
    assert [(r["alias"], r["status"]) for r in stale] == [("guide", "failed"), ("local", "failed")]
    assert len(doc_server.requests) == requests
    assert listed("guide")["stale"] and listed("local")["stale"]  # nothing was checked
    # Allowed by the user's settings: refreshed, and the new content indexed.
    doc_server.files["/guide/llms.txt"] = GUIDE + b"\n## Later\n\nlater text.\n"
    allowed = {**base, "BLZ_MCP_ALLOW_HOSTS": "127.0.0.1", "BLZ_MCP_FILE_ROOTS": str(local.parent)}
    done = asyncio.run(asyncio.wait_for(_refresh(StdioServerParameters(command=cmd[0], args=cmd[1:],
                                                                        env=allowed)), 60))
    assert not done[0][0] and json.loads(done[0][1])["results"][0]["status"] == "updated"
    assert not done[1][0] and json.loads(done[1][1])["results"][0]["status"] == "unchanged"
    assert json.loads(done[2][1]) == {"results": []}  # both fresh now
    assert not listed("guide")["stale"] and listed("guide")["metadata"]["headings"] == 4


def test_manifest_entries_carry_their_own_settings(doc_server: DocServer, data_root: Path, tmp_path: Path) -> None:
    doc_server.files.update({"/guide/llms.txt": GUIDE, "/lib/llms.txt": LIB})
    manifest = tmp_path / "m.toml"
    manifest.write_text(f'[[source]]\nalias = "guide"\nurl = "{doc_server.url("/guide/llms.txt")}"\nexact = true\n'
                        'tags = ["docs"]\ncategory = "frontend"\naliases = ["gd"]\nrefreshHours = 6\n\n'
                        f'[[source]]\nalias = "lib"\nurl = "{doc_server.url("/lib/llms.txt")}"\nexact = true\n\n'
                        f'[[source]]\nalias = "bad"\nurl = "{doc_server.url("/lib/llms.txt")}"\ntags = "web"\n')
    code, out, err = blz("add", "--manifest", str(manifest), "--tag", "web", "--refresh-hours", "12", "--json")
    assert code == 2 and err == "blz: error: bad: source 'bad': tags must be a list of names, e.g. tags = [\"web\"].\n"
    assert [r["status"] for r in json.loads(out)["results"]] == ["added", "added", "failed"]
    guide, lib = listed("guide"), listed("lib")
    assert (guide["tags"], guide["category"], guide["aliases"], guide["refreshHours"]) == (["web", "docs"], "frontend",
                                                                                          ["gd"], 6)
    assert (lib["tags"], lib["category"], lib["aliases"], lib["refreshHours"]) == (["web"], None, [], 12)
    assert {h["alias"] for h in js("search", "async", "-s", "gd")["hits"]} == {"guide"}
    code, _, err = blz("add", "--manifest", str(manifest), "--alias", "x")
    assert code == 2 and "--alias names one source" in err
