"""On-chain analytics: a UTXO-set state machine over the raw vecs, in ``OUT/utxo/`` and ``OUT/realized/``.

A separate pass run right after the computer (``cairn_servers.brk.compute.compute`` calls ``update``): it
reads the committed raw vecs (spent output of every input, value and type of every output) and the
computed monotonic timestamps, and catches up from its own committed height. Nothing is hooked into
the indexer.

Per height (``OUT/utxo``, one crash-safe ``VecStore``):

* ``supply_<type>`` / ``utxo_count_<type>``: value (sats) and number of unspent outputs of each script
  type (the 12 parser types, plus ``p2pk`` = p2pk65 + p2pk33); ``unspendable_supply`` = the value
  of OP_RETURN outputs ever created (they can never be spent). ``supply`` itself (the computer's)
  is the sum of every other type.
* ``spent_value`` (sats spent by the block's inputs), ``coindays_destroyed`` (BTC x days between the
  creating and the spending block, on the monotonic timestamp), ``coinblocks_destroyed`` (BTC x
  heights), ``coindays_created`` / ``coinblocks_created`` (the spendable supply before the block x
  the time / one block since the previous one), their ``_cumulative`` running sums, ``liveliness``
  (cumulative coin-days destroyed / created) and ``vaultedness`` (1 - liveliness).
* ``supply_age_<band>``: the spendable supply by age (block time - creating block time), twelve
  bands that always sum to ``supply``.

The state behind the age bands is one array on disk: the unspent spendable value of every creation
height (8 bytes a block). After each block the band boundaries (creation heights whose age crosses
1 day, 1 week, ...) move forward; what crosses one is summed from the array, so each boundary sweeps
the chain once. The array is checkpointed next to the vecs as ``state/unspent-<H>.bin`` (written,
fsynced and renamed before the manifest naming ``H`` is committed), and checkpoints at
logarithmically spaced heights below the tip are kept: a reorg (or a kill) restarts from the newest
checkpoint at or below the fork and replays from the raw vecs, so every figure equals an
uninterrupted run's (tested).

With prices (``OUT/prices``), ``OUT/realized`` holds ``realized_cap`` (every spendable UTXO valued at
the close of the day it was created; days without a close take the last earlier close, coins from
before the first price count at 0), ``realized_value_destroyed`` (the same valuation of the coins a
block spends) and ``value_destroyed_usd`` (what they are worth at the block's own close). A copy of
the closes it used is kept: when prices change, the heights from the first changed day on are
recomputed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.brk.faults import fault as _fault
from cairn_servers.brk.gather import Rows
from cairn_servers.brk.layout import OUTPUT_TYPES, computed_dir
from cairn_servers.brk.progress import Stage
from cairn_servers.brk.reader import StoreReader
from cairn_servers.brk.vecs import VecSpec, VecStore
from cairn_servers.core.files import replace_file

if TYPE_CHECKING:
    import numpy as np

NO_OUTPUT = (1 << 64) - 1
OPRETURN = OUTPUT_TYPES.index("opreturn")
SUPPLY_TYPES = (*OUTPUT_TYPES, "p2pk")  # p2pk = p2pk65 + p2pk33
DAY = 86_400
# Age bands: (name, lower bound in days); a band holds ages in [its bound, the next one's).
AGE_BANDS = (("lt_1d", 0), ("1d_1w", 1), ("1w_1m", 7), ("1m_3m", 30), ("3m_6m", 90), ("6m_1y", 180),
             ("1y_2y", 365), ("2y_3y", 730), ("3y_5y", 1095), ("5y_7y", 1825), ("7y_10y", 2555),
             ("gt_10y", 3650))
AGE_IDS = tuple(f"supply_age_{name}" for name, _ in AGE_BANDS)
EDGES = tuple(days * DAY for _, days in AGE_BANDS[1:])  # 11 boundaries, in seconds
# Inputs + outputs read per chunk (bounds memory); the crash tests make it small to commit often.
CHUNK_ROWS = int(os.environ.get("CAIRN_BRK_UTXO_CHUNK", "1000000"))
SATS = 100_000_000.0
COIN_FLOWS = ("coindays_destroyed", "coinblocks_destroyed", "coindays_created", "coinblocks_created")
PROFIT_IDS = ("supply_in_profit", "supply_in_loss", "supply_breakeven")

# name -> (dtype, version); every vec is keyed by height.
_UTXO: dict[str, tuple[str, int]] = {
    "blockhash": ("u1", 1),
    **{f"supply_{t}": ("<u8", 1) for t in SUPPLY_TYPES},
    **{f"utxo_count_{t}": ("<u8", 1) for t in SUPPLY_TYPES},
    "unspendable_supply": ("<u8", 1),
    "spent_value": ("<u8", 1),
    **{name: ("<f8", 1) for name in COIN_FLOWS},
    **{f"{name}_cumulative": ("<f8", 1) for name in COIN_FLOWS},
    "liveliness": ("<f8", 1),
    "vaultedness": ("<f8", 1),
    **{name: ("<u8", 1) for name in AGE_IDS},
}
_REALIZED: dict[str, tuple[str, int]] = {
    "blockhash": ("u1", 1),
    "realized_cap": ("<f8", 1),
    "realized_value_destroyed": ("<f8", 1),
    "value_destroyed_usd": ("<f8", 1),
    # Sats of the spendable supply whose creation price is below / above / equal to the block day's close
    # (NaN on heights whose day has no close).
    **{name: ("<f8", 1) for name in PROFIT_IDS},
}


def _specs(table: dict[str, tuple[str, int]]) -> list[VecSpec]:
    return [VecSpec(f"height_to_{name}", "height", dtype, 32 if name == "blockhash" else 1, version)
            for name, (dtype, version) in table.items()]


def utxo_dir(out: Path) -> Path:
    return out / "utxo"


def realized_dir(out: Path) -> Path:
    return out / "realized"


def update(out: Path, *, durable: bool = True, progress: Callable[..., None] | None = None,
           stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Bring ``OUT/utxo`` (and, with prices, ``OUT/realized``) up to the computed tip.

    The caller holds the computer's lock (``compute`` does)."""
    chain = _Chain(out)
    try:
        summary = {"utxo": _UtxoPass(out, chain, durable).run(progress, stop)}
        if stop is not None and stop():
            return summary
        prices = StoreReader(out / "prices")
        prices.refresh()
        if prices.exists and prices.length("dateindex_to_close") > 0:
            summary["realized"] = _RealizedPass(out, chain, prices, durable).run(progress, stop)
        prices.close()
        return summary
    finally:
        chain.close()


class _Chain:
    """Read access to the raw and computed vecs the passes need (one consistent snapshot)."""

    def __init__(self, out: Path) -> None:
        import numpy as np

        self.raw = StoreReader(out)
        self.raw.refresh()
        self.comp = StoreReader(computed_dir(out))
        self.comp.refresh()
        n = min(self.raw.length("height_to_blockhash"), self.comp.length("height_to_mtimestamp"))
        self.n = n
        self.mts = self.comp.read("height_to_mtimestamp", 0, n).astype(np.int64)
        self.dateindex = self.comp.read("height_to_dateindex", 0, n).astype(np.int64)

        def bounds(vec: str, total: str) -> np.ndarray:
            firsts = self.raw.read(vec, 0, n + 1).astype(np.int64)
            if firsts.shape[0] == n:
                firsts = np.concatenate((firsts, [self.raw.length(total)]))
            return firsts

        self.first_out = bounds("height_to_first_outputindex", "outputindex_to_value")
        self.first_in = bounds("height_to_first_inputindex", "inputindex_to_outputindex")
        self.rows = self.first_out[:-1] + self.first_in[:-1]  # once: a chunk's end is a search in it
        self.n_out = int(self.first_out[-1])
        self._vecs = out / "vecs"

    def hashes(self, a: int, b: int) -> np.ndarray:
        return self.raw.read("height_to_blockhash", a, b)

    def chunk_end(self, a: int) -> int:
        import numpy as np

        rows = self.rows
        limit = int(np.searchsorted(rows, int(rows[a]) + CHUNK_ROWS, "right"))
        return max(a + 1, min(self.n, limit))

    def created(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Outputs of heights [a, b): block (0-based in the chunk), value, type."""
        import numpy as np

        o0, o1 = int(self.first_out[a]), int(self.first_out[b])
        block = np.repeat(np.arange(b - a), np.diff(self.first_out[a:b + 1]))
        return (block, self.raw.read("outputindex_to_value", o0, o1),
                self.raw.read("outputindex_to_type", o0, o1).astype(np.int64))

    def spent(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Spent outputs of heights [a, b): spending block (0-based), value, type, creating height."""
        import numpy as np

        i0, i1 = int(self.first_in[a]), int(self.first_in[b])
        spent = self.raw.read("inputindex_to_outputindex", i0, i1)
        block = np.repeat(np.arange(b - a), np.diff(self.first_in[a:b + 1]))
        real = spent != np.uint64(NO_OUTPUT)
        outs = spent[real].astype(np.int64)  # kept in the inputs' order: per-block sums are deterministic
        created = np.searchsorted(self.first_out, outs, "right") - 1
        # Random rows of the whole chain's outputs: short-lived maps (the resident size stays bounded).
        rows = Rows(outs)
        value = rows.take(self._vecs / "outputindex_to_value.bin", "<u8", self.n_out)
        kind = rows.take(self._vecs / "outputindex_to_type.bin", "u1", self.n_out).astype(np.int64)
        return block[real], value, kind, created

    def close(self) -> None:
        self.raw.close()
        self.comp.close()


def _fork(store: VecStore, chain: _Chain, have: int) -> int:
    """The first height whose stored hash differs from the raw chain (``have`` when none)."""
    import numpy as np

    if have == 0:
        return 0
    top = min(have, chain.n)
    ours = np.asarray(store.read("height_to_blockhash")[:top])
    theirs = chain.hashes(0, top)
    if top and np.array_equal(ours[-1], theirs[-1]):
        return top
    differ = np.flatnonzero((ours != theirs).any(axis=1))
    return int(differ[0]) if differ.size else top


def _seq_cumsum(prev: float, values: np.ndarray) -> np.ndarray:
    """Running sum from ``prev``, accumulated left to right (chunking never changes the bits)."""
    import numpy as np

    result: np.ndarray = np.cumsum(np.concatenate(([prev], values)))[1:]
    return result


def _prev(store: VecStore, name: str, start: int) -> Any:
    return store.read(f"height_to_{name}")[start - 1].item() if start else 0


def _log_spaced(have: list[int], tip: int) -> set[int]:
    """The checkpoints to keep: the tip's and, for each k, the newest one at or below tip - 2**k + 1."""
    keep = {tip}
    for k in range(40):
        below = [h for h in have if h <= tip - (1 << k) + 1]
        if below:
            keep.add(below[-1])
    return keep


def _heights_of(state_dir: Path, prefix: str) -> list[int]:
    """Heights of the ``<prefix><H>.bin`` checkpoints in ``state_dir``, sorted."""
    found = []
    for p in state_dir.glob(f"{prefix}*.bin"):
        try:
            found.append(int(p.name[len(prefix):-len(".bin")]))
        except ValueError:
            continue
    return sorted(found)


class _UtxoPass:
    def __init__(self, out: Path, chain: _Chain, durable: bool) -> None:
        self.chain = chain
        self.store = VecStore(utxo_dir(out), _specs(_UTXO), durable=durable)
        self.state_dir = utxo_dir(out) / "state"
        self.state_dir.mkdir(exist_ok=True)
        self.durable = durable

    # -- checkpoints --------------------------------------------------------------------------
    def _checkpoint(self, heights: int) -> Path:
        return self.state_dir / f"unspent-{heights}.bin"

    def _checkpoints(self) -> list[int]:
        return _heights_of(self.state_dir, "unspent-")

    def _prune(self, tip: int) -> None:
        """Keep the tip's checkpoint and, for each k, the newest one at or below tip - 2**k + 1."""
        have = self._checkpoints()
        keep = _log_spaced(have, tip)
        for h in have:
            if h not in keep:
                self._checkpoint(h).unlink(missing_ok=True)

    def run(self, progress: Callable[..., None] | None = None,
            should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
        s = self.store
        chain = self.chain
        meta = dict(s.meta)
        meta.setdefault("generation", 0)
        have = s.lengths["height_to_blockhash"]
        if have and int(meta.get("state", -1)) != have:
            have = 0  # the vecs were reset (a version change): start again
        fork = _fork(s, chain, have)
        rolled = None
        if fork < have or (have == 0 and s.lengths["height_to_blockhash"]):
            usable = [h for h in self._checkpoints() if h <= fork and (h == 0 or h <= have)]
            restart = usable[-1] if usable else 0
            if restart and not self._checkpoint(restart).exists():
                restart = 0
            meta["generation"] = int(meta["generation"]) + 1
            meta["state"] = restart
            s.truncate({name: restart for name in s.lengths}, meta)
            for h in self._checkpoints():
                if h > restart:
                    self._checkpoint(h).unlink(missing_ok=True)
            rolled = restart
            have = restart
        if have == 0:
            for h in self._checkpoints():
                self._checkpoint(h).unlink(missing_ok=True)
        start = have
        done = 0
        stage = Stage(progress, "utxo", chain.raw, start, chain.n, should_stop)
        while start < chain.n:
            stop = chain.chunk_end(start)
            self._chunk(start, stop, meta)
            done += stop - start
            start = stop
            if stage.done(stop):
                break
        return {"height": s.lengths["height_to_blockhash"] - 1, "computed_heights": done, "restarted_from": rolled}

    # -- one chunk ----------------------------------------------------------------------------
    def _chunk(self, a: int, b: int, meta: dict[str, Any]) -> None:
        import numpy as np

        s = self.store
        chain = self.chain
        nb = b - a
        nt = len(OUTPUT_TYPES)
        cblk, cval, ctyp = chain.created(a, b)
        sblk, sval, styp, sch = chain.spent(a, b)
        cvf = cval.astype(np.float64)  # sums of sats stay below 2**53: exact in float64
        svf = sval.astype(np.float64)
        c_val = np.bincount(cblk * nt + ctyp, weights=cvf, minlength=nb * nt).reshape(nb, nt)
        c_cnt = np.bincount(cblk * nt + ctyp, minlength=nb * nt).reshape(nb, nt)
        s_val = np.bincount(sblk * nt + styp, weights=svf, minlength=nb * nt).reshape(nb, nt)
        s_cnt = np.bincount(sblk * nt + styp, minlength=nb * nt).reshape(nb, nt)
        cols: dict[str, np.ndarray] = {"blockhash": chain.hashes(a, b)}
        delta_v = (c_val - s_val).astype(np.int64)
        delta_c = (c_cnt - s_cnt).astype(np.int64)
        supply_t = np.zeros((nb, nt), dtype=np.int64)
        for i, t in enumerate(OUTPUT_TYPES):
            sv = np.int64(_prev(s, f"supply_{t}", a)) + np.cumsum(delta_v[:, i])
            sc = np.int64(_prev(s, f"utxo_count_{t}", a)) + np.cumsum(delta_c[:, i])
            supply_t[:, i] = sv
            cols[f"supply_{t}"] = sv.astype(np.uint64)
            cols[f"utxo_count_{t}"] = sc.astype(np.uint64)
        cols["supply_p2pk"] = cols["supply_p2pk65"] + cols["supply_p2pk33"]
        cols["utxo_count_p2pk"] = cols["utxo_count_p2pk65"] + cols["utxo_count_p2pk33"]
        cols["unspendable_supply"] = cols["supply_opreturn"]
        cols["spent_value"] = s_val.sum(axis=1).astype(np.uint64)
        spendable_supply = supply_t.sum(axis=1) - supply_t[:, OPRETURN]

        # Coin age of what is spent (OP_RETURN outputs are never spendable: left out throughout).
        keep = styp != OPRETURN
        sblk, svf, sch = sblk[keep], svf[keep], sch[keep]
        sval = sval[keep]
        heights = a + sblk
        age_s = chain.mts[heights] - chain.mts[sch]
        btc = svf / SATS
        cols["coindays_destroyed"] = np.bincount(sblk, weights=btc * (age_s / DAY), minlength=nb)
        cols["coinblocks_destroyed"] = np.bincount(sblk, weights=btc * (heights - sch), minlength=nb)
        before = sum(int(_prev(s, f"supply_{t}", a)) for t in OUTPUT_TYPES if t != "opreturn")
        prev_supply = np.concatenate(([before], spendable_supply[:-1])).astype(np.float64)
        mts = chain.mts[a:b]
        prev_mts = chain.mts[a - 1] if a else mts[0]
        dt = np.diff(np.concatenate(([prev_mts], mts)))
        cols["coindays_created"] = prev_supply / SATS * (dt / DAY)
        cols["coinblocks_created"] = prev_supply / SATS
        for name in COIN_FLOWS:
            cols[f"{name}_cumulative"] = _seq_cumsum(float(_prev(s, f"{name}_cumulative", a)), cols[name])
        created_cum = cols["coindays_created_cumulative"]
        live = np.divide(cols["coindays_destroyed_cumulative"], created_cum, out=np.full(nb, np.nan),
                         where=created_cum > 0)
        cols["liveliness"] = live
        cols["vaultedness"] = 1.0 - live

        # Age bands, block by block over the on-disk unspent-by-creation-height array.
        cspend = np.where(ctyp != OPRETURN, cval, 0).astype(np.uint64)
        created_h = np.bincount(cblk, weights=cspend.astype(np.float64), minlength=nb).astype(np.int64)
        band = np.searchsorted(np.asarray(EDGES), age_s, "right")
        band_spent = np.bincount(sblk * len(AGE_BANDS) + band, weights=svf,
                                 minlength=nb * len(AGE_BANDS)).reshape(nb, len(AGE_BANDS)).astype(np.int64)
        edges = np.asarray(EDGES, dtype=np.int64)
        hs = np.arange(a - 1, b)
        cut = np.searchsorted(chain.mts, chain.mts[np.maximum(hs, 0)][:, None] - edges[None, :], "right")
        if a == 0:
            cut[0] = 0
        bands = np.asarray([_prev(s, name, a) for name in AGE_IDS], dtype=np.int64)
        out_bands = np.zeros((nb, len(AGE_BANDS)), dtype=np.int64)
        unspent = self._open_state(a, b)
        spend_at = np.concatenate(([0], np.cumsum(np.bincount(sblk, minlength=nb))))
        sch_u = sch.astype(np.int64)
        for j in range(nb):
            old, new = cut[j], cut[j + 1]
            for k in np.flatnonzero(new > old).tolist():
                moved = int(unspent[old[k]:new[k]].sum(dtype=np.uint64))
                bands[k] -= moved
                bands[k + 1] += moved
            unspent[a + j] = created_h[j]
            bands[0] += created_h[j]
            lo, hi = spend_at[j], spend_at[j + 1]
            if hi > lo:
                np.subtract.at(unspent, sch_u[lo:hi], sval[lo:hi])
                bands -= band_spent[j]
            out_bands[j] = bands
        for i, name in enumerate(AGE_IDS):
            cols[name] = out_bands[:, i].astype(np.uint64)
        self._close_state(unspent, b)
        _fault("utxo-state")  # the crash tests kill here: a checkpoint newer than the manifest

        for name, values in cols.items():
            s.append(f"height_to_{name}", values)
        meta["state"] = b
        meta["height"] = b - 1
        s.commit(meta)
        _fault("utxo-commit")
        self._prune(b)

    def _open_state(self, a: int, b: int) -> np.ndarray:
        """The unspent-by-creation-height array after height ``a - 1``, grown to ``b`` rows (a new file)."""
        import numpy as np

        tmp = self.state_dir / "unspent.tmp"
        with open(tmp, "wb") as dst:
            if a:
                with open(self._checkpoint(a), "rb") as src:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
            dst.truncate(8 * b)
        return np.memmap(tmp, dtype="<u8", mode="r+", shape=(b,))

    def _close_state(self, unspent: np.ndarray, b: int) -> None:
        tmp = self.state_dir / "unspent.tmp"
        unspent.flush()  # type: ignore[attr-defined]
        del unspent
        replace_file(tmp, self._checkpoint(b), durable=self.durable)


class _RealizedPass:
    """Dollar values at creation prices; recomputed from the first day whose price changed.

    ``supply_in_profit`` / ``_in_loss`` / ``supply_breakeven`` need the spendable supply by creation
    day (a few kB: one number a day, whatever the UTXO count). It is kept on disk as
    ``state/byday-<H>.bin`` (the supply after height ``H - 1``; checkpoints written before the
    manifest naming ``H`` commits, kept at logarithmically spaced heights like the UTXO pass's); it
    does not depend on prices, so after a price change or a reorg the pass resumes from the newest
    checkpoint at or below the first height to redo and replays the blocks in between. Within a day
    the close is fixed, so each block only classifies what it creates and spends; at a new day the
    supply by creation day is compared with the new close once (days x days over the whole chain).
    """

    def __init__(self, out: Path, chain: _Chain, prices: StoreReader, durable: bool) -> None:
        import numpy as np

        self.chain = chain
        specs = [*_specs(_REALIZED), VecSpec("dateindex_to_close", "dateindex", "<f8")]
        self.store = VecStore(realized_dir(out), specs, durable=durable)
        self.state_dir = realized_dir(out) / "state"
        self.state_dir.mkdir(exist_ok=True)
        self.durable = durable
        self.close = prices.read("dateindex_to_close").astype(np.float64)
        # A coin's creation price: its day's close, else the last earlier close, else 0 (no market yet).
        filled = self.close.copy()
        known = ~np.isnan(filled)
        idx = np.where(known, np.arange(filled.shape[0]), -1)
        np.maximum.accumulate(idx, out=idx)
        self.basis = np.where(idx >= 0, filled[np.maximum(idx, 0)], 0.0)
        self.by_day = np.zeros(0, dtype=np.int64)  # spendable sats by creation day, after the last height done

    def _price(self, table: np.ndarray, days: np.ndarray, missing: float) -> np.ndarray:
        import numpy as np

        out = np.full(days.shape[0], missing)
        ok = days < table.shape[0]
        out[ok] = table[days[ok]]
        if missing == 0.0 and table.shape[0] and (~ok).any():
            out[~ok] = table[-1]  # after the last close, the basis stays the last close
        return out

    # -- supply by creation day -----------------------------------------------------------------------
    def _state_path(self, heights: int) -> Path:
        return self.state_dir / f"byday-{heights}.bin"

    def _save_state(self, heights: int) -> None:
        tmp = self.state_dir / "byday.tmp"
        with open(tmp, "wb") as f:
            f.write(self.by_day.astype("<i8").tobytes())
        replace_file(tmp, self._state_path(heights), durable=self.durable)

    def _drop_states_above(self, heights: int) -> None:
        for h in _heights_of(self.state_dir, "byday-"):
            if h > heights:
                self._state_path(h).unlink(missing_ok=True)

    def _load_state(self, heights: int) -> None:
        """``by_day`` after height ``heights - 1``: the newest checkpoint at or below it, then a replay."""
        import numpy as np

        usable = [h for h in _heights_of(self.state_dir, "byday-") if h <= heights]
        at = usable[-1] if usable else 0
        self.by_day = (np.fromfile(self._state_path(at), dtype="<i8").astype(np.int64) if at
                       else np.zeros(0, dtype=np.int64))
        while at < heights:
            stop = min(self.chain.chunk_end(at), heights)
            for _, day, val in self._deltas(at, stop):
                self._add(day, val)
            at = stop

    def _add(self, day: np.ndarray, val: np.ndarray) -> None:
        import numpy as np

        if not day.shape[0]:
            return
        need = int(day.max()) + 1
        if need > self.by_day.shape[0]:
            self.by_day = np.concatenate((self.by_day, np.zeros(need - self.by_day.shape[0], dtype=np.int64)))
        np.add.at(self.by_day, day, val)

    def _deltas(self, a: int, b: int, read: tuple[Any, Any] | None = None) -> list[tuple[Any, Any, Any]]:
        """What heights [a, b) change in the spendable supply, in two parts (the outputs created, the outputs
        spent), each ordered by block: (block 0-based, creation day, signed sats). ``read``: the chunk's
        ``created`` and ``spent`` when already read."""
        import numpy as np

        chain = self.chain
        (cblk, cval, ctyp), (sblk, sval, styp, sch) = read or (chain.created(a, b), chain.spent(a, b))
        ck, sk = ctyp != OPRETURN, styp != OPRETURN
        c_blk = cblk[ck]
        return [(c_blk, chain.dateindex[a + c_blk], cval[ck].astype(np.int64)),
                (sblk[sk], chain.dateindex[sch[sk]], -sval[sk].astype(np.int64))]

    def _basis_table(self, days: int) -> np.ndarray:
        """The creation price of each day ``0 .. days - 1`` (after the last close: the last close)."""
        import numpy as np

        table = self.basis[:days]
        if table.shape[0] < days:
            fill = self.basis[-1] if self.basis.shape[0] else 0.0
            table = np.concatenate((table, np.full(days - table.shape[0], fill)))
        return table

    def _profit(self, a: int, b: int, today: np.ndarray, read: tuple[Any, Any]) -> dict[str, np.ndarray]:
        """Supply in profit / loss / at breakeven after each height of [a, b); advances ``by_day`` to b.

        Each coin a block creates or spends is classified once against its block's close (the close is
        the same all day); each day starts from the by-day supply compared with that day's close."""
        import numpy as np

        nb = b - a
        parts = self._deltas(a, b, read)
        basis = self._basis_table(int(self.chain.dateindex[b - 1]) + 1)
        steps = np.zeros((nb, 3))  # per block: loss, breakeven, profit (sats created - spent)
        # What a block creates is valued at its own day's close: at breakeven, wherever the day has a close.
        c_blk, _, c_val = parts[0]
        steps[:, 1] = np.bincount(c_blk, weights=c_val, minlength=nb)
        s_blk, s_day, s_val = parts[1]
        close = today[s_blk]
        ok = ~np.isnan(close)
        cls = np.sign(close[ok] - basis[s_day[ok]]).astype(np.int64) + 1
        steps += np.bincount(s_blk[ok] * 3 + cls, weights=s_val[ok], minlength=nb * 3).reshape(nb, 3)
        isteps = steps.astype(np.int64)  # sums of whole sats below 2**53: exact
        cols = {name: np.full(nb, np.nan) for name in PROFIT_IDS}
        bdays = self.chain.dateindex[a:b]
        starts = np.flatnonzero(np.concatenate(([True], bdays[1:] != bdays[:-1])))
        bounds = np.append(starts, nb)
        cuts = [np.searchsorted(blk, bounds, "left") for blk, _, _ in parts]
        for g in range(starts.shape[0]):
            j0, j1 = int(bounds[g]), int(bounds[g + 1])
            close = today[j0]
            if close == close:  # a close for this day: classify the supply by creation price
                held = self.by_day
                price = basis[:held.shape[0]]
                base = (int(held[price > close].sum()), int(held[price == close].sum()),
                        int(held[price < close].sum()))
                for k, name in enumerate(("supply_in_loss", "supply_breakeven", "supply_in_profit")):
                    cols[name][j0:j1] = base[k] + np.cumsum(isteps[j0:j1, k])
            for (_, day, val), cut in zip(parts, cuts):
                self._add(day[cut[g]:cut[g + 1]], val[cut[g]:cut[g + 1]])
        return cols

    def run(self, progress: Callable[..., None] | None = None,
            should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
        import numpy as np

        s = self.store
        chain = self.chain
        meta = dict(s.meta)
        meta.setdefault("generation", 0)
        have = s.lengths["height_to_blockhash"]
        self._drop_states_above(have)  # written by a run killed before its commit
        fork = chain_fork = _fork(s, chain, have)
        self._drop_states_above(chain_fork)  # the supply by day does not depend on prices: a reorg drops it
        old = np.asarray(s.read("dateindex_to_close"))
        m = min(old.shape[0], self.close.shape[0])
        same = (old[:m] == self.close[:m]) | (np.isnan(old[:m]) & np.isnan(self.close[:m]))
        changed = int(np.argmin(same)) if not same.all() else (m if old.shape[0] != self.close.shape[0] else -1)
        if changed >= 0:
            fork = min(fork, int(np.searchsorted(chain.dateindex, changed, "left")))
        if fork < have or changed >= 0:
            meta["generation"] = int(meta["generation"]) + 1
            lengths = {name: fork for name in s.lengths}
            lengths["dateindex_to_close"] = 0
            s.truncate(lengths, meta)
            s.append("dateindex_to_close", self.close)
        start = s.lengths["height_to_blockhash"]
        self._load_state(start)
        done = 0
        stage = Stage(progress, "realized", chain.raw, start, chain.n, should_stop)
        while start < chain.n:
            stop = chain.chunk_end(start)
            self._chunk(start, stop)
            self._save_state(stop)
            _fault("realized-state")  # the crash tests kill here: a checkpoint newer than the manifest
            meta["height"] = stop - 1
            s.commit(meta)
            have_states = _heights_of(self.state_dir, "byday-")
            keep = _log_spaced(have_states, stop)
            for h in have_states:
                if h not in keep:
                    self._state_path(h).unlink(missing_ok=True)
            done += stop - start
            start = stop
            if stage.done(stop):
                break
        if s.pending_length("dateindex_to_close") != s.lengths["dateindex_to_close"]:
            s.commit(meta)
        return {"height": s.lengths["height_to_blockhash"] - 1, "computed_heights": done}

    def _chunk(self, a: int, b: int) -> None:
        import numpy as np

        chain = self.chain
        nb = b - a
        read = (chain.created(a, b), chain.spent(a, b))
        (cblk, cval, ctyp), (sblk, sval, styp, sch) = read
        ck = ctyp != OPRETURN
        sk = styp != OPRETURN
        cblk, cbtc = cblk[ck], cval[ck] / SATS
        sblk, sbtc, sch = sblk[sk], sval[sk] / SATS, sch[sk]
        day = chain.dateindex
        # A block's outputs share its day's basis: summed per block first, then valued.
        created_usd = np.bincount(cblk, weights=cbtc, minlength=nb) * self._price(self.basis, day[a:b], 0.0)
        destroyed = np.bincount(sblk, weights=sbtc * self._price(self.basis, day[sch], 0.0), minlength=nb)
        spent_btc = np.bincount(sblk, weights=sbtc, minlength=nb)
        today = self._price(self.close, day[a:b], np.nan)
        s = self.store
        cap = _seq_cumsum(float(_prev(s, "realized_cap", a)), created_usd - destroyed)
        s.append("height_to_blockhash", chain.hashes(a, b))
        s.append("height_to_realized_cap", cap)
        s.append("height_to_realized_value_destroyed", destroyed)
        s.append("height_to_value_destroyed_usd", spent_btc * today)
        for name, values in self._profit(a, b, today, read).items():
            s.append(f"height_to_{name}", values)
