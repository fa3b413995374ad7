from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn_servers.ctx.service import Service
from cairn_servers.ctx.store import document_id

from .conftest import config_file, write

pytestmark = pytest.mark.usefixtures("ctx_backend")  # every test on SQLite and on PostgreSQL


def service(tmp_path: Path, extra: str = "", root: Path | None = None) -> Service:
    root = root or tmp_path / "docs"
    return Service.from_config(config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[connectors.filesystem.docs]
root = "{root}"
{extra}
"""))


def docs(svc: Service) -> dict[str, str]:
    return dict(svc.store.sql("SELECT source_id, body FROM documents"))


def test_first_sync_indexes_matching_files(tmp_path: Path, docs_tree: Path) -> None:
    svc = service(tmp_path)
    report = svc.sync("all").sources[0]
    assert (report.ok, report.added, report.scanned) == (True, 3, 3)
    assert set(docs(svc)) == {"guide/install.md", "guide/auth.md", "notes.txt"}
    ((title, updated),) = svc.store.sql(
        "SELECT title, updated_at FROM documents WHERE id = ?", (document_id("filesystem:docs", "guide/auth.md"),)
    )
    assert title == "Authentication"
    assert updated == int((docs_tree / "guide/auth.md").stat().st_mtime)
    assert svc.search("JWT")[0].source_id == "guide/auth.md"


def test_resync_is_incremental(tmp_path: Path, docs_tree: Path) -> None:
    svc = service(tmp_path)
    svc.sync("all")
    chunk_rows = dict(svc.store.sql("SELECT hash, rowid FROM chunks"))

    again = svc.sync("docs").sources[0]
    assert (again.unchanged, again.added, again.updated, again.deleted, again.chunks) == (3, 0, 0, 0, 0)

    # Touching a file without changing it re-reads it but re-chunks nothing.
    future = time.time() + 100
    os.utime(docs_tree / "notes.txt", (future, future))
    touched = svc.sync("docs").sources[0]
    assert (touched.unchanged, touched.updated, touched.chunks) == (3, 0, 0)
    assert dict(svc.store.sql("SELECT hash, rowid FROM chunks")) == chunk_rows

    write(docs_tree, {"guide/auth.md": "# Authentication\n\nWe now use OAuth device flow.\n", "new.md": "# New\n\nfresh"})
    (docs_tree / "notes.txt").unlink()
    changed = svc.sync("filesystem").sources[0]
    assert (changed.added, changed.updated, changed.deleted, changed.unchanged) == (1, 1, 1, 1)
    assert set(docs(svc)) == {"guide/install.md", "guide/auth.md", "new.md"}
    assert svc.search("JWT") == []
    assert svc.search("device flow")[0].source_id == "guide/auth.md"
    assert svc.search("blue-green") == []  # deleted files leave the index, FTS included
    # The unchanged document kept its chunk rows.
    install = svc.store.sql("SELECT chunks.hash, chunks.rowid FROM chunks JOIN documents d ON d.rowid = chunks.doc"
                                   " WHERE d.source_id = 'guide/install.md'")
    assert all(chunk_rows[h] == r for h, r in install)


def test_no_longer_matching_files_disappear(tmp_path: Path, docs_tree: Path) -> None:
    service(tmp_path).sync("all")
    svc = service(tmp_path, 'exclude_globs = ["guide/**"]')
    report = svc.sync("all").sources[0]
    assert report.deleted == 2
    assert set(docs(svc)) == {"notes.txt"}


def test_dry_run_writes_nothing(tmp_path: Path, docs_tree: Path) -> None:
    svc = service(tmp_path)
    report = svc.sync("all", dry_run=True).sources[0]
    assert report.dry_run and sorted(report.would_add) == ["guide/auth.md", "guide/install.md", "notes.txt"]
    assert docs(svc) == {}
    svc.sync("all")
    (docs_tree / "notes.txt").unlink()
    assert svc.sync("all", dry_run=True).sources[0].would_delete == ["notes.txt"]
    assert "notes.txt" in docs(svc)


def test_full_resync_rechunks_without_changing_ids(tmp_path: Path, docs_tree: Path) -> None:
    svc = service(tmp_path)
    svc.sync("all")
    ids = sorted(r[0] for r in svc.store.sql("SELECT id FROM documents"))
    hashes = sorted(r[0] for r in svc.store.sql("SELECT hash FROM chunks"))
    report = svc.sync("all", full=True).sources[0]
    assert report.updated == 3 and report.unchanged == 0
    assert sorted(r[0] for r in svc.store.sql("SELECT id FROM documents")) == ids
    assert sorted(r[0] for r in svc.store.sql("SELECT hash FROM chunks")) == hashes


def test_policy_binary_size_symlinks(tmp_path: Path, docs_tree: Path) -> None:
    (docs_tree / "blob.md").write_bytes(b"# looks like markdown\x00\x01\x02")
    (docs_tree / "huge.md").write_text("big " * 1000)
    outside = tmp_path / "outside"
    write(outside, {"secret.md": "# Outside\n\nlinked in"})
    (docs_tree / "link").symlink_to(outside, target_is_directory=True)
    (docs_tree / "loop").symlink_to(docs_tree, target_is_directory=True)
    (docs_tree / ".git").mkdir()
    (docs_tree / ".git" / "HEAD.md").write_text("never indexed")

    svc = service(tmp_path, "max_file_bytes = 1000")
    report = svc.sync("all").sources[0]
    assert set(docs(svc)) == {"guide/install.md", "guide/auth.md", "notes.txt"}
    assert report.skipped >= 4  # binary, oversized, two symlinks

    svc = service(tmp_path, "max_file_bytes = 1000\nfollow_symlinks = true")
    svc.sync("all")
    assert "link/secret.md" in docs(svc)
    assert not any(k.startswith("loop/") for k in docs(svc))  # the loop was cut


def test_several_instances_and_targets(tmp_path: Path, docs_tree: Path) -> None:
    other = tmp_path / "other"
    write(other, {"a.md": "# Alpha\n\nshared word kiwi"})
    write(docs_tree, {"k.md": "# Kiwi\n\nkiwi in docs too"})
    svc = Service.from_config(config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[connectors.filesystem.docs]
root = "{docs_tree}"
[connectors.filesystem.other]
root = "{other}"
"""))
    assert [r.source for r in svc.sync("other").sources] == ["filesystem:other"]
    assert [r.source for r in svc.sync("filesystem").sources] == ["filesystem:docs", "filesystem:other"]
    assert {r.source for r in svc.search("kiwi")} == {"filesystem:docs", "filesystem:other"}
    assert {r.source for r in svc.search("kiwi", source="other")} == {"filesystem:other"}
    assert {r.source_id for r in svc.search("kiwi", source="filesystem:docs")} == {"k.md"}
    counts = {s.source: s.doc_count for s in svc.sources()}
    assert counts == {"filesystem:docs": 4, "filesystem:other": 1}
    from cairn_servers.core.errors import NotFound

    with pytest.raises(NotFound, match="No connector matches 'nope'. Configured: filesystem:docs, filesystem:other"):
        svc.sync("nope")


def test_missing_root_fails_that_source_only_and_keeps_its_documents(tmp_path: Path, docs_tree: Path) -> None:
    svc = service(tmp_path)
    svc.sync("all")
    docs_tree.rename(tmp_path / "moved")
    report = svc.sync("all").sources[0]
    assert not report.ok and "is not a directory" in (report.error or "")
    assert len(docs(svc)) == 3  # a failed scan deletes nothing
    status = svc.sources()[0]
    assert (status.healthy, status.doc_count) == (False, 3)


def test_a_script_connector_with_a_missing_script_fails_alone(tmp_path: Path, docs_tree: Path) -> None:
    svc = service(tmp_path, f'[connectors.script.jira]\npath = "{tmp_path / "jira.lua"}"\n')
    summary = svc.sync("all")
    by = {r.source: r for r in summary.sources}
    assert by["filesystem:docs"].ok
    assert not by["script:jira"].ok and "jira.lua does not exist" in (by["script:jira"].error or "")
    assert by["script:jira"].error_code == "not_found"


def test_extension_point_registers_a_connector_type(tmp_path: Path, docs_tree: Path) -> None:
    """Script connectors (next part) plug in exactly like this: register a factory for the type."""
    from cairn_servers.ctx import connectors
    from cairn_servers.ctx.config import ConnectorConfig
    from cairn_servers.ctx.connectors import Entry, Item

    class Static:
        skipped = 0

        def __init__(self, config: ConnectorConfig) -> None:
            self.config = config

        def scan(self) -> Iterator[Entry]:
            for i in range(3):
                item = Item(source_id=f"T-{i}", body=f"ticket {i} about printers", title=f"Ticket {i}",
                            author="bot", source_url=f"https://user:pw@tickets.example.org/T-{i}", updated_at=1700000000)

                def load(it: Item = item) -> Item:
                    return it

                yield Entry(item.source_id, str(hash(item.body)), load)

    connectors.register("script", Static)
    try:
        svc = service(tmp_path, f'[connectors.script.tickets]\npath = "{tmp_path / "t.lua"}"\n')
        assert all(r.ok for r in svc.sync("script").sources)
        hits = svc.search("printers", source="tickets")
        assert sorted(h.source_id for h in hits) == ["T-0", "T-1", "T-2"]
        hits = sorted(hits, key=lambda h: h.source_id)
        assert hits[0].source_url == "https://***@tickets.example.org/T-0"  # credentials scrubbed
        assert svc.get(hits[0].id).author == "bot"
    finally:
        from cairn_servers.ctx.connectors.base import _TYPES

        _TYPES.pop("script", None)
