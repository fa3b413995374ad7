"""Bounds on the HTTP connections of a Cairn server: idle and read timeouts, and a connection cap.

uvicorn closes a keep-alive connection that stays silent after a response, but not one that never
sends a request, nor one that sends half a header or half a body and then stops: each holds a file
descriptor for good, and about 20,000 of them exhaust the process's limit. :func:`protocol` returns
uvicorn's HTTP/1.1 protocol with three bounds added:

* **idle timeout**: a connection that sends nothing for ``idle_timeout`` seconds, before its first
  request or between requests, is closed;
* **read timeout**: once a request's first byte arrives, its headers must be in within
  ``read_timeout`` seconds, and then its body within another ``read_timeout`` seconds; otherwise the
  server answers ``408`` and closes the connection. The deadline is fixed when the phase starts, so a
  client dripping a byte at a time does not extend it. After a ``408`` (or ``503``) the server stops
  sending and drops what still arrives for up to ``LINGER`` seconds before it closes, so the client
  reads the answer rather than a connection reset;
* **connection cap**: past ``max_connections`` open connections, the connection that has been idle (or
  half-way through its headers) the longest is closed to make room; when every connection has a
  request in progress, the new one is answered ``503`` and closed.

The time a request spends in the application is not bounded here (the application bounds its own work).
Settings come from the environment (:func:`limits_from_env`), per server: ``CTX_HTTP_IDLE_TIMEOUT``,
``BRK_HTTP_READ_TIMEOUT``, ...
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from cairn_servers.core.errors import InvalidInput


@dataclass(frozen=True)
class Limits:
    """The bounds of one server's connections (see the module docstring)."""

    idle_timeout: float = 5.0  # seconds a connection may stay silent before (or between) requests
    read_timeout: float = 30.0  # seconds a request's headers, then its body, have to arrive in full
    max_connections: int = 1000  # open connections at once


LINGER = 2.0  # seconds a connection answered 408 or 503 stays open, its input dropped, before it is closed

SETTINGS = (("IDLE_TIMEOUT", "idle_timeout", "seconds"), ("READ_TIMEOUT", "read_timeout", "seconds"),
            ("MAX_CONNECTIONS", "max_connections", "connections"))


def env_help(prefix: str) -> str:
    """The settings as a ``--help`` epilog of ``{prefix} serve`` (``prefix`` is ``CTX`` or ``BRK``)."""
    what = {"idle_timeout": "seconds a connection may stay silent",
            "read_timeout": "seconds for a request's headers, then its body (else 408)",
            "max_connections": "open connections at once (idle ones make room, else 503)"}
    lines = ["HTTP connections (environment):"]
    for suffix, field, _unit in SETTINGS:
        lines.append(f"  {prefix}_HTTP_{suffix:<16} {what[field]}; default {getattr(Limits, field):g}")
    return "\n".join(lines)


def limits_from_env(prefix: str, environ: dict[str, str] | None = None) -> Limits:
    """The limits ``{PREFIX}_HTTP_IDLE_TIMEOUT``, ``{PREFIX}_HTTP_READ_TIMEOUT`` and
    ``{PREFIX}_HTTP_MAX_CONNECTIONS`` set (``prefix`` is ``CTX`` or ``BRK``), the defaults for the others."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for suffix, field, unit in SETTINGS:
        name = f"{prefix}_HTTP_{suffix}"
        raw = env.get(name, "").strip()
        if not raw:
            continue
        try:
            value: float = int(raw) if field == "max_connections" else float(raw)
        except ValueError:
            value = float("nan")
        if not value > 0 or value == float("inf") or (field == "max_connections" and value > 1_000_000):
            kind = "a whole number of" if field == "max_connections" else "a number of"
            raise InvalidInput(f"{name}={raw!r} is not valid: give {kind} {unit} greater than 0, "
                               f"such as {getattr(Limits, field):g}.")
        values[field] = value
    return Limits(**values)


def fit_descriptors(limits: Limits, reserve: int = 256) -> Limits:
    """``limits`` with the open-file limit raised (up to its hard limit) so that ``max_connections``
    connections plus ``reserve`` other descriptors (databases, Lua workers, logs) fit; where the hard
    limit is lower, the cap comes down to what fits (never below 16)."""
    try:
        import resource
    except ImportError:  # not on POSIX: nothing to raise
        return limits
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = limits.max_connections + reserve
    if soft != resource.RLIM_INFINITY and soft < want:
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < want:
        return Limits(limits.idle_timeout, limits.read_timeout, max(16, soft - reserve))
    return limits


def _raw_response(status: int, reason: str, code: str, message: str) -> bytes:
    """A complete HTTP/1.1 response that closes the connection, written without h11 (the request, if
    any, was never complete, so h11 has no response to frame)."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\n\r\n").encode() + body


def protocol(limits: Limits) -> type:
    """uvicorn's h11 protocol class with ``limits`` enforced (pass it as ``uvicorn.Config(http=...)``)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    idle_after = limits.idle_timeout
    read_within = limits.read_timeout
    cap = limits.max_connections
    request_timeout = _raw_response(408, "Request Timeout", "timeout",
                                    f"The request did not arrive in full within {read_within:g} seconds.")
    unavailable = _raw_response(503, "Service Unavailable", "unavailable",
                                f"The server has {cap} connections open, each with a request in progress. "
                                "Try again shortly.")

    class BoundedH11Protocol(H11Protocol):
        """One connection; ``phase`` is what it is waiting for: ``idle`` (a request), ``header`` (the rest
        of a request's headers), ``body`` (the rest of its body), or None (the application is answering).

        Between requests uvicorn's own keep-alive timer, set to the idle timeout, closes a silent
        connection; this class arms a timer of its own only before the first request and while a
        request is incomplete, so a request that arrives whole costs no extra timer."""

        phase: str | None = None
        since = 0.0  # loop time the phase began
        timer: Any = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.timeout_keep_alive = idle_after  # type: ignore[assignment]  # seconds, may be fractional

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._set("idle", idle_after)  # until its first byte
            if len(self.connections) > cap:
                self._make_room()

        def data_received(self, data: bytes) -> None:
            if self.phase == "lingering":
                return  # after a 408 or 503: read and dropped (see _answer_and_close)
            super().data_received(data)
            self._track()

        def on_response_complete(self) -> None:
            super().on_response_complete()  # arms the keep-alive timer; may start a pipelined request
            if not self.transport.is_closing() and self.phase != "closed" and self.conn.their_state is h11.IDLE:
                self._set("idle", None)  # uvicorn's keep-alive timer bounds it
            else:
                self._track()

        def connection_lost(self, exc: Exception | None) -> None:
            self._set(None)
            self.phase = "closed"
            super().connection_lost(exc)

        def _track(self) -> None:
            """After bytes arrived: the phase the request is in (a phase's deadline never moves)."""
            if self.transport.is_closing() or self.phase in ("closed", "lingering"):
                self._set(None)
                return
            state = self.conn.their_state
            if state is h11.IDLE:  # bytes, but not yet a whole header
                self._set("header", read_within)
            elif state is h11.SEND_BODY:
                self._set("body", read_within)
            else:
                self._set(None)

        def _set(self, phase: str | None, timeout: float | None = None) -> None:
            if phase == self.phase:
                return
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            self.phase = phase
            self.since = self.loop.time()
            if timeout is not None:
                self.timer = self.loop.call_later(timeout, self._expire)

        def _expire(self) -> None:
            self.timer = None
            if self.transport.is_closing():
                return
            if self.phase == "header" or (self.phase == "body" and self.cycle is not None
                                          and not self.cycle.response_started):
                self._answer_and_close(request_timeout)
            else:
                self._close()

        def _answer_and_close(self, response: bytes) -> None:
            """Write ``response``, end the sending side (FIN after it), then drop whatever the client still
            sends for up to ``LINGER`` s before closing. Closing at once with bytes of the client still
            unread (the rest of a dripped request) makes the kernel reset the connection, and a reset can
            reach the client before it has read the answer, which it then never sees."""
            self._set(None)
            self.phase = "lingering"
            self.transport.write(response)
            try:
                self.transport.write_eof()
            except (NotImplementedError, RuntimeError, OSError):
                self._close()
                return
            self.timer = self.loop.call_later(LINGER, self._close)

        def _close(self) -> None:
            self._set(None)
            self.phase = "closed"
            self.transport.close()

        def _make_room(self) -> None:
            """Close a connection already answered 408 or 503 (lingering), else the one idle the longest
            (or half-way through its headers); if every connection has a request in progress, answer this
            one 503."""
            victim: BoundedH11Protocol | None = None
            for other in self.connections:
                if other is self or not isinstance(other, BoundedH11Protocol):
                    continue
                if other.phase == "lingering":  # answered already: the first to go
                    victim = other
                    break
                if other.phase in ("idle", "header") and (victim is None or other.since < victim.since):
                    victim = other
            if victim is not None:
                victim._close()
            else:
                self._answer_and_close(unavailable)

    return BoundedH11Protocol
