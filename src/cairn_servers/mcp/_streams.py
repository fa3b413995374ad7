"""Server-Sent Event streams for Streamable HTTP: ordered, replayable, followable by many readers.

Each POST answered with SSE, and each standalone GET, owns one ``EventStream``. Worker threads push
messages into it; HTTP responses follow it from a position, so a client that lost its connection can
resume with ``Last-Event-ID`` (``<stream id>_<sequence>``) and get what it missed.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any, AsyncIterator

from cairn_servers.mcp import jsonrpc as rpc

MAX_EVENTS = 1000  # per stream, kept for replay


class NoStream(Exception):
    """There is no open stream to carry a server-initiated message."""


class EventStream:
    """An append-only list of SSE events (owned by the event loop) with waiters."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, standalone: bool = False) -> None:
        self.id = secrets.token_hex(8)
        self.loop = loop
        self.standalone = standalone
        self.events: list[tuple[int, str]] = []
        self.seq = 0
        self.done = False
        self.cuts = 0  # bumped by close_stream(): current readers end, the client must reconnect
        self.readers = 0
        self._changed = asyncio.Event()

    # -- producers (any thread) ---------------------------------------------------------------

    def push(self, message: dict[str, Any]) -> None:
        data = rpc.dumps_safe(message)
        self._call(self._append, data, False)

    def finish(self, message: dict[str, Any] | None = None) -> None:
        self._call(self._append, rpc.dumps_safe(message) if message is not None else None, True)

    def cut(self) -> None:
        self._call(self._cut)

    def _call(self, fn: Any, *args: Any) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            fn(*args)
        else:
            self.loop.call_soon_threadsafe(fn, *args)

    # -- event-loop side ----------------------------------------------------------------------

    def _append(self, data: str | None, final: bool) -> None:
        if self.done:
            return
        if data is not None:
            self.seq += 1
            self.events.append((self.seq, data))
            if len(self.events) > MAX_EVENTS:
                del self.events[: len(self.events) - MAX_EVENTS]
        if final:
            self.done = True
        self._wake()

    def _cut(self) -> None:
        self.cuts += 1
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def event_id(self, seq: int) -> str:
        return f"{self.id}_{seq}"

    async def follow(self, after: int, *, retry_ms: int, prime: bool, keepalive: float = 15.0) -> AsyncIterator[bytes]:
        """SSE bytes: an optional priming event, then every event after ``after``, live, until done or cut."""
        cuts = self.cuts
        self.readers += 1
        try:
            if prime:
                yield f"id: {self.event_id(after)}\nretry: {retry_ms}\ndata: \n\n".encode()
            position = after
            while True:
                for seq, data in self.events:
                    if seq > position:
                        position = seq
                        yield f"id: {self.event_id(seq)}\nevent: message\ndata: {data}\n\n".encode()
                if self.done or self.cuts != cuts:
                    return
                changed = self._changed
                try:
                    await asyncio.wait_for(changed.wait(), keepalive)
                except asyncio.TimeoutError:
                    yield b": keepalive\n\n"  # also how a vanished client is noticed on idle streams
        finally:
            self.readers -= 1
