"""Progress of a long ``brk index`` run on stderr: a bar on a terminal, JSON lines when piped.

The indexer calls a ``Progress`` with an event name and figures (see ``Indexer(progress=...)``):
``scan`` once per blk file scanned, ``start`` before indexing (target height and bytes to do),
``block`` after every block parsed, ``commit`` after every committed batch. The computed passes
(``cairn_servers.brk.compute.compute(progress=...)``) then report through a ``Stage``: ``stage`` when a
pass starts (its name, first and target heights, the block bytes it will cover) and ``commit`` after
each committed chunk. The reporter decides what to show and when:

* ``bar`` (stderr is a terminal): one line redrawn at most five times a second,
  ``height 123,456/800,000 [#####.....] 15.4%  1,234 blk/s  25.3 MB/s  ETA 1h02m``.
* ``json`` (stderr is not a terminal): one JSON object per line: one per committed batch (at most
  four a second), one a second between commits, and a last ``done`` or ``stopped`` line. Fields:

  ``event``            ``scan``, ``start``, ``progress`` (between commits), ``stage`` (a computed
                       pass begins), ``commit``, ``done`` or ``stopped``
  ``stage``            ``index`` (the raw vecs), then ``computed``, ``utxo``, ``realized``,
                       ``addresses`` (the computed passes that have work to do)
  ``height``           highest height indexed so far (``progress`` lines: perhaps not committed yet)
  ``committed_height`` highest height committed to disk (a rerun resumes after it)
  ``target_height``    the best chain's tip this run is heading to
  ``blocks``/``bytes`` blocks and bytes of block data done by this stage (``done``/``stopped`` lines:
                       indexed by this run)
  ``elapsed_s``        seconds since the run started
  ``blocks_per_s``/``mb_per_s``  rates over the last ten seconds (the whole run on the last line)
  ``eta_s``            seconds left at the recent byte rate (null until known)
  ``file``/``files``/``found``   ``scan`` lines: blk files scanned so far, in all, blocks found

* ``none``: nothing.
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TextIO

MODES = ("auto", "bar", "json", "none")


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "--"
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Progress:
    """A callable progress reporter for ``Indexer(progress=...)``; ``finish()`` writes the last line."""

    def __init__(self, mode: str = "auto", stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic, *, quiet_until_work: bool = False) -> None:
        self.stream = stream or sys.stderr
        # For the polls of --watch: say nothing until a block is indexed (an idle poll stays silent).
        self.quiet = quiet_until_work
        if mode == "auto":
            isatty = getattr(self.stream, "isatty", None)
            mode = "bar" if isatty is not None and isatty() else "json"
        self.mode = mode
        self.clock = clock
        self.start = clock()
        self.last_emit = float("-inf")
        self.window: deque[tuple[float, int, int]] = deque()  # (time, blocks, bytes) over ~10 s
        self.state: dict[str, Any] = {"stage": "index", "height": -1, "committed_height": -1, "target_height": -1,
                                      "blocks": 0, "bytes": 0, "total_bytes": 0}
        self.stage_start = self.start
        self.indexed: tuple[int, int] | None = None  # (blocks, bytes) of the index stage, once a pass starts
        self.bar_shown = False
        self.unsaid_commit = False  # a commit line skipped by the rate limit, said before the next stage
        # ``brk index --jobs``: stages run at once, each event naming its own. Each stage keeps its own
        # figures, rates and rate limit (a context, swapped in when one of its events comes).
        self.concurrent = False
        self.contexts: dict[str, dict[str, Any]] = {}

    _CONTEXT = ("state", "window", "stage_start", "last_emit", "unsaid_commit")

    def _switch(self, name: str) -> None:
        """Make ``name``'s context the current one (concurrent stages only)."""
        current = str(self.state["stage"])
        if name == current:
            return
        self.contexts[current] = {key: getattr(self, key) for key in self._CONTEXT}
        saved = self.contexts.pop(name, None)
        if saved is None:  # a stage's first event: its figures start from the current ones, as in turn
            saved = {"state": dict(self.state), "window": deque(), "stage_start": self.clock(),
                     "last_emit": float("-inf"), "unsaid_commit": False}
        for key, value in saved.items():
            setattr(self, key, value)
        self.state["stage"] = name

    def flush_stages(self) -> None:
        """Concurrent stages: each says where it stopped if its last commit was skipped by the rate limit."""
        if self.mode == "none" or self.quiet:
            return
        for name in [n for n, c in self.contexts.items() if c["unsaid_commit"]] + [str(self.state["stage"])]:
            self._switch(name)
            if self.unsaid_commit:
                self._emit("commit", self.clock())

    def known(self, height: int) -> None:
        """The committed tip before the run: the heights a run that finds nothing new reports."""
        for key in ("height", "committed_height", "target_height"):
            self.state[key] = max(self.state[key], height)

    # -- the indexer's callback ----------------------------------------------------------------
    def __call__(self, event: str, **fields: Any) -> None:
        if self.mode == "none":
            return
        if self.concurrent:
            self._switch(str(fields.get("stage", "index")))
            if event == "stage" and self.indexed is None:
                self.indexed = (0, 0)  # the last line reports the index stage's own figures
            fields.pop("stage", None)
        if event == "stage" and self.unsaid_commit and not self.quiet and not self.concurrent:
            # The stage before this one ended on a commit the rate limit skipped: say where it stopped.
            self.unsaid_commit = False
            self._emit("commit", self.clock())
        if event == "stage" and self.indexed is None:
            self.indexed = (int(self.state["blocks"]), int(self.state["bytes"]))
        self.state.update(fields)
        if self.quiet:
            if event not in ("block", "stage"):
                return
            self.quiet = False
        now = self.clock()
        if event == "stage":  # a computed pass begins: rates and ETA start again for it
            self.window.clear()
            self.stage_start = now
            self.last_emit = float("-inf")  # every stage says it started
        if event in ("start", "commit", "stage"):
            self.state["committed_height"] = self.state["height"]
        if event in ("block", "commit", "stage"):
            self.window.append((now, self.state["blocks"], self.state["bytes"]))
            while len(self.window) > 2 and now - self.window[0][0] > 10.0:
                self.window.popleft()
        # JSON: a line per commit (unless batches come faster than four a second: the last one skipped is said
        # before the next stage begins), else one a second.
        gap = 0.2 if self.mode == "bar" else 0.25 if event in ("start", "commit") else 1.0
        if now - self.last_emit < gap:
            self.unsaid_commit = self.unsaid_commit or event == "commit"
            return
        self._emit(event, now)

    def _emit(self, event: str, now: float) -> None:
        self.last_emit = now
        if event in ("commit", "stage"):
            self.unsaid_commit = False
        if self.mode == "bar":
            self._bar(event, now)
        else:
            self._json("progress" if event == "block" else event, now)

    def log(self, msg: str) -> None:
        """A log line that does not garble the bar (pass as the indexer's ``log``)."""
        self._write(("\r\x1b[K" if self.bar_shown else "") + f"brk: {msg}\n")
        self.bar_shown = False

    def finish(self, event: str = "done") -> None:
        """The last line: ``done`` or ``stopped``, with rates over the whole run."""
        if self.mode == "none" or self.quiet:
            return
        now = self.clock()
        if self.concurrent:
            self.flush_stages()
            self._switch("index")
        elif self.indexed is not None:  # the last line reports the indexing and the whole job's time
            self.state["blocks"], self.state["bytes"] = self.indexed
            self.state["stage"] = "index"
            self.stage_start = self.start
        if self.mode == "bar":
            if self.bar_shown:
                self._write("\r\x1b[K")
                self.bar_shown = False
            return
        self._json(event, now, whole_run=True)

    # -- rendering -----------------------------------------------------------------------------
    def _rates(self, now: float, whole_run: bool = False) -> tuple[float, float, float | None]:
        st = self.state
        if whole_run or len(self.window) < 2:
            dt = max(now - self.stage_start, 1e-9)
            blocks, nbytes = st["blocks"], st["bytes"]
        else:
            t0, b0, y0 = self.window[0]
            dt = max(now - t0, 1e-9)
            blocks, nbytes = st["blocks"] - b0, st["bytes"] - y0
        bps, byps = blocks / dt, nbytes / dt
        left = st["total_bytes"] - st["bytes"]
        eta = left / byps if byps > 0 and st["total_bytes"] else None
        return bps, byps / 1e6, eta

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # stderr closed or a broken pipe: indexing matters more than progress
            self.mode = "none"

    def _json(self, event: str, now: float, whole_run: bool = False) -> None:
        st = self.state
        line: dict[str, Any] = {"event": event, "stage": st["stage"]}
        if event == "scan":
            line.update({k: st.get(k) for k in ("file", "files", "found")})
        bps, mbps, eta = self._rates(now, whole_run)
        line.update({
            "height": st["height"], "committed_height": st["committed_height"],
            "target_height": st["target_height"], "blocks": st["blocks"], "bytes": st["bytes"],
            "elapsed_s": round(now - self.start, 2), "blocks_per_s": round(bps, 1), "mb_per_s": round(mbps, 2),
            "eta_s": None if eta is None else round(eta, 1),
        })
        self._write(json.dumps(line) + "\n")

    def _bar(self, event: str, now: float) -> None:
        st = self.state
        if event == "scan":
            text = f"scanning blk files {st.get('file', 0)}/{st.get('files', 0)}  ({st.get('found', 0):,} blocks found)"
        else:
            bps, mbps, eta = self._rates(now)
            target = max(st["target_height"], 0)
            done = st["bytes"] / st["total_bytes"] if st["total_bytes"] else 0.0
            filled = int(20 * min(1.0, done))
            label = "height" if st["stage"] == "index" else st["stage"]
            text = (f"{label} {st['height']:,}/{target:,} [{'#' * filled}{'.' * (20 - filled)}] {100 * done:5.1f}%  "
                    f"{bps:,.0f} blk/s  {mbps:.1f} MB/s  ETA {_eta(eta)}")
            if self.concurrent and self.contexts:  # the other stages' committed heights
                text += "  | " + "  ".join(f"{name} {c['state']['committed_height']:,}"
                                           for name, c in sorted(self.contexts.items()))
        self._write("\r\x1b[K" + text)
        self.bar_shown = True


class Stage:
    """Progress of one computed pass over heights ``[start, n)``: ``stage`` when it begins, ``commit`` after
    each chunk (rates and ETA from the block bytes of the heights done, read from ``height_to_size``)."""

    def __init__(self, progress: Callable[..., None] | None, name: str, raw: Any, start: int, n: int,
                 stop: Callable[[], bool] | None = None) -> None:
        import numpy as np

        self.stop = stop
        self.progress = progress
        self.name = name
        self.start = start
        self.sizes = np.zeros(1, dtype=np.int64)
        if progress is None or start >= n:
            self.progress = None
            return
        self.sizes = np.concatenate(([0], np.cumsum(raw.read("height_to_size", start, n).astype(np.int64))))
        progress("stage", stage=name, height=start - 1, target_height=n - 1, blocks=0, bytes=0,
                 total_bytes=int(self.sizes[-1]))

    def done(self, stop: int) -> bool:
        """Heights below ``stop`` are committed; True when the pass should stop there (Ctrl-C)."""
        if self.progress is not None:
            k = min(stop - self.start, self.sizes.shape[0] - 1)
            self.progress("commit", stage=self.name, height=stop - 1, blocks=stop - self.start,
                          bytes=int(self.sizes[k]))
        return self.stop is not None and self.stop()
