"""The computer: per-height derived vecs from the raw vecs, stored in ``OUT/computed/``.

Stored per height (crash-safe ``VecStore``, one manifest commit per chunk): the monotonic timestamp
and dateindex (which define every calendar index), block_interval, block_vbytes, hash_rate,
input/output counts, per-script-type output counts, coinbase, subsidy, supply, utxo_count, fee_rate,
and running ``_cumulative`` sums of the flows. Aggregates over coarser indexes (days, weeks, ...,
halving epochs) are reductions of these stored height vecs and are computed by the query interface.

Incremental: each run appends the heights the raw store committed since the last run. A vec whose
version changed is emptied alone (``VecStore(independent=True)``) and recomputed from height 0 while
the others only get their missing tail. A reorg (the raw chain no longer holds the computed tip) cuts
every computed vec back to the fork height and bumps ``meta.generation`` so readers drop caches.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.brk.layout import OUTPUT_TYPES as OUTPUT_TYPES
from cairn_servers.brk.layout import computed_dir as computed_dir
from cairn_servers.brk.reader import StoreReader
from cairn_servers.brk.vecs import VecSpec, VecStore

if TYPE_CHECKING:
    import numpy as np

TYPE_COUNTS = tuple(f"{t}_count" for t in OUTPUT_TYPES)
HASH_RATE_WINDOW = 144  # blocks in the trailing window of hash_rate
CHUNK_OUTPUTS = 1_000_000  # bound on outputs read per chunk (memory: about 60 bytes an output)
TWO_32 = float(1 << 32)

# name -> (dtype, version). Every vec is keyed by height.
_COMPUTED: dict[str, tuple[str, int]] = {
    "blockhash": ("u1", 1),  # copy of the raw hash: finds the fork height after a reorg
    "mtimestamp": ("<u4", 1),
    "dateindex": ("<u4", 1),
    "block_interval": ("<u4", 1),
    "block_vbytes": ("<u4", 1),
    "hash_rate": ("<f8", 1),
    "input_count": ("<u4", 1),
    "output_count": ("<u4", 1),
    **{name: ("<u4", 1) for name in TYPE_COUNTS},
    "coinbase": ("<u8", 1),
    "subsidy": ("<u8", 1),
    "supply": ("<u8", 2),  # v2: OP_RETURN outputs' value (unspendable) is left out
    "utxo_count": ("<u8", 1),
    "fee_rate": ("<f8", 1),
}
# Flows whose running sums are stored (block_count's is height + 1).
CUMULATED = ("tx_count", "input_count", "output_count", *TYPE_COUNTS, "fee", "coinbase", "subsidy", "block_size",
             "block_weight", "block_vbytes")
for _name in CUMULATED:
    _COMPUTED[f"{_name}_cumulative"] = ("<u8", 1)
RAW_FLOWS = {"tx_count": "height_to_tx_count", "fee": "height_to_fee", "block_size": "height_to_size",
             "block_weight": "height_to_weight"}


def specs() -> list[VecSpec]:
    return [VecSpec(f"height_to_{name}", "height", dtype, 32 if name == "blockhash" else 1, version)
            for name, (dtype, version) in _COMPUTED.items()]


@contextmanager
def locked(root: Path, name: str = ".lock") -> Iterator[None]:
    """One computer per output directory at a time (``brk index`` and ``brk run`` may both try).

    ``OUT/computed/.lock`` guards the computed vecs and the UTXO/realized passes (which read them and the
    prices); ``OUT/computed/.addresses.lock`` guards the address pass, which reads only the raw store, so
    the two can run at once in separate processes (``brk index --jobs``)."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / name, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


# In dependency order: utxo reads the computed vecs (and cohorts both), explorer and addrcohorts the address pass's
# ids (addrcohorts never goes past the height the address pass committed, so it may run in another process).
PASSES = ("computed", "utxo", "cohorts", "addresses", "addrcohorts", "explorer", "mining")


def compute(out: Path, *, durable: bool = True, blocks_dir: Path | None = None,
            progress: Callable[..., None] | None = None, stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Bring ``OUT/computed`` up to the raw store's committed tip; returns a summary.

    Then the on-chain analytics passes: ``cairn_servers.brk.utxo`` (the UTXO set, coin age, realized value;
    from the vecs) and ``cairn_servers.brk.addresses`` (which re-reads the blocks: ``blocks_dir``, else the
    one remembered from an earlier run; without either the address counts wait). ``progress`` (a
    ``cairn_servers.brk.progress.Progress``) hears a ``stage`` event as each pass with work begins and a
    ``commit`` after each of its chunks. ``stop()`` is asked after every committed chunk: when true, the
    passes end there (each resumes from its own committed height next time)."""
    from cairn_servers.core.heap import return_large_buffers, trim_heap

    return_large_buffers()  # chunk columns of tens of MB: from mmap, not a heap that fragments and creeps up
    trim_heap()  # what indexing freed (brk index runs the passes in the same process) goes back to the OS
    return run_passes(out, PASSES, durable=durable, blocks_dir=blocks_dir, progress=progress, stop=stop)


def run_passes(out: Path, passes: tuple[str, ...], *, durable: bool = True, blocks_dir: Path | None = None,
               progress: Callable[..., None] | None = None, stop: Callable[[], bool] | None = None
               ) -> dict[str, Any]:
    """The named passes (of ``PASSES``, run in that order) up to the raw store's committed tip.

    Each resumes from its own committed height and finds a reorg by its stored block hashes, so any
    subset may run in any process while the indexer appends (``cairn_servers.brk.pipeline``)."""
    summary: dict[str, Any] = {}

    def stopped() -> bool:
        return stop is not None and stop()

    if "computed" in passes or "utxo" in passes or "cohorts" in passes:
        with locked(computed_dir(out)):
            if "computed" in passes:
                summary = _Computer(out, durable=durable, progress=progress, stop=stop).run()
            if "utxo" in passes and not ("computed" in passes and stopped()):
                from cairn_servers.brk import utxo

                utxo.update(out, durable=durable, progress=progress, stop=stop)
            if "cohorts" in passes and not (len(passes) > 1 and stopped()):
                from cairn_servers.brk import cohorts  # UTXO cohorts: reads the computed vecs and the prices

                cohorts.update(out, durable=durable, progress=progress, stop=stop)
    if "addresses" in passes and not (len(passes) > 1 and stopped()):
        from cairn_servers.brk import addresses

        with locked(computed_dir(out), ".addresses.lock"):
            addresses.update(out, durable=durable, blocks_dir=blocks_dir, progress=progress, stop=stop)
    if "addrcohorts" in passes and not (len(passes) > 1 and stopped()):
        from cairn_servers.brk import addrcohorts  # address cohorts: read what the address pass committed

        with locked(computed_dir(out), ".addrcohorts.lock"):
            addrcohorts.update(out, durable=durable, progress=progress, stop=stop)
    if "explorer" in passes and not (len(passes) > 1 and stopped()):
        from cairn_servers.brk import explorer

        with locked(computed_dir(out), ".addresses.lock"):  # it reads what the address pass writes
            explorer.update(out, durable=durable, progress=progress, stop=stop)
    if "mining" in passes and not (len(passes) > 1 and stopped()):
        from cairn_servers.brk import mining  # pool attribution: reads the coinbases from the blk files

        with locked(computed_dir(out), ".mining.lock"):
            mining.update(out, durable=durable, blocks_dir=blocks_dir, progress=progress, stop=stop)
    return summary


class _Computer:
    def __init__(self, out: Path, *, durable: bool, progress: Callable[..., None] | None = None,
                 stop: Callable[[], bool] | None = None) -> None:
        self.progress = progress
        self.stop = stop
        self.raw = StoreReader(out)
        self.raw.refresh()
        self.store = VecStore(computed_dir(out), specs(), durable=durable, independent=True)

    def close(self) -> None:
        self.raw.close()

    def run(self) -> dict[str, Any]:
        try:
            return self._run()
        finally:
            self.close()

    def _run(self) -> dict[str, Any]:
        import numpy as np

        s = self.store
        raw = self.raw
        n = raw.length("height_to_blockhash")
        meta = dict(s.meta)
        meta.setdefault("generation", 0)
        have = s.lengths["height_to_blockhash"]
        fork = self._fork(have, n)
        if fork < have:
            meta["generation"] = int(meta["generation"]) + 1
            s.truncate({name: min(length, fork) for name, length in s.lengths.items()}, meta)
        start = min(s.lengths.values())
        computed = 0
        first_out = raw.read("height_to_first_outputindex", 0, n)
        from cairn_servers.brk.progress import Stage

        stage = Stage(self.progress, "computed", raw, start, n, self.stop)
        while start < n:
            limit = int(np.searchsorted(first_out, int(first_out[start]) + CHUNK_OUTPUTS, "right"))
            stop = max(start + 1, min(n, limit))
            cols = self._chunk(start, stop, n)
            for name, values in cols.items():
                key = f"height_to_{name}"
                skip = s.lengths[key] - start
                if skip < values.shape[0]:
                    s.append(key, values[max(skip, 0):])
            computed += stop - start
            meta["height"] = stop - 1
            meta["tip"] = bytes(cols["blockhash"][-1][::-1]).hex()
            s.commit(meta)
            start = stop
            if stage.done(stop):
                break
        if computed == 0 and s.meta != meta:
            s.commit(meta)
        return {"height": s.lengths["height_to_blockhash"] - 1, "computed_heights": computed,
                "rolled_back_to": fork if fork < have else None, "generation": meta["generation"]}

    def _fork(self, have: int, n: int) -> int:
        """The first height whose computed hash differs from the raw chain (``have`` when none)."""
        import numpy as np

        if have == 0:
            return 0
        tip = min(have, n) - 1
        if tip >= 0 and np.array_equal(self.store.read("height_to_blockhash")[tip],
                                       self.raw.read("height_to_blockhash", tip, tip + 1)[0]):
            return min(have, n)
        ours = np.asarray(self.store.read("height_to_blockhash")[:tip + 1])
        theirs = self.raw.read("height_to_blockhash", 0, tip + 1)
        differ = np.flatnonzero((ours != theirs).any(axis=1))
        return int(differ[0]) if differ.size else tip + 1

    def _prev(self, name: str, start: int) -> int | float:
        """The stored value of a computed vec at ``start - 1`` (0 before height 0)."""
        if start == 0:
            return 0
        value: int | float = self.store.read(f"height_to_{name}")[start - 1].item()
        return value

    def _chunk(self, a: int, b: int, n: int) -> dict[str, np.ndarray]:
        """Every computed column for heights ``[a, b)``."""
        import numpy as np

        from cairn_servers.brk.dates import dateindex_of_day

        raw = self.raw
        cols: dict[str, np.ndarray] = {"blockhash": raw.read("height_to_blockhash", a, b)}
        ts = raw.read("height_to_timestamp", a, b).astype(np.int64)
        prev_mts = int(self._prev("mtimestamp", a))
        mts = np.maximum.accumulate(np.maximum(ts, prev_mts))
        cols["mtimestamp"] = mts.astype(np.uint32)
        cols["dateindex"] = dateindex_of_day(mts // 86400).astype(np.uint32)
        prev_ts = raw.read("height_to_timestamp", a - 1, a).astype(np.int64) if a else ts[:1]
        cols["block_interval"] = np.maximum(np.diff(np.concatenate((prev_ts, ts))), 0).astype(np.uint32)
        weight = raw.read("height_to_weight", a, b).astype(np.int64)
        cols["block_vbytes"] = ((weight + 3) // 4).astype(np.uint32)
        cols["hash_rate"] = self._hash_rate(a, b, mts)

        def bounds(vec: str, total_vec: str) -> np.ndarray:
            firsts = raw.read(vec, a, min(b + 1, n)).astype(np.int64)
            if b == n:
                firsts = np.concatenate((firsts, [raw.length(total_vec)]))
            return firsts

        f_in = bounds("height_to_first_inputindex", "inputindex_to_outputindex")
        f_out = bounds("height_to_first_outputindex", "outputindex_to_value")
        f_tx = bounds("height_to_first_txindex", "txindex_to_txid")
        cols["input_count"] = np.diff(f_in).astype(np.uint32)
        n_out = np.diff(f_out)
        cols["output_count"] = n_out.astype(np.uint32)
        o0 = int(f_out[0])
        types = raw.read("outputindex_to_type", o0, int(f_out[-1])).astype(np.int64)
        groups = np.repeat(np.arange(b - a, dtype=np.int64), n_out)
        per_type = np.bincount(groups * len(OUTPUT_TYPES) + types,
                               minlength=(b - a) * len(OUTPUT_TYPES)).reshape(b - a, len(OUTPUT_TYPES))
        for i, name in enumerate(TYPE_COUNTS):
            cols[name] = per_type[:, i].astype(np.uint32)
        values = raw.read("outputindex_to_value", o0, int(f_out[-1])).astype(np.uint64)
        value_cs = np.concatenate(([0], np.cumsum(values, dtype=np.uint64)))
        cb_outs = raw.read("txindex_to_output_count", int(f_tx[0]), int(f_tx[-1])).astype(np.int64)
        cb_n = cb_outs[f_tx[:-1] - f_tx[0]]
        cb_first = f_out[:-1] - o0
        coinbase = value_cs[cb_first + cb_n] - value_cs[cb_first]
        fee = raw.read("height_to_fee", a, b).astype(np.uint64)
        subsidy = np.where(coinbase > fee, coinbase - np.minimum(fee, coinbase), 0).astype(np.uint64)
        cols["coinbase"] = coinbase
        cols["subsidy"] = subsidy
        # Unspendable (OP_RETURN) value never enters the supply: ``OUT/utxo`` keeps it apart.
        opret = np.where(types == OUTPUT_TYPES.index("opreturn"), values, np.uint64(0))
        burnt = np.bincount(groups, weights=opret.astype(np.float64), minlength=b - a).astype(np.uint64)
        cols["supply"] = np.uint64(self._prev("supply", a)) + np.cumsum(subsidy - burnt, dtype=np.uint64)
        created = n_out - per_type[:, OUTPUT_TYPES.index("opreturn")]
        spent = np.diff(f_in) - 1  # every block's first input is its coinbase's, which spends nothing
        cols["utxo_count"] = (int(self._prev("utxo_count", a)) + np.cumsum(created - spent)).astype(np.uint64)
        vsize = raw.read("txindex_to_vsize", int(f_tx[0]), int(f_tx[-1])).astype(np.int64)
        vs_cs = np.concatenate(([0], np.cumsum(vsize)))
        rel = f_tx - f_tx[0]
        paid_vsize = vs_cs[rel[1:]] - vs_cs[rel[:-1] + 1]  # every tx but the coinbase
        cols["fee_rate"] = np.divide(fee.astype(np.float64), paid_vsize, out=np.zeros(b - a),
                                     where=paid_vsize > 0)
        for name in CUMULATED:
            src = cols[name] if name in cols else raw.read(RAW_FLOWS[name], a, b)
            cols[f"{name}_cumulative"] = np.uint64(self._prev(f"{name}_cumulative", a)) + np.cumsum(
                src.astype(np.uint64), dtype=np.uint64)
        return cols

    def _hash_rate(self, a: int, b: int, mts: np.ndarray) -> np.ndarray:
        """Hashes per second: the window's summed work (difficulty x 2^32) over its time span.

        The window is the trailing ``HASH_RATE_WINDOW`` blocks (fewer near genesis); its span is
        measured on the monotonic timestamp, at least one second. Height 0 assumes 600 s.
        """
        import numpy as np

        w = HASH_RATE_WINDOW
        lo = max(0, a - w)
        diff = self.raw.read("height_to_difficulty", lo, b).astype(np.float64)
        prior = self.store.read("height_to_mtimestamp")[lo:a].astype(np.int64) if a else np.zeros(0, np.int64)
        times = np.concatenate((prior, mts))
        heights = np.arange(a, b)
        k = np.minimum(heights, w)  # blocks in each window (their timespan starts k blocks back)
        # Each window is summed on its own (not as a difference of running sums) so the result does
        # not depend on where a chunk starts: incremental runs give the same bits as one full run.
        padded = np.concatenate((np.zeros(max(0, w - 1 - (a - lo))), diff))
        if lo == 0:
            padded[w - 1 - a] = 0.0  # height 0 only opens windows (its own rate is handled below)
        windows = np.lib.stride_tricks.sliding_window_view(padded, w)[-(b - a):]
        work = windows.sum(axis=1) * TWO_32
        work = np.where(k == 0, diff[heights - lo] * TWO_32, work)
        span = times[heights - lo] - times[heights - lo - k]
        span = np.where(k == 0, 600, np.maximum(span, 1))
        result: np.ndarray = work / span
        return result
