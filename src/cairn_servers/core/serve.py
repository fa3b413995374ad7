"""Run an ASGI app on uvicorn the way every Cairn HTTP server should.

Shared by ``ctx serve mcp`` and ``brk serve``: parses ``HOST:PORT``, refuses non-loopback binds unless
the caller allows them, bounds every connection (idle and read timeouts, a connection cap:
``cairn_servers.core.connections``), refuses cross-site requests (``HostGuard``, ``CrossSiteGuard``), and bounds
graceful shutdown. uvicorn waits for every open connection before
it runs the app's shutdown, and an MCP client's GET SSE stream never ends on its own, so without a
bound a SIGTERM would hang forever.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from cairn_servers.core.errors import CairnError, InvalidInput, envelope
from cairn_servers.core.heap import return_large_buffers

if TYPE_CHECKING:
    from cairn_servers.core.connections import Limits

SHUTDOWN_GRACE_SECONDS = 2


def parse_bind(bind: str, default_port: int) -> tuple[str, int]:
    """``"127.0.0.1:7331"``, ``"[::1]:80"``, ``"localhost"`` or ``":8080"`` as ``(host, port)``."""
    text = bind.strip()
    host, port_text = text, ""
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise InvalidInput(f"Bad bind address {bind!r}: missing ']'. Use [::1]:PORT.")
        host, rest = text[1:close], text[close + 1 :]
        if rest and not rest.startswith(":"):
            raise InvalidInput(f"Bad bind address {bind!r}. Use HOST:PORT.")
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    host = host or "127.0.0.1"
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise InvalidInput(f"Bad port in bind address {bind!r}: use a number from 0 to 65535.")
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and any 127.0.0.0/8 or ``::1`` address."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]", "::1")


def host_name(header: str) -> str:
    """The host part of a ``Host`` header value, lower-cased: ``"[::1]:80"`` -> ``"[::1]"``."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class ForbiddenHost(CairnError):
    """The request names a host this loopback server does not answer for (DNS rebinding protection)."""

    code = "forbidden"
    http_status = 403


class HostGuard:
    """ASGI middleware for loopback binds: refuse (403) HTTP requests whose ``Host`` names anything but
    this machine. A web page that rebinds its own domain to 127.0.0.1 (DNS rebinding) sends its
    domain as Host, so it never reaches the app. Requests without a Host header are not browsers'."""

    def __init__(self, app: Any, allowed: tuple[str, ...] | list[str] = LOOPBACK_NAMES) -> None:
        self.app = app
        self.allowed = {h.lower() for h in allowed}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            raw = dict(scope.get("headers") or ()).get(b"host")
            host = raw.decode("latin-1") if raw is not None else None
            if host is not None and host_name(host) not in self.allowed:
                import json

                message = (f"Host {host!r} is not allowed: this server only answers requests addressed to "
                           "localhost (DNS rebinding protection). Use http://127.0.0.1:PORT.")
                body = json.dumps(envelope(ForbiddenHost(message))).encode()
                await send({"type": "http.response.start", "status": ForbiddenHost.http_status,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def origin_host(origin: str) -> str | None:
    """The host of an ``Origin`` header value as :func:`host_name` spells hosts (``"[::1]"``), or None
    when it is not an http(s) origin (``null``, a ``file:`` page)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(origin.strip())
        name = parts.hostname
    except ValueError:
        return None
    if not name or parts.scheme not in ("http", "https"):
        return None
    return f"[{name}]" if ":" in name else name


class ForbiddenOrigin(ForbiddenHost):
    """A web page of another site sent the request (cross-site request protection)."""


class CrossSiteGuard:
    """ASGI middleware for a server without a token: refuse (403) requests that a web page of another
    site could have sent through the user's browser. On a loopback bind, the ``Host`` must name this
    machine and an ``Origin``, when there is one, must be a page of this machine (any port) or one of
    ``allowed_origins``: the rule MCP's ``/mcp`` applies (``cairn_servers.mcp.http``). CORS preflights
    (``OPTIONS``) and the ``exempt`` paths (served by an app with its own guard) pass through.

    Browsers send ``Origin`` with every ``fetch()`` and form ``POST`` across sites; clients that are
    not browsers (curl, MCP clients) send none and are served."""

    def __init__(self, app: Any, allowed_origins: tuple[str, ...] | list[str] = (), *,
                 exempt: tuple[str, ...] = (), hint: str = "") -> None:
        self.app = app
        self.origins = {o.lower().rstrip("/") for o in allowed_origins}
        self.exempt = exempt
        self.hint = hint

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and scope.get("method") != "OPTIONS" and scope.get("path") not in self.exempt:
            refused = self.refusal(scope)
            if refused is not None:
                import json

                body = json.dumps(envelope(refused)).encode()
                await send({"type": "http.response.start", "status": refused.http_status,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: Any) -> CairnError | None:
        server = scope.get("server") or ("", 0)
        if not is_loopback(str(server[0])):
            return None  # bound beyond loopback: a token is required there (ctx refuses to start without one)
        bind = str(server[0]).lower()
        allowed = {*LOOPBACK_NAMES, f"[{bind}]" if ":" in bind else bind}
        headers = dict(scope.get("headers") or ())
        raw_host = headers.get(b"host")
        if raw_host is not None and host_name(raw_host.decode("latin-1")) not in allowed:
            host = raw_host.decode("latin-1")
            return ForbiddenHost(f"Host {host!r} is not allowed: this server only answers requests addressed to "
                                 "localhost (DNS rebinding protection). Use http://127.0.0.1:PORT.")
        raw_origin = headers.get(b"origin")
        if raw_origin is None:
            return None
        origin = raw_origin.decode("latin-1")
        if origin.lower().rstrip("/") in self.origins or origin_host(origin.lower()) in allowed:
            return None
        return ForbiddenOrigin(f"Origin {origin!r} is not allowed: a web page of another site cannot call this "
                               f"server (cross-site request protection).{' ' + self.hint if self.hint else ''}")


class CloseUnreadBodies:
    """ASGI middleware: a response sent before the request body was read to its end (a 413, a 401, a
    GET with a body) closes the connection (``Connection: close``). Otherwise the server would go on
    reading, and discarding, whatever the client still sends: gigabytes, or forever for a chunked body."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        length = headers.get(b"content-length", b"0").strip()
        unread = [b"transfer-encoding" in headers or not length.isdigit() or int(length) > 0]

        async def tracked_receive() -> Any:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                unread[0] = False
            return message

        async def guarded_send(message: Any) -> None:
            if message["type"] == "http.response.start" and unread[0]:
                given = list(message.get("headers", []))
                if not any(k.lower() == b"connection" for k, _ in given):
                    message = {**message, "headers": [*given, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, tracked_receive, guarded_send)


class RequestLog:
    """ASGI middleware logging every HTTP request at debug (``cairn_servers.core.log``): method, path, status,
    duration, and for a JSON-RPC POST its method and tool name. Installed only when debug is on."""

    PEEK = 64 * 1024  # bytes of a request body kept to name its JSON-RPC method

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        import time

        from cairn_servers.core import log

        t0 = time.perf_counter()
        body: list[bytes] = []
        status: list[int] = []

        async def peek() -> Any:
            message = await receive()
            if message.get("type") == "http.request" and sum(map(len, body)) < self.PEEK:
                body.append(message.get("body", b""))
            return message

        async def sending(message: Any) -> None:
            if message.get("type") == "http.response.start":
                status.append(int(message.get("status", 0)))
            await send(message)

        try:
            await self.app(scope, peek, sending)
        finally:
            what = f"{scope.get('method', '?')} {scope.get('path', '?')}"
            if body and scope.get("method") == "POST":
                what += _rpc_summary(b"".join(body))
            log.debug(f"{what} {status[0] if status else 'no response'} "
                      f"{(time.perf_counter() - t0) * 1000:.2f} ms")


def _rpc_summary(data: bytes) -> str:
    """`` [tools/call find (id 3)]`` for a JSON-RPC body ('' when it is not one)."""
    import json

    from cairn_servers.core.log import describe

    try:
        msg = json.loads(data)
    except ValueError:
        return ""
    return f" [{describe(msg)}]" if isinstance(msg, (dict, list)) else ""


def _uvicorn_level() -> str:
    from cairn_servers.core import log

    return {log.ERROR: "error", log.WARN: "warning", log.INFO: "info", log.DEBUG: "debug"}.get(log.level, "critical")


def serve(app: Any, host: str, port: int, *, name: str, allow_remote: bool = False,
          log_level: str | None = None, limits: "Limits | None" = None) -> None:
    """Serve ``app`` on ``host:port`` until SIGINT/SIGTERM; prints the address to stderr.

    :param log_level: uvicorn's level; by default the one ``cairn_servers.core.log`` was configured with
        (``--log-level`` / ``$CTX_LOG`` / ``$BRK_LOG``). Requests are logged by ``RequestLog`` at debug.
    :param limits: the connections' timeouts and cap (:mod:`cairn_servers.core.connections`); by default
        from ``$NAME_HTTP_IDLE_TIMEOUT``, ``$NAME_HTTP_READ_TIMEOUT`` and ``$NAME_HTTP_MAX_CONNECTIONS``.

    :param allow_remote: binding beyond loopback exposes the server to the network; callers pass
        the user's explicit flag here.
    """
    if not is_loopback(host) and not allow_remote:
        raise InvalidInput(
            f"Refusing to bind {name} to {host}: it is not a loopback address. "
            "Pass --allow-remote (and set an auth token) to expose it to the network."
        )
    from cairn_servers.core.connections import fit_descriptors, limits_from_env, protocol

    limits = fit_descriptors(limits if limits is not None else limits_from_env(name.upper()))
    import uvicorn

    from cairn_servers.core import log

    return_large_buffers()
    if is_loopback(host):  # DNS rebinding: only requests addressed to this machine
        shown_host = f"[{host}]" if ":" in host else host
        app = HostGuard(app, (*LOOPBACK_NAMES, shown_host.lower()))
    app = CloseUnreadBodies(app)
    if log.enabled(log.DEBUG):
        app = RequestLog(app)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level or _uvicorn_level(),
        access_log=False,  # RequestLog does it at debug, with durations
        lifespan="on",
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
        server_header=False,
        http=protocol(limits),  # idle and read timeouts, the connection cap
        loop="auto",  # uvloop (a dependency on Linux and macOS): 10-15 % less server CPU a ctx request than asyncio
        ws="none",  # no WebSocket routes: an upgrade must not leave the bounded HTTP protocol
    )
    server = uvicorn.Server(config)
    shown = f"[{host}]" if ":" in host else host
    check_free(host, port, name)  # before "listening on": uvicorn would print it, then a raw [Errno 98]
    print(f"{name} listening on http://{shown}:{port}", file=sys.stderr, flush=True)
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal against the handler
    # that was installed before it started: with Python's defaults that is a KeyboardInterrupt
    # traceback or death by signal (exit status -15). A stop the user asked for is a clean exit.
    import threading

    in_main = threading.current_thread() is threading.main_thread()  # signal handlers live there only
    previous = {sig: signal.signal(sig, _exit_cleanly) for sig in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
    log.info(f"serving HTTP on {shown}:{port} (pid {os.getpid()}; connections: idle timeout {limits.idle_timeout:g} s, "
             f"read timeout {limits.read_timeout:g} s, at most {limits.max_connections})")
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        log.info("HTTP server stopped")


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)


def check_free(host: str, port: int, name: str) -> None:
    """Raise :class:`Conflict` with a ``--bind`` hint when ``host:port`` cannot be listened on because
    something holds it (bound the way uvicorn binds, ``SO_REUSEADDR`` included, then released)."""
    import errno
    import socket

    from cairn_servers.core.errors import Conflict

    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            shown = f"[{host}]" if ":" in host else host
            raise Conflict(f"Cannot listen on {shown}:{port}: the port is in use (another program, or a {name} "
                           f"server already running). Stop it, or choose another port: --bind {shown}:PORT.") from None
