"""Issue 16 item 6: a registry worth browsing (`blz lookup`, MCP `lookup`), `blz add DOMAIN`, registry
names resolved through the registry, `blz add --manifest FILE`, and `--dry-run` (nothing written).

Fetches go to real HTTP(S) servers on 127.0.0.1 (tests/blz/conftest.py); `blz add DOMAIN` fetches
https://DOMAIN/..., so its tests use the HTTPS server, its self-signed certificate trusted through
SSL_CERT_FILE. No test reaches the internet.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from cairn_servers.blz import registry, sources
from cairn_servers.blz.cli import run
from cairn_servers.blz.store import Store

from .conftest import DocServer, blz
from .test_lang import multilingual

pytestmark = pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026")

FULL = b"# Site\n\n## Install\n\nnpm install site\n\n## Usage\n\nCall site().\n"
INDEX = b"# Site\n\n> The index.\n\n## Docs\n\n- [Guide](https://example.test/guide.md)\n"


def blz_json(*argv: str) -> tuple[int, Any, str]:
    code, out, err = blz(*argv, "--json")
    return code, (json.loads(out) if out else None), err


def snapshot(root: Path) -> dict[str, Any]:
    """Everything a write would change: every stored file's bytes, and every row of every table."""
    files = {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(root.rglob("*")) if p.is_file() and not p.name.endswith(("-wal", "-shm"))}
    files.pop("blz.db", None)  # its pages are compared row by row below (a checkpoint may rewrite them)
    db = sqlite3.connect(root / "blz.db")
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                           "AND name NOT LIKE 'sections_%' ORDER BY name")]
        rows = {t: sorted(map(repr, db.execute(f'SELECT * FROM "{t}"'))) for t in tables}
    finally:
        db.close()
    return {"files": files, "rows": rows}


def open_store(root: Path) -> None:
    """Create the (empty) database, as any earlier command would have."""
    store = Store(root)
    try:
        store.sources()
    finally:
        store.close()


# -- the registry itself ----------------------------------------------------------------------------

def test_registry_has_forty_well_formed_entries() -> None:
    entries = registry.REGISTRY
    assert len(entries) >= 40
    aliases = [e.alias for e in entries]
    assert len(set(aliases)) == len(aliases) and aliases == sorted(aliases)
    for e in entries:
        assert re.fullmatch(r"[a-z0-9][a-z0-9-]{0,63}", e.alias), e
        assert re.fullmatch(r"https://[a-z0-9.-]+(/[A-Za-z0-9._/-]*)?/[a-z-]*\.txt", e.url), e
        assert e.category in registry.CATEGORIES, e
        assert e.description and "\n" not in e.description and len(e.description) <= 80, e
    assert all(n > 0 for n in registry.categories().values()), "every category has entries"
    assert sum(registry.categories().values()) == len(entries)


def test_docs_list_the_categories_and_say_the_registry_is_curated() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "blz.md").read_text()
    listed = re.search(r"^Categories: (.+?)\.$", doc, re.M | re.S)
    assert listed and re.findall(r"`([a-z]+)`", listed.group(1)) == list(registry.CATEGORIES)
    assert "curated by hand, not verified at build time" in doc


def test_lookup_searches_and_filters_by_category(data_root: Path) -> None:
    code, everything, _ = blz_json("lookup")
    assert code == 0 and len(everything["results"]) == len(registry.REGISTRY)
    assert everything["categories"] == registry.categories() and everything["category"] is None
    code, found, _ = blz_json("lookup", "orm", "-c", "database")
    assert code == 0 and [r["alias"] for r in found["results"]] == ["drizzle", "prisma"]
    assert all(r["category"] == "database" and r["installed"] is False for r in found["results"])
    assert found["results"][0]["suggestedCommand"] == "blz add drizzle"
    code, ai, _ = blz_json("lookup", "--category", "ai")
    assert code == 0 and ai["category"] == "ai" and len(ai["results"]) == registry.categories()["ai"]
    code, none, _ = blz_json("lookup", "react", "-c", "python")
    assert code == 0 and none["results"] == []
    code, out, err = blz("lookup", "x", "-c", "frameworks")
    assert code == 2 and out == "" and err.startswith(
        """blz: error: Invalid parameter for 'lookup': category: "frameworks" is not one of "ai", "auth", """)
    code, text, _ = blz("lookup", "-c", "payments", "--text")
    assert code == 0 and text.splitlines()[0].startswith("stripe  [payments]  Stripe")
    assert "(blz add stripe)" in text and "categories: ai (" in text


def test_lookup_says_which_entries_are_installed(tmp_path: Path, data_root: Path) -> None:
    (tmp_path / "llms.txt").write_bytes(FULL)
    assert blz("add", "hono", str(tmp_path / "llms.txt"))[0] == 0
    code, found, _ = blz_json("lookup", "hono")
    assert code == 0 and found["results"][0] == {
        "alias": "hono", "url": "https://hono.dev/llms-full.txt", "description": registry.get("hono").description,  # type: ignore[union-attr]
        "category": "backend", "installed": True, "suggestedCommand": "blz add hono"}
    code, text, _ = blz("lookup", "hono", "--text")
    assert "(installed)" in text.splitlines()[1]


def test_lookup_over_mcp(data_root: Path) -> None:
    async def main() -> None:
        params = StdioServerParameters(command=sys.executable, args=["-m", "cairn_servers.blz.cli", "mcp"],
                                       env={"BLZ_DATA_DIR": str(data_root)})
        async with Client(params, cache=None) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools["lookup"].input_schema["properties"]) == {"query", "category"}
            res = await client.call_tool("lookup", {"query": "agents", "category": "ai"})
            got = res.structured_content
            assert got is not None and not res.is_error
            assert got["results"] and all(r["category"] == "ai" for r in got["results"])
            assert "mastra" in [r["alias"] for r in got["results"]]
            assert set(tools["lookup"].input_schema["properties"]["category"]["enum"]) == set(registry.CATEGORIES)
            with pytest.raises(MCPError, match="""category: "nope" is not one of "ai", """):
                await client.call_tool("lookup", {"category": "nope"})
            learn = (await client.call_tool("learn-blz", {})).structured_content
            assert learn is not None and "lookup" in learn["tools"]

    asyncio.run(asyncio.wait_for(main(), 60))


# -- blz add DOMAIN ---------------------------------------------------------------------------------

def test_domain_alias_is_the_projects_name() -> None:
    assert sources.domain_alias("bun.sh") == "bun"
    assert sources.domain_alias("docs.astro.build") == "astro"
    assert sources.domain_alias("orm.drizzle.team") == "drizzle"
    assert sources.domain_alias("developers.cloudflare.com") == "cloudflare"
    assert sources.domain_alias("www.better-auth.com") == "better-auth"
    assert sources.domain_alias("langchain-ai.github.io") == "langchain-ai"
    assert sources.domain_alias("example.co.uk") == "example"
    assert sources.domain_alias("Hono.Dev/") == "hono"
    assert sources.domain_alias("127.0.0.1:8443") == "127-0-0-1"
    assert sources.is_domain("bun.sh") and sources.is_domain("localhost:8080")
    assert not sources.is_domain("react") and not sources.is_domain("https://bun.sh")
    assert not sources.is_domain("bun.sh/docs") and not sources.is_domain("bun..sh")
    assert not sources.is_domain("bun.sh:99999") and not sources.is_domain("-bun.sh")


def test_add_domain_prefers_llms_full(tls_server: DocServer, data_root: Path) -> None:
    tls_server.files["/llms-full.txt"] = FULL
    tls_server.files["/llms.txt"] = INDEX
    code, added, err = blz_json("add", tls_server.host)
    assert code == 0, err
    assert added["alias"] == "127-0-0-1" and added["url"] == tls_server.url("/llms-full.txt")
    assert added["headings"] == 3 and added["lines"] == 9
    assert re.fullmatch(rf"Added 127-0-0-1 \(3 headings, 9 lines\) in \d+ms from {re.escape(tls_server.url('/llms-full.txt'))}",
                        added["message"]), added["message"]
    assert [p for m, p, _h in tls_server.requests] == ["/llms-full.txt"]
    code, text, _ = blz("get", "127-0-0-1:3-5", "--text")
    assert code == 0 and "npm install site" in text


def test_add_domain_falls_back_to_llms_txt_and_says_so(tls_server: DocServer, data_root: Path) -> None:
    tls_server.files["/llms.txt"] = INDEX
    code, text, err = blz("add", tls_server.host + "/", "--text")
    assert code == 0, err
    full, index = tls_server.url("/llms-full.txt"), tls_server.url("/llms.txt")
    assert text.strip().endswith(f"from {index} ({full}: not found)"), text
    assert [p for m, p, _h in tls_server.requests] == ["/llms-full.txt", "/llms.txt"]
    code, listed, _ = blz_json("list")
    assert [(s["alias"], s["url"]) for s in listed["sources"]] == [("127-0-0-1", index)]


def test_add_domain_with_neither_file_says_so_and_writes_nothing(tls_server: DocServer, data_root: Path) -> None:
    open_store(data_root)
    before = snapshot(data_root)
    code, out, err = blz("add", tls_server.host)
    full, index = tls_server.url("/llms-full.txt"), tls_server.url("/llms.txt")
    assert code == 3 and out == ""
    assert err == (f"blz: error: Neither {full} nor {index} exists (HTTP 404). If {tls_server.host} keeps its "
                   f"llms.txt elsewhere, give that URL: blz add 127-0-0-1 URL.\n")
    assert snapshot(data_root) == before


def test_add_domain_refuses_what_is_not_one(tmp_path: Path, data_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.v2").write_bytes(FULL)
    assert blz("add", "notes.v2") == (2, "", "blz: error: 'notes.v2' is a local file or folder. Name the source: "
                                             "blz add ALIAS notes.v2\n")
    code, _, err = blz("add", "docs.txt")
    assert code == 2 and "There is no file 'docs.txt' here, and it is not a domain" in err
    code, _, err = blz("add", "bun.sh", "--exact")
    assert code == 2 and "blz add bun https://bun.sh/llms.txt --exact" in err
    code, _, err = blz("add", "a..b")
    assert code == 2 and "neither an alias" in err
    assert not (data_root / "sources").exists()


def test_an_agents_domain_goes_through_the_guard(tls_server: DocServer, store: Store,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """MCP source-add(alias="DOMAIN"): loopback and link-local hosts are refused before connecting."""
    from cairn_servers.core.errors import InvalidInput

    for name in (sources.MCP_HOSTS_ENV, sources.MCP_ROOTS_ENV, sources.MCP_NETWORK_ENV):
        monkeypatch.delenv(name, raising=False)
    tls_server.files["/llms-full.txt"] = FULL
    for domain in (tls_server.host, "169.254.169.254", "localhost:1"):
        with pytest.raises(InvalidInput, match="^Refused to connect to "):
            sources.add(store, domain, guard=sources.agent_guard())
    assert tls_server.requests == [] and store.sources() == []
    monkeypatch.setenv(sources.MCP_HOSTS_ENV, "127.0.0.1")  # the user allows it
    assert sources.add(store, tls_server.host, guard=sources.agent_guard())["alias"] == "127-0-0-1"


def test_add_domain_conflicts_with_an_existing_source(tls_server: DocServer, data_root: Path) -> None:
    tls_server.files["/llms-full.txt"] = FULL
    assert blz("add", tls_server.host)[0] == 0
    code, _, err = blz("add", tls_server.host)
    assert code == 4 and "Source '127-0-0-1' already exists" in err
    assert blz("add", tls_server.host, "--force")[0] == 0


# -- registry names -----------------------------------------------------------------------------------

def _local_registry(monkeypatch: pytest.MonkeyPatch, *entries: registry.Entry) -> None:
    """The registry with these entries too (their URLs on the test's own server)."""
    monkeypatch.setattr(registry, "REGISTRY", registry.REGISTRY + entries)


def test_registry_name_resolves_through_the_registry(doc_server: DocServer, data_root: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    doc_server.files["/site/llms-full.txt"] = FULL
    _local_registry(monkeypatch, registry.Entry("localsite", doc_server.url("/site/llms-full.txt"), "A site", "spec"))
    code, added, err = blz_json("add", "localsite")
    assert code == 0, err
    assert added["url"] == doc_server.url("/site/llms-full.txt")
    assert added["message"].endswith(f"from {doc_server.url('/site/llms-full.txt')}")


def test_registry_entry_falls_back_to_its_llms_txt(doc_server: DocServer, data_root: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    doc_server.files["/site/llms.txt"] = INDEX
    _local_registry(monkeypatch, registry.Entry("localsite", doc_server.url("/site/llms-full.txt"), "A site", "spec"))
    code, added, err = blz_json("add", "localsite")
    assert code == 0, err
    assert added["url"] == doc_server.url("/site/llms.txt")
    assert added["message"].endswith(f"from {doc_server.url('/site/llms.txt')} "
                                      f"({doc_server.url('/site/llms-full.txt')}: not found)")
    code, _, err = blz("add", "nowhere-in-registry")
    assert code == 3 and "blz add example.com" in err


# -- --dry-run ----------------------------------------------------------------------------------------

def test_dry_run_reports_and_writes_nothing(doc_server: DocServer, data_root: Path) -> None:
    doc_server.files["/ml/llms-full.txt"] = multilingual().encode()
    doc_server.files["/other/llms.txt"] = FULL
    assert blz("add", "other", doc_server.url("/other/llms.txt"))[0] == 0
    before = snapshot(data_root)
    code, report, err = blz_json("add", "ml", doc_server.url("/ml/llms.txt"), "--dry-run")
    assert code == 0, err
    doc = multilingual()
    assert report["dryRun"] is True and report["url"] == doc_server.url("/ml/llms-full.txt")
    assert report["lines"] == doc.count("\n") and report["headings"] == 3  # H1 + the two English pages
    assert report["skippedLines"] > 0 and report["skippedLanguages"] == {"fr": 2, "ja": 2}
    assert report["sha256"] == hashlib.sha256(doc.encode()).hexdigest()
    assert report["message"].startswith(f"Dry run: would add ml (3 headings, {report['lines']} lines) from ")
    assert "nothing was written" in report["message"] and "would be stored but not indexed" in report["message"]
    assert snapshot(data_root) == before
    # --all-languages counts every page; a dry run over an existing alias needs --force, as an add does
    code, every, _ = blz_json("add", "ml", doc_server.url("/ml/llms.txt"), "--dry-run", "--all-languages")
    assert code == 0 and every["headings"] == 7 and every["skippedLines"] == 0
    code, _, err = blz("add", "other", doc_server.url("/ml/llms.txt"), "--dry-run")
    assert code == 4 and "already exists" in err
    code, again, _ = blz_json("add", "other", doc_server.url("/ml/llms.txt"), "--dry-run", "--force")
    assert code == 0 and again["message"].startswith("Dry run: would replace other ")
    assert snapshot(data_root) == before
    code, listed, _ = blz_json("list")
    assert [s["alias"] for s in listed["sources"]] == ["other"]


def test_dry_run_of_a_domain(tls_server: DocServer, data_root: Path) -> None:
    tls_server.files["/llms.txt"] = INDEX
    open_store(data_root)
    before = snapshot(data_root)
    code, text, err = blz("add", tls_server.host, "--dry-run", "--text")
    assert code == 0, err
    assert text == (f"Dry run: would add 127-0-0-1 (2 headings, 7 lines) from {tls_server.url('/llms.txt')} "
                    f"({tls_server.url('/llms-full.txt')}: not found); nothing was written\n")
    assert snapshot(data_root) == before


def test_dry_run_over_mcp_writes_nothing(doc_server: DocServer, data_root: Path) -> None:
    doc_server.files["/lib/llms-full.txt"] = FULL
    open_store(data_root)
    before = snapshot(data_root)

    async def main() -> dict[str, Any]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "cairn_servers.blz.cli", "mcp"],
                                       env={"BLZ_DATA_DIR": str(data_root), "BLZ_MCP_ALLOW_HOSTS": "127.0.0.1"})
        async with Client(params, cache=None) as client:
            res = await client.call_tool("source-add", {"alias": "lib", "url": doc_server.url("/lib/llms.txt"),
                                                        "dryRun": True})
            assert not res.is_error, res.content
            listed = (await client.call_tool("list-sources", {})).structured_content
            assert listed is not None and all(s["kind"] == "registry" for s in listed["sources"])
            got: dict[str, Any] = res.structured_content or {}
            return got

    got = asyncio.run(asyncio.wait_for(main(), 60))
    assert got["lines"] == 9 and got["headings"] == 3 and got["skippedLines"] == 0
    assert got["message"].startswith("Dry run: would add lib (3 headings, 9 lines) from ")
    assert snapshot(data_root) == before


# -- --manifest ---------------------------------------------------------------------------------------

def test_manifest_adds_each_entry_and_reports_failures(tmp_path: Path, doc_server: DocServer,
                                                       tls_server: DocServer, data_root: Path) -> None:
    doc_server.files["/one/llms-full.txt"] = FULL
    tls_server.files["/llms.txt"] = INDEX
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "local.txt").write_bytes(b"# Local\n\n## Notes\n\ntext\n")
    manifest = tmp_path / "blz.toml"
    manifest.write_text(f'''version = "1"

[[source]]
alias = "one"
url = "{doc_server.url('/one/llms.txt')}"
name = "One"           # upstream BLZ's descriptive keys are accepted
category = "library"
tags = ["a", "b"]

[[source]]
alias = "gone"
url = "{doc_server.url('/gone/llms.txt')}"

[[source]]
alias = "local"
path = "docs/local.txt"

[[source]]
alias = "typo"
ulr = "https://example.test/llms.txt"

[[source]]
alias = "{tls_server.host}"

[[source]]
alias = "one"
path = "docs/local.txt"
''')
    code, out, err = blz("add", "--manifest", str(manifest), "--json")
    assert code == 3, err  # the first failure's exit code: not found
    data = json.loads(out)
    assert [(r["alias"], r["status"]) for r in data["results"]] == [
        ("one", "added"), ("gone", "failed"), ("local", "added"), ("typo", "failed"), ("127-0-0-1", "added"),
        ("one", "failed")]
    assert data["added"] == 3 and data["failed"] == 3 and data["dryRun"] is False
    assert data["message"] == f"{manifest}: added 3 of 6 sources; 3 failed"
    assert data["results"][1]["code"] == "not_found" and "Nothing found at" in data["results"][1]["error"]
    assert data["results"][3]["error"] == ("source #4: unknown key 'ulr'; a source takes alias, url or path, "
                                           "exact, allLanguages, tags, category, aliases, refreshHours.")
    assert data["results"][5]["error"] == "'one' appears twice in the manifest; the first one is used."
    assert err.splitlines() == [f"blz: error: gone: {data['results'][1]['error']}", f"blz: error: typo: {data['results'][3]['error']}",
                                f"blz: error: one: {data['results'][5]['error']}"]
    code, listed, _ = blz_json("list")
    assert sorted((s["alias"], s["metadata"]["totalLines"]) for s in listed["sources"]) == [
        ("127-0-0-1", 7), ("local", 5), ("one", 9)]
    code, text, _ = blz("get", "local:3", "--text")
    assert "## Notes" in text
    # again: every entry now exists (conflicts) but for --force, which replaces them
    code, _, err = blz("add", "--manifest", str(manifest), "--force", "--text")
    assert code == 3 and "blz: error: gone:" in err and "blz: error: one: 'one' appears twice" in err


def test_manifest_text_output_and_all_good_exit_code(tmp_path: Path, doc_server: DocServer, data_root: Path) -> None:
    doc_server.files["/a/llms.txt"] = FULL
    doc_server.files["/b/llms.txt"] = INDEX
    manifest = tmp_path / "m.toml"
    manifest.write_text(f'[[source]]\nalias = "a"\nurl = "{doc_server.url("/a/llms.txt")}"\nexact = true\n\n'
                        f'[[source]]\nalias = "b"\nurl = "{doc_server.url("/b/")}"\n')
    code, text, err = blz("add", "--manifest", str(manifest), "--text")
    assert code == 0 and err == ""
    lines = text.splitlines()
    assert re.fullmatch(r"a: Added a \(3 headings, 9 lines\) in \d+ms", lines[0]), lines[0]
    assert lines[1].startswith("b: Added b (2 headings, 7 lines) in ") and "/b/llms-full.txt: not found)" in lines[1]
    assert lines[2] == f"{manifest}: added 2 of 2 sources"
    assert [p for m, p, _h in doc_server.requests if p.startswith("/a/")] == ["/a/llms.txt"]  # exact: no llms-full


def test_manifest_only_picks_entries(tmp_path: Path, doc_server: DocServer, data_root: Path) -> None:
    for name in ("a", "b", "c"):
        doc_server.files[f"/{name}/llms.txt"] = FULL
    manifest = tmp_path / "m.toml"
    manifest.write_text("".join(f'[[source]]\nalias = "{n}"\nurl = "{doc_server.url(f"/{n}/llms.txt")}"\nexact = true\n\n'
                                for n in ("a", "b", "c")))
    code, out, err = blz("add", "--manifest", str(manifest), "--only", "C,a", "--json")
    assert code == 0, err
    assert [r["alias"] for r in json.loads(out)["results"]] == ["a", "c"]
    assert sorted(p for m, p, _h in doc_server.requests) == ["/a/llms.txt", "/c/llms.txt"]
    code, out, err = blz("add", "--manifest", str(manifest), "--only", "b", "--only", "zz", "--json")
    assert code == 0 and [r["alias"] for r in json.loads(out)["results"]] == ["b"]
    assert blz("add", "--manifest", str(manifest), "--only", "x,y") == (
        2, "", f"blz: error: No entry of {manifest} has an alias in --only x,y. Its aliases: a, b, c.\n")
    assert blz("add", "a", "--only", "a")[0] == 2


def test_manifest_dry_run_writes_nothing(tmp_path: Path, doc_server: DocServer, data_root: Path) -> None:
    doc_server.files["/a/llms.txt"] = FULL
    manifest = tmp_path / "m.toml"
    manifest.write_text(f'[[source]]\nalias = "a"\nurl = "{doc_server.url("/a/llms.txt")}"\n\n'
                        f'[[source]]\nalias = "b"\nurl = "{doc_server.url("/b/llms.txt")}"\n')
    open_store(data_root)
    before = snapshot(data_root)
    code, out, err = blz("add", "--manifest", str(manifest), "--dry-run", "--json")
    assert code == 3 and "blz: error: b: Nothing found at" in err
    data = json.loads(out)
    assert data["dryRun"] is True and data["added"] == 0 and data["failed"] == 1
    assert data["results"][0]["status"] == "dry-run" and data["results"][0]["lines"] == 9
    assert data["message"] == f"{manifest}: would add 1 of 2 sources; 1 failed; nothing was written"
    assert snapshot(data_root) == before


@pytest.mark.parametrize(("content", "code", "message"), [
    (None, 3, "No manifest at {path}. Check the path."),
    ("[[source]\nalias = 1", 2, "{path} is not valid TOML: "),
    ('title = "nothing"\n', 2, "{path} lists no sources. Write one [[source]] table per source"),
    ("source = 3\n", 2, "{path} lists no sources."),
    # A RecursionError traceback in tomllib: nested arrays, inline tables, both 100,000 deep.
    ("x = " + "[" * 100_000 + "]" * 100_000 + "\n", 2,
     "{path} nests arrays or tables too deeply to be a manifest. A manifest is a list of [[source]] tables."),
    ("x = " + "{a = " * 5_000 + "1" + "}" * 5_000 + "\n", 2, "{path} nests arrays or tables too deeply"),
    ("# " + "x" * (5 << 20) + "\n", 2, "{path} is over 4 MiB; a manifest lists sources in a few KB."),
])
def test_bad_manifest_files(tmp_path: Path, data_root: Path, content: str | None, code: int, message: str) -> None:
    path = tmp_path / "m.toml"
    if content is not None:
        path.write_text(content)
    got, out, err = blz("add", "--manifest", str(path))
    assert got == code and out == "" and err.startswith("blz: error: " + message.format(path=path)), err


def test_manifest_excludes_alias_and_needs_something(tmp_path: Path, data_root: Path) -> None:
    assert blz("add", "x", "--manifest", str(tmp_path / "m.toml")) == (
        2, "", "blz: error: Give either ALIAS [URL] or --manifest FILE, not both.\n")
    assert blz("add") == (2, "", "blz: error: Name a source: blz add ALIAS [URL], blz add DOMAIN, or blz add "
                                 "--manifest FILE.\n")


def test_manifest_entry_checks(tmp_path: Path, data_root: Path) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text('source = [1, {url = "x"}, {alias = "a", url = "u", path = "p"}, {alias = "b", exact = "yes"},'
                        ' {alias = "c", url = ""}]\n')
    code, out, _ = blz("add", "--manifest", str(manifest), "--json")
    assert code == 2
    assert [r["error"] for r in json.loads(out)["results"]] == [
        'source #1 is not a table: write it as [[source]] with alias = "...".',
        'source #2 has no alias: give alias = "name" (a registry name or a domain alone, or with url or path).',
        "source 'a' has both url and path: give one.",
        "source 'b': exact must be true or false.",
        "source 'c': url must be a non-empty string."]


@pytest.mark.parametrize("kind", ["fifo", "device", "symlink to a fifo"])
def test_a_manifest_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path, data_root: Path, kind: str) -> None:
    """A FIFO used to hang `blz add --manifest` (waiting for a writer that never comes)."""
    import os
    import time

    path = tmp_path / "m.toml"
    if kind == "device":
        path = Path("/dev/zero")
    else:
        os.mkfifo(tmp_path / "fifo")
        if kind == "fifo":
            path = tmp_path / "fifo"
        else:
            path.symlink_to(tmp_path / "fifo")
    t0 = time.monotonic()
    got, out, err = blz("add", "--manifest", str(path))
    assert (got, out, err) == (2, "", f"blz: error: {path} is not a regular file. Give the manifest's TOML file.\n")
    assert time.monotonic() - t0 < 5
