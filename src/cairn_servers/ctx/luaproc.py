"""Lua runs in worker processes that the server can kill.

The sandbox (``cairn_servers.ctx.lua``) stops Lua code with an instruction-count hook, but a hook never fires
inside a C function: ``string.rep("", 1e10)``, a pathological pattern or a library loop the sandbox
did not foresee keeps its thread busy, and a Python thread cannot be stopped from outside. So every
script run (a tool's declaration, a tool call, a connector scan) happens in a worker process:

* the parent sends the job as one frame (4-byte big-endian length + JSON) on the worker's stdin and
  reads frames back from its stdout: ``{"call": name, "args": [...]}`` asks the parent to run a
  ``context.*`` function against its knowledge base (answered with ``{"reply": ...}``), and
  ``{"done": {"ok": ..., "value" | "error"}}`` ends the job;
* the parent waits for at most the job's timeout plus ``GRACE`` seconds. The hook normally answers
  first with a clean :class:`Timeout`; if it does not (a C function is still running), the parent
  kills the worker (SIGKILL), reports the timeout, and the next job starts a fresh worker. A worker
  that dies (a Lua panic, the OOM killer) is an :class:`ExtensionError` for that call only.
* the job's ``timeout`` covers the ``context.*`` calls the parent answers for it: each runs under the
  job's deadline (:mod:`cairn_servers.core.deadline`: its database statements stop there, a pooled
  connection is awaited no longer) and one that ends past it is a :class:`Timeout` for the whole call,
  its worker killed; so a tool answers within its timeout plus a statement's interruption, and frees
  its server thread then.
* a caller that gives up (its HTTP client disconnected, or MCP ``notifications/cancelled``) passes
  ``cancelled``: the waiting side checks it every ``CANCEL_POLL`` s, then kills the worker, frees its
  slot and raises :class:`Cancelled`; a ``context.*`` answer computed meanwhile is dropped, not sent.
* workers are reused (each job still gets a fresh Lua state); at most ``size`` run at once, others
  wait. :meth:`LuaPool.close` kills them all, so a server's shutdown never waits for a script, and
  a worker whose parent is gone exits by itself (a watchdog thread checks every ``ORPHAN_CHECK`` s).

Cost: one round trip on a pipe per call (plus one per ``context.*`` call), measured in docs/ctx.md.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from cairn_servers.core.errors import ALL_ERRORS, CairnError, ExtensionError, Timeout

GRACE = 1.0  # seconds a job may run past its timeout before its worker is killed
CANCEL_POLL = 0.05  # seconds between checks, while a job runs, that its caller has not gone away
START_TIMEOUT = 60.0  # seconds a new worker may take to import lupa and say it is ready
ORPHAN_CHECK = 0.5  # seconds between a worker's checks that its parent is still alive
MAX_FRAME = 1 << 30
_HEADER = struct.Struct(">I")
_ERRORS = {cls.__name__: cls for cls in ALL_ERRORS}
# What a worker runs for each job, named rather than imported: ``cairn_servers.ctx.scripts`` builds on the pool
# (it imports this module), so this module only names it and the worker process imports it.
JOB_RUNNER = "cairn_servers.ctx.scripts:run_job"

Callback = Callable[[str, list[Any]], Any]
CancelCheck = Callable[[], bool]


class Cancelled(CairnError):
    """The caller gave up on a Lua call (its client disconnected or sent notifications/cancelled).

    Nobody reads the answer: MCP sends no response for a cancelled request, and an HTTP client that
    went away gets none. 499 is the status web servers log for "client closed the request"."""

    code = "cancelled"
    http_status = 499
    jsonrpc_code = -32800  # RequestCancelled, as in LSP


class _WorkerGone(Exception):
    """The worker closed its pipe or died."""


class _Worker:
    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # the directory holding the cairn package
        code = (f"import sys; sys.path.insert(0, {root!r}); from cairn_servers.ctx.luaproc import worker_main; "
                f"worker_main({JOB_RUNNER!r})")
        self.proc = subprocess.Popen([sys.executable, "-I", "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=None, bufsize=0, close_fds=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.wfd = self.proc.stdin.fileno()
        self.rfd = self.proc.stdout.fileno()
        self.buf = bytearray()
        self.ready = False

    def wait_ready(self, cancelled: CancelCheck | None = None) -> None:
        if not self.ready:
            msg = self.recv(time.monotonic() + START_TIMEOUT, cancelled)
            if msg.get("ready") is not True:
                raise _WorkerGone("the Lua worker did not start")
            self.ready = True

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, default=str).encode("utf-8")
        try:
            _write_all(self.wfd, _HEADER.pack(len(data)) + data)
        except OSError:
            raise _WorkerGone("the Lua worker closed its input") from None

    def recv(self, deadline: float, cancelled: CancelCheck | None = None) -> dict[str, Any]:
        """One frame; raises ``TimeoutError`` once ``deadline`` passes, :class:`_WorkerGone` on EOF and
        :class:`Cancelled` once ``cancelled()`` is true (checked every ``CANCEL_POLL`` s)."""
        import select

        poller = select.poll()  # not select(): a busy server's descriptors may be over 1024
        poller.register(self.rfd, select.POLLIN)
        while True:
            if len(self.buf) >= 4:
                (size,) = _HEADER.unpack_from(self.buf)
                if size > MAX_FRAME:
                    raise _WorkerGone("the Lua worker sent a malformed frame")
                if len(self.buf) >= 4 + size:
                    data = bytes(self.buf[4:4 + size])
                    del self.buf[:4 + size]
                    value = json.loads(data)
                    if not isinstance(value, dict):
                        raise _WorkerGone("the Lua worker sent a malformed frame")
                    return value
            if cancelled is not None and cancelled():
                raise Cancelled("cancelled")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if cancelled is not None:
                left = min(left, CANCEL_POLL)
            if not poller.poll(max(1, int(left * 1000))):
                continue
            try:
                chunk = os.read(self.rfd, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                raise _WorkerGone("the Lua worker stopped")
            self.buf += chunk

    def kill(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover (SIGKILL of a child does not take seconds)
            pass

    def status(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "still running"
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class LuaPool:
    """Up to ``size`` Lua worker processes; :meth:`run` runs one job on one of them."""

    def __init__(self, size: int = 8, *, grace: float = GRACE) -> None:
        self.size = size
        self.grace = grace
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> "LuaPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def warm(self) -> None:
        """Start one worker now (the first call then pays no start-up)."""
        with self._lock:
            if self._idle or self._busy or self._closed:
                return
        worker = _Worker()
        with self._lock:
            self._idle.append(worker)

    def run(self, job: dict[str, Any], *, label: str, timeout: float, call: Callback | None = None,
            cancelled: CancelCheck | None = None) -> Any:
        """Run ``job`` (see :func:`worker_main`) and return its value or raise its error.

        ``call(name, args)`` answers the script's ``context.*`` calls; ``timeout`` is the job's own
        budget (the worker enforces it; the parent kills the worker ``GRACE`` s after it). Once
        ``cancelled()`` is true (checked every ``CANCEL_POLL`` s while waiting for a slot or for the
        worker, and after each ``context.*`` call) the worker is killed, its slot freed (the next job
        starts a fresh worker) and :class:`Cancelled` raised."""
        if not self._acquire(cancelled):
            raise Cancelled(f"{label}: cancelled before it started.")
        try:
            worker = self._checkout()
            reusable = False
            try:
                try:
                    worker.wait_ready(cancelled)
                    started = time.monotonic()
                    deadline = started + timeout + self.grace
                    worker.send({"job": job})
                    while True:
                        msg = worker.recv(deadline, cancelled)
                        if "call" in msg:
                            # The script's budget covers its context.* calls: each runs under the run's deadline
                            # (its statements stop there) and a call that ends past it ends the run.
                            answer = _answer(call, msg, started + timeout,
                                             f"{label}: exceeded its time limit of {timeout:g} s in a "
                                             f"context.{str(msg.get('call'))[:40]} call. Raise `timeout` in its "
                                             "config or make it search less")
                            if cancelled is not None and cancelled():  # the result of a context.* call
                                raise Cancelled("cancelled")           # in flight is dropped, never sent
                            worker.send({"reply": answer})
                            continue
                        done = msg.get("done")
                        if not isinstance(done, dict):
                            raise _WorkerGone("the Lua worker sent a malformed frame")
                        reusable = True
                        if done.get("ok"):
                            return done.get("value")
                        raise _rebuild(done.get("error"), label)
                except Cancelled:  # the worker is killed by _checkin (not reusable): nothing of it is kept
                    raise Cancelled(f"{label}: cancelled by its caller; its Lua worker was stopped.") from None
                except TimeoutError:
                    raise Timeout(f"{label}: exceeded its time limit of {timeout:g} s (a library call did not "
                                  "stop in time, so its Lua worker was killed). Make the script do less.") from None
                except _WorkerGone as exc:
                    if self._closed:
                        raise ExtensionError(f"{label}: stopped: the server is shutting down.") from None
                    try:
                        worker.proc.wait(timeout=0.5)  # for the exit status in the message
                    except subprocess.TimeoutExpired:
                        pass
                    raise ExtensionError(f"{label}: {exc} ({worker.status()}): the script crashed its sandbox "
                                         "(out of memory?). Other calls are not affected.") from None
            finally:
                self._checkin(worker, reusable)
        finally:
            self._slots.release()

    def _acquire(self, cancelled: CancelCheck | None) -> bool:
        """Wait for a free slot; False if ``cancelled()`` turns true first."""
        if cancelled is None:
            self._slots.acquire()
            return True
        while not self._slots.acquire(timeout=CANCEL_POLL):
            if cancelled():
                return False
        if cancelled():
            self._slots.release()
            return False
        return True

    def _checkout(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise ExtensionError("Lua scripts cannot run: the server is shutting down.")
            worker = self._idle.pop() if self._idle else None
        if worker is None or worker.proc.poll() is not None:
            if worker is not None:
                worker.kill()
            worker = _Worker()
        with self._lock:
            self._busy.add(worker)
        return worker

    def _checkin(self, worker: _Worker, reusable: bool) -> None:
        with self._lock:
            self._busy.discard(worker)
            keep = reusable and not self._closed and worker.proc.poll() is None
            if keep:
                self._idle.append(worker)
        if not keep:
            worker.kill()

    def close(self) -> None:
        """Kill every worker, busy ones included: their callers get an error at once."""
        with self._lock:
            self._closed = True
            workers = self._idle + list(self._busy)
            self._idle = []
        for worker in workers:
            worker.kill()

    def pids(self) -> list[int]:
        with self._lock:
            return [w.proc.pid for w in self._idle + list(self._busy)]


def _answer(call: Callback | None, msg: dict[str, Any], at: float, what: str) -> dict[str, Any]:
    """The reply to a ``context.*`` call, computed under the run's deadline ``at``: past it, the call's
    work stops (:mod:`cairn_servers.core.deadline`) and :class:`Timeout` ends the run (its worker is killed)."""
    from cairn_servers.core import deadline

    if call is None:
        return {"ok": False, "error": {"class": "ExtensionError", "message": "context is not available here"}}
    with deadline.bounded(at, what):
        deadline.check()
        try:
            return {"ok": True, "value": call(str(msg.get("call")), list(msg.get("args") or []))}
        except Timeout:
            raise
        except CairnError as exc:
            if deadline.passed():
                raise deadline.expired() from None
            return {"ok": False, "error": _describe(exc)}


def _describe(exc: CairnError) -> dict[str, Any]:
    """An error for the pipe, named by the nearest class the other side can rebuild (a subclass such as
    ``EmbeddingsDisabled`` travels as ``InvalidInput``, so it stays a 400, not a script failure)."""
    cls = next(c for c in type(exc).__mro__ if _ERRORS.get(c.__name__) is c)
    return {"class": cls.__name__, "message": exc.message, "details": exc.details}


def _rebuild(error: Any, label: str) -> Exception:
    if not isinstance(error, dict):
        return ExtensionError(f"{label}: the Lua worker reported an unreadable error.")
    cls = _ERRORS.get(str(error.get("class")))
    message = str(error.get("message") or "Lua error")
    if cls is None:  # an unexpected exception inside the worker: an internal error, as in-process
        return RuntimeError(message)
    details = error.get("details")
    return cls(message, details=details if isinstance(details, dict) else None)


# ---- the worker -----------------------------------------------------------------------------------


def worker_main(runner: str = JOB_RUNNER) -> None:
    """A worker's loop: read a job, run it with ``runner`` (``module:function``), answer; exit when the
    parent closes the pipe or dies."""
    channel = os.dup(1)
    os.dup2(2, 1)  # anything printed by mistake goes to stderr, never into the channel
    sys.stdout = sys.stderr
    parent = os.getppid()

    def watch() -> None:  # a C function cannot be interrupted, but this thread runs beside it
        while True:
            time.sleep(ORPHAN_CHECK)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, daemon=True, name="ctx-lua-orphan-check").start()
    import importlib

    module, _, function = runner.partition(":")
    run_job = getattr(importlib.import_module(module), function)

    reader = _Reader(0)
    send = _sender(channel)
    send({"ready": True})
    while True:
        msg = reader.read()
        if msg is None:
            return
        job = msg.get("job")
        if not isinstance(job, dict):
            continue

        def call(name: str, args: list[Any]) -> Any:
            send({"call": name, "args": args})
            answer = reader.read()
            reply = answer.get("reply") if answer else None
            if not isinstance(reply, dict):
                os._exit(0)  # the parent is gone or confused: nothing sensible is left to do
            if reply.get("ok"):
                return reply.get("value")
            err = _rebuild(reply.get("error"), "context")
            raise err if isinstance(err, CairnError) else ExtensionError(str(err))

        try:
            value = run_job(job, call)
            done: dict[str, Any] = {"ok": True, "value": value}
        except CairnError as exc:
            done = {"ok": False, "error": _describe(exc)}
        except Exception as exc:  # noqa: BLE001 (reported to the parent as an internal error)
            done = {"ok": False, "error": {"class": type(exc).__name__, "message": f"{type(exc).__name__}: {exc}"}}
        send({"done": done})


class _Reader:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = bytearray()

    def _fill(self, n: int) -> bool:
        while len(self.buf) < n:
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return False
            self.buf += chunk
        return True

    def read(self) -> dict[str, Any] | None:
        if not self._fill(4):
            return None
        (size,) = _HEADER.unpack_from(self.buf)
        if size > MAX_FRAME or not self._fill(4 + size):
            return None
        data = bytes(self.buf[4:4 + size])
        del self.buf[:4 + size]
        value = json.loads(data)
        return value if isinstance(value, dict) else None


def _sender(fd: int) -> Callable[[dict[str, Any]], None]:
    def send(message: dict[str, Any]) -> None:
        data = json.dumps(message, default=str).encode("utf-8")
        try:
            _write_all(fd, _HEADER.pack(len(data)) + data)
        except OSError:
            os._exit(0)  # the parent closed the pipe

    return send
