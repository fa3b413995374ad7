"""cairn.core.heap: the one copy of the glibc memory helpers (malloc arenas, malloc_trim, mmap threshold)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cairn

SRC = Path(cairn.__file__).resolve().parent


def test_only_core_heap_talks_to_malloc() -> None:
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                 if p.name != "heap.py" and any(w in p.read_text(encoding="utf-8")
                                                for w in ("mallopt", "malloc_trim", 'CDLL("libc'))]
    assert offenders == []


def test_the_helpers_run_in_a_server_like_process() -> None:
    code = ("from cairn.core import heap; heap.one_arena(); heap.return_large_buffers(); "
            "b = [bytes(300_000) for _ in range(20)]; del b; heap.trim_heap(); heap.trim_heap(min_interval=60); "
            "print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_memory_kib_reads_a_process_s_own_figures() -> None:
    """One reader of /proc/PID/status for the tests and benchmarks (brk's peak-RSS runs used two copies)."""
    import time

    from cairn.core.heap import memory_kib

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
