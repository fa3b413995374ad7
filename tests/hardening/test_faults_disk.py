"""A full disk under blz, brk and ctx: a clear error (exit 7, "No space left"), the previous state
intact, and the next run succeeds once space is freed.

Two ways to run out of space:
* a real small file system: a tmpfs mounted on the test's directory (needs root; skips cleanly when
  `mount` is refused), filled with a filler file leaving a few chosen amounts free;
* an injected write error that works anywhere: RLIMIT_FSIZE in the child process, with SIGXFSZ
  ignored, makes every write past the limit fail with EFBIG, as a size-limited file system would.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cairn_servers.brk.sample import write_sample

pytestmark = pytest.mark.timeout(180)

STRESS = os.environ.get("CAIRN_STRESS", "") not in ("", "0")
# Bytes left free before each run: a few fixed points, many more under CAIRN_STRESS=1.
BLZ_LEAVE = [0, 16 << 10, 256 << 10, 1 << 20, 2 << 20, 3 << 20] + ([i * (160 << 10) for i in range(1, 15)] if STRESS else [])
BRK_LEAVE = [64 << 10, 512 << 10, 1 << 20, 2 << 20] + ([i * (100 << 10) for i in range(1, 9)] if STRESS else [])
CTX_LEAVE = [0, 32 << 10, 256 << 10, 512 << 10] + ([i * (48 << 10) for i in range(1, 9)] if STRESS else [])
SPACE_WORDS = ("No space left", "disk is full", "File too large", "too large")


def _doc(version: int, sections: int = 1200) -> bytes:
    out = [f"# Doc v{version}\n"]
    for s in range(sections):
        out.append(f"## Section {s} v{version}\n")
        out.extend(f"line {n} of section {s} in version {version} with some words to index\n" for n in range(10))
    out.append(f"\nversiontoken{version}\n")
    return "".join(out).encode()


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs mounted at tmp_path/fs (skips where mounting is not allowed): a brk store of the
    3,000-block test chain takes 31 MB."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if not shutil.which("mount"):
        pytest.skip("no mount command")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.strip() or res.returncode}); the injected "
                    "write-error tests cover full disks instead")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(mnt: Path, leave: int) -> Path:
    """Occupy the file system until only ``leave`` bytes are free; returns the filler file."""
    filler = mnt / "filler"
    filler.unlink(missing_ok=True)
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    size = max(0, free - leave)
    with open(filler, "wb") as fh:
        try:
            fh.truncate(0)
            block = b"\0" * (1 << 20)
            while size > 0:
                n = fh.write(block[: min(size, len(block))])
                size -= n
            fh.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def _limited(limit: int) -> Callable[[], None]:
    """preexec_fn: writes past ``limit`` bytes per file fail with EFBIG instead of killing the child."""
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def _run(module: str, env: dict[str, str], *args: str, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], env=env, capture_output=True, text=True,
                          timeout=120, preexec_fn=_limited(limit) if limit else None)


# -- blz -----------------------------------------------------------------------------------------

def _blz_state(env: dict[str, str]) -> str:
    val = _run("cairn_servers.blz.cli", env, "validate", "--json")
    assert val.returncode == 0 and json.loads(val.stdout)["ok"], val.stdout + val.stderr
    shown = _run("cairn_servers.blz.cli", env, "inspect", "d", "--json")
    assert shown.returncode == 0, shown.stderr
    return str(json.loads(shown.stdout)["metadata"]["sha256"])


def _blz_round(env: dict[str, str], data: Path, src: Path, version: int, committed: str,
               limit: int | None = None, filler: Path | None = None) -> tuple[bool, str]:
    """One update that may run out of space (``filler`` is deleted afterwards to make room);
    returns (failed, committed sha)."""
    body = _doc(version)
    src.write_bytes(body)
    res = _run("cairn_servers.blz.cli", env, "update", "d", "--json", "--progress", "none", limit=limit)
    if res.returncode != 0:
        assert res.returncode == 7, (res.returncode, res.stderr)
        assert res.stderr.startswith("blz: error: ") and any(w in res.stderr for w in SPACE_WORDS), res.stderr
        assert "Traceback" not in res.stderr
        # Reads may work on the full disk or fail the same clear way (SQLite's WAL needs a -shm file).
        val = _run("cairn_servers.blz.cli", env, "validate", "--json")
        if val.returncode:
            assert val.returncode == 7 and any(w in val.stderr for w in SPACE_WORDS), val.stderr
    if filler is not None:
        filler.unlink()
    if res.returncode == 0:
        sha = _blz_state(env)
        assert sha == hashlib.sha256(body).hexdigest()
        return False, sha
    assert _blz_state(env) == committed  # the previous version, whole
    assert [p.name for p in (data / "sources" / "d").iterdir()] == [f"{committed[:16]}.txt"]
    hit = _run("cairn_servers.blz.cli", env, "search", f"versiontoken{version - 1}", "--json")
    assert hit.returncode == 0 and json.loads(hit.stdout)["hits"], hit.stdout
    return True, committed


def test_blz_on_a_full_file_system(small_fs: Path, tmp_path: Path) -> None:
    data = small_fs / "blz"
    env = {**os.environ, "BLZ_DATA_DIR": str(data)}
    src = tmp_path / "llms.txt"
    src.write_bytes(_doc(0))
    assert _run("cairn_servers.blz.cli", env, "add", "d", str(src), "--exact").returncode == 0
    committed = _blz_state(env)
    failures = 0
    for version, leave in enumerate(BLZ_LEAVE, start=1):
        failed, committed = _blz_round(env, data, src, version, committed, filler=_fill(small_fs, leave))
        failures += failed
        if failed:  # the next run succeeds once there is room
            failed, committed = _blz_round(env, data, src, version, committed)
            assert not failed
    assert failures >= len(BLZ_LEAVE) * 2 // 3, f"only {failures} of {len(BLZ_LEAVE)} fills made the update fail"


def test_blz_injected_write_error(tmp_path: Path) -> None:
    data = tmp_path / "blz"
    env = {**os.environ, "BLZ_DATA_DIR": str(data)}
    src = tmp_path / "llms.txt"
    src.write_bytes(_doc(0))
    assert _run("cairn_servers.blz.cli", env, "add", "d", str(src), "--exact").returncode == 0
    committed = _blz_state(env)
    size = len(_doc(1))
    for version, limit in enumerate([40_000, size // 2, size - 1], start=1):
        failed, committed = _blz_round(env, data, src, version, committed, limit=limit)
        assert failed, f"a {limit}-byte file size limit did not stop a {size}-byte write"
        failed, committed = _blz_round(env, data, src, version, committed)
        assert not failed


# -- brk -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 3,000-block sample chain and its reference index (built without any fault)."""
    base = tmp_path_factory.mktemp("chain")
    blocks, ref = base / "blocks", base / "ref"
    write_sample(blocks, 3000, seed=5)
    res = _run("cairn_servers.brk.cli", dict(os.environ), "index", "--blocks-dir", str(blocks), "--out", str(ref),
               "--format", "json")
    assert res.returncode == 0, res.stderr
    return blocks, ref


def _same_as(out: Path, ref: Path) -> None:
    """Every vec and computed file equals the reference, byte for byte; the RocksDB indexes (transactions,
    addresses) and the analytics' crash-recovery state by their contents (tests/brk/_run.vec_bytes). The
    address pass's ``seen.bin`` filter is left out: whether it exists depends on which run last added blocks
    (tests/brk/test_addresses.py checks that it never hides a known address)."""
    from ..brk._run import vec_bytes

    def comparable(root: Path) -> dict[str, bytes]:
        return {k: v for k, v in vec_bytes(root).items()
                if not k.endswith("manifest.json") and not Path(k).name.startswith("blockpos")
                and k != "addresses/seen.bin"}  # a look-up cache: written when a pass adds blocks, rebuilt if absent

    got, want = comparable(out), comparable(ref)
    assert sorted(got) == sorted(want)
    for key in sorted(want):
        assert got[key] == want[key], key


def _brk_status(env: dict[str, str], out: Path) -> int:
    res = _run("cairn_servers.brk.cli", env, "status", "--out", str(out), "--format", "json")
    assert res.returncode == 0, res.stderr
    return int(json.loads(res.stdout)["height"])


def _brk_fail_or_finish(res: subprocess.CompletedProcess[str]) -> bool:
    if res.returncode == 0:
        return False
    assert res.returncode == 7, (res.returncode, res.stderr)
    # The error is the last line. Before it, only a stage process of `--jobs` (the address pass, which
    # runs while the indexer writes) may have said the same cause about its own files.
    *before, last = res.stderr.splitlines()
    assert last.startswith("brk: error: Cannot write") and any(w in last for w in SPACE_WORDS), res.stderr
    assert all(line.startswith("brk: address counts not updated: ") and any(w in line for w in SPACE_WORDS)
               for line in before), res.stderr
    assert "Traceback" not in res.stderr
    return True


def test_brk_index_on_a_full_file_system(small_fs: Path, chain: tuple[Path, Path]) -> None:
    blocks, ref = chain
    out = small_fs / "brk"
    env = dict(os.environ)
    cmd = ["index", "--blocks-dir", str(blocks), "--out", str(out), "--commit-every", "200", "--format", "json",
           "--progress", "none"]  # stderr holds only the error
    failures, heights = 0, []
    for leave in BRK_LEAVE:
        filler = _fill(small_fs, leave)
        failed = _brk_fail_or_finish(_run("cairn_servers.brk.cli", env, *cmd))
        failures += failed
        if out.joinpath("manifest.json").exists():
            heights.append(_brk_status(env, out))  # readable and consistent while the disk is full
        filler.unlink()
    assert failures >= 3, failures
    assert heights == sorted(heights)  # never lost committed blocks
    assert not _brk_fail_or_finish(_run("cairn_servers.brk.cli", env, *cmd))
    assert _brk_status(env, out) == 2999
    _same_as(out, ref)


def test_brk_injected_write_error(tmp_path: Path, chain: tuple[Path, Path]) -> None:
    blocks, ref = chain
    out = tmp_path / "brk"
    env = dict(os.environ)
    cmd = ["index", "--blocks-dir", str(blocks), "--out", str(out), "--commit-every", "200", "--format", "json",
           "--progress", "none"]  # stderr holds only the error
    for limit in [20_000, 60_000, 150_000]:
        assert _brk_fail_or_finish(_run("cairn_servers.brk.cli", env, *cmd, limit=limit))
        if out.joinpath("manifest.json").exists():
            _brk_status(env, out)
    assert not _brk_fail_or_finish(_run("cairn_servers.brk.cli", env, *cmd))
    _same_as(out, ref)


def test_brk_follow_recovers_after_the_disk_fills(small_fs: Path, chain: tuple[Path, Path]) -> None:
    """`brk run` keeps polling after a failed commit; once space is back, it must resume from the last
    commit (not from where the failed run had got to in memory) and end equal to the reference."""
    from cairn_servers.brk.cli_serve import follow

    blocks, ref = chain
    out = small_fs / "brk"
    # Start from an empty out dir on a nearly full disk: the first polls fail.
    filler = _fill(small_fs, 200 << 10)
    logs: list[str] = []
    stop = threading.Event()
    thread = threading.Thread(target=follow, args=(blocks, out, 0.05, stop, logs.append), daemon=True)
    try:
        thread.start()
        deadline = 200
        while not any("indexing failed" in m for m in logs) and deadline:
            stop.wait(0.05)
            deadline -= 1
        assert any("indexing failed" in m and "No space left" in m for m in logs), logs
        filler.unlink()
        deadline = 400
        while deadline:
            if out.joinpath("manifest.json").exists() and _brk_status(dict(os.environ), out) == 2999:
                break
            stop.wait(0.05)
            deadline -= 1
    finally:
        stop.set()
        thread.join(30)
    assert _brk_status(dict(os.environ), out) == 2999
    _same_as(out, ref)


# -- ctx -----------------------------------------------------------------------------------------

def _ctx_setup(tmp_path: Path, db: Path) -> tuple[Path, Path, dict[str, str]]:
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(200):
        (root / f"base{i:03d}.md").write_text(f"# Base {i}\n\nbasetoken{i} stays indexed.\n" + "filler " * 200)
    cfg = tmp_path / "ctx.toml"
    cfg.write_text(f'[db]\npath = "{db}"\n[embedding]\nprovider = "disabled"\n'
                   f'[connectors.filesystem.docs]\nroot = "{root}"\n')
    env = {**os.environ, "CTX_OUTPUT_FORMAT": "json"}
    res = _run("cairn_servers.ctx.cli", env, "sync", "all", "--config", str(cfg))
    assert res.returncode == 0, res.stderr
    return root, cfg, env


def _ctx_check(env: dict[str, str], cfg: Path, db: Path, expect_docs: int | None = None) -> int:
    import sqlite3

    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        con.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        ids = {sid for (sid,) in con.execute("SELECT source_id FROM documents")}
    finally:
        con.close()
    assert {f"base{i:03d}.md" for i in range(200)} <= ids  # nothing previously indexed was lost
    if expect_docs is not None:
        assert len(ids) == expect_docs
    hit = _run("cairn_servers.ctx.cli", env, "search", "basetoken7", "--config", str(cfg))
    assert hit.returncode == 0 and "base007.md" in hit.stdout, hit.stdout + hit.stderr
    return len(ids)


def _ctx_round(env: dict[str, str], cfg: Path, db: Path, root: Path, n: int, limit: int | None = None,
               filler: Path | None = None, words: tuple[str, ...] = SPACE_WORDS) -> bool:
    for i in range(60):
        (root / f"round{n}-{i:02d}.md").write_text(f"# Round {n} {i}\n\nroundtoken{n}x{i}\n" + f"words{i} " * 500)
    res = _run("cairn_servers.ctx.cli", env, "sync", "all", "--config", str(cfg), limit=limit)
    if res.returncode:
        assert res.returncode == 7, (res.returncode, res.stderr)
        assert "ctx: error: " in res.stderr and any(w in res.stderr for w in words), res.stderr
        assert "Traceback" not in res.stderr
    if filler is not None:
        filler.unlink()
    on_disk = len(list(root.glob("*.md")))
    _ctx_check(env, cfg, db, on_disk if res.returncode == 0 else None)
    return res.returncode != 0


def test_ctx_sync_on_a_full_file_system(small_fs: Path, tmp_path: Path) -> None:
    db = small_fs / "kb.sqlite"
    root, cfg, env = _ctx_setup(tmp_path, db)
    failures = 0
    for n, leave in enumerate(CTX_LEAVE, start=1):
        failed = _ctx_round(env, cfg, db, root, n, filler=_fill(small_fs, leave))
        failures += failed
        if failed:  # the next sync, with room, completes the work
            assert not _ctx_round(env, cfg, db, root, n + 100)
    assert failures >= 3, failures


def test_ctx_injected_write_error(tmp_path: Path) -> None:
    db = tmp_path / "kb.sqlite"
    root, cfg, env = _ctx_setup(tmp_path, db)
    for n, limit in enumerate([64 << 10, 160 << 10], start=1):  # the WAL outgrows these
        # SQLite reports EFBIG as "disk I/O error"; the message still names the likely fix.
        assert _ctx_round(env, cfg, db, root, n, limit=limit, words=("Check free space",))
        assert not _ctx_round(env, cfg, db, root, n + 100)
