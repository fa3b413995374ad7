"""cairn_servers.core.heap: the one copy of the glibc memory helpers (malloc arenas, malloc_trim, mmap threshold)."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

import cairn_servers

SRC = Path(cairn_servers.__file__).resolve().parent


def test_only_core_heap_talks_to_malloc() -> None:
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                 if p.name != "heap.py" and any(w in p.read_text(encoding="utf-8")
                                                for w in ("mallopt", "malloc_trim", 'CDLL("libc'))]
    assert offenders == []


def test_the_helpers_run_in_a_server_like_process() -> None:
    code = ("from cairn_servers.core import heap; heap.one_arena(); heap.return_large_buffers(); "
            "b = [bytes(300_000) for _ in range(20)]; del b; heap.trim_heap(); heap.trim_heap(min_interval=60); "
            "print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_memory_kib_reads_a_process_s_own_figures() -> None:
    """One reader of /proc/PID/status for the tests and benchmarks (brk's peak-RSS runs used two copies)."""
    import time

    from cairn_servers.core.heap import memory_kib

    rss, peak = memory_kib(), memory_kib("self", "VmHWM")
    assert 0 < rss <= peak
    child = subprocess.Popen([sys.executable, "-c", "b = bytearray(64 << 20); import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while memory_kib(child.pid) < 64 * 1024 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert memory_kib(child.pid, "VmHWM") >= 64 * 1024  # the child's own peak, not this process's
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)
    assert memory_kib(child.pid) == 0  # gone
    assert memory_kib("self", "NoSuchField") == 0


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_the_helpers_reach_glibc_without_importing_ctypes() -> None:
    """The three malloc calls are made from _ctypes directly: `import ctypes` (and struct) kept ~0.25 MiB
    more resident in every stdio server (issue 14: blz mcp's RSS after tools/list)."""
    code = ("import sys; from cairn_servers.core import heap; "
            "assert heap._libc('mallopt') is not None and heap._libc('malloc_trim') is not None; "
            "assert heap._libc('mallopt')(-3, 256 * 1024) == 1; "  # mallopt answers 1 on success
            "heap.return_large_buffers(); heap.one_arena(); heap.trim_heap(); "
            "assert heap._trim, 'malloc_trim not found'; "
            "assert heap._libc('no_such_function_in_libc') is None; "
            "print(sorted(m for m in ('ctypes', 'struct', 'queue', 'heapq') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_stdio_worker_pool_runs_jobs_in_order_and_drains() -> None:
    """The stdio pool's job queue (a deque and a semaphore since the queue module was dropped): every job
    runs once, one worker takes them in order, and drain() stops the workers after the queued jobs."""
    import threading
    from functools import partial

    from cairn_servers.mcp.stdio import _Pool

    pool = _Pool(1)
    done: list[int] = []
    gate = threading.Event()
    pool.submit(lambda: None if gate.wait(30) else None)
    for i in range(200):
        pool.submit(partial(done.append, i))
    gate.set()
    pool.drain()
    assert done == list(range(200))
    many = _Pool(8)
    seen: list[int] = []
    lock = threading.Lock()

    def job(i: int) -> None:
        with lock:
            seen.append(i)

    for i in range(500):
        many.submit(partial(job, i))
    many.drain()
    assert sorted(seen) == list(range(500))
