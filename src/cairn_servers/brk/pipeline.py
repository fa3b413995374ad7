"""``brk index --jobs N``: the computed passes run as stages in their own processes beside the indexer.

The indexer (the parent process, with its block-parsing process) appends to the raw store; each stage
process runs its passes (``cairn_servers.brk.compute.run_passes``) over the heights the raw store has
committed, again and again as the indexer commits more:

* ``N == 1``: no stage process; the passes run after the indexer in the same process (``compute``).
* ``N >= 2``: two stage processes, ``computed`` + ``utxo`` (with ``realized``) + ``cohorts`` + ``addrcohorts`` +
  ``mining`` in one,
  ``addresses`` + ``explorer`` (the block explorer's indexes, which read the address pass's ids) in the
  other (they cost several times the others together; a finer split would not go faster: see docs/brk.md).

The parent talks to each stage over its stdin/stdout, one line per message. Parent to stage: ``go N``
(the raw store committed more heights; ``go N now``: start a cycle at once, the indexer is done),
``hold`` (a reorg is about to truncate the raw store: stop at the next committed chunk and wait),
``end`` (finish what the raw store holds, then exit) and ``stop`` (Ctrl-C: stop at the next committed
chunk and exit). Stage to parent, one JSON object a line:
``took`` (a cycle starts, having read ``go`` number ``seq``), ``idle`` (the cycle is done), ``held``,
``progress`` (a ``Stage`` event of a pass), ``error`` and ``exit``.

The queue between the indexer and a stage is bounded: at most ``MAX_BEHIND`` commits not yet taken by
the stage; past that the indexer waits (back-pressure), so a slow stage reads what the indexer wrote
recently (still in the page cache) and never falls arbitrarily far behind. Crash safety is the passes'
own: every pass resumes from its own committed height, and a stage whose parent dies (SIGKILL) sees end
of file on its stdin and stops at its next committed chunk. A stage that dies makes the whole command
fail with a clear error (the other stages stop at their next chunk).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from cairn_servers.core.errors import CairnError

MAX_BEHIND = 8  # commits of the indexer a stage may have left to take before the indexer waits
# A stage starts its next cycle once this many commits wait for it, or CYCLE_S seconds after the last one
# began (or at once when the indexer is done): each cycle re-opens the passes' stores (the address
# index, its filter, the per-block arrays), a cost worth paying every few seconds, not at every commit.
CYCLE_COMMITS = MAX_BEHIND // 2
CYCLE_S = 5.0


def default_jobs() -> int:
    return max(1, os.cpu_count() or 1)


def groups(jobs: int) -> list[tuple[str, ...]]:
    """The passes of each stage process for ``jobs`` processes in all (the indexer is one)."""
    if jobs <= 1:
        return []
    # Two processes or more: the address and explorer passes (the costly ones, and the explorer reads what the
    # address pass writes) in one stage, the others in another. With one stage for all of them, that stage
    # was the slowest process of a two-core job and the indexer waited on it (docs/benchmarks.md).
    # The address cohorts read what the address pass commits but cost little: in the lighter stage, following the
    # address pass's committed height (``FOLLOWERS``: the tail it has not reached is done once both stages end).
    return [("computed", "utxo", "cohorts", "addrcohorts", "mining"), ("addresses", "explorer")]


# Passes of one stage that follow a pass of another: once every stage has ended, the parent runs them to the tip.
FOLLOWERS = ("addrcohorts",)


class StageFailed(CairnError):
    """A stage process died or failed: the command fails (committed heights are kept)."""


class _Child:
    def __init__(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        self.name = name
        self.proc = proc
        self.sent = 0  # ``go`` messages sent
        self.took = 0  # the last ``go`` a started cycle had read
        self.done = 0  # the last ``go`` a finished cycle covered
        self.held = False
        self.exited = False  # said ``exit`` (or its stdout ended)
        self.said_exit = False
        self.error: str | None = None  # a user-facing error it reported (a full disk, ...)
        self.error_exit = 1  # and its exit code

    def send(self, line: str) -> None:
        stdin = self.proc.stdin
        if stdin is None:
            return
        try:
            stdin.write(line.encode() + b"\n")
            stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # it died: its reader thread reports it


class Pipeline:
    """The stage processes of one ``brk index`` run (see the module docstring)."""

    def __init__(self, out: Path, blocks_dir: Path, jobs: int, *, durable: bool = True,
                 progress: Callable[..., None] | None = None, on_failure: Callable[[], None] | None = None,
                 on_stop: Callable[[], None] | None = None) -> None:
        self.out = out
        self.blocks_dir = blocks_dir
        self.durable = durable
        self.progress = progress
        self.on_failure = on_failure
        self.on_stop = on_stop
        self.closing = False
        self.cond = threading.Condition()
        self.children: list[_Child] = []
        self.failed: str | None = None
        self.failed_exit = 1
        self._relay = _Relay(progress) if progress is not None else None
        for passes in groups(jobs):
            self._spawn(passes)

    # -- processes ----------------------------------------------------------------------------------
    def _spawn(self, passes: tuple[str, ...]) -> None:
        config = {"out": str(self.out), "blocks_dir": str(self.blocks_dir), "passes": list(passes),
                  "durable": self.durable, "progress": self.progress is not None}
        proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.brk.pipeline", json.dumps(config)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        child = _Child("+".join(passes), proc)
        self.children.append(child)
        threading.Thread(target=self._read, args=(child,), name=f"brk-stage-{child.name}", daemon=True).start()

    def _read(self, child: _Child) -> None:
        assert child.proc.stdout is not None
        for raw in child.proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            ev = msg.get("ev")
            if ev == "progress":
                if self._relay is not None:
                    self._relay(msg["event"], msg["fields"])
                continue
            with self.cond:
                if ev == "took":
                    child.took = int(msg["seq"])
                    child.held = False
                elif ev == "idle":
                    child.done = int(msg["seq"])
                elif ev == "held":
                    child.held = True
                elif ev == "error":
                    child.error = str(msg["message"])
                    child.error_exit = int(msg.get("exit_code", 1))
                elif ev == "exit":
                    child.said_exit = True
                self.cond.notify_all()
        code = child.proc.wait()
        with self.cond:
            child.exited = True
            failed = child.error is not None or code != 0 or not child.said_exit
            if self.failed is None and failed:
                # A user-facing error (a full disk) is said as it is, whichever process met it.
                self.failed = child.error or self._describe(child, code)
                self.failed_exit = child.error_exit if child.error else 1
            self.cond.notify_all()
        if failed and self.on_failure is not None:
            self.on_failure()
        elif not failed and not self.closing and self.on_stop is not None:
            self.on_stop()  # it was stopped (SIGTERM) without being asked: the whole job stops

    def _describe(self, child: _Child, code: int) -> str:
        how = (f"killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals()
               else f"exit status {code}" if code else "ended without finishing")
        return (f"the {child.name} stage (process {child.proc.pid}) failed: {how}. The heights every pass committed "
                f"are kept; run the same command again to resume.")

    def _check(self) -> None:
        if self.failed is not None:
            exc = StageFailed(self.failed)
            exc.exit_code = self.failed_exit
            raise exc

    def _wait(self, ready: Callable[[], bool], stop: Callable[[], bool] | None = None) -> bool:
        """Wait until ``ready()`` (True), a stage fails or ``stop()`` (False)."""
        with self.cond:
            while not ready():
                if self.failed is not None or (stop is not None and stop()):
                    return False
                self.cond.wait(0.2)
        return True

    # -- what the indexer and the CLI call ----------------------------------------------------------
    def index_event(self, event: str, **fields: Any) -> None:
        """The indexer's progress events (they pass through, and tell the stages' ETA what is left)."""
        if self._relay is not None:
            self._relay.index(event, fields)

    def committed(self, stop: Callable[[], bool] | None = None, *, now: bool = False) -> None:
        """The raw store committed more heights: each stage gets a ``go`` (``now``: start a cycle at once);
        waits while one is too far behind."""
        for child in self.children:
            if not child.exited:
                child.sent += 1
                child.send(f"go {child.sent}{' now' if now else ''}")
        self._wait(lambda: all(c.exited or c.sent - c.took <= MAX_BEHIND for c in self.children), stop)

    def hold(self) -> None:
        """Before a rollback of the raw store: every stage stops reading it (at its next committed chunk)."""
        for child in self.children:
            child.held = False
            child.send("hold")
        with self.cond:  # even after a failure elsewhere: no live stage may read what the rollback changes
            while not all(c.exited or c.held for c in self.children):
                self.cond.wait(0.2)

    def set_progress(self, progress: Callable[..., None] | None) -> None:
        """A new reporter (each poll of ``--watch`` has its own)."""
        self.progress = progress
        if progress is None or self._relay is None:
            self._relay = _Relay(progress) if progress is not None else None
        else:
            self._relay.renew(progress)

    def sync(self, stop: Callable[[], bool] | None = None) -> bool:
        """Wait until every stage has caught up with the raw store's committed tip (False when stopped or
        when a stage failed: ``failed`` says why, ``close`` raises it)."""
        self.committed(stop, now=True)
        return self._wait(lambda: all(c.exited or c.done >= c.sent for c in self.children), stop)

    def close(self, *, stop: bool = False) -> None:
        """Stages end (``stop``: at their next committed chunk; else once caught up) and are waited for."""
        self.closing = True
        for child in self.children:
            child.send("stop" if stop else "end")
        with self.cond:
            while not all(c.exited for c in self.children):
                self.cond.wait(0.2)
        self._close_inputs()
        if self._relay is not None:
            self._relay.flush()
        self._check()
        if not stop and self.children:
            from cairn_servers.brk.compute import run_passes

            run_passes(self.out, FOLLOWERS, durable=self.durable)

    def abandon(self, *, wait: float = 0.0) -> None:
        """The parent is leaving (an error, a second Ctrl-C): stages see end of file and stop at their next
        committed chunk. ``wait``: seconds to wait for them, so that what they say on stderr comes before
        the parent's own error (its last line)."""
        self.closing = True
        for child in self.children:
            child.send("stop")
        self._close_inputs()
        deadline = time.monotonic() + wait
        with self.cond:
            while not all(c.exited for c in self.children) and time.monotonic() < deadline:
                self.cond.wait(min(0.2, max(0.0, deadline - time.monotonic())))

    def _close_inputs(self) -> None:
        for child in self.children:
            if child.proc.stdin is not None:
                try:
                    child.proc.stdin.close()
                except OSError:
                    pass


class _Relay:
    """Stage events from the processes into the parent's ``Progress`` (one lock). A stage's blocks and
    bytes add up over its cycles; its total is what it had to catch up on when it began plus what this
    run indexes, so its ETA counts what the indexer has still to do."""

    def __init__(self, progress: Callable[..., None]) -> None:
        self.progress = progress
        if hasattr(progress, "concurrent"):
            progress.concurrent = True  # a Progress: one context a stage
        self.lock = threading.Lock()
        self.index_total = 0  # bytes this run indexes
        self.index_committed = 0  # of which committed
        self.index_target = -1
        self.stages: dict[str, dict[str, int]] = {}

    def renew(self, progress: Callable[..., None]) -> None:
        """A new reporter (a poll of ``--watch``): each stage's next event says ``stage`` to it first."""
        with self.lock:
            if hasattr(progress, "concurrent"):
                progress.concurrent = True
            self.progress = progress
            self.index_total = self.index_committed = 0
            for st in self.stages.values():
                st.update(announce=1, base_blocks=-st["blocks"], base_bytes=-st["bytes"], extra=0)

    def index(self, event: str, fields: dict[str, Any]) -> None:
        with self.lock:
            if event == "start":
                self.index_total = int(fields.get("total_bytes", 0))
                self.index_target = int(fields.get("target_height", -1))
            if event == "commit":
                self.index_committed = int(fields.get("bytes", 0))
            self.progress(event, **fields)

    def __call__(self, event: str, fields: dict[str, Any]) -> None:
        with self.lock:
            name = str(fields["stage"])
            st = self.stages.get(name)
            if event == "stage":
                if st is None:  # behind the indexer's start by what this first cycle has beyond its commits
                    extra = max(0, int(fields["total_bytes"]) - self.index_committed)
                    st = self.stages[name] = {"base_blocks": 0, "base_bytes": 0, "blocks": 0, "bytes": 0,
                                              "extra": extra, "height": int(fields["height"])}
                    self.progress("stage", stage=name, height=fields["height"],
                                  target_height=max(self.index_target, int(fields["target_height"])),
                                  blocks=0, bytes=0, total_bytes=max(extra + self.index_total,
                                                                     int(fields["total_bytes"])))
                    return
                st["base_blocks"] += st["blocks"]
                st["base_bytes"] += st["bytes"]
                st["blocks"] = st["bytes"] = 0
                st["height"] = int(fields["height"])
                return
            if st is None:
                return
            if st.pop("announce", 0):
                self.progress("stage", stage=name, height=st["height"], target_height=int(fields["height"]),
                              blocks=0, bytes=0, total_bytes=0)
            st["height"] = int(fields["height"])
            st["blocks"], st["bytes"] = int(fields["blocks"]), int(fields["bytes"])
            done = st["base_bytes"] + st["bytes"]
            self.progress("commit", stage=name, height=fields["height"], blocks=st["base_blocks"] + st["blocks"],
                          bytes=done, total_bytes=max(done, st["extra"] + self.index_total),
                          target_height=max(self.index_target, int(fields["height"])))

    def flush(self) -> None:
        flush = getattr(self.progress, "flush_stages", None)
        if flush is not None:
            with self.lock:
                flush()


# -- the stage process ---------------------------------------------------------------------------------

class _Control:
    """The parent's messages on stdin, read without blocking between chunks."""

    def __init__(self) -> None:
        self.fd = sys.stdin.fileno()
        self.buf = b""
        self.eof = False
        self.seq = 0  # the last ``go`` read
        self.now = False  # a ``go ... now`` since the last cycle began
        self.hold = False
        self.end = False
        self.stop = False

    def _take(self, line: str) -> None:
        if line.startswith("go "):
            seq, _, now = line[3:].partition(" ")
            self.seq = int(seq)
            self.now = self.now or now == "now"
        elif line == "hold":
            self.hold = True
        elif line == "end":
            self.end = True
        elif line == "stop":
            self.stop = True

    def poll(self, timeout: float | None) -> None:
        """Read what has arrived (waiting up to ``timeout`` s for something; None: until something)."""
        wait = timeout
        while not self.eof:
            ready, _, _ = select.select([self.fd], [], [], wait)
            if not ready:
                return
            chunk = os.read(self.fd, 65536)
            if not chunk:
                self.eof = True
                return
            self.buf += chunk
            *lines, self.buf = self.buf.split(b"\n")
            for line in lines:
                self._take(line.decode().strip())
            wait = 0

    @property
    def leaving(self) -> bool:
        return self.stop or self.eof


def _stage_main(config: dict[str, Any]) -> int:
    from cairn_servers.brk.compute import run_passes
    from cairn_servers.core.heap import return_large_buffers, trim_heap

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which says ``stop``
    ctl = _Control()
    signal.signal(signal.SIGTERM, lambda signum, frame: setattr(ctl, "stop", True))
    wire: IO[str] = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # a stray print of a pass cannot garble the messages
    parent = os.getppid()

    def say(ev: str, **fields: Any) -> None:
        try:
            wire.write(json.dumps({"ev": ev, **fields}) + "\n")
        except (BrokenPipeError, OSError, ValueError):
            ctl.eof = True

    def progress(event: str, **fields: Any) -> None:
        say("progress", event=event, fields=fields)

    def should_stop() -> bool:
        ctl.poll(0)
        if os.getppid() != parent:
            ctl.eof = True
        return ctl.leaving or ctl.hold

    out = Path(config["out"])
    passes = tuple(config["passes"])
    return_large_buffers()
    trim_heap()
    done = 0  # the last ``go`` a finished cycle covered
    started = float("-inf")  # when the last cycle began
    paused_at = -1  # after a ``hold``: the ``go`` messages up to this one are not run again
    try:
        while True:
            if ctl.hold:
                ctl.hold = False
                paused_at = ctl.seq
                say("held")
            if ctl.leaving:
                break
            if ctl.seq <= max(done, paused_at):
                if ctl.end:
                    break
                ctl.poll(1.0)
                if os.getppid() != parent:
                    ctl.eof = True
                continue
            wait = started + CYCLE_S - time.monotonic()
            if wait > 0 and not (ctl.now or ctl.end) and ctl.seq - max(done, paused_at) < CYCLE_COMMITS:
                ctl.poll(min(wait, 1.0))  # more commits, or the time, or the end, or a hold
                if os.getppid() != parent:
                    ctl.eof = True
                continue
            started = time.monotonic()
            ctl.now = False
            seq = ctl.seq
            say("took", seq=seq)
            run_passes(out, passes, durable=bool(config["durable"]), blocks_dir=Path(config["blocks_dir"]),
                       progress=progress if config["progress"] else None, stop=should_stop)
            if not (ctl.hold or ctl.leaving):
                done = seq
                say("idle", seq=seq)
    except CairnError as exc:
        say("error", message=exc.message, exit_code=exc.exit_code)
        return 1
    except OSError as exc:  # opening a store on a full disk: said as a commit says it
        from cairn_servers.core.errors import write_failure

        say("error", **_storage(exc.filename or out, write_failure(exc)))
        return 1
    except Exception as exc:
        if str(exc).startswith("IO error:"):  # the address index engine (RocksDB) could not write
            say("error", **_storage(out, str(exc)))
            return 1
        # A bug: the parent says which stage failed; this process's traceback goes to stderr only when
        # CAIRN_RAISE_ERRORS asks for it.
        import traceback

        from cairn_servers.core.errors import raise_errors

        if raise_errors():
            traceback.print_exc()
        say("error", message=f"the {'+'.join(passes)} stage (process {os.getpid()}) failed: "
                             f"{type(exc).__name__}: {exc}", exit_code=1)
        return 1
    say("exit", stopped=ctl.leaving)
    return 0


def _storage(where: object, why: str) -> dict[str, Any]:
    from cairn_servers.core.errors import StorageError

    err = StorageError(f"Cannot write to {where}: {why}. Free some space (or fix the permissions) and run the "
                       "same command again: the last commit is intact and work resumes from it.")
    return {"message": err.message, "exit_code": err.exit_code}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        return _stage_main(json.loads(argv[0]))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
