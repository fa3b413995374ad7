"""``ctx export`` / ``ctx import`` (issue 17, item 5): JSON Lines out, the same knowledge base back in.

A knowledge base is synced (Markdown, a PDF, with local embeddings), exported by the real CLI, and
imported by the real CLI into a fresh data directory; keyword, semantic and hybrid searches (filters
included) and ``get`` must answer exactly as before, and exporting the import gives the same lines.
Import is one transaction: a bad line (named by its number), a refused database or a SIGKILL leaves
the database as it was. Export streams: its Python memory does not grow with the knowledge base.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.core.errors import InvalidInput, StorageError
from cairn_servers.ctx import transfer
from cairn_servers.ctx.chunk import chunk_hash
from cairn_servers.ctx.service import Service
from cairn_servers.ctx.store import SCHEMA_VERSION

from ._docs import pdf_bytes
from .conftest import config_file, drop_database, pg_database, write

SRC = str(Path(__file__).resolve().parents[2] / "src")
QUERIES = ["kiwi", "flightless bird", "harvest report 7", "zebra migration", "orchard words"]


def conf(folder: Path, root: Path, embedding: str = "", db: str = 'path = "data/kb.sqlite"') -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return config_file(folder, f"""
[db]
{db}
[embedding]
{embedding}
[connectors.filesystem.notes]
root = "{root / 'notes'}"
[connectors.filesystem.wiki]
root = "{root / 'wiki'}"
""")


Fresh = Callable[[], str]


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_db(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fresh]:
    """A function giving the ``[db]`` lines of a new, empty knowledge base at each call: a SQLite
    file, or a database of its own on the session's PostgreSQL server (``[db] url``)."""
    monkeypatch.delenv("CTX_DATABASE_URL", raising=False)
    if request.param == "sqlite":
        yield lambda: 'path = "data/kb.sqlite"'
        return
    server: str = request.getfixturevalue("pg_server")
    names: list[str] = []

    def fresh() -> str:
        name, url = pg_database(server)
        names.append(name)
        return f"url = {json.dumps(url)}"

    try:
        yield fresh
    finally:
        for name in names:
            drop_database(server, name)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    write(root / "notes", {f"n{i:02d}.md": f"# Note {i}\n\nThe kiwi harvest report number {i}, "
                                           + "with orchard words " * (i % 5) + "\n" for i in range(25)})
    write(root / "wiki", {
        "kiwi.md": "# Kiwi\n\nA kiwi is a flightless bird from New Zealand. Zoë writes “quotes” \u2028 here.\n",
        "moa.md": "# Moa\n\nThe moa was a giant bird of New Zealand that could not fly.\n",
        "long.md": "# Long\n\n" + "\n\n".join(f"## Part {i}\n\n" + "filler text " * 150 + ("kiwi" if i == 3 else "")
                                            for i in range(6)),
        "empty.md": "",
    })
    (root / "wiki" / "report.pdf").write_bytes(pdf_bytes([["Annual report"], ["The zebra migration was late."]]))
    old = 946684800  # 2000-01-01
    os.utime(root / "wiki" / "moa.md", (old, old))
    return root


def ctx(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, PYTHONPATH=SRC, CTX_OUTPUT_FORMAT="")
    return subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", *args], capture_output=True, env=env, timeout=120,
                          input=stdin)


def answers(svc: Service, modes: tuple[str, ...]) -> list[Any]:
    out: list[Any] = []
    for mode in modes:
        for q in QUERIES:
            out.append(svc.search(q, mode, limit=20, explain=True))
            out.append(svc.search(q, mode, source="wiki", since="2010-01-01"))
    hit = svc.search("zebra")[0]
    out.append(svc.get(hit.id))
    return out


def lines(path: Path) -> list[dict[str, Any]]:
    out = [json.loads(line) for line in path.read_bytes().split(b"\n") if line]
    out[0].pop("exported_at")
    return out


def test_export_then_import_into_a_fresh_data_dir_answers_every_search_the_same(tmp_path: Path, corpus: Path,
                                                                                fresh_db: Fresh) -> None:
    local = 'provider = "local"'
    a = conf(tmp_path / "a", corpus, local, fresh_db())
    assert ctx("sync", "all", "--config", str(a)).returncode == 0
    before = Service.from_config(a)
    expected = answers(before, ("keyword", "semantic", "hybrid"))
    stats = before.stats()
    before.close()

    out = tmp_path / "kb.jsonl"
    r = ctx("export", "--vectors", "-o", str(out), "--config", str(a), "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert (report["documents"], report["chunks"], report["vectors"]) == (
        stats.documents, stats.chunks, stats.distinct_chunks)
    assert report["bytes"] == out.stat().st_size and out.stat().st_mode & 0o777 == 0o600
    exported = lines(out)
    assert exported[0] == {"type": "header", "format": "ctx-export", "version": 1, "schema_version": SCHEMA_VERSION,
                           "embedding": {"model": "local:l2_supercat:256", "dims": 256}, "vectors": True}
    assert [e["type"] for e in exported].count("document") == stats.documents
    empty = next(e for e in exported if e["type"] == "document" and e["source_id"] == "empty.md")
    assert empty["body"] == ""  # a document without chunks is exported too
    assert b"\xe2\x80\xa8" not in out.read_bytes()  # U+2028 escaped: a JavaScript line split cannot cut a record

    # A fresh data dir, the same configuration otherwise; nothing is synced or embedded there.
    b = conf(tmp_path / "b", corpus, local, fresh_db())
    r = ctx("import", str(out), "--config", str(b), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["documents"] == stats.documents and b"note:" not in r.stderr
    after = Service.from_config(b)
    assert after.stats().pending_embeddings == 0 and after.stats().vectors == stats.vectors
    assert answers(after, ("keyword", "semantic", "hybrid")) == expected
    after.close()
    again = tmp_path / "again.jsonl"
    assert ctx("export", "--vectors", "-o", str(again), "--config", str(b)).returncode == 0
    assert lines(again) == exported  # the import holds exactly what was exported

    # A sync from the same folders after the import finds nothing to do: fingerprints came along.
    synced = json.loads(ctx("sync", "all", "--config", str(b), "--json").stdout)
    assert all(s["added"] == s["updated"] == s["deleted"] == 0 and s["unchanged"] for s in synced["sources"])


def test_keyword_only_export_to_stdout_and_import_from_stdin(tmp_path: Path, corpus: Path, fresh_db: Fresh) -> None:
    a = conf(tmp_path / "a", corpus, db=fresh_db())
    assert ctx("sync", "all", "--config", str(a)).returncode == 0
    before = Service.from_config(a)
    expected = answers(before, ("keyword",))
    before.close()
    r = ctx("export", "--config", str(a))
    assert r.returncode == 0 and r.stderr.startswith(b"ctx: Exported ")  # the summary stays off stdout
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert rows[0]["type"] == "header" and rows[0]["embedding"] is None and rows[0]["vectors"] is False
    assert {row["type"] for row in rows[1:]} == {"document", "chunk"}

    b = conf(tmp_path / "b", corpus, 'provider = "local"', fresh_db())  # embeddings on: the import says what to do next
    imported = ctx("import", "-", "--config", str(b), "--json", stdin=r.stdout)
    assert imported.returncode == 0, imported.stderr
    assert b"ctx: note: " in imported.stderr and b"run `ctx embed pending`" in imported.stderr
    after = Service.from_config(b)
    assert answers(after, ("keyword",)) == expected
    after.close()

    # --vectors without an embedding model is refused before a file is created
    r = ctx("export", "--vectors", "-o", str(tmp_path / "v.jsonl"), "--config", str(a))
    assert r.returncode == 2 and b'provider is "disabled"' in r.stderr and not (tmp_path / "v.jsonl").exists()


def test_a_document_whose_chunks_span_export_batches(tmp_path: Path, corpus: Path,
                                                     monkeypatch: pytest.MonkeyPatch, fresh_db: Fresh) -> None:
    monkeypatch.setattr(transfer, "BATCH", 2)  # long.md's chunks cross several batches
    a = conf(tmp_path / "a", corpus, db=fresh_db())
    svc = Service.from_config(a)
    svc.sync("all")
    buf = io.BytesIO()
    report = transfer.export(svc, buf)
    records = [json.loads(line) for line in buf.getvalue().splitlines()]
    docs = [r["id"] for r in records if r["type"] == "document"]
    assert len(docs) == len(set(docs)) == report.documents == svc.stats().documents
    svc.close()
    target = Service.from_config(conf(tmp_path / "b", corpus, db=fresh_db()))
    transfer.load(target, io.BytesIO(buf.getvalue()), "kb.jsonl")
    assert target.stats().chunks == report.chunks
    assert target.get(target.search("kiwi", source="wiki")[0].id).chunks  # chunks went to their documents
    target.close()


def test_a_non_empty_knowledge_base_is_refused_unless_merge(tmp_path: Path, corpus: Path, fresh_db: Fresh) -> None:
    a = conf(tmp_path / "a", corpus, db=fresh_db())
    svc = Service.from_config(a)
    svc.sync("all")
    buf = io.BytesIO()
    transfer.export(svc, buf)
    before = svc.stats()
    r = ctx("import", "-", "--config", str(a), stdin=buf.getvalue())
    assert r.returncode == 4 and b"already has documents" in r.stderr and b"--merge" in r.stderr
    assert b"Traceback" not in r.stderr

    # --merge: a document in the file replaces the stored one; the others stay.
    edited = []
    for line in buf.getvalue().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "document" and rec["source_id"] == "moa.md":
            rec["title"] = "Dinornis"
        edited.append(json.dumps(rec).encode())
    r = ctx("import", "-", "--merge", "--config", str(a), "--json", stdin=b"\n".join(edited) + b"\n")
    assert r.returncode == 0, r.stderr
    assert svc.stats().documents == before.documents and svc.stats().chunks == before.chunks
    assert svc.search("moa")[0].title == "Dinornis"
    svc.close()


def _good_file() -> list[bytes]:
    text = "The pelican eats fish."
    return [b'{"type":"header","format":"ctx-export","version":1,"embedding":{"model":"m:x:2","dims":2}}',
            b'{"type":"document","source":"filesystem:x","source_id":"p.md","title":"P","body":"b",'
            b'"updated_at":"2024-01-01"}',
            json.dumps({"type": "chunk", "document": transfer_id("filesystem:x", "p.md"), "ordinal": 0,
                        "heading": "", "text": text, "hash": chunk_hash("", text)}).encode(),
            json.dumps({"type": "vector", "hash": chunk_hash("", text), "vector": [0.6, 0.8]}).encode()]


def transfer_id(source: str, source_id: str) -> str:
    from cairn_servers.ctx.store import document_id

    return document_id(source, source_id)


BAD = [
    (1, b'{"type":"document"}', "expected the header line"),
    (1, b'{"type":"header","format":"ctx-export","version":7}', "export format version 7 is not one this ctx reads"),
    (1, b'{"type":"header","format":"ctx-export","version":1,"schema_version":999}',
     f"the export comes from a knowledge base at schema version 999; this ctx knows versions 1 to {SCHEMA_VERSION}"),
    (1, b'{"type":"header","format":"ctx-export","version":1,"schema_version":"3"}', "at schema version '3'"),
    (2, b'{"type":"chunk","document":"x","text":"t"}', "a chunk before any document line"),
    (3, b'{"type":"document","source":"s","source_id":"q"', "not valid JSON"),
    (3, b'["document"]', "expected a JSON object, got list"),
    (3, b'{"type":"tag"}', "unknown line type 'tag'"),
    (3, b'{"type":"document","source":"s"}', "document has no 'source_id'"),
    (3, b'{"type":"document","source":"s","source_id":"q","updated_at":"soon"}', "updated_at 'soon' is not a date"),
    (3, b'{"type":"document","source":"s","source_id":"q","updated_at":1,"title":5}',
     "document 'title' must be a string, not int"),
    (3, b'{"type":"document","id":"abc","source":"s","source_id":"q","updated_at":1}', "document id 'abc' is not"),
    (3, b'{"type":"chunk","document":"other","text":"t"}', "does not follow that document's line"),
    (3, json.dumps({"type": "chunk", "document": transfer_id("filesystem:x", "p.md"), "text": "t",
                    "hash": "0" * 32}).encode(), "does not match its heading and text"),
    (4, b'{"type":"vector","hash":"h","vector":[1]}', "vector must be 2 numbers (the header's dims)"),
    (4, b'{"type":"vector","hash":"h","vector":[true, 0]}', "vector must be 2 numbers"),
    (4, b'{"type":"vector","hash":"h","vector":["1", 0]}', "vector must be 2 numbers"),
    (4, b'{"type":"vector","hash":"h","vector":[1e300, 0]}', "not a finite float32 number"),
    (4, b'{"type":"vector","hash":"h","vector":[NaN, 0]}', "not a finite float32 number"),
    (4, b'{"type":"vector","hash":"h","vector":[Infinity, -Infinity]}', "not a finite float32 number"),
    (4, b'{"type":"header","format":"ctx-export","version":1}', "a second header line"),
    (3, b"\xff\xfe", "not UTF-8 text"),
    (4, b'{"type":"document","source":"filesystem:x","source_id":"p.md","updated_at":1}', "appears a second time"),
    # Bad input that used to be a traceback or stored silently.
    (3, b'{"type":"document","source":"s","source_id":"q","updated_at":' + b"9" * 5000 + b"}",
     "not valid JSON (Exceeds the limit (4300 digits) for integer string conversion"),
    (3, json.dumps({"type": "chunk", "document": transfer_id("filesystem:x", "p.md"), "ordinal": 2**70,
                    "text": "t"}).encode(), "chunk 'ordinal' 1180591620717411303424 is out of range (0 to 2147483647)"),
    (3, json.dumps({"type": "chunk", "document": transfer_id("filesystem:x", "p.md"), "ordinal": -1,
                    "text": "t"}).encode(), "chunk 'ordinal' -1 is out of range"),
    (2, b'{"type":"document","source":"filesystem:y","source_id":"q","updated_at":1,"title":"\\ud800"}',
     "a string holds a lone UTF-16 surrogate"),
    (2, b'{"type":"document","source":"filesystem:y","source_id":"q","updated_at":1,"metadata":{"\\uDC00":1}}',
     "a string holds a lone UTF-16 surrogate"),
    (2, b'{"type":"document","source":"filesystem:y","source_id":"q","updated_at":1,"metadata":{"x":[1e400]}}',
     "holds a number JSON cannot carry (NaN or infinity)"),
    (2, b'{"type":"document","source":"filesystem:y","source_id":"q","updated_at":1,"metadata":{"x":NaN}}',
     "holds a number JSON cannot carry"),
    (4, json.dumps({"type": "chunk", "document": transfer_id("filesystem:x", "p.md"), "ordinal": 0,
                    "heading": "", "text": "The pelican eats fish.",
                    "hash": chunk_hash("", "The pelican eats fish.")}).encode(),
     f"chunk 0 of document {transfer_id('filesystem:x', 'p.md')!r} appears a second time"),
    (5, json.dumps({"type": "vector", "hash": chunk_hash("", "no such chunk"), "vector": [0.6, 0.8]}).encode(),
     f"vector for {chunk_hash('', 'no such chunk')!r}, which is the hash of no chunk in the file or the knowledge base"),
]


@pytest.mark.parametrize("number,bad,message", BAD, ids=[m for _, _, m in BAD])
def test_a_bad_line_is_named_by_its_number_and_nothing_is_imported(tmp_path: Path, number: int, bad: bytes,
                                                                   message: str, fresh_db: Fresh) -> None:
    good = _good_file()
    data = b"\n".join(good[:number - 1] + [bad] + good[number - 1:]) + b"\n"
    svc = Service.from_config(config_file(tmp_path, f'[db]\n{fresh_db()}\n'))
    with pytest.raises(InvalidInput) as info:
        transfer.load(svc, io.BytesIO(data), "kb.jsonl")
    assert info.value.message.startswith(f"kb.jsonl: line {number}: ") and message in info.value.message, \
        info.value.message
    assert svc.stats().documents == 0 and svc.search("pelican") == []  # rolled back, still usable
    transfer.load(svc, io.BytesIO(b"\n".join(good) + b"\n"), "kb.jsonl")  # the good file imports after that
    assert [r.title for r in svc.search("pelican")] == ["P"] and svc.store.vector_count("m:x:2") == 1
    svc.close()


def test_cli_errors_for_bad_files(tmp_path: Path, fresh_db: Fresh) -> None:
    cfg = config_file(tmp_path, f'[db]\n{fresh_db()}\n')
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join(_good_file()[:2]) + b"\n{oops\n")
    r = ctx("import", str(bad), "--config", str(cfg))
    assert r.returncode == 2 and r.stdout == b""
    assert r.stderr.decode() == f"ctx: error: {bad}: line 3: not valid JSON (Expecting property name enclosed in " \
                                "double quotes at column 2)\n"
    assert ctx("import", str(tmp_path / "missing.jsonl"), "--config", str(cfg)).returncode == 3
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    r = ctx("import", str(empty), "--config", str(cfg))
    assert r.returncode == 2 and b"is empty; expected a ctx export" in r.stderr
    assert ctx("import", str(tmp_path), "--config", str(cfg)).returncode == 2  # a directory
    r = ctx("export", "-o", str(tmp_path / "nowhere" / "x.jsonl"), "--config", str(cfg))
    assert r.returncode == 3 and b"does not exist" in r.stderr


def _big_export(path: Path, n: int) -> None:
    with path.open("wb") as fh:
        fh.write(b'{"type":"header","format":"ctx-export","version":1,"embedding":null}\n')
        for i in range(n):
            sid = f"d{i:06d}.md"
            text = f"token{i} " + "word " * 60
            fh.write(json.dumps({"type": "document", "source": "filesystem:big", "source_id": sid, "title": sid,
                                 "body": text, "updated_at": 1700000000}).encode() + b"\n")
            fh.write(json.dumps({"type": "chunk", "document": transfer_id("filesystem:big", sid), "ordinal": 0,
                                 "heading": "", "text": text}).encode() + b"\n")


def _fresh_config(tmp_path: Path, fresh_db: Fresh, name: str) -> Path:
    """A config in a folder of its own whose knowledge base is new (a SQLite file in that folder, or a
    database of its own on PostgreSQL)."""
    (tmp_path / name).mkdir()
    return config_file(tmp_path / name, f"[db]\n{fresh_db()}\n")


def test_sigkill_during_import_leaves_the_database_as_it_was(tmp_path: Path, fresh_db: Fresh) -> None:
    from cairn_servers.ctx import config as cfgmod
    from cairn_servers.ctx.stores import open_store

    big = tmp_path / "big.jsonl"
    _big_export(big, 6000)
    timing = _fresh_config(tmp_path, fresh_db, "timing")
    started = time.monotonic()
    assert ctx("import", str(big), "--config", str(timing)).returncode == 0
    full = time.monotonic() - started

    env = dict(os.environ, PYTHONPATH=SRC)
    rng = random.Random(7)
    killed_mid_run = 0
    for attempt in range(8):  # the kill lands at a random share of a timed run; under load a run may end first
        cfg = _fresh_config(tmp_path, fresh_db, f"kb{attempt}")
        proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.ctx.cli", "import", str(big), "--config", str(cfg)],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 0.85) * full)
        killed_mid_run += proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        db = cfgmod.load(cfg).db
        store = open_store(db)
        try:
            if not db.url:
                assert store.sql("PRAGMA integrity_check")[0][0] == "ok"
            docs, chunks, _ = store.counts()
            assert (docs, chunks) in ((0, 0), (6000, 6000))  # the whole import or nothing
        finally:
            store.close()
        if docs == 0:
            break  # killed before its commit: the database below is the one to use again
    assert killed_mid_run >= 1
    svc = Service.from_config(cfg)
    if svc.stats().documents == 0:
        assert svc.search("token5") == []  # usable, and the import can simply be run again
        transfer.import_file(svc, str(big))
    assert svc.stats().documents == 6000 and svc.search("token5432")[0].source_id == "d005432.md"
    svc.close()


def _peak(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


class Sink(io.BytesIO):
    """A binary file that keeps nothing."""

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        return len(b)


def test_export_and_import_memory_does_not_grow_with_the_knowledge_base(tmp_path: Path, fresh_db: Fresh) -> None:
    peaks = {}
    for n in (500, 4000):
        big = tmp_path / f"big{n}.jsonl"
        _big_export(big, n)
        svc = Service.from_config(_fresh_config(tmp_path, fresh_db, f"kb{n}"))
        svc.store  # opened outside the measurement
        with big.open("rb") as fh:
            imported = _peak(lambda: transfer.load(svc, fh, big.name))
        exported = _peak(lambda: transfer.export(svc, Sink()))
        peaks[n] = (imported, exported)
        svc.close()
    # Eight times the documents: the peak Python memory stays within a small constant of the smaller run's.
    for which in (0, 1):
        assert peaks[4000][which] < peaks[500][which] * 1.5 + 256 * 1024, peaks


def test_export_into_a_pipe_closed_early_ends_quietly(tmp_path: Path, fresh_db: Fresh) -> None:
    big = tmp_path / "big.jsonl"
    _big_export(big, 3000)  # about 1.5 MB: more than a pipe holds
    cfg = config_file(tmp_path, f'[db]\n{fresh_db()}\n')
    svc = Service.from_config(cfg)
    transfer.import_file(svc, str(big))
    svc.close()
    proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.ctx.cli", "export", "--config", str(cfg)],
                            env=dict(os.environ, PYTHONPATH=SRC), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(100).startswith(b'{"type":"header"')
    proc.stdout.close()  # `ctx export | head -c 100`
    err = proc.stderr.read()
    assert proc.wait(60) == 141 and err == b"", err


def test_vectors_round_trip_bit_for_bit_and_a_non_finite_one_is_refused(tmp_path: Path, fresh_db: Fresh) -> None:
    from array import array

    svc = Service.from_config(config_file(tmp_path, f'[db]\n{fresh_db()}\n[embedding]\nprovider = "local"\n'))
    svc.store  # created
    rng = random.Random(3)
    values = [rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30) for _ in range(256)]
    blob = array("f", values).tobytes()
    from cairn_servers.ctx.chunk import Chunk
    from cairn_servers.ctx.store import DocumentRecord

    hash_ = chunk_hash("", "vector text")
    with svc.store.transaction():
        svc.store.upsert(DocumentRecord("filesystem:x", "v.md", "V", "vector text", 0, "", ""),
                         [Chunk(0, "", "vector text", hash_)])
        svc.store.put_vectors("local:l2_supercat:256", [hash_], [blob])
        svc.store.put_vectors("local:l2_supercat:256", ["a" * 32], [blob])  # of no chunk: not exported
    buf = io.BytesIO()
    transfer.export(svc, buf, vectors=True)
    target = Service.from_config(config_file(tmp_path, f'[db]\n{fresh_db().replace("kb.sqlite", "kb2.sqlite")}\n',
                                             "b.toml"))
    transfer.load(target, io.BytesIO(buf.getvalue()), "x")
    assert target.store.vectors_after("local:l2_supercat:256", "", 10) == [(hash_, blob)]
    target.close()
    if svc.config.db.url:  # pgvector refuses a NaN itself: it cannot be stored, so never exported
        svc.close()
        return
    with svc.store.transaction():
        svc.store.put_vectors("local:l2_supercat:256", [hash_], [array("f", [float("nan")] * 256).tobytes()])
    with pytest.raises(StorageError, match="not finite"):
        transfer.export(svc, io.BytesIO(), vectors=True)
    svc.close()


def test_an_export_moves_a_knowledge_base_from_sqlite_to_postgresql_and_back(tmp_path: Path, corpus: Path,
                                                                             pg_server: str,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CTX_DATABASE_URL", raising=False)
    a = Service.from_config(conf(tmp_path / "a", corpus))
    a.sync("all")
    buf = io.BytesIO()
    transfer.export(a, buf)
    name, url = pg_database(pg_server)
    try:
        pg = Service.from_config(conf(tmp_path / "b", corpus, db=f"url = {json.dumps(url)}"))
        report = transfer.load(pg, io.BytesIO(buf.getvalue()), "kb.jsonl")
        assert (report.documents, report.chunks) == (a.stats().documents, a.stats().chunks)
        hit = a.search("zebra")[0]
        assert pg.get(hit.id) == a.get(hit.id)  # the document and its chunks, as they were
        # the same documents match (the keyword scores follow each backend's own ranking)
        assert {r.id for r in pg.search("kiwi", limit=50)} == {r.id for r in a.search("kiwi", limit=50)}
        back = io.BytesIO()
        transfer.export(pg, back)
        pg.close()
        assert back.getvalue().split(b"\n")[1:] == buf.getvalue().split(b"\n")[1:]  # all but the header's time
    finally:
        drop_database(pg_server, name)
    a.close()


def test_export_reads_one_snapshot_while_another_connection_writes(tmp_path: Path, corpus: Path,
                                                                   fresh_db: Fresh) -> None:
    from cairn_servers.ctx.store import DocumentRecord, document_id

    cfg = conf(tmp_path / "a", corpus, db=fresh_db())
    reader, writer = Service.from_config(cfg), Service.from_config(cfg)
    reader.sync("all")
    new = DocumentRecord(source="filesystem:wiki", source_id="late.md", title="Late", body="", updated_at=0,
                         fingerprint="", content_hash="")
    with reader.store.snapshot():
        first = reader.store.chunks_after(0, 1)
        with writer.store.transaction():  # a sync committing meanwhile (SQLite WAL and PostgreSQL: not blocked)
            writer.store.upsert(new, [])
        assert writer.store.has_document(document_id("filesystem:wiki", "late.md"))
        assert not reader.store.has_document(document_id("filesystem:wiki", "late.md"))  # not in the snapshot
        assert reader.store.chunks_after(0, 1) == first
    assert reader.store.has_document(document_id("filesystem:wiki", "late.md"))
    reader.close()
    writer.close()


def test_dates_of_every_year_round_trip(tmp_path: Path) -> None:
    """Every date import accepts comes back from export as the same date, years before 1000 included
    (they were written as "500-01-01T00:00:00Z", which import refused)."""
    from cairn_servers.ctx.times import MAX_TIME, MIN_TIME, iso, parse_time

    stamps = [MIN_TIME, MIN_TIME + 1, -49_000_000_000, -30_610_224_001, -30_610_224_000, -1, 0, 1_700_000_000,
              MAX_TIME]  # year 1, 417, the last second of 999, 1000-01-01
    for ts in stamps:
        assert parse_time(iso(ts), "t") == ts, iso(ts)
    assert iso(-49_000_000_000) == "0417-04-02T08:53:20Z" and iso(MIN_TIME) == "0001-01-01T00:00:00Z"
    header = b'{"type":"header","format":"ctx-export","version":1}'
    docs = [json.dumps({"type": "document", "source": "filesystem:x", "source_id": f"d{i}.md", "title": "t",
                        "updated_at": ts}).encode() for i, ts in enumerate(stamps)]
    svc = Service.from_config(config_file(tmp_path, '[db]\npath = "a.sqlite"\n'))
    transfer.load(svc, io.BytesIO(b"\n".join([header, *docs]) + b"\n"), "in")
    first = io.BytesIO()
    transfer.export(svc, first)
    svc.close()
    again = Service.from_config(config_file(tmp_path, '[db]\npath = "b.sqlite"\n', "b.toml"))
    transfer.load(again, io.BytesIO(first.getvalue()), "out")  # its own export: accepted
    second = io.BytesIO()
    transfer.export(again, second)
    again.close()
    dates = sorted(json.loads(line)["updated_at"] for line in first.getvalue().splitlines()[1:])
    assert dates == sorted(iso(ts) for ts in stamps)
    assert "0999-12-31T23:59:59Z" in dates and "1000-01-01T00:00:00Z" in dates
    assert first.getvalue().splitlines()[1:] == second.getvalue().splitlines()[1:]


@pytest.mark.parametrize("line, message", [
    (b'{"type":"header","format":"ctx-export","version":1,"schema_version":999}',
     "line 1: the export comes from a knowledge base at schema version 999"),
    (b'{"type":"header","format":"ctx-export","version":' + b"1" * 5000 + b"}",
     "line 1: not valid JSON (Exceeds the limit (4300 digits)"),
    (b'{"type":"header","format":"ctx-export","version":1}\n{"type":"document","source":"s:x","source_id":"q",'
     b'"updated_at":1,"title":"\\ud800"}', "line 2: a string holds a lone UTF-16 surrogate"),
])
def test_cli_bad_input_is_a_clear_error_not_a_traceback(tmp_path: Path, line: bytes, message: str) -> None:
    cfg = config_file(tmp_path, '[db]\npath = "kb.sqlite"\n')
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(line + b"\n")
    r = ctx("import", str(bad), "--config", str(cfg))
    err = r.stderr.decode()
    assert r.returncode == 2 and err.startswith(f"ctx: error: {bad}: {message}") and "Traceback" not in err, err


def test_vectors_past_one_batch_find_the_last_documents_chunks(tmp_path: Path) -> None:
    """Vectors are checked against the stored chunks a batch at a time: the last document (whose
    chunks are written when the next line that is not a chunk arrives) must be stored first."""
    n = transfer.BATCH + 100
    header = b'{"type":"header","format":"ctx-export","version":1,"embedding":{"model":"m:x:2","dims":2}}'
    out = [header]
    texts = [f"chunk number {i}" for i in range(n)]
    for i, text in enumerate(texts):
        out.append(json.dumps({"type": "document", "source": "filesystem:x", "source_id": f"d{i}.md",
                               "updated_at": 1}).encode())
        out.append(json.dumps({"type": "chunk", "document": transfer_id("filesystem:x", f"d{i}.md"), "ordinal": 0,
                               "text": text}).encode())
    for text in reversed(texts):  # the last document's vector first
        out.append(json.dumps({"type": "vector", "hash": chunk_hash("", text), "vector": [0.6, 0.8]}).encode())
    svc = Service.from_config(config_file(tmp_path, '[db]\npath = "a.sqlite"\n'))
    report = transfer.load(svc, io.BytesIO(b"\n".join(out) + b"\n"), "kb.jsonl")
    assert (report.documents, report.chunks, report.vectors) == (n, n, n)
    assert svc.store.vector_count("m:x:2") == n
    svc.close()
    late = out[:3] + [out[-1], out[4]]  # a chunk line after a vector line
    svc = Service.from_config(config_file(tmp_path, '[db]\npath = "b.sqlite"\n', "b.toml"))
    with pytest.raises(InvalidInput, match="line 5: a chunk after vector lines: chunks follow their document's line"):
        transfer.load(svc, io.BytesIO(b"\n".join(late) + b"\n"), "kb.jsonl")
    svc.close()
