"""A time limit on the knowledge-base work of the calling thread: a Lua tool's ``context.*`` callbacks.

A Lua tool's ``timeout`` covers its whole call. Its ``context.search`` runs in the server's process
(:mod:`cairn_servers.ctx.luaproc`), where the sandbox's instruction hook cannot reach, so the server
bounds that work itself: :func:`bounded` sets the run's deadline for the thread, and the stores stop
a statement that passes it (SQLite: a progress handler on every connection; PostgreSQL:
``statement_timeout`` set to the time left before each statement), waiting for a pooled connection
waits no longer than it, and :func:`check` refuses to start more work after it. Whatever fails once
the deadline has passed leaves :func:`bounded` as one :class:`~cairn_servers.core.errors.Timeout`
naming the run and its limit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from cairn_servers.core.errors import Timeout

_local = threading.local()
SLACK = 0.05  # seconds: an error this close to the deadline is the deadline's


@contextmanager
def bounded(at: float, what: str) -> Iterator[None]:
    """Work in this block stops at ``at`` (``time.monotonic()``); ``what`` names it in the error
    ("Lua tool 'x': exceeded its time limit of 3 s in context.search"). An outer, earlier deadline
    stays in force."""
    outer = getattr(_local, "at", None), getattr(_local, "what", "")
    if outer[0] is None or at < outer[0]:
        _local.at, _local.what = at, what
    try:
        yield
    except Timeout:
        raise
    except BaseException:
        # The interrupted statement (or anything else) failed for lack of time. A server's timer (PostgreSQL's
        # statement_timeout) may fire a hair before this clock says so: within SLACK, it is the deadline's.
        if time.monotonic() >= _local.at - SLACK:
            raise expired() from None
        raise
    finally:
        _local.at, _local.what = outer
    if time.monotonic() >= at:  # done, but too late: the caller's budget is spent all the same
        raise Timeout(f"{what}.")


def at() -> float | None:
    """This thread's deadline (``time.monotonic()``), or None when its work is not bounded."""
    return getattr(_local, "at", None)


def remaining() -> float | None:
    """Seconds left before this thread's deadline (0 once passed), or None when unbounded."""
    deadline = at()
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def passed() -> bool:
    """Whether this thread's deadline has passed (cheap: the SQLite progress handler calls it)."""
    deadline = getattr(_local, "at", None)
    return deadline is not None and time.monotonic() >= deadline


def expired() -> Timeout:
    return Timeout(f"{getattr(_local, 'what', '') or 'The request'}.")


def check() -> None:
    """Raise :class:`Timeout` if this thread's deadline has passed: before starting more work."""
    if passed():
        raise expired()
