"""The stdio transport: newline-delimited JSON-RPC on stdin/stdout, logs on stderr.

A reader thread (the caller's) decodes each line. Quick methods are answered inline; methods that run
user code (tools/call, resources/read, prompts/get, completion/complete) go to a small worker pool so a
long tool never blocks pings, cancellations or the client's answers to server-to-client requests.
Writes go to the real stdout under a lock, one line per message. While serving, ``sys.stdout`` and file
descriptor 1 point at stderr, so nothing but protocol messages can reach the client.
On stdin EOF the server drains in-flight requests, then returns 0.
A line longer than ``max_line`` bytes (``$CAIRN_MCP_MAX_LINE``, default 8 MiB) is read in bounded
pieces and discarded, never held whole, and answered with a -32600 error (carrying the request's id
when it appears near the start of the line); the next line is served as usual.
Diagnostics go through ``cairn_servers.core.log`` (stderr): start-up and shutdown at info, and at debug every
message with its method (and tool name), outcome and duration.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import IO, Any, Callable

from cairn_servers.core import log
from cairn_servers.core.heap import trim_heap
from cairn_servers.mcp import jsonrpc as rpc
from cairn_servers.mcp.jsonrpc import RpcError

if TYPE_CHECKING:
    from cairn_servers.mcp.server import Server
    from cairn_servers.mcp.session import Session

_STOP = object()
MAX_LINE = 8 << 20  # bytes of one stdio message (twice HTTP's 4 MiB body: JSON escapes may double a text)
MAX_LINE_ENV = "CAIRN_MCP_MAX_LINE"
_DISCARD_CHUNK = 1 << 20
_ID_SCAN = 64 << 10  # bytes of an oversize line searched for its id


def max_line_setting() -> int:
    """The stdio line limit in force: ``$CAIRN_MCP_MAX_LINE`` (bytes, ``K``/``M`` suffixes allowed),
    else :data:`MAX_LINE`; a value that is not a size of at least 1 KiB is an ``InvalidInput``."""
    raw = os.environ.get(MAX_LINE_ENV, "").strip()
    if not raw:
        return MAX_LINE
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(raw[-1:].lower(), 1)
    digits = raw[:-1] if scale != 1 else raw
    if digits.lower().endswith("i"):  # 8Mi, 512Ki
        digits = digits[:-1]
    if not digits.isdigit() or len(digits) > 12 or int(digits) * scale < 1024:
        from cairn_servers.core.errors import InvalidInput

        raise InvalidInput(f"${MAX_LINE_ENV} must be a size in bytes of at least 1024 (e.g. 8388608 or 8M), "
                           f"not {raw[:40]!r}.")
    return int(digits) * scale


class _Writer:
    """Serializes whole messages onto the protocol stream, one line each: with ``fd`` (the real
    stdout's unbuffered descriptor) one ``os.write`` per line, else the stream's write + flush."""

    def __init__(self, stream: IO[bytes], fd: int | None = None) -> None:
        self._stream = stream
        self._fd = fd
        self._lock = threading.Lock()
        self.broken = False

    def __call__(self, message: Any) -> None:
        line = (rpc.encode_safe(message) if isinstance(message, dict) else rpc.encode(message)) + b"\n"
        with self._lock:
            if self.broken:
                return
            try:
                if self._fd is None:
                    self._stream.write(line)
                    self._stream.flush()
                    return
                view = memoryview(line)
                while view:  # a pipe takes a long line in parts
                    view = view[os.write(self._fd, view):]
            except (BrokenPipeError, OSError, ValueError):
                self.broken = True


class _Jobs:
    """The pool's first-in first-out queue of jobs: a deque, and a lock per waiting worker that a put
    releases. Not ``queue.SimpleQueue``: the queue module, heapq and their two C extensions kept
    ~0.25 MiB resident in every stdio server for this one queue; a hand-off costs ~2 us more."""

    def __init__(self) -> None:
        self._items: deque[Any] = deque()
        self._waiters: deque[Any] = deque()  # one held lock per worker blocked in get()
        self._mutex = threading.Lock()

    def put(self, item: Any) -> None:
        with self._mutex:
            self._items.append(item)
            if self._waiters:
                self._waiters.popleft().release()

    def get(self) -> Any:
        while True:
            with self._mutex:
                if self._items:
                    return self._items.popleft()
                wake = threading.Lock()
                wake.acquire()
                self._waiters.append(wake)
            wake.acquire()  # released by a put; another worker may have taken that item: look again


class _Pool:
    """A bounded pool of daemon worker threads, started on demand (no concurrent.futures: 13 ms to import)."""

    def __init__(self, max_workers: int) -> None:
        self._queue = _Jobs()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._max = max_workers
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if self._idle == 0 and len(self._threads) < self._max:
                t = threading.Thread(target=self._work, name=f"mcp-worker-{len(self._threads)}", daemon=True)
                self._threads.append(t)
                t.start()
            else:
                self._idle -= 1 if self._idle else 0
        self._queue.put(fn)

    def _work(self) -> None:
        while True:
            fn = self._queue.get()
            if fn is _STOP:
                return
            try:
                fn()
            except Exception:
                import traceback  # off the start-up path

                traceback.print_exc(file=sys.stderr)
            with self._lock:
                self._idle += 1

    def drain(self) -> None:
        """Finish queued work, then stop every worker."""
        with self._lock:
            threads = list(self._threads)
        for _ in threads:
            self._queue.put(_STOP)
        for t in threads:
            t.join()


def serve_stdio(server: Server, *, stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None,
                max_workers: int = 8, after_first: Callable[[], None] | None = None,
                max_line: int | None = None) -> int:
    """Serve ``server`` on stdin/stdout until stdin closes; returns the exit status (0).

    :param after_first: run once on the reader thread right after the first message (``initialize``)
        is answered: set-up that need not delay the client's first reply (warm-up threads, caches).
    :param max_line: the longest message line in bytes (default :func:`max_line_setting`); longer
        lines are discarded unread and answered with -32600.
    """
    if max_line is None:
        from cairn_servers.core.errors import InvalidInput

        try:
            max_line = max_line_setting()
        except InvalidInput as exc:  # before anything is served: a clear message and exit 2
            sys.stderr.write(f"{server.name}: error: {exc.message}\n")
            return 2
    limit = max_line
    redirect = stdout is None
    later: list[Callable[[], None]] = [server.declare_deferred_tools]  # before the next message is read
    if stdin is None:  # a server process of its own: tune malloc, but after answering (ctypes costs ms)
        from cairn_servers.core.heap import return_large_buffers

        later.append(return_large_buffers)
    if after_first is not None:
        later.append(after_first)
    saved_fd: int | None = None
    saved_stdout = sys.stdout
    if redirect:
        # Keep the real stdout for protocol messages; point fd 1 and sys.stdout at stderr so a stray
        # print() or a chatty C library cannot corrupt the stream.
        sys.stdout.flush()
        saved_fd = os.dup(1)
        os.dup2(2, 1)
        out: IO[bytes] = os.fdopen(os.dup(saved_fd), "wb", buffering=0)
        sys.stdout = sys.stderr
    else:
        out = stdout  # type: ignore[assignment]
    inp = stdin if stdin is not None else sys.stdin.buffer
    write = _Writer(out, out.fileno() if redirect else None)  # out is unbuffered when redirect
    session = server.open_session(send=write)
    pool = _Pool(max_workers)
    started = time.monotonic()
    log.info(f"serving MCP on stdio ({server.name} {server.version}, pid {os.getpid()})")
    try:
        _read_loop(session, inp, write, pool, later, limit)
    finally:
        session.abandon_requests()  # nobody is left to answer them; then finish what is in flight
        pool.drain()
        session.close()
        log.info(f"stdin closed: stopped after {time.monotonic() - started:.1f} s")
        if redirect:
            assert saved_fd is not None
            sys.stdout = saved_stdout
            os.dup2(saved_fd, 1)
            os.close(saved_fd)
            out.close()
    return 0


def _read_loop(session: Session, inp: IO[bytes], write: _Writer, pool: _Pool,
               later: list[Callable[[], None]] | None = None, max_line: int = MAX_LINE) -> None:
    answered = False
    while not write.broken:
        if later and answered:  # the first message was answered: now the deferred set-up
            _run_later(later)
            later = None
        line = inp.readline(max_line + 1)  # bounded: a 100 MB line is never held whole
        if not line:
            return  # EOF: the caller drains in-flight requests
        if len(line) > max_line and not line.endswith(b"\n"):
            answered = True
            write(_oversize_reply(line, inp, max_line))
            del line
            trim_heap(min_interval=1.0)
            continue
        if not line.strip():
            continue
        answered = True
        try:
            msg = rpc.loads(line)
        except RpcError as exc:
            write(rpc.error_response(None, exc))
            continue
        try:
            refused = session.enqueue(msg)  # an error when the id is already in flight
            if refused is None and session.is_slow(msg):
                pool.submit(_job(session, msg, write))
                continue
            reply = refused if refused is not None else _handle(session, msg, write)
        except Exception as exc:  # defensive: dispatch bugs must not end the session
            import traceback  # off the start-up path

            traceback.print_exc(file=sys.stderr)
            reply = rpc.error_response(msg.get("id") if isinstance(msg, dict) else None,
                                       RpcError(rpc.INTERNAL_ERROR, f"Internal error: {exc}"))
        if reply is not None:
            write(reply)
        trim_heap(min_interval=1.0)  # parse errors of huge or deeply nested lines are answered here


def _oversize_reply(head: bytes, inp: IO[bytes], max_line: int) -> Any:
    """Discard the rest of an oversize line in bounded pieces; the -32600 reply for it."""
    discarded = len(head)
    while True:
        piece = inp.readline(_DISCARD_CHUNK)
        discarded += len(piece)
        if not piece or piece.endswith(b"\n"):
            break
    log.warn(f"discarded a stdio message of {discarded} bytes, over the {max_line}-byte limit (${MAX_LINE_ENV})")
    return rpc.error_response(_leading_id(head[:_ID_SCAN]), RpcError(
        rpc.INVALID_REQUEST, f"Request too large: a stdio message may hold at most {max_line} bytes "
                             f"(${MAX_LINE_ENV}); this one was discarded unread. Send less in one message."))


def _leading_id(prefix: bytes) -> Any:
    """The ``id`` member of the JSON object that ``prefix`` begins, when it is complete within the
    prefix and at the top level (a nested ``"id"`` is not the request's); else None."""
    import re

    tokens = re.finditer(rb'"(?:[^"\\]|\\.)*"|[{}\[\],:]|[^\s{}\[\],:"]+', prefix)
    depth = 0
    expect_key = False
    key: bytes | None = None
    value: bytes | None = None
    for i, m in enumerate(tokens):
        tok = m.group()
        if i == 0 and tok != b"{":
            return None
        if value is not None:  # the id's value is complete only if a separator follows it
            if tok in (b",", b"}"):
                try:
                    found = rpc.loads(value)
                except RpcError:
                    return None
                return found if isinstance(found, str) or (type(found) is int) else None
            return None
        if tok in (b"{", b"["):
            depth += 1
            expect_key = depth == 1 and tok == b"{"
        elif tok in (b"}", b"]"):
            depth -= 1
            expect_key = False
        elif tok == b",":
            expect_key = depth == 1
        elif tok == b":":
            pass
        elif expect_key:
            key, expect_key = tok, False
        elif depth == 1 and key == b'"id"':
            value = tok
        else:
            key = None if depth == 1 else key
    return None


def _run_later(later: list[Callable[[], None]]) -> None:
    """Run the deferred set-up (after the first reply); a failure is printed, never fatal."""
    for fn in later:
        try:
            fn()
        except Exception:
            import traceback

            traceback.print_exc(file=sys.stderr)


def _handle(session: Session, msg: Any, write: _Writer) -> Any:
    """``session.handle``, logged at debug with the method, the outcome and the time it took."""
    if not log.enabled(log.DEBUG):
        return session.handle(msg, write)
    t0 = time.perf_counter()
    reply = session.handle(msg, write)
    log.debug(f"{log.describe(msg)} {log.outcome(reply)} {(time.perf_counter() - t0) * 1000:.2f} ms")
    return reply


def _job(session: Session, msg: Any, write: _Writer) -> Callable[[], None]:
    def run() -> None:
        try:
            reply = _handle(session, msg, write)
        except Exception as exc:
            import traceback  # off the start-up path

            traceback.print_exc(file=sys.stderr)
            reply = rpc.error_response(msg.get("id") if isinstance(msg, dict) else None,
                                       RpcError(rpc.INTERNAL_ERROR, f"Internal error: {exc}"))
        if reply is not None:
            write(reply)
        # Tool calls are where big transient allocations happen (huge arguments, Lua runs, parses);
        # without this a long-running server keeps their freed memory resident in fragmented arenas.
        trim_heap(min_interval=1.0)

    return run
