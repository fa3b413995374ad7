"""A time limit on the knowledge-base work of the calling thread: a Lua tool's ``context.*`` callbacks.

A Lua tool's ``timeout`` covers its whole call. Its ``context.search`` runs in the server's process
(:mod:`cairn_servers.ctx.luaproc`), where the sandbox's instruction hook cannot reach, so the server
bounds that work itself: :func:`bounded` sets the run's deadline for the thread, and the stores stop
a statement that passes it (SQLite: a progress handler on every connection; PostgreSQL:
``statement_timeout`` set to the time left before each statement), waiting for a pooled connection
waits no longer than it, and :func:`check` refuses to start more work after it. Whatever fails once
the deadline has passed leaves :func:`bounded` as one :class:`~cairn_servers.core.errors.Timeout`
naming the run and its limit.

The same stop serves a caller that gives up (an HTTP client that disconnected, MCP
``notifications/cancelled``): :func:`cancellable` gives the thread a cancel check, :func:`passed`
turns true once it does (so SQLite's progress handler stops the statement), PostgreSQL's running
statement is cancelled on the server by a watcher thread (:func:`on_cancel`), and whatever fails once
the caller has gone leaves :func:`cancellable` as one :class:`~cairn_servers.core.errors.Cancelled`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from cairn_servers.core.errors import Cancelled, Timeout

CancelCheck = Callable[[], bool]

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


class OverBudget(Exception):
    """Work under :func:`budget` ran past it (stopped: to be done again where waiting is allowed)."""


@contextmanager
def budget(seconds: float) -> Iterator[None]:
    """Work in this block stops once it has run ``seconds`` (SQLite's progress handler interrupts its
    statement) and leaves as :class:`OverBudget`: a try at work that is cheap most of the time, on a thread
    that must not wait long (an HTTP server's event loop), done again elsewhere when it was not cheap.
    Unlike :func:`bounded`, work that ends late keeps its answer. An outer, earlier deadline stays in force."""
    outer = getattr(_local, "at", None), getattr(_local, "what", "")
    mine = time.monotonic() + seconds
    if outer[0] is not None and outer[0] <= mine:
        yield
        return
    _local.at, _local.what = mine, "The request"
    try:
        yield
    except BaseException:
        if time.monotonic() >= mine:  # it failed (an interrupted statement, ...) for lack of time
            raise OverBudget() from None
        raise
    finally:
        _local.at, _local.what = outer


def at() -> float | None:
    """This thread's deadline (``time.monotonic()``), or None when its work is not bounded."""
    return getattr(_local, "at", None)


def remaining() -> float | None:
    """Seconds left before this thread's deadline (0 once passed), or None when unbounded."""
    deadline = at()
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def passed() -> bool:
    """Whether this thread's deadline has passed or its caller gave up (cheap: the SQLite progress
    handler calls it)."""
    deadline = getattr(_local, "at", None)
    if deadline is not None and time.monotonic() >= deadline:
        return True
    cancel = getattr(_local, "cancel", None)
    return cancel is not None and bool(cancel())


def expired() -> Timeout:
    return Timeout(f"{getattr(_local, 'what', '') or 'The request'}.")


def check() -> None:
    """Raise :class:`Cancelled` if this thread's caller gave up, :class:`Timeout` if its deadline has
    passed: before starting more work."""
    if cancelled():
        raise Cancelled(_GONE)
    if passed():
        raise expired()


_GONE = "The request was cancelled: its client went away or cancelled it."


def cancelled() -> bool:
    """Whether this thread's caller gave up (see :func:`cancellable`)."""
    cancel = getattr(_local, "cancel", None)
    return cancel is not None and bool(cancel())


def cancel_check() -> CancelCheck | None:
    """This thread's cancel check (to hand to a helper thread), or None."""
    return getattr(_local, "cancel", None)


@contextmanager
def cancellable(check_fn: CancelCheck | None) -> Iterator[None]:
    """Work in this block stops once ``check_fn()`` turns true (the caller's client disconnected or
    cancelled): :func:`passed` and :func:`check` see it, statements registered with :func:`on_cancel`
    are cancelled, and whatever fails after it leaves the block as :class:`Cancelled`. Nested checks
    combine; ``None`` changes nothing."""
    if check_fn is None:
        yield
        return
    outer: CancelCheck | None = getattr(_local, "cancel", None)
    mine: CancelCheck = check_fn
    _local.cancel = mine if outer is None else (lambda: outer() or mine())
    try:
        yield
    except Cancelled:
        raise
    except BaseException:
        if mine():  # the statement (or anything else) failed because the caller gave up
            raise Cancelled(_GONE) from None
        raise
    finally:
        _local.cancel = outer


class _Watched:
    __slots__ = ("check", "stop", "lock", "done")

    def __init__(self, check_fn: CancelCheck, stop: Callable[[], None]) -> None:
        self.check, self.stop, self.lock, self.done = check_fn, stop, threading.Lock(), False


WATCH_EVERY = 0.05  # seconds between the watcher's looks at the cancel checks of running statements
_watch = threading.Condition()
_watched: set[_Watched] = set()
_watcher: list[threading.Thread] = []


@contextmanager
def on_cancel(stop: Callable[[], None]) -> Iterator[None]:
    """While this block runs (one database statement), ``stop()`` is called from a watcher thread once
    this thread's caller gives up (PostgreSQL: cancel the statement on the server). Never after the block
    has ended: leaving it waits for a ``stop()`` under way, so a connection given back to its pool is
    never cancelled for someone else. Outside :func:`cancellable`, nothing is watched."""
    check_fn = getattr(_local, "cancel", None)
    if check_fn is None:
        yield
        return
    if check_fn():
        raise Cancelled(_GONE)
    entry = _Watched(check_fn, stop)
    with _watch:
        _watched.add(entry)
        if not _watcher:
            thread = threading.Thread(target=_watch_loop, name="cancel-watcher", daemon=True)
            _watcher.append(thread)
            thread.start()
        _watch.notify()
    try:
        yield
    finally:
        with entry.lock:
            entry.done = True
        with _watch:
            _watched.discard(entry)


def _watch_loop() -> None:
    while True:
        with _watch:
            while not _watched:
                _watch.wait()
            entries = list(_watched)
        for entry in entries:
            try:
                gone = entry.check()
            except Exception:
                gone = False
            if gone:
                with entry.lock:
                    if not entry.done:
                        entry.done = True  # once
                        try:
                            entry.stop()
                        except Exception:
                            pass  # the statement ends on its own (or with its connection)
        time.sleep(WATCH_EVERY)
