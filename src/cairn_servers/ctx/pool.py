"""The knowledge-base services of a server process: a bounded pool shared by every thread.

Its own module, light to import (the service and its store are imported on the first lease), so that a
server's start-up does not pay for them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from cairn_servers.core.errors import StorageError

if TYPE_CHECKING:
    from cairn_servers.ctx.config import Config
    from cairn_servers.ctx.service import Service


POOL_WAIT = 30.0  # seconds a request waits for a free connection before a storage error


class ServicePool:
    """At most ``size`` services (each one database connection, opened on first use) shared by every thread
    of a server process: a request leases one for its work and gives it back (:meth:`lease`).

    Threads come and go (an idle worker thread of the HTTP server is replaced after 10 s), connections do
    not: the process never holds more than ``[db] pool_size`` of them, however many threads ran. A
    request finding them all busy waits up to :data:`POOL_WAIT` s (never past its own deadline, see
    :mod:`cairn_servers.core.deadline`), then fails with a storage error that names the setting."""

    def __init__(self, config: "Config", size: int | None = None, *, wait: float = POOL_WAIT) -> None:
        self.config = config
        self.size = size if size is not None else config.db.pool_size
        self.wait = wait
        self._slots = threading.BoundedSemaphore(self.size)
        self._idle: list["Service"] = []
        self._all: list["Service"] = []
        self._lock = threading.Lock()
        self._closed = False

    @contextmanager
    def lease(self) -> Iterator["Service"]:
        """A service for this block's work, then back to the pool (never closed while the pool is open)."""
        from cairn_servers.core.sanitize import scrub
        from cairn_servers.core import deadline

        left = deadline.remaining()
        if not self._slots.acquire(timeout=self.wait if left is None else min(self.wait, left)):
            deadline.check()
            raise StorageError(
                f"All {self.size} connections to the knowledge base {scrub(self.config.db.label)} stayed busy for "
                f"{self.wait:g} s. Raise [db] pool_size (or $CTX_DB_POOL_SIZE), or send fewer requests at once.")
        try:
            with self._lock:
                if self._closed:
                    raise StorageError("The knowledge base is closed: the server is shutting down.")
                svc = self._idle.pop() if self._idle else None
                if svc is None:
                    from cairn_servers.ctx.service import Service

                    svc = Service(self.config)
                    self._all.append(svc)
            try:
                yield svc
            finally:
                with self._lock:
                    keep = not self._closed
                    if keep:
                        self._idle.append(svc)
                if not keep:  # the pool was closed meanwhile: this one was left open for us
                    svc.close()
        finally:
            self._slots.release()

    def open_count(self) -> int:
        """Services created so far (each holds at most one connection, plus SQLite's ranking helper)."""
        with self._lock:
            return len(self._all)

    def close(self) -> None:
        """Close every idle service now; a leased one is closed when it comes back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            leased = [s for s in self._all if s not in idle]
            self._all = leased
        for svc in idle:
            try:
                svc.close()
            except Exception:
                pass
