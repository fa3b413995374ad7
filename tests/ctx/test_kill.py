"""SIGKILL `ctx sync` at random moments: the database must stay intact and keep every indexed document."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cairn_servers.ctx import config as cfgmod
from cairn_servers.ctx.service import Service
from cairn_servers.ctx.store import Match
from cairn_servers.ctx.stores import open_store

from .conftest import config_file, write

pytestmark = pytest.mark.usefixtures("ctx_backend")  # every test on SQLite and on PostgreSQL

KILLS = 20 if os.environ.get("CAIRN_STRESS") == "1" else 5


def check(cfg: Path, base: dict[str, str]) -> int:
    """The database is intact (SQLite: integrity checks; both: no orphan rows, the keyword index
    finds sampled documents) and holds every document indexed before; returns the document count."""
    conf = cfgmod.load(cfg)
    if not conf.db.url:
        db = sqlite3.connect(conf.db.path)
        try:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")  # FTS matches chunks
        finally:
            db.close()
    store = open_store(conf.db)
    try:
        present = {sid for (sid,) in store.sql("SELECT source_id FROM documents")}
        missing = set(base) - present
        assert not missing, f"lost previously indexed documents: {sorted(missing)[:5]}"
        for sid, token in list(base.items())[:: max(1, len(base) // 20)]:
            hits = store.chunk_hits(list(store.fts_rank(Match((token,)), 10)))
            assert sid in {h[3] for h in hits.values()}
        orphans = store.sql("SELECT COUNT(*) FROM chunks WHERE doc NOT IN (SELECT rowid FROM documents)")
        assert orphans[0][0] == 0
        dups = store.sql("SELECT COUNT(*) FROM (SELECT doc, ordinal FROM chunks GROUP BY doc, ordinal"
                         " HAVING COUNT(*) > 1) AS d")
        assert dups[0][0] == 0
        return len(present)
    finally:
        store.close()


def test_sigkill_during_sync_never_corrupts_or_loses(tmp_path: Path) -> None:
    rng = random.Random(1234)
    root = tmp_path / "docs"
    base = {f"base/b{i:04d}.md": f"basetoken{i}" for i in range(300)}
    write(root, {sid: f"# Base {i}\n\n{tok} stays indexed.\n" for i, (sid, tok) in enumerate(base.items())})
    cfg = config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[embedding]
provider = "local"
[connectors.filesystem.docs]
root = "{root}"
""")
    Service.from_config(cfg).sync("all")
    assert check(cfg, base) == 300

    extra = [f"extra/e{i:04d}.md" for i in range(2500)]
    sync = [sys.executable, "-m", "cairn_servers.ctx.cli", "sync", "all", "--config", str(cfg)]

    def fresh_work(round_: int) -> None:
        # New and rewritten files, some base files edited (they must survive).
        write(root, {sid: f"# Extra\n\nround {round_} text {rng.random()} " + "filler " * rng.randint(5, 300)
                     for sid in rng.sample(extra, 800)})
        write(root, {sid: f"# Base\n\n{base[sid]} edited in round {round_}\n" for sid in rng.sample(list(base), 20)})

    # Kill delays scale with an uninterrupted sync of the same amount of work, so kills land mid-run
    # on a quiet machine and on a loaded one alike.
    fresh_work(-1)
    started = time.monotonic()
    subprocess.run(sync, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    full_run = time.monotonic() - started
    killed_mid_run = 0
    for round_ in range(KILLS):
        fresh_work(round_)
        proc = subprocess.Popen(sync, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.1, 0.9) * full_run)
        if proc.poll() is None:
            killed_mid_run += 1
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        check(cfg, base)

    assert killed_mid_run >= KILLS // 2  # the kills really landed during syncs
    # After the kills, one sync finishes the work: everything indexed and embedded.
    svc = Service.from_config(cfg)
    summary = svc.sync("all")
    assert summary.sources[0].ok
    total = check(cfg, base)
    on_disk = sum(1 for p in root.rglob("*.md"))
    assert total == on_disk
    stats = svc.stats()
    assert stats.pending_embeddings == 0 and stats.vectors == stats.distinct_chunks
    assert svc.sync("all").sources[0].unchanged == on_disk
