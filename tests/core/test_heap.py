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
