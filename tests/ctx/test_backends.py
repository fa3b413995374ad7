"""Storage behaviour both backends must share beyond the search/sync suites: several writers at once,
searches answered during a sync, versioned schema migrations, and database URLs that never print
their password."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cairn_servers.core.errors import StorageError
from cairn_servers.ctx import config as cfgmod
from cairn_servers.ctx.service import Service
from cairn_servers.ctx.store import SCHEMA_VERSION, DocumentRecord, KnowledgeStore
from cairn_servers.ctx.stores import open_store
from cairn_servers.ctx.chunk import chunk_text

from .conftest import config_file, write

pytestmark = pytest.mark.usefixtures("ctx_backend")  # every test on SQLite and on PostgreSQL


def _config(tmp_path: Path, root: Path) -> Path:
    return config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[connectors.filesystem.docs]
root = "{root}"
""")


def _ctx(*args: str) -> list[str]:
    return [sys.executable, "-m", "cairn_servers.ctx.cli", *args]


def _integrity(cfg: Path) -> tuple[int, int]:
    """(documents, chunks) after checking there are no duplicate documents or chunks and no orphans."""
    store = open_store(cfgmod.load(cfg).db)
    try:
        assert store.sql("SELECT COUNT(*) FROM (SELECT source, source_id FROM documents GROUP BY source, source_id"
                         " HAVING COUNT(*) > 1) AS d")[0][0] == 0
        assert store.sql("SELECT COUNT(*) FROM (SELECT doc, ordinal FROM chunks GROUP BY doc, ordinal"
                         " HAVING COUNT(*) > 1) AS d")[0][0] == 0
        assert store.sql("SELECT COUNT(*) FROM chunks WHERE doc NOT IN (SELECT rowid FROM documents)")[0][0] == 0
        docs, chunks, _ = store.counts()
        return docs, chunks
    finally:
        store.close()


def test_two_syncs_at_once_index_every_document_once(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write(root, {f"d{i:04d}.md": f"# Doc {i}\n\nsynctoken{i} " + "words " * (i % 40) for i in range(600)})
    cfg = _config(tmp_path, root)
    Service.from_config(cfg).store.close()  # create the database first, as `ctx init` would
    procs = [subprocess.Popen(_ctx("sync", "all", "--json", "--config", str(cfg)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    reports = [json.loads(o)["sources"][0] for o, _ in outs]
    # The source lock: one sync indexed everything, the other waited and found it done.
    assert sorted(r["added"] for r in reports) == [0, 600]
    assert sorted(r["unchanged"] for r in reports) == [0, 600]
    docs, _ = _integrity(cfg)
    assert docs == 600
    svc = Service.from_config(cfg)
    assert svc.search("synctoken123")[0].source_id == "d0123.md"


def test_searches_are_answered_during_a_sync(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write(root, {"base.md": "# Base\n\nThe heron nests by the lake.\n"})
    cfg = _config(tmp_path, root)
    svc = Service.from_config(cfg)
    svc.sync("all")
    write(root, {f"bulk/b{i:04d}.md": f"# Bulk {i}\n\n" + "river stone " * 200 for i in range(800)})
    proc = subprocess.Popen(_ctx("sync", "all", "--json", "--config", str(cfg)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    answered = 0
    slowest = 0.0
    try:
        while proc.poll() is None:
            t = time.monotonic()
            hits = svc.search("heron lake")
            slowest = max(slowest, time.monotonic() - t)
            assert hits and hits[0].source_id == "base.md"
            answered += 1
            time.sleep(0.02)
    finally:
        _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    assert answered >= 5, "the sync finished before the searches could overlap it"
    assert slowest < 5.0  # a search never waits for the writer's transaction
    assert svc.stats().documents == 801


def test_a_database_from_the_previous_schema_is_upgraded(tmp_path: Path) -> None:
    from cairn_servers.ctx.store import SqliteStore

    cfg = _config(tmp_path, tmp_path / "docs")
    db = cfgmod.load(cfg).db
    if db.url:
        from cairn_servers.ctx.store_pg import PostgresStore

        old: SqliteStore | PostgresStore = PostgresStore(db.url, migrate=False)
    else:
        old = SqliteStore(db.path, create=True, migrate=False)
    assert old.migrate(target=SCHEMA_VERSION - 1) == 0
    assert old.schema_version() == SCHEMA_VERSION - 1
    body = "# Kept\n\nThe otter survived the upgrade in the café.\n"
    with old.transaction():
        old.upsert(DocumentRecord("filesystem:docs", "kept.md", "Kept", body, 1_700_000_000, "fp", "ch"),
                   chunk_text(body, 400, 40))
        old.bump()
    old.close()

    out = subprocess.run(_ctx("migrate", "--json", "--config", str(cfg)), capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    assert (report["previous"], report["version"]) == (SCHEMA_VERSION - 1, SCHEMA_VERSION)
    assert report["backend"] == ("postgres" if db.url else "sqlite")
    svc = Service.from_config(cfg)
    assert svc.store.schema_version() == SCHEMA_VERSION
    # The (source, updated_at) index of version 2 is there; the old data is intact and searchable.
    if db.url:
        assert svc.store.sql("SELECT to_regclass('documents_source_updated') IS NOT NULL")[0][0]
    else:
        assert svc.store.sql("SELECT name FROM sqlite_master WHERE name = 'documents_source_updated'")
    assert svc.search("otter")[0].source_id == "kept.md"
    # Version 3 folds accents in PostgreSQL's index (FTS5 always did): the old row is found without its accent.
    assert [r.source_id for r in svc.search("cafe")] == ["kept.md"]
    again = subprocess.run(_ctx("migrate", "--config", str(cfg), "--text"), capture_output=True, text=True, check=True)
    assert f"schema version {SCHEMA_VERSION} (up to date)" in again.stdout


def test_a_database_from_a_newer_ctx_is_refused(tmp_path: Path) -> None:
    cfg = _config(tmp_path, tmp_path / "docs")
    svc = Service.from_config(cfg)
    with svc.store.transaction():
        svc.store.sql("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    svc.close()
    with pytest.raises(StorageError, match="schema version 99, newer than this ctx knows"):
        Service.from_config(cfg).store


def test_database_url_password_is_never_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _config(tmp_path, tmp_path / "docs")
    # A server that is not there: the error names the database, with the password masked.
    monkeypatch.setenv("CTX_DATABASE_URL", "postgresql://kb:pw-s3cret-9@/kb?host=/nonexistent-cairn-socket")
    shown = subprocess.run(_ctx("config", "show", "--json", "--config", str(cfg)), capture_output=True, text=True,
                           check=True)
    assert json.loads(shown.stdout)["db"]["url"] == "postgresql://kb:***@/kb?host=/nonexistent-cairn-socket"
    failed = subprocess.run(_ctx("stats", "--config", str(cfg)), capture_output=True, text=True)
    assert failed.returncode != 0
    assert "Cannot connect to the knowledge base postgresql://***@/kb?host=/nonexistent-cairn-socket" in failed.stderr
    assert "pw-s3cret-9" not in failed.stderr + failed.stdout + shown.stdout + shown.stderr
    assert "Traceback" not in failed.stderr
    monkeypatch.setenv("CTX_DATABASE_URL", "mysql://kb:pw@h/kb")
    with pytest.raises(Exception, match=r"\[db\] url: must be a postgresql:// URL, not 'mysql://kb:\*\*\*@h/kb'"):
        cfgmod.load(cfg)


def test_config_masks_passwords_in_urls() -> None:
    assert cfgmod.mask_url("postgresql://u:p%40ss@db.internal:5432/kb?sslmode=require") == (
        "postgresql://u:***@db.internal:5432/kb?sslmode=require")
    assert cfgmod.mask_url("postgresql://db/kb?user=u&password=hunter2&x=1") == "postgresql://db/kb?user=u&password=***&x=1"
    # user info with no colon may be a token (https://TOKEN@host): masked whole
    assert cfgmod.mask_url("postgresql://u@db/kb") == "postgresql://***@db/kb"


# The schema a new database gets, as the catalog describes it: the digest of the released version's (the schema
# built by the statements of ctx before they were written once for both backends), so a store that writes its
# statements differently still builds the same tables, and a database it made opens as one made before.
_RELEASED_SCHEMA = {"sqlite": "b9b66604dc0552a75f3a3cae99a76b04a1fb756f352127bfdd21627bb74b122a", "postgres": "703f2b55c834ec3df180f075c020c9ab9fa20a5cbc7ea9214e7dfcd66063b8cb"}


def _schema(store: KnowledgeStore, postgres: bool) -> list[tuple[object, ...]]:
    """The schema of a knowledge base as its catalog lists it (FTS5's own shadow tables left out: SQLite's)."""
    sql = store.sql
    if not postgres:
        return sql("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'chunks_fts_%'"
                   " ORDER BY type, name")
    tables = ("meta", "documents", "chunks", "vectors", "checkpoints")
    marks = ",".join("?" * len(tables))
    return sql("SELECT table_name, column_name, data_type, is_nullable, is_identity, is_generated, column_default"
               f" FROM information_schema.columns WHERE table_name IN ({marks}) ORDER BY table_name, column_name",
               tables) + sql(f"SELECT tablename, indexname, indexdef FROM pg_indexes WHERE tablename IN ({marks})"
                             " ORDER BY tablename, indexname", tables)


def test_a_new_database_has_the_released_schema_and_reopens_without_migrating(tmp_path: Path) -> None:
    import hashlib

    cfg = _config(tmp_path, tmp_path / "docs")
    db = cfgmod.load(cfg).db
    store = open_store(db)
    try:
        assert store.migrated_from == 0
        schema = _schema(store, bool(db.url))
        digest = hashlib.sha256(json.dumps(schema, default=str).encode()).hexdigest()
        assert digest == _RELEASED_SCHEMA["postgres" if db.url else "sqlite"], (digest, schema)
        assert store.sql("SELECT key, value FROM meta ORDER BY key") == [("generation", "0"),
                                                                         ("schema_version", str(SCHEMA_VERSION))]
        body = "# Kept\n\nThe otter stays put.\n"
        with store.transaction():
            store.upsert(DocumentRecord("filesystem:docs", "kept.md", "Kept", body, 1_700_000_000, "fp", "ch"),
                         chunk_text(body, 400, 40))
            store.bump()
    finally:
        store.close()
    again = open_store(db)
    try:
        assert again.migrated_from == SCHEMA_VERSION  # found current: no migration ran
        assert _schema(again, bool(db.url)) == schema and again.generation() == 1
        if not db.url:
            assert again.db.total_changes == 0  # type: ignore[attr-defined]  # opening wrote nothing
        assert [r[1] for r in again.sql("SELECT rowid, source_id FROM documents")] == ["kept.md"]
    finally:
        again.close()
