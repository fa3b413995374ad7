"""ctx's progress: the embedding stage advances per batch of at most 32 texts (whatever the configured
batch size), and a piped ``ctx sync`` reports on stderr in JSON lines, as ``brk index`` does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cairn_servers.ctx.service import Service


def _kb(tmp_path: Path, docs: int, provider: str) -> Path:
    (tmp_path / "docs").mkdir()
    for i in range(docs):
        (tmp_path / "docs" / f"d{i:03}.md").write_text(f"# Note {i}\n\nDeploy step {i}: rotate key {i} first.\n")
    config = tmp_path / "ctx.toml"
    config.write_text(f'[db]\npath = "kb.sqlite"\n[embedding]\nprovider = "{provider}"\nbatch_size = 256\n'
                      '[connectors.filesystem.docs]\nroot = "docs"\n')
    return config


def test_the_embedding_stage_advances_per_batch_of_at_most_32(tmp_path: Path) -> None:
    config = _kb(tmp_path, 100, "local")
    calls: list[tuple[str, int, int]] = []
    svc = Service.from_config(config)
    try:
        summary = svc.sync("all", progress=lambda label, done, total: calls.append((label, done, total)))
    finally:
        svc.close()
    assert summary.embedding is not None and summary.embedding.embedded == 100
    embedding = [(done, total) for label, done, total in calls if label == "embedding"]
    assert embedding[-1] == (100, 100) and all(total == 100 for _, total in embedding)
    steps = [b - a for (a, _), (b, _) in zip([(0, 0), *embedding], embedding) if b != a]
    assert len(steps) >= 4 and max(steps) <= 32, embedding  # 100 texts: 32, 32, 32, 4 (not one jump of 100)


def test_a_piped_sync_reports_json_lines_on_stderr(tmp_path: Path) -> None:
    config = _kb(tmp_path, 40, "local")
    r = subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "--config", str(config), "sync", "all",
                        "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stderr.splitlines()]
    assert {line["event"] for line in lines} <= {"progress", "done"} and lines
    assert all(set(line) == {"event", "stage", "done", "total", "elapsed_s", "per_s"} for line in lines)
    done = [line for line in lines if line["event"] == "done"]
    assert [(d["stage"], d["done"], d["total"]) for d in done][-1] == ("embedding", 40, 40)
    quiet = subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "--config", str(config), "sync", "all",
                            "--full", "--json", "--progress", "none"], capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == ""
