"""``ctx sync --since/--until/--limit`` as Context Harness documents them: only new or changed documents
updated on or after ``--since`` (the day's start) and on or before ``--until`` (the whole day) are
written, at most ``--limit`` per source; the others wait for a later sync, and bad values are refused
before any source is touched."""

from __future__ import annotations

import calendar
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cairn_servers.core.errors import InvalidInput
from cairn_servers.ctx.service import Service
from cairn_servers.ctx.sync import window

from .conftest import config_file, write

PY = sys.executable


def at(day: str, hour: int = 12) -> int:
    y, m, d = map(int, day.split("-"))
    return calendar.timegm((y, m, d, hour, 0, 0))


def dated(root: Path, files: dict[str, tuple[str, int]]) -> None:
    write(root, {name: body for name, (body, _) in files.items()})
    for name, (_, when) in files.items():
        os.utime(root / name, (when, when))


def service(tmp_path: Path) -> Service:
    return Service.from_config(config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[connectors.filesystem.docs]
root = "{tmp_path / 'docs'}"
"""))


def indexed(svc: Service) -> dict[str, str]:
    return dict(svc.store.sql("SELECT source_id, body FROM documents"))


FILES = {
    "jan.md": ("# January\n\nwinter notes\n", at("2024-01-10")),
    "mar.md": ("# March\n\nspring notes\n", at("2024-03-15", 23)),  # late on the --until day
    "may.md": ("# May\n\nsummer notes\n", at("2024-05-20")),
}


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_since_until_write_only_documents_dated_in_the_window(tmp_path: Path) -> None:
    dated(tmp_path / "docs", FILES)
    svc = service(tmp_path)
    try:
        r = svc.sync("all", since="2024-03-01", until="2024-03-15").sources[0]
        assert (r.ok, r.added, r.held, r.deleted) == (True, 1, 2, 0)
        assert set(indexed(svc)) == {"mar.md"}
        r = svc.sync("all", since="2024-05-20").sources[0]  # --since takes the day from its start
        assert (r.added, r.held, r.unchanged) == (1, 1, 1)
        r = svc.sync("all").sources[0]  # no window: what was held back is written now
        assert (r.added, r.held, r.unchanged) == (1, 0, 2)
        assert set(indexed(svc)) == set(FILES)

        # A changed document outside the window keeps its indexed version until a sync admits it.
        dated(tmp_path / "docs", {"jan.md": ("# January\n\nrewritten\n", at("2024-01-11"))})
        r = svc.sync("all", until="2024-01-10").sources[0]
        assert (r.updated, r.held) == (0, 1) and indexed(svc)["jan.md"] == FILES["jan.md"][0]
        r = svc.sync("all", until="2024-01-11").sources[0]
        assert (r.updated, r.held) == (1, 0) and indexed(svc)["jan.md"] == "# January\n\nrewritten\n"
    finally:
        svc.close()


@pytest.mark.usefixtures("ctx_backend")  # on SQLite and on PostgreSQL
def test_limit_counts_documents_written_per_source_and_the_rest_follow(tmp_path: Path) -> None:
    dated(tmp_path / "docs", {f"n{i}.md": (f"# Note {i}\n\nbody {i}\n", at("2024-02-01") + i) for i in range(5)})
    svc = service(tmp_path)
    try:
        counts = []
        for _ in range(3):
            r = svc.sync("all", limit=2).sources[0]
            counts.append((r.added, r.held, r.unchanged))
        assert counts == [(2, 3, 0), (2, 1, 2), (1, 0, 4)]
        assert len(indexed(svc)) == 5
        # the scan is complete, so a deleted file is removed even by a limited sync
        (tmp_path / "docs" / "n0.md").unlink()
        r = svc.sync("all", limit=1).sources[0]
        assert (r.deleted, r.added, r.held) == (1, 0, 0) and "n0.md" not in indexed(svc)
        # dry run: the same counts, nothing written
        dated(tmp_path / "docs", {"new1.md": ("a\n", at("2024-06-01")), "new2.md": ("b\n", at("2024-06-02"))})
        r = svc.sync("all", limit=1, dry_run=True).sources[0]
        assert (r.would_add, r.held) == (["new1.md"], 1) and "new1.md" not in indexed(svc)
    finally:
        svc.close()


@pytest.mark.parametrize("args, message", [
    ({"limit": "0"}, "--limit must be a whole number of documents, 1 or more, not '0'."),
    ({"limit": "ten"}, "--limit must be a whole number of documents, 1 or more, not 'ten'."),
    ({"limit": "-3"}, "--limit must be a whole number of documents, 1 or more, not '-3'."),
    ({"since": "last week"}, "--since 'last week' is not a date. Use YYYY-MM-DD, an ISO 8601 time or unix "
                             "seconds (years 1 to 9999)."),
    ({"until": "2024-13-01"}, "--until '2024-13-01' is not a date. Use YYYY-MM-DD, an ISO 8601 time or unix "
                              "seconds (years 1 to 9999)."),
    ({"since": "2024-05-01", "until": "2024-04-01"}, "--since 2024-05-01 is after --until 2024-04-01: no "
                                                     "document could be synced. Give a --since on or before "
                                                     "the --until."),
])
def test_bad_window_is_refused_with_its_reason(args: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        window(**args)
    assert caught.value.message == message


def test_window_values() -> None:
    assert window() == window(None, None, None)
    w = window("2024-03-01", "2024-03-15", "7")
    assert (w.since, w.until, w.limit) == (at("2024-03-01", 0), at("2024-03-15", 0) + 86_399, 7)
    # an ISO time or unix seconds is taken as given (no whole-day widening)
    assert window(until="2024-03-15T06:00:00Z").until == at("2024-03-15", 6)
    assert window(since=1_700_000_000).since == 1_700_000_000


def test_cli_options_and_errors(tmp_path: Path) -> None:
    dated(tmp_path / "docs", FILES)
    path = config_file(tmp_path, f'[db]\npath = "kb.sqlite"\n[connectors.filesystem.docs]\nroot = "{tmp_path / "docs"}"\n')

    def ctx(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "cairn_servers.ctx.cli", "sync", "--config", str(path), "--progress", "none",
                               *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)

    r = ctx("--since", "2024-05-01", "--until", "2024-04-01")
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.strip() == ("ctx: error: --since 2024-05-01 is after --until 2024-04-01: no document could be "
                                "synced. Give a --since on or before the --until.")
    r = ctx("--limit", "1", "--since", "2024-02-01", "--text")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("filesystem:docs: 1 added, 0 updated, 0 deleted, 0 unchanged, 0 skipped, ")
    assert ", 2 held back by --since/--until/--limit" in r.stdout
    help_text = subprocess.run([PY, "-m", "cairn_servers.ctx.cli", "sync", "--help"], capture_output=True,
                               text=True, timeout=60).stdout
    assert "--since DATE" in help_text and "--until DATE" in help_text and "--limit N" in help_text
