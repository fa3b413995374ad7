"""Keep long-running servers' resident memory honest on glibc (every function is a no-op elsewhere),
and read a process's memory figures (:func:`memory_kib`, for the tests and benchmarks that measure it).

glibc keeps freed memory in its heap arenas, so a server that once handled a few huge messages would
stay large for the rest of its life. Standard library only: imported on the stdio start-up path.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any


def _libc(name: str) -> Any:
    """glibc's function ``name`` (C ``int`` arguments and result), or None off glibc.

    Made from ``_ctypes``, the C part of ``ctypes``, as ``ctypes.CDLL("libc.so.6").NAME`` would be:
    ``import ctypes`` also runs ctypes/__init__.py and loads struct, ~0.25 MiB more resident in
    every server for three calls (measured on ``blz mcp`` after ``tools/list``).
    """
    try:
        import _ctypes

        class CInt(_ctypes._SimpleCData):  # type: ignore[type-arg]
            _type_ = "i"

        class CFunction(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL
            _restype_ = CInt

        class Library:
            _handle = _ctypes.dlopen("libc.so.6", _RTLD_NOW)

        return CFunction((name, Library))  # type: ignore[arg-type]  # what CDLL passes: its _handle
    except (ImportError, OSError, AttributeError, TypeError):  # not glibc, or no ctypes
        return None


_RTLD_NOW = 2


def return_large_buffers() -> None:
    """Make glibc return large freed buffers to the OS (servers only; a no-op off glibc).

    glibc raises its mmap threshold each time a large block is freed, after which buffers up to
    32 MiB come from the heap and stay resident once freed: a long-running server that once parsed a
    few 10 MB messages kept ~130 MB it never used again (measured on ``brk mcp``). A fixed threshold
    keeps every allocation over 256 KiB in its own mapping, unmapped on free.
    """
    mallopt = _libc("mallopt")
    if mallopt is not None:
        mallopt(-3, 256 * 1024)  # M_MMAP_THRESHOLD


def one_arena() -> None:
    """Make glibc use one malloc arena for all threads (servers only, before any worker thread exists).

    Requests run on worker threads; with an arena per thread, freed memory (a parse's, SQLite's page
    cache) is spread over up to eight arenas and stays resident. Measured on ``blz mcp``: 2-4 MB less
    RSS after indexing, no latency change.
    """
    mallopt = _libc("mallopt")
    if mallopt is not None:
        mallopt(-8, 1)  # M_ARENA_MAX


_trim: Any = None
_last_trim = 0.0


def trim_heap(min_interval: float = 0.0) -> None:
    """Hand free heap memory back to the OS now (glibc ``malloc_trim``; a no-op elsewhere).

    Freed small blocks from a burst of large work (a 10 MB message parsed into thousands of objects,
    indexing a 3 MB llms.txt that briefly needs ~20 MB) sit in the heap, fragmented across threads'
    arenas, and stay resident; servers call this after such bursts. It costs well under a
    millisecond on these heaps.

    :param min_interval: skip the trim when the last one was less than this many seconds ago.
    """
    global _trim, _last_trim
    now = time.monotonic()
    if now - _last_trim < min_interval:
        return
    _last_trim = now
    if _trim is None:
        _trim = _libc("malloc_trim") or False
    if _trim:
        _trim(0)


def memory_kib(pid: int | str = "self", field: str = "VmRSS") -> int:
    """A memory figure of a running process in KiB, from ``/proc/PID/status`` (0 when the process is gone,
    or off Linux).

    ``VmRSS`` is its resident size now; ``VmHWM`` its peak, of its own address space. For a child's peak
    sample ``VmHWM`` while it runs: ``wait4``'s ``ru_maxrss`` is no good, since Linux carries the parent's
    high-water mark across fork and exec (under a large pytest process every child would "peak" at the
    parent's size).
    """
    key = field.encode() + b":"
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(key):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0
