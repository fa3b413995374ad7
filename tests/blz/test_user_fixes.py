"""Defects found by trying blz as a new user would (issue 16, item 7), each through the real CLI process
or the real stdio MCP server, against files on disk and a loopback HTTP server.

* ``source-add`` over MCP can fetch exactly the URL given (``exact``), and no substituted URL (the
  llms-full.txt sibling, the files looked up inside a site) carries the given URL's query string.
* ``blz validate``'s suggested fix repairs a damaged stored file or index: ``update`` used to answer
  "unchanged" (304, or the same bytes) and ``add --force`` kept the damaged file, whose name (its
  content hash) matched the fetched content.
* ``blz add FOLDER`` also takes ``llms-small.txt`` (after llms-full.txt and llms.txt).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from cairn_servers.blz import sources
from cairn_servers.blz.store import Store

from .conftest import DocServer
from .test_mcp import data, seeded

pytestmark = [pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026"), pytest.mark.timeout(120)]

FULL = b"# Lib\n\n## Install\n\nnpm install lib\n\n## Usage\n\nCall lib() once.\n"
INDEX = b"# Lib\n\n- [Install](https://example.com/install)\n"


def blz(data_root: Path, *argv: str) -> tuple[int, Any, str]:
    """``blz ARGV --json`` as a user runs it: a separate process; returns (exit code, JSON or None, stderr)."""
    env = dict(os.environ, BLZ_DATA_DIR=str(data_root))
    env.pop("BLZ_OUTPUT_FORMAT", None)
    done = subprocess.run([sys.executable, "-m", "cairn_servers.blz.cli", *argv, "--json"], capture_output=True,
                          text=True, env=env, timeout=60)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None, done.stderr


def stored(data_root: Path, alias: str) -> Path:
    (only,) = (data_root / "sources" / alias).iterdir()
    return only


# -- exact fetches and query strings ---------------------------------------------------------------

def test_candidates_never_carry_a_query_onto_a_substituted_url() -> None:
    given = "https://docs.example.com/v2/llms.txt?token=abc#top"
    assert sources.candidates(given) == ["https://docs.example.com/v2/llms-full.txt", given]
    assert sources.candidates(given, exact=True) == [given]
    assert sources.candidates("https://docs.example.com/v2/?lang=en") == [
        "https://docs.example.com/v2/llms-full.txt", "https://docs.example.com/v2/llms.txt",
        "https://docs.example.com/v2/llms-small.txt"]
    assert sources.candidates("https://docs.example.com/export.txt?fmt=llms") == [
        "https://docs.example.com/export.txt?fmt=llms"]


def test_cli_add_drops_the_query_on_the_full_variant_and_exact_keeps_it(data_root: Path,
                                                                     doc_server: DocServer) -> None:
    doc_server.files["/lib/llms-full.txt"] = FULL
    doc_server.files["/lib/llms.txt?v=2"] = INDEX
    code, out, err = blz(data_root, "add", "lib", doc_server.url("/lib/llms.txt?v=2"))
    assert code == 0, err
    # The sibling was asked for without ?v=2 (which it does not serve: the old code fell back to llms.txt).
    assert out["url"] == doc_server.url("/lib/llms-full.txt") and out["lines"] == FULL.count(b"\n")
    assert [p for m, p, _ in doc_server.requests] == ["/lib/llms-full.txt"]

    doc_server.requests.clear()
    code, out, err = blz(data_root, "add", "lib", doc_server.url("/lib/llms.txt?v=2"), "--force", "--exact")
    assert code == 0, err
    assert out["url"] == doc_server.url("/lib/llms.txt?v=2") and out["lines"] == INDEX.count(b"\n")
    assert [p for m, p, _ in doc_server.requests] == ["/lib/llms.txt?v=2"]

    # A site URL with a query: the conventional files are looked up without it; nothing found names --exact.
    doc_server.requests.clear()
    code, out, err = blz(data_root, "add", "site", doc_server.url("/site/?lang=en"))
    assert code == 3 and out is None
    assert [p for m, p, _ in doc_server.requests] == ["/site/llms-full.txt", "/site/llms.txt", "/site/llms-small.txt"]
    assert "blz add --exact" in err and "Traceback" not in err


async def _mcp_exact(params: Any, http: DocServer) -> None:
    http.files["/lib/llms-full.txt"] = FULL
    http.files["/lib/llms.txt"] = INDEX
    http.files["/lib/llms.txt?v=2"] = INDEX
    async with Client(params, cache=None) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        schema = tools["source-add"].input_schema
        # the seed's names, plus exact, allLanguages, dryRun, and a source's tags, category and refresh interval
        assert set(schema["properties"]) == {"alias", "url", "force", "exact", "allLanguages", "dryRun", "tags",
                                             "category", "refreshHours", "aliases", "crawl", "maxPages", "crawlDepth"}
        assert schema["properties"]["exact"]["type"] == "boolean" and schema["required"] == ["alias"]
        assert "exact" in (tools["source-add"].description or "")

        added = data(await client.call_tool("source-add", {"alias": "lib", "url": http.url("/lib/llms.txt"),
                                                           "exact": True}))
        assert added["url"] == http.url("/lib/llms.txt") and added["lines"] == INDEX.count(b"\n")
        assert [p for m, p, _ in http.requests] == ["/lib/llms.txt"]  # llms-full.txt never asked for
        hit = data(await client.call_tool("find", {"query": "install", "source": "lib"}))["hits"][0]
        assert hit["sourceUrl"] == http.url("/lib/llms.txt")

        http.requests.clear()  # without exact: the full variant, without the query string
        again = data(await client.call_tool("source-add", {"alias": "lib", "url": http.url("/lib/llms.txt?v=2"),
                                                           "force": True}))
        assert again["url"] == http.url("/lib/llms-full.txt") and again["lines"] == FULL.count(b"\n")
        assert [p for m, p, _ in http.requests] == ["/lib/llms-full.txt"]

        with pytest.raises(MCPError) as bad:  # the schema types it: a string is refused before any fetch
            await client.call_tool("source-add", {"alias": "lib2", "url": http.url("/lib/llms.txt"), "exact": "yes"})
        assert "exact" in str(bad.value)


def test_mcp_source_add_exact_fetches_exactly_the_url_given(tmp_path: Path, data_root: Path,
                                                            doc_server: DocServer) -> None:
    params = seeded(tmp_path, data_root)  # BLZ_MCP_ALLOW_HOSTS=127.0.0.1: the loopback server is allowed
    asyncio.run(asyncio.wait_for(_mcp_exact(params, doc_server), 90))


# -- validate's fix repairs ------------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["overwrite", "same-size", "delete", "index"])
def test_validate_suggests_a_fix_that_repairs(data_root: Path, doc_server: DocServer, damage: str) -> None:
    doc_server.files["/d/llms-full.txt"] = FULL
    code, out, err = blz(data_root, "add", "d", doc_server.url("/d/llms.txt"))
    assert code == 0, err
    path = stored(data_root, "d")
    # Undamaged, update is conditional and a 304 changes nothing.
    code, out, _ = blz(data_root, "update", "d")
    assert out["results"][0]["status"] == "unchanged" and doc_server.gets("/d/llms-full.txt")[-1].get("if-none-match")

    if damage == "overwrite":
        path.write_bytes(b"# Something else entirely\n")
    elif damage == "same-size":  # the same length, one byte flipped
        path.write_bytes(FULL.replace(b"npm", b"nqm"))
    elif damage == "delete":
        path.unlink()
    else:
        db = sqlite3.connect(data_root / "blz.db")
        db.execute("DELETE FROM headings WHERE alias = 'd' AND level = 2")
        db.commit()
        db.close()
    code, report, _ = blz(data_root, "validate")
    assert code == 7 and report["ok"] is False
    (entry,) = report["sources"]
    assert entry["problems"] and entry["fix"] == "blz update d"

    # Run exactly the suggested command.
    code, out, err = blz(data_root, *entry["fix"].split()[1:])
    assert code == 0, err
    (result,) = out["results"]
    assert result["status"] == "repaired" and result["reason"] == "; ".join(entry["problems"])
    assert "if-none-match" not in doc_server.gets("/d/llms-full.txt")[-1]  # a 304 would have kept the damage

    code, report, _ = blz(data_root, "validate")
    assert code == 0 and report["ok"] is True
    assert stored(data_root, "d").read_bytes() == FULL
    code, got, _ = blz(data_root, "get", "d:5")
    assert got["snippets"][0]["content"] == "npm install lib"
    code, found, _ = blz(data_root, "search", "install", "-s", "d")
    assert found["hits"][0]["headingPath"] == ["Lib", "Install"]
    code, hist, _ = blz(data_root, "history", "d")
    assert hist["events"][0]["action"] == "update" and hist["events"][0]["detail"].startswith("repaired: ")
    # Repaired, the next update is conditional again.
    code, out, _ = blz(data_root, "update", "d")
    assert out["results"][0]["status"] == "unchanged"


def test_add_force_rewrites_a_damaged_file_of_the_same_content(data_root: Path, tmp_path: Path) -> None:
    doc = tmp_path / "llms.txt"
    doc.write_bytes(FULL)
    assert blz(data_root, "add", "d", str(doc))[0] == 0
    path = stored(data_root, "d")
    path.write_bytes(b"garbage\n")
    code, out, err = blz(data_root, "add", "d", str(doc), "--force")
    assert code == 0, err
    assert stored(data_root, "d").read_bytes() == FULL  # the same name (content hash), now the right bytes
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")]  # written via a temp file
    code, report, _ = blz(data_root, "validate")
    assert code == 0 and report["ok"] is True


def test_a_running_reader_sees_the_repaired_file(data_root: Path, tmp_path: Path) -> None:
    """A long-lived Store (as in `blz mcp`) that read the damaged file must not keep serving line
    offsets computed from it once another process has repaired it."""
    doc = tmp_path / "llms.txt"
    doc.write_bytes(FULL)
    assert blz(data_root, "add", "d", str(doc))[0] == 0
    store = Store(data_root)
    try:
        row = store.source("d")
        assert row is not None and store.read_lines(row, 5, 5) == ["npm install lib"]
        stored(data_root, "d").write_bytes(b"x\n" * 3 + b"a much longer line than before\n" * 8)
        assert store.read_lines(row, 5, 5) == ["a much longer line than before"]  # damaged, as stored
        assert blz(data_root, "update", "d")[1]["results"][0]["status"] == "repaired"
        assert store.read_lines(row, 5, 5) == ["npm install lib"]
    finally:
        store.close()


# -- folders and llms-small.txt --------------------------------------------------------------------

def test_add_folder_takes_llms_small_after_full_and_index(data_root: Path, tmp_path: Path,
                                                         doc_server: DocServer) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "llms-small.txt").write_bytes(b"# Small\n\n## Tiny\n\nsmall words\n")
    code, out, err = blz(data_root, "add", "small", str(folder))
    assert code == 0, err
    assert out["url"].endswith("/docs/llms-small.txt") and out["lines"] == 5

    (folder / "llms.txt").write_bytes(INDEX)  # preferred over llms-small.txt
    code, out, _ = blz(data_root, "add", "small", str(folder), "--force")
    assert out["url"].endswith("/docs/llms.txt")
    (folder / "llms-full.txt").write_bytes(FULL)  # preferred over both
    code, out, _ = blz(data_root, "add", "small", str(folder), "--force")
    assert out["url"].endswith("/docs/llms-full.txt")

    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = blz(data_root, "add", "none", str(empty))
    assert code == 3 and "llms-full.txt" in err and "llms.txt" in err and "llms-small.txt" in err

    doc_server.files["/site/llms-small.txt"] = b"# Site\n\nsmall\n"  # a site URL: the same order
    code, out, err = blz(data_root, "add", "site", doc_server.url("/site/"))
    assert code == 0, err
    assert out["url"] == doc_server.url("/site/llms-small.txt")
    assert [p for m, p, _ in doc_server.requests] == ["/site/llms-full.txt", "/site/llms.txt", "/site/llms-small.txt"]


def test_docs_and_help_describe_the_fixes(data_root: Path) -> None:
    from cairn_servers.blz.cli import build_parser
    from cairn_servers.blz.tools import build_server

    doc = (Path(__file__).resolve().parents[2] / "docs" / "blz.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| `source-add` |"))
    props = build_server().tools["source-add"].input_schema["properties"]
    assert all(f"`{name}`" in row for name in props)
    assert "`llms-full.txt`, then `llms.txt`, then `llms-small.txt`" in doc
    assert '"status": "repaired"' in doc
    help_text = build_parser()._subparsers._group_actions[0].choices["add"].format_help()  # type: ignore[union-attr,index]
    assert "llms-small.txt" in help_text and "--exact" in help_text
