"""Streamable HTTP transport (MCP 2025-11-25, also serving 2025-06-18 / 2025-03-26 clients) as an ASGI app.

``mcp_app(server, stateless=True)`` answers every POST with a fresh session (no ``Mcp-Session-Id``; any
replica behind a load balancer can serve any request; GET is 405). ``stateless=False`` keeps sessions:
initialize issues an ``Mcp-Session-Id``, GET opens a stream for server-initiated messages, DELETE ends
the session, and server-to-client requests (``ctx.request``) travel on the SSE stream of the POST being
handled (or the GET stream), their answers arriving as POSTs. Mount it with
``Route("/mcp", mcp_app(...))`` or serve it directly (it answers on any path).
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, Iterable

from cairn_servers.core.serve import host_name as _host_name
from cairn_servers.core.serve import origin_host as _origin_host
from cairn_servers.mcp import SUPPORTED_PROTOCOL_VERSIONS
from cairn_servers.mcp import jsonrpc as rpc
from cairn_servers.mcp._streams import EventStream, NoStream
from cairn_servers.mcp.jsonrpc import RpcError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import Receive, Scope, Send

    from cairn_servers.mcp.server import Server
    from cairn_servers.mcp.session import Session

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
SESSION_NOT_FOUND = -32001
MAX_BODY = 4 * 1024 * 1024  # bytes of a POST body; the body is streamed and reading stops past this


class _ClientGone(Exception):
    """The client disconnected before its reply was ready: there is nobody to answer."""


class _HttpSession:
    """A stateful session plus its streams (POST SSE streams for resumption, the GET stream)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.streams: dict[str, EventStream] = {}
        self.get_stream: EventStream | None = None
        self.last_used = time.monotonic()

    def send_default(self, message: dict[str, Any]) -> None:
        stream = self.get_stream
        if stream is None or stream.done:
            raise NoStream("no GET stream is open for server-initiated messages")
        stream.push(message)

    def keep(self, stream: EventStream) -> None:
        self.streams[stream.id] = stream
        if len(self.streams) > 100:  # keep the most recent streams for Last-Event-ID resumption
            for key in list(self.streams)[: len(self.streams) - 100]:
                del self.streams[key]

    def close(self) -> None:
        self.session.close()
        for stream in [*self.streams.values(), *([self.get_stream] if self.get_stream else [])]:
            stream.finish()


class McpApp:
    """The ASGI application; build it with ``mcp_app``."""

    def __init__(self, server: Server, *, stateless: bool = False, json_response: bool = False,
                 allowed_hosts: Iterable[str] | None = None, allowed_origins: Iterable[str] | None = None,
                 dns_rebinding_protection: bool | None = None, retry_ms: int = 1000,
                 session_idle_timeout: float = 3600.0, max_sessions: int = 1000) -> None:
        self.server = server
        self.stateless = stateless
        self.json_response = json_response
        self.allowed_hosts = {h.lower() for h in (allowed_hosts if allowed_hosts is not None else LOOPBACK_HOSTS)}
        self.allowed_origins = {o.lower().rstrip("/") for o in (allowed_origins or ())}
        self.protection = dns_rebinding_protection
        self.retry_ms = retry_ms
        self.idle_timeout = session_idle_timeout
        self.max_sessions = max_sessions
        self.sessions: dict[str, _HttpSession] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        from starlette.requests import ClientDisconnect, Request

        request = Request(scope, receive)
        try:
            response = await self._dispatch(request)
        except (ClientDisconnect, _ClientGone):
            return  # nobody is left to read an answer
        except Exception as exc:  # the app must answer even when the core has a bug
            traceback.print_exc(file=sys.stderr)
            response = self._error(500, None, RpcError(rpc.INTERNAL_ERROR, f"Internal error: {exc}"))
        await response(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for held in list(self.sessions.values()):
                    held.close()
                self.sessions.clear()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    def _error(status: int, request_id: Any, error: RpcError, headers: dict[str, str] | None = None) -> Response:
        from starlette.responses import Response

        return Response(rpc.dumps(rpc.error_response(request_id, error)), status_code=status,
                        media_type="application/json", headers=headers)

    def _guard(self, request: Request) -> Response | None:
        """DNS-rebinding protection: Host and Origin must name an allowed host (403 otherwise)."""
        enabled = self.protection
        if enabled is None:
            server_addr = request.scope.get("server") or ("", 0)
            enabled = str(server_addr[0]) in ("127.0.0.1", "::1", "localhost")
        if not enabled or "*" in self.allowed_hosts:
            return None
        host = request.headers.get("host", "")
        if _host_name(host) not in self.allowed_hosts and host.lower() not in self.allowed_hosts:
            return self._error(403, None, RpcError(rpc.INVALID_REQUEST,
                               f"Forbidden: Host {host!r} is not allowed (DNS rebinding protection)"))
        origin = request.headers.get("origin")
        if origin is not None:
            ok = origin.lower().rstrip("/") in self.allowed_origins or _origin_host(origin) in self.allowed_hosts
            if not ok:
                return self._error(403, None, RpcError(rpc.INVALID_REQUEST,
                                   f"Forbidden: Origin {origin!r} is not allowed (DNS rebinding protection)"))
        return None

    def _version_check(self, request: Request) -> Response | None:
        version = request.headers.get("mcp-protocol-version")
        if version is not None and version not in SUPPORTED_PROTOCOL_VERSIONS:
            return self._error(400, None, RpcError(rpc.INVALID_REQUEST,
                               f"Bad Request: unsupported MCP-Protocol-Version {version!r}; supported: "
                               f"{', '.join(SUPPORTED_PROTOCOL_VERSIONS)}"))
        return None

    def _lookup(self, request: Request) -> _HttpSession | Response:
        sid = request.headers.get("mcp-session-id")
        if not sid:
            return self._error(400, None, RpcError(rpc.INVALID_REQUEST,
                               "Bad Request: Mcp-Session-Id header is required; send initialize first to get one"))
        self._expire()
        held = self.sessions.get(sid)
        if held is None:
            return self._error(404, None, RpcError(SESSION_NOT_FOUND,
                               "Session not found: it ended or expired; send initialize to start a new one"))
        held.last_used = time.monotonic()
        return held

    def _expire(self) -> None:
        now = time.monotonic()
        for sid, held in list(self.sessions.items()):
            if now - held.last_used > self.idle_timeout and not (held.get_stream and held.get_stream.readers):
                held.close()
                self.sessions.pop(sid, None)

    def _new_session(self) -> tuple[str, _HttpSession]:
        self._expire()
        while len(self.sessions) >= self.max_sessions:  # evict the least recently used
            oldest = min(self.sessions, key=lambda k: self.sessions[k].last_used)
            self.sessions.pop(oldest).close()
        sid = secrets.token_urlsafe(24)
        session = self.server.open_session()
        held = _HttpSession(session)
        session.default_send = held.send_default
        self.sessions[sid] = held
        return sid, held

    # -- methods ------------------------------------------------------------------------------

    async def _dispatch(self, request: Request) -> Response:
        from starlette.responses import Response

        denied = self._guard(request)
        if denied is not None:
            return denied
        method = request.method
        if method == "POST":
            return await self._post(request)
        if method == "GET" and not self.stateless:
            return await self._get(request)
        if method == "DELETE" and not self.stateless:
            held = self._lookup(request)
            if not isinstance(held, _HttpSession):
                return held
            sid = request.headers["mcp-session-id"]
            self.sessions.pop(sid, None)
            held.close()
            return Response(status_code=204)
        allow = "POST" if self.stateless else "GET, POST, DELETE"
        return self._error(405, None, RpcError(rpc.INVALID_REQUEST,
                           f"Method Not Allowed: {method}" + (" (this endpoint is stateless: POST only)" if self.stateless else "")),
                           headers={"Allow": allow})

    async def _post(self, request: Request) -> Response:
        from starlette.responses import Response

        bad_version = self._version_check(request)
        if bad_version is not None:
            return bad_version
        body = await self._read_body(request)
        if not isinstance(body, bytearray):
            return body
        try:
            msg = rpc.loads(bytes(body))
        except RpcError as exc:
            return self._error(400, None, exc)
        items = msg if isinstance(msg, list) else [msg]
        kinds = [rpc.kind(m) for m in items]
        if isinstance(msg, dict) and kinds[0] == "invalid":
            return self._error(400, msg.get("id"), RpcError(rpc.INVALID_REQUEST, rpc.invalid_reason(msg)))
        is_init = isinstance(msg, dict) and kinds[0] == "request" and msg["method"] == "initialize"

        sid: str | None = None
        held: _HttpSession | None = None
        if self.stateless:
            session = self.server.open_session(stateless=True)
            version = request.headers.get("mcp-protocol-version")
            if version:
                session.protocol_version = version
        elif is_init and request.headers.get("mcp-session-id") not in self.sessions:
            sid, held = self._new_session()
            session = held.session
        else:
            found = self._lookup(request)
            if not isinstance(found, _HttpSession):
                return found
            held, session = found, found.session
        headers = {"mcp-session-id": sid} if sid else {}

        if isinstance(msg, dict) and kinds[0] in ("notification", "response"):
            session.handle(msg, None)  # quick: no user code runs for these
            return Response(status_code=202, headers=headers)
        if isinstance(msg, list):
            replies = await self._run_while_connected(request, session, msg)
            if replies is None:
                return Response(status_code=202, headers=headers)
            return Response(rpc.dumps(replies), media_type="application/json", headers=headers)

        accept = request.headers.get("accept", "")
        wants_sse = "text/event-stream" in accept and (
            "application/json" not in accept or (not self.json_response and session.is_slow(msg)))
        if not wants_sse:
            if session.is_slow(msg):
                reply = await self._run_while_connected(request, session, msg)
            else:  # initialize, ping, lists, subscriptions, setLevel: no user code, answer on the loop
                reply = session.handle(msg, None)
            if reply is None:  # cancelled while running
                return Response(status_code=202, headers=headers)
            status = 200
            if is_init and "error" in reply and sid:
                self.sessions.pop(sid, None)  # a failed initialize leaves no session behind
                headers = {}
            return Response(rpc.dumps_safe(reply), media_type="application/json", status_code=status, headers=headers)
        return self._sse_reply(session, held, msg, headers)

    async def _read_body(self, request: Request) -> bytearray | Response:
        """The POST body, read as it arrives and refused (413) as soon as it passes ``MAX_BODY``, so a
        huge or endless upload costs at most ``MAX_BODY`` of memory. The 413 closes the connection:
        the rest of the upload is never read."""
        too_large = RpcError(rpc.INVALID_REQUEST, f"Request too large: the limit is {MAX_BODY} bytes")
        close = {"connection": "close"}
        length = request.headers.get("content-length")
        if length is not None and length.strip().isdigit() and int(length) > MAX_BODY:
            return self._error(413, None, too_large, headers=close)
        body = bytearray()
        async for chunk in request.stream():  # raises ClientDisconnect if the client goes away
            body += chunk
            if len(body) > MAX_BODY:
                return self._error(413, None, too_large, headers=close)
        return body

    async def _run_while_connected(self, request: Request, session: Session, msg: Any) -> Any:
        """Run a request or batch in a worker thread; if the client disconnects first, stop it.

        A JSON reply can only travel on this connection, so a client that went away will never read
        it: the rest of a batch is skipped, and the running request is cancelled (``ctx.cancelled``;
        a stateless session is closed). Raises ``_ClientGone`` then.
        """
        abort = threading.Event()
        work = asyncio.ensure_future(self._run(session.handle, msg, None, abort))
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if work.done():
            return work.result()
        abort.set()
        if session.stateless:
            session.close()
        else:
            for item in msg if isinstance(msg, list) else [msg]:
                if rpc.kind(item) == "request":
                    session.cancel(item["id"], "the client disconnected")
        work.add_done_callback(_settle)  # the thread finishes on its own; nothing awaits it
        raise _ClientGone()

    def _sse_reply(self, session: Session, held: _HttpSession | None, msg: dict[str, Any],
                   headers: dict[str, str]) -> Response:
        from starlette.responses import StreamingResponse

        loop = asyncio.get_running_loop()
        stream = EventStream(loop)
        if held is not None:
            held.keep(stream)

        def send(message: dict[str, Any]) -> None:
            if stream.done:
                raise NoStream("the response stream has finished")
            stream.push(message)

        send.close_stream = stream.cut  # type: ignore[attr-defined]

        async def produce() -> None:
            try:
                reply = await self._run(session.handle, msg, send)
            except Exception as exc:
                traceback.print_exc(file=sys.stderr)
                reply = rpc.error_response(msg.get("id"), RpcError(rpc.INTERNAL_ERROR, f"Internal error: {exc}"))
            stream.finish(reply)

        task = loop.create_task(produce())
        stateless = self.stateless

        async def body() -> Any:
            try:
                async for chunk in stream.follow(0, retry_ms=self.retry_ms, prime=True):
                    yield chunk
            finally:
                if stateless and not task.done():
                    session.close()  # the only reader left: a stateless request dies with its connection

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={**headers, "cache-control": "no-cache, no-transform", "x-accel-buffering": "no"})

    async def _get(self, request: Request) -> Response:
        from starlette.responses import StreamingResponse

        if "text/event-stream" not in request.headers.get("accept", ""):
            return self._error(406, None, RpcError(rpc.INVALID_REQUEST,
                               "Not Acceptable: GET opens an SSE stream; send Accept: text/event-stream"))
        bad_version = self._version_check(request)
        if bad_version is not None:
            return bad_version
        held = self._lookup(request)
        if not isinstance(held, _HttpSession):
            return held
        last = request.headers.get("last-event-id")
        if last:
            stream_id, _, seq = last.rpartition("_")
            stream = held.streams.get(stream_id)
            if stream is None and held.get_stream is not None and held.get_stream.id == stream_id:
                stream = held.get_stream
            if stream is None or not seq.isdigit():
                return self._error(404, None, RpcError(rpc.INVALID_REQUEST,
                                   f"Unknown Last-Event-ID {last!r}: that stream is gone; open a new GET stream"))
            after = int(seq)
            prime = False
        else:
            if held.get_stream is not None and not held.get_stream.done and held.get_stream.readers:
                return self._error(409, None, RpcError(rpc.INVALID_REQUEST,
                                   "Conflict: this session already has an open GET stream"))
            stream = EventStream(asyncio.get_running_loop(), standalone=True)
            held.get_stream = stream
            after, prime = 0, True
        return StreamingResponse(stream.follow(after, retry_ms=self.retry_ms, prime=prime), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache, no-transform", "x-accel-buffering": "no"})

    @staticmethod
    async def _run(fn: Callable[..., Any], *args: Any) -> Any:
        """Run synchronous core code in a worker thread (handlers may block on ctx.request)."""
        import anyio.to_thread

        return await anyio.to_thread.run_sync(fn, *args)


async def _disconnected(request: Request) -> None:
    """Return once the client has disconnected (the body has been read: only that can arrive now)."""
    while (await request.receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)  # a server that answers at once with empty body messages: do not spin


def _settle(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        print(f"cairn_servers.mcp: a request whose client disconnected failed: {task.exception()!r}", file=sys.stderr)


def mcp_app(server: Server, *, stateless: bool = False, json_response: bool = False,
            allowed_hosts: Iterable[str] | None = None, allowed_origins: Iterable[str] | None = None,
            dns_rebinding_protection: bool | None = None, retry_ms: int = 1000,
            session_idle_timeout: float = 3600.0, max_sessions: int = 1000) -> McpApp:
    """An ASGI app serving ``server`` over Streamable HTTP.

    :param stateless: no sessions; every POST stands alone (GET/DELETE answer 405).
    :param json_response: answer requests with JSON even when the client accepts SSE.
    :param allowed_hosts: Host names accepted when DNS-rebinding protection is on (any port);
        default ``localhost``, ``127.0.0.1``, ``[::1]``; ``"*"`` allows any.
    :param allowed_origins: extra full origins accepted (``https://app.example``).
    :param dns_rebinding_protection: ``None`` (default) turns it on when the server is bound to loopback.
    :param retry_ms: the SSE ``retry`` hint sent in each stream's priming event.
    """
    return McpApp(server, stateless=stateless, json_response=json_response, allowed_hosts=allowed_hosts,
                  allowed_origins=allowed_origins, dns_rebinding_protection=dns_rebinding_protection,
                  retry_ms=retry_ms, session_idle_timeout=session_idle_timeout, max_sessions=max_sessions)
