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

from cairn.ctx.service import Service

from .conftest import config_file, write

KILLS = 20 if os.environ.get("CAIRN_STRESS") == "1" else 5


def check(db_path: Path, base: dict[str, str]) -> int:
    db = sqlite3.connect(db_path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")  # FTS matches chunks
        present = {sid for (sid,) in db.execute("SELECT source_id FROM documents")}
        missing = set(base) - present
        assert not missing, f"lost previously indexed documents: {sorted(missing)[:5]}"
        for sid, token in list(base.items())[:: max(1, len(base) // 20)]:
            hit = db.execute("SELECT d.source_id FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid JOIN documents d"
                             " ON d.rowid = c.doc WHERE chunks_fts MATCH ?", (token,)).fetchall()
            assert (sid,) in hit
        orphans = db.execute("SELECT COUNT(*) FROM chunks WHERE doc NOT IN (SELECT rowid FROM documents)").fetchone()
        assert orphans[0] == 0
        return len(present)
    finally:
        db.close()


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
    db_path = tmp_path / "kb.sqlite"
    Service.from_config(cfg).sync("all")
    assert check(db_path, base) == 300

    extra = [f"extra/e{i:04d}.md" for i in range(2500)]
    sync = [sys.executable, "-m", "cairn.ctx.cli", "sync", "all", "--config", str(cfg)]

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
        check(db_path, base)

    assert killed_mid_run >= KILLS // 2  # the kills really landed during syncs
    # After the kills, one sync finishes the work: everything indexed and embedded.
    svc = Service.from_config(cfg)
    summary = svc.sync("all")
    assert summary.sources[0].ok
    total = check(db_path, base)
    on_disk = sum(1 for p in root.rglob("*.md"))
    assert total == on_disk
    stats = svc.stats()
    assert stats.pending_embeddings == 0 and stats.vectors == stats.distinct_chunks
    assert svc.sync("all").sources[0].unchanged == on_disk
