"""The document reader's worker process: PDF and Office files are read outside the sync, under limits.

:class:`Reader` (one per connector and sync) starts ``python -m cairn_servers.ctx.reader``, a fresh
interpreter, not a fork of the sync: it holds none of the parent's memory, so its limits measure
the reader alone. The worker reads one document at a time under:

* an address-space limit (``RLIMIT_AS``, :data:`~cairn_servers.ctx.extract.MEMORY_MB`), set once at
  start: past it Python raises MemoryError and PDFium or calamine abort;
* a CPU-time limit per document (``RLIMIT_CPU``, :data:`~cairn_servers.ctx.extract.CPU_SECONDS`
  from the CPU time already used): past it the kernel ends the worker with SIGXCPU;
* a wall-clock limit, enforced by the parent: a worker still busy ``MAX_SECONDS + KILL_AFTER`` after
  it was handed the document is killed;
* an output limit, enforced by the parent: an answer longer than
  :data:`~cairn_servers.ctx.extract.OUTPUT_MB` is not read, and the worker is killed.

A worker that dies or is killed costs that one document (:class:`~cairn_servers.ctx.extract.Skipped`
with the reason, which names the limit); the next document gets a fresh worker. The parsers' own
caps (XML bytes and elements, sheet cells, PDF pages, operators, streams, nested forms) are applied
inside the worker by ``cairn_servers.ctx.extract`` and end with the same kind of warning.

The pipe carries length-prefixed frames: a JSON header and the document's bytes in, one JSON answer
out (JSON, not pickle: the parent never runs what a worker that read hostile input sends back). The
worker's stdout (fd 1) points at stderr, so a native library that prints cannot corrupt the pipe. An
idle worker exits after :data:`IDLE_SECONDS`, and when its parent is gone (end of file on its stdin).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time
from typing import IO, Any

from cairn_servers.ctx import extract as ex

IDLE_SECONDS = 30.0
_LEN = struct.Struct(">Q")
_SIGNALS = {6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV", 24: "SIGXCPU"}


class Reader:
    """Reads PDF and Office files in a worker process (started on first use, reused, replaced as needed).

    HTML and text are read in process, and so is everything on Windows (the parsers' caps still hold
    there; the worker's limits do not).
    """

    def __init__(self) -> None:
        self._proc: Any = None
        self._memory: int | None = None  # the memory limit the running worker was started with

    def extract(self, data: bytes, name: str, fmt: str) -> ex.Extracted:
        if fmt not in ex.BINARY_FORMATS or sys.platform == "win32":  # no select() on pipes: read in process
            try:
                return ex.extract(data, name, fmt)
            except MemoryError:
                raise ex.Skipped("could not be read (MemoryError)") from None
        limits = ex.limits()
        header = json.dumps({"name": name, "fmt": fmt, "limits": limits}).encode()
        for attempt in (0, 1):
            if self._proc is None or self._proc.poll() is not None or self._memory != limits["MEMORY_MB"]:
                self._start(limits["MEMORY_MB"])
            try:
                _send(self._proc.stdin, header, data)
                break
            except OSError:  # the worker ended (idle, or it died): one more try with a fresh one
                if attempt:
                    raise self._died(fmt, limits) from None
                self.stop()
        wait = float(limits["MAX_SECONDS"]) + float(limits["KILL_AFTER"])
        try:
            answer = self._answer(time.monotonic() + wait, limits["OUTPUT_MB"] << 20)
        except TimeoutError:
            self.stop()
            raise ex.Skipped(f"extraction did not finish within {wait:.0f} s; its worker was killed") from None
        except _TooLong as exc:
            self.stop()
            with _LimitsOf(limits):
                raise ex.over("OUTPUT_MB", f"the text is {exc.size / (1 << 20):,.1f} MiB") from None
        except (OSError, EOFError, ValueError):
            raise self._died(fmt, limits) from None
        if answer.get("last"):  # the worker ends after this answer (a MemoryError): the next file gets another
            self.stop()
        if answer.get("kind") == "skip":
            raise ex.Skipped(str(answer.get("reason")))
        try:
            fields = answer["fields"]
            title, warning = fields.get("title"), fields.get("warning")
            return ex.Extracted(body=str(fields["body"]), title=None if title is None else str(title),
                                sections=int(fields.get("sections", 0)), metadata=dict(fields.get("metadata") or {}),
                                warning=None if warning is None else str(warning))
        except (KeyError, TypeError, ValueError, AttributeError):
            self.stop()
            raise ex.Skipped(f"the {fmt.upper()} reader sent an answer that could not be read; its worker was killed"
                             ) from None

    def _answer(self, deadline: float, most: int) -> dict[str, Any]:
        fd = self._proc.stdout.fileno()
        size = _LEN.unpack(_read(fd, _LEN.size, deadline))[0]
        if size > most:
            raise _TooLong(size)
        answer = json.loads(_read(fd, size, deadline))
        if not isinstance(answer, dict):
            raise ValueError("not an answer")
        return answer

    def _died(self, fmt: str, limits: dict[str, Any]) -> ex.Skipped:
        """The Skipped for a worker that went away while reading, with what its exit says."""
        code, peak = _reap(self._proc) if self._proc is not None else (None, 0)
        self.stop()
        if code is None:  # still running: it sent something that is not an answer
            return ex.Skipped(f"the {fmt.upper()} reader sent an answer that could not be read; its worker was killed")
        how = f"signal {-code}" if code < 0 else f"exit status {code}"
        with _LimitsOf(limits):
            if code == -24:  # SIGXCPU: the soft RLIMIT_CPU
                return ex.Skipped(f"the {fmt.upper()} reader was stopped: {ex.limit_text('CPU_SECONDS')}")
            # An allocation refused by RLIMIT_AS aborts PDFium and calamine (SIGABRT); SIGKILL is the OOM
            # killer; Python itself may fail to unwind a MemoryError (exit status 1) with its memory near the limit.
            if code in (-6, -9) or (code > 0 and peak << 10 >= (limits["MEMORY_MB"] << 20) * 3 // 4):
                name = _SIGNALS[-code] if code < 0 else how
                return ex.Skipped(f"the {fmt.upper()} reader stopped ({name}), most likely " + ex.limit_text("MEMORY_MB"))
        return ex.Skipped(f"the {fmt.upper()} reader crashed on this file ({how})")

    def _start(self, memory_mb: int) -> None:
        import subprocess
        from pathlib import Path

        self.stop()
        src = str(Path(__file__).resolve().parents[2])  # the folder that holds cairn_servers
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "cairn_servers.ctx.reader", str(memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True,
        )
        self._memory = memory_mb

    def stop(self) -> None:
        """End the worker (if any); the next :meth:`extract` starts another."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.returncode is None:
            try:
                proc.kill()
            except OSError:
                pass
            try:
                proc.wait(5)
            except Exception:  # noqa: BLE001 - already reaped by _died
                pass
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class _TooLong(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class _LimitsOf:
    """Within: the module's limits are ``values`` (so a message names the limit the worker had)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values
        self.saved: dict[str, Any] = {}

    def __enter__(self) -> None:
        self.saved = {k: getattr(ex, k) for k in self.values}
        ex.apply_limits(self.values)

    def __exit__(self, *exc: object) -> None:
        ex.apply_limits(self.saved)


def _reap(proc: Any, wait: float = 2.0) -> tuple[int | None, int]:
    """(exit code, peak RSS in KiB) of a worker that is exiting; (None, 0) if it is still running after ``wait``."""
    deadline = time.monotonic() + wait
    while True:
        try:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:  # already reaped
            return proc.returncode, 0
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_maxrss
        if time.monotonic() > deadline:
            return None, 0
        time.sleep(0.01)


def _send(pipe: IO[bytes], header: bytes, data: bytes) -> None:
    pipe.write(_LEN.pack(len(header)) + header)
    pipe.write(_LEN.pack(len(data)))
    pipe.write(data)
    pipe.flush()


def _read(fd: int, n: int, deadline: float) -> bytes:
    """Exactly ``n`` bytes from ``fd`` by ``deadline`` (TimeoutError), EOFError if the writer is gone."""
    import select

    parts: list[bytes] = []
    while n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


# ---- the worker ----------------------------------------------------------------------------------


def _limit(memory_mb: int) -> None:
    try:
        import resource
    except ImportError:  # not on this platform: the parent's wall-clock and output limits remain
        return
    cap = memory_mb << 20
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def _cpu(seconds: int) -> None:
    try:
        import resource
    except ImportError:
        return
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(used.ru_utime + used.ru_stime) + 1 + seconds
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _frame(stream: IO[bytes]) -> bytes | None:
    head = stream.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    size = _LEN.unpack(head)[0]
    body = stream.read(size)
    return body if len(body) == size else None


def main(argv: list[str]) -> int:
    """The worker's loop: (header, bytes) in, ``{"kind": "ok", "fields": ...}`` or ``{"kind": "skip", ...}`` out."""
    import select

    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything a library prints goes to stderr, never into the pipe
    requests = sys.stdin.buffer
    _limit(int(argv[0]) if argv else ex.MEMORY_MB)
    reserve = bytearray(4 << 20)  # given back on MemoryError, so the answer can still be written
    while True:
        if not select.select([requests], [], [], IDLE_SECONDS)[0]:
            return 0  # idle: the parent starts another when it needs one
        raw = _frame(requests)
        data = _frame(requests) if raw is not None else None
        if raw is None or data is None:
            return 0  # the parent closed the pipe (or is gone)
        request = json.loads(raw)
        ex.apply_limits(request["limits"])
        out_of_memory = json.dumps({"kind": "skip", "reason": ex.limit_text("MEMORY_MB"), "last": True}).encode()
        _cpu(int(ex.CPU_SECONDS))
        message: dict[str, Any] | None = None
        try:
            out = ex.extract(data, request["name"], request["fmt"])
            message = {"kind": "ok", "fields": {"body": out.body, "title": out.title, "sections": out.sections,
                                                "metadata": out.metadata, "warning": out.warning}}
            del out
        except ex.Skipped as exc:
            message = {"kind": "skip", "reason": exc.reason}
        except MemoryError:
            reserve = bytearray()
        except BaseException as exc:  # noqa: BLE001 - RecursionError and the like: this file only
            message = {"kind": "skip", "reason": f"could not be read ({type(exc).__name__})"}
        del data
        try:
            body = json.dumps(message, ensure_ascii=False).encode("utf-8", errors="replace") if message else out_of_memory
        except MemoryError:
            reserve, message, body = bytearray(), None, out_of_memory
        answers.write(_LEN.pack(len(body)))
        answers.write(body)
        answers.flush()
        if not reserve:
            return 0  # after a MemoryError the next document gets a fresh worker


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
