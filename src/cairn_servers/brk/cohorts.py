"""UTXO cohorts (BRK's ids): supply, counts, realized and unrealized value of the UTXOs grouped by age, amount,
output type, halving epoch and year of creation, per height in ``OUT/cohorts/``.

A coin's cohorts:

* age band: whole hours between the hour of the current block and the hour of its creating block, both on the
  monotonic block time (the running maximum of timestamps, as every date index and the HODL waves); 21 bands
  ``under_1h_old`` .. ``over_15y_old`` on BRK's boundaries (1 month = 30 days, 1 year = 365 days). ``sth`` is
  the coins under 5 months (150 days) old, ``lth`` the others; ``over_<age>_old`` / ``under_<age>_old`` sum bands.
* amount band: its value, 15 bands ``0sats`` .. ``over_100k_btc`` (powers of ten), plus ``over_<amount>`` /
  ``under_<amount>``;
* output type (the spendable ones: ``p2pk65`` .. ``p2a``, ``empty_outputs``, ``unknown_outputs``);
* halving epoch of its creating height (``epoch_0`` .. ``epoch_4``) and year of its creation day (``class_2009``
  .. ``class_2028``).

OP_RETURN outputs are in no cohort (they are not supply). The cohorts of an age, amount, type, epoch or year
dimension each sum to the whole spendable supply.

**Bounded state.** Nothing is kept per UTXO. The state is two tables of integers: supply and UTXO count per
creation *hour* (the age dimension: a coin moves between age bands as the block time advances, so each band's
totals are kept and, at every block, the hours whose age crosses a boundary are moved from one band to the
next: each boundary sweeps the hours once), and supply and count per creation *day* x group (amount band,
type, epoch, year: a coin never changes group). Every coin of an hour or a day shares a creation price (the
close of its creation day, else the last earlier close, else 0: as ``realized_cap``), so realized values are
supply x price. Within a day the close is fixed: each cohort's supply in profit / in loss is reclassified at
the first block of a day, and each block after that only adds what it creates and spends.

The tables and the running per-cohort totals are checkpointed as ``state/cohorts-<H>.bin`` (written and
renamed before the manifest naming ``H`` commits; logarithmically spaced heights kept), with a copy of the
closes used: a reorg, a price change or a kill restarts from the newest checkpoint at or below the first
height to redo, so every figure equals an uninterrupted run's, byte for byte (tested).

Stored per height, one row of ``len(ATOMIC)`` columns per metric (the atomic cohorts: age bands then groups);
the sums (``sth``, ``lth``, ``over_*``, ``under_*``) are read as sums of columns (``cohort_columns``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.brk.faults import fault as _fault
from cairn_servers.brk.layout import OUTPUT_TYPES
from cairn_servers.brk.progress import Stage
from cairn_servers.brk.reader import StoreReader
from cairn_servers.brk.vecs import VecSpec, VecStore
from cairn_servers.core.files import replace_file

if TYPE_CHECKING:
    import numpy as np

    from cairn_servers.brk.utxo import _Chain

SATS = 100_000_000.0
_H_D, _H_M, _H_Y = 24, 24 * 30, 24 * 365
# Age boundaries in hours (BRK's), and their labels.
AGE_EDGES = (1, _H_D, 7 * _H_D, _H_M, 2 * _H_M, 3 * _H_M, 4 * _H_M, 5 * _H_M, 6 * _H_M, _H_Y, 2 * _H_Y, 3 * _H_Y,
             4 * _H_Y, 5 * _H_Y, 6 * _H_Y, 7 * _H_Y, 8 * _H_Y, 10 * _H_Y, 12 * _H_Y, 15 * _H_Y)
AGE_LABELS = ("1h", "1d", "1w", "1m", "2m", "3m", "4m", "5m", "6m", "1y", "2y", "3y", "4y", "5y", "6y", "7y", "8y",
              "10y", "12y", "15y")
AGE_BANDS = ("utxos_under_1h_old",
             *(f"utxos_{AGE_LABELS[i]}_to_{AGE_LABELS[i + 1]}_old" for i in range(len(AGE_EDGES) - 1)),
             "utxos_over_15y_old")
STH_BANDS = AGE_EDGES.index(5 * _H_M) + 1  # bands 0 .. 7: under 150 days
# Amount boundaries in sats and their labels (BRK's).
AMOUNT_EDGES = tuple(10 ** k for k in range(14))
AMOUNT_LABELS = ("1sat", "10sats", "100sats", "1k_sats", "10k_sats", "100k_sats", "1m_sats", "10m_sats", "1btc",
                 "10btc", "100btc", "1k_btc", "10k_btc", "100k_btc")
AMOUNT_BANDS = ("utxos_0sats", *(f"utxos_{AMOUNT_LABELS[i]}_to_{AMOUNT_LABELS[i + 1]}" for i in range(13)),
                "utxos_over_100k_btc")
TYPE_NAMES = {"empty": "empty_outputs", "unknown": "unknown_outputs"}
SPENDABLE = tuple(t for t in OUTPUT_TYPES if t != "opreturn")
TYPE_COHORTS = tuple(TYPE_NAMES.get(t, t) for t in SPENDABLE)
EPOCHS = 5  # epoch_0 .. epoch_4 (BRK's): coins of later epochs are in no epoch cohort
FIRST_YEAR, YEARS = 2009, 20  # class_2009 .. class_2028
EPOCH_COHORTS = tuple(f"epoch_{e}" for e in range(EPOCHS))
YEAR_COHORTS = tuple(f"class_{FIRST_YEAR + y}" for y in range(YEARS))
GROUPS = (*AMOUNT_BANDS, *TYPE_COHORTS, *EPOCH_COHORTS, *YEAR_COHORTS)
NG = len(GROUPS) + 1  # the last group is a sink (epochs and years out of range), never stored
G_TYPE, G_EPOCH, G_YEAR = len(AMOUNT_BANDS), len(AMOUNT_BANDS) + len(TYPE_COHORTS), \
    len(AMOUNT_BANDS) + len(TYPE_COHORTS) + EPOCHS
ATOMIC = (*AGE_BANDS, *GROUPS)  # the stored columns
NA = len(AGE_BANDS)


def _cohort_columns() -> dict[str, tuple[int, ...]]:
    """Every cohort id -> the atomic columns it sums."""
    cols: dict[str, tuple[int, ...]] = {name: (i,) for i, name in enumerate(ATOMIC)}
    cols["sth"] = tuple(range(STH_BANDS))
    cols["lth"] = tuple(range(STH_BANDS, NA))
    for i, label in enumerate(AGE_LABELS):
        if 1 <= i <= 18:  # over_1d .. over_12y
            cols[f"utxos_over_{label}_old"] = tuple(range(i + 1, NA))
        if i >= 2:  # under_1w .. under_15y
            cols[f"utxos_under_{label}_old"] = tuple(range(0, i + 1))
    for i, label in enumerate(AMOUNT_LABELS):
        if i <= 12:
            cols[f"utxos_over_{label}"] = tuple(NA + k for k in range(i + 1, len(AMOUNT_BANDS)))
        if i >= 1:
            cols[f"utxos_under_{label}"] = tuple(NA + k for k in range(0, i + 1))
    return cols


COHORTS = _cohort_columns()
# Every cohort is a run of adjacent columns: the catalogue reads it as one slice.
assert all(cols == tuple(range(cols[0], cols[-1] + 1)) for cols in COHORTS.values())
# The stored metrics: states (the last value on a coarse index) then flows (summed).
STATES = ("supply", "utxo_count", "realized_cap", "supply_in_profit", "supply_in_loss", "unrealized_profit",
          "unrealized_loss")
FLOWS = ("realized_profit", "realized_loss", "value_created", "value_destroyed")
METRICS = (*STATES, *FLOWS)
SATS_METRICS = ("supply", "supply_in_profit", "supply_in_loss")
# Cost-basis percentiles (BRK's ids), stored per height for every cohort of ``COHORTS`` (not summable: one column
# per cohort id) as a price bucket (``bucket_floor``).
COST_METRICS = ("cost_basis_min", "cost_basis_pct50", "cost_basis_max")
COHORT_IDS = tuple(COHORTS)  # the columns of the cost-basis vecs
PER_DECADE = 100  # price buckets per decade: each 2.33% wide, from $0.01
PRICE_FLOOR = 0.01
NO_BUCKET = 0xFFFF  # no close that day, or a cohort without supply: NaN
# Cells of a dense block x cohort x bucket histogram processed at a time (16 MB of float64).
HIST_CELLS = 2_000_000
HIST_ITEMS = 1_000_000  # and items x columns added at a time (16 MB of keys and sats)
# Besides the log-spaced checkpoints, one per window of this many heights (a URPD query starts from it).
URPD_EVERY = int(os.environ.get("CAIRN_BRK_URPD_EVERY", "20000"))
# Blocks per chunk at most: the chunk's per-cohort rows stay a few MB whatever the block sizes.
CHUNK_BLOCKS = int(os.environ.get("CAIRN_BRK_COHORT_BLOCKS", "2000"))
VERSION = 1


def creation_prices(known: np.ndarray, days: np.ndarray) -> np.ndarray:
    """Creation price of each dateindex in ``days`` from ``known`` (each day's close, else the last earlier one,
    else 0; past its end: its last)."""
    import numpy as np

    if not known.shape[0]:
        return np.zeros(days.shape[0])
    result: np.ndarray = known[np.minimum(days, known.shape[0] - 1)]
    return result


def close_of(close: np.ndarray, day: int) -> float:
    """Day ``day``'s close (NaN when none is known)."""
    return float(close[day]) if day < close.shape[0] else float("nan")


def cohorts_dir(out: Path) -> Path:
    return out / "cohorts"


def specs() -> list[VecSpec]:
    return [VecSpec("height_to_blockhash", "height", "u1", 32, VERSION),
            *(VecSpec(f"height_to_{m}", "height", "<f8", len(ATOMIC), VERSION) for m in METRICS),
            *(VecSpec(f"height_to_{m}", "height", "<u2", len(COHORT_IDS), VERSION) for m in COST_METRICS),
            VecSpec("dateindex_to_close", "dateindex", "<f8", 1, VERSION)]


def price_bucket(price: np.ndarray) -> np.ndarray:
    """The cost-basis bucket of each price: 0 for 0 (coins created before the first close), else
    ``1 + floor(PER_DECADE x log10(price / PRICE_FLOOR))`` (prices under a cent in bucket 1)."""
    import numpy as np

    p = np.asarray(price, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.floor(PER_DECADE * np.log10(np.maximum(p, PRICE_FLOOR) / PRICE_FLOOR)) + 1
    out: np.ndarray = np.where(p > 0, np.clip(k, 1, NO_BUCKET - 1), 0).astype(np.int64)
    return out


def bucket_floor(bucket: np.ndarray) -> np.ndarray:
    """The price a bucket stands for, its floor: ``PRICE_FLOOR x 10 ** ((bucket - 1) / PER_DECADE)`` (0 for
    bucket 0, NaN for ``NO_BUCKET``)."""
    import numpy as np

    b = np.asarray(bucket, dtype=np.float64)
    none = b == NO_BUCKET
    out: np.ndarray = np.where(b == 0, 0.0, PRICE_FLOOR * 10.0 ** ((np.where(none, 1, b) - 1) / PER_DECADE))
    return np.where(none, np.nan, out)


def update(out: Path, *, durable: bool = True, progress: Callable[..., None] | None = None,
           stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Bring ``OUT/cohorts`` up to the computed tip (the caller holds the computer's lock)."""
    import numpy as np

    from cairn_servers.brk.utxo import _Chain

    prices = StoreReader(out / "prices")
    prices.refresh()
    close = (prices.read("dateindex_to_close").astype(np.float64)
             if prices.exists and prices.length("dateindex_to_close") else np.zeros(0))
    prices.close()
    chain = _Chain(out)
    try:
        return _CohortPass(out, chain, close, durable).run(progress, stop)
    finally:
        chain.close()


def _filled(close: np.ndarray) -> np.ndarray:
    """Each day's creation price: its close, else the last earlier close, else 0."""
    import numpy as np

    idx = np.where(~np.isnan(close), np.arange(close.shape[0]), -1)
    np.maximum.accumulate(idx, out=idx)
    filled: np.ndarray = np.where(idx >= 0, close[np.maximum(idx, 0)], 0.0)
    return filled


def _read_state(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A checkpoint's hour table (supply, count), day x group table (supply, count) and running totals."""
    import numpy as np

    raw = np.fromfile(path, dtype="<i8")
    nh, nd = int(raw[0]), int(raw[1])
    at = 2
    f_sup, at = raw[at:at + nh].copy(), at + nh
    f_cnt, at = raw[at:at + nh].copy(), at + nh
    g_sup, at = raw[at:at + nd * NG].reshape(nd, NG).copy(), at + nd * NG
    g_cnt, at = raw[at:at + nd * NG].reshape(nd, NG).copy(), at + nd * NG
    floats = raw[at:].view("<f8")
    return f_sup, f_cnt, g_sup, g_cnt, floats[:NA * 7].reshape(NA, 7).copy(), floats[NA * 7:].reshape(NG, 7).copy()


def _year_of_days(n: int) -> np.ndarray:
    """Calendar year of dateindex 0 .. n - 1."""
    import numpy as np

    from cairn_servers.brk.dates import day_nums

    days = day_nums(np.arange(n)).astype("datetime64[D]")
    years: np.ndarray = days.astype("datetime64[Y]").astype(np.int64) + 1970
    return years


def _windowed(have: list[int]) -> set[int]:
    """The first checkpoint of each window of ``URPD_EVERY`` heights: a URPD query advances fewer blocks than
    that from one (each holds the hour and day tables: about 8 MB at mainnet's tip, so 45 of them there)."""
    first: dict[int, int] = {}
    for h in have:
        first.setdefault(h // URPD_EVERY, h)
    return set(first.values())


class _CohortPass:
    def __init__(self, out: Path, chain: _Chain, close: np.ndarray, durable: bool) -> None:
        import numpy as np

        self.chain = chain
        self.store = VecStore(cohorts_dir(out), specs(), durable=durable)
        self.state_dir = cohorts_dir(out) / "state"
        self.state_dir.mkdir(exist_ok=True)
        self.durable = durable
        self.close = close
        self.basis_known = _filled(close)
        self.h0 = int(chain.mts[0]) // 3600 if chain.n else 0
        self.hour = chain.mts // 3600 - self.h0  # hour of each height, from the chain's first
        self.d0 = int(chain.dateindex[0]) if chain.n else 0  # the day table's first row: the chain's first day
        # the state after the last height done
        self.f_sup = np.zeros(0, np.int64)
        self.f_cnt = np.zeros(0, np.int64)
        self.g_sup = np.zeros((0, NG), np.int64)
        self.g_cnt = np.zeros((0, NG), np.int64)
        self.age_state = np.zeros((NA, 7))
        self.grp_state = np.zeros((NG, 7))

    # -- prices -------------------------------------------------------------------------------------
    def basis(self, days: np.ndarray) -> np.ndarray:
        return creation_prices(self.basis_known, days)

    def today(self, day: int) -> float:
        return close_of(self.close, day)

    # -- checkpoints ----------------------------------------------------------------------------------
    def _path(self, h: int) -> Path:
        return self.state_dir / f"cohorts-{h}.bin"

    def _heights(self) -> list[int]:
        from cairn_servers.brk.utxo import _heights_of

        return _heights_of(self.state_dir, "cohorts-")

    def _save(self, h: int) -> None:
        import numpy as np

        tmp = self.state_dir / "cohorts.tmp"
        head = np.array([self.f_sup.shape[0], self.g_sup.shape[0]], dtype="<i8")
        with open(tmp, "wb") as f:
            for arr in (head, self.f_sup, self.f_cnt, self.g_sup, self.g_cnt):
                f.write(arr.astype("<i8").tobytes())
            for arr in (self.age_state, self.grp_state):
                f.write(arr.astype("<f8").tobytes())
        replace_file(tmp, self._path(h), durable=self.durable)

    def _load(self, h: int) -> None:
        if h == 0:
            return
        self.f_sup, self.f_cnt, self.g_sup, self.g_cnt, self.age_state, self.grp_state = _read_state(self._path(h))

    # -- the pass -------------------------------------------------------------------------------------
    def run(self, progress: Callable[..., None] | None, should_stop: Callable[[], bool] | None) -> dict[str, Any]:
        import numpy as np

        from cairn_servers.brk.utxo import _fork, _log_spaced

        s = self.store
        chain = self.chain
        meta = dict(s.meta)
        meta.setdefault("generation", 0)
        have = s.lengths["height_to_blockhash"]
        if any(s.lengths[f"height_to_{m}"] != have for m in METRICS) or int(meta.get("state", have)) != have:
            have = 0  # a vec was reset (a version change): start again
        fork = _fork(s, chain, have)
        old = np.asarray(s.read("dateindex_to_close"))
        m = min(old.shape[0], self.close.shape[0])
        same = (old[:m] == self.close[:m]) | (np.isnan(old[:m]) & np.isnan(self.close[:m]))
        changed = int(np.argmin(same)) if not same.all() else (m if old.shape[0] != self.close.shape[0] else -1)
        if changed >= 0:
            fork = min(fork, int(np.searchsorted(chain.dateindex[:chain.n], changed, "left")))
        restart = have
        missing = have > 0 and have not in self._heights()
        if fork < have or have < s.lengths["height_to_blockhash"] or changed >= 0 or missing:
            usable = [h for h in self._heights() if h <= min(fork, have) and not (missing and h == have)]
            restart = usable[-1] if usable else 0
            meta["generation"] = int(meta["generation"]) + 1
            lengths = {name: restart for name in s.lengths}
            lengths["dateindex_to_close"] = 0
            meta["state"] = restart
            s.truncate(lengths, meta)
            s.append("dateindex_to_close", self.close)
        for h in self._heights():
            if h > restart or restart == 0:
                self._path(h).unlink(missing_ok=True)
        self._load(restart)
        start, done = restart, 0
        stage = Stage(progress, "cohorts", chain.raw, start, chain.n, should_stop)
        while start < chain.n:
            stop = min(chain.chunk_end(start), start + CHUNK_BLOCKS)
            self._chunk(start, stop)
            self._save(stop)
            _fault("cohorts-state")  # the crash tests kill here: a checkpoint newer than the manifest
            meta["height"] = stop - 1
            meta["state"] = stop
            s.commit(meta)
            have_states = self._heights()
            keep = _log_spaced(have_states, stop) | _windowed(have_states)
            for h in have_states:
                if h not in keep:
                    self._path(h).unlink(missing_ok=True)
            done += stop - start
            start = stop
            if stage.done(stop):
                break
        if s.pending_length("dateindex_to_close") != s.lengths["dateindex_to_close"]:
            s.commit(meta)
        return {"height": s.lengths["height_to_blockhash"] - 1, "computed_heights": done,
                "restarted_from": restart if restart != have else None}

    # -- one chunk ------------------------------------------------------------------------------------
    def _chunk(self, a: int, b: int) -> None:
        import numpy as np

        from cairn_servers.brk.utxo import OPRETURN

        chain = self.chain
        nb = b - a
        cblk, cval, ctyp = chain.created(a, b)
        sblk, sval, styp, sch = chain.spent(a, b)
        ck, sk = ctyp != OPRETURN, styp != OPRETURN
        cblk, cval, ctyp = cblk[ck], cval[ck].astype(np.int64), ctyp[ck]
        sblk, sval, styp, sch = sblk[sk], sval[sk].astype(np.int64), styp[sk], sch[sk]
        day = chain.dateindex
        cday, sday = day[a + cblk], day[sch]
        hour = self.hour
        closes = np.array([self.today(int(d)) for d in day[a:b]])
        # per item: creation price, class against its block's close (1 profit, -1 loss, 0 even or no close)
        cb, sb = self.basis(cday), self.basis(sday)
        cc = np.nan_to_num(closes[cblk], nan=0.0)
        sc = np.nan_to_num(closes[sblk], nan=0.0)
        c_cls = np.where(np.isnan(closes[cblk]), 0, np.sign(cc - cb)).astype(np.int64)
        s_cls = np.where(np.isnan(closes[sblk]), 0, np.sign(sc - sb)).astype(np.int64)

        # Every item once: what the chunk creates (+) then what it spends (-).
        blk_all = np.concatenate((cblk, sblk))
        v_all = np.concatenate((cval, -sval)).astype(np.float64)
        r_all = v_all / SATS * np.concatenate((cb, sb))
        cls_all = np.concatenate((c_cls, s_cls)) + 1  # 0 loss, 1 even, 2 profit
        sign_all = np.concatenate((np.ones(cblk.shape[0]), -np.ones(sblk.shape[0])))

        def state_deltas(coh: np.ndarray, nc: int) -> np.ndarray:
            """Per block and cohort: the 7 state fields the items add (supply, count, realized, the profit and
            loss parts of supply and realized)."""
            key = (blk_all * nc + coh) * 3 + cls_all
            n = nb * nc * 3
            bv = np.bincount(key, weights=v_all, minlength=n).reshape(nb, nc, 3)
            br = np.bincount(key, weights=r_all, minlength=n).reshape(nb, nc, 3)
            bc = np.bincount(key, weights=sign_all, minlength=n).reshape(nb, nc, 3)
            out = np.empty((nb, nc, 7))
            out[..., 0] = bv[..., 0] + bv[..., 1] + bv[..., 2]
            out[..., 1] = bc[..., 0] + bc[..., 1] + bc[..., 2]
            out[..., 2] = br[..., 0] + br[..., 1] + br[..., 2]
            out[..., 3], out[..., 4] = bv[..., 2], br[..., 2]
            out[..., 5], out[..., 6] = bv[..., 0], br[..., 0]
            return out

        def per_block(blk: np.ndarray, coh: np.ndarray, f: np.ndarray, nc: int) -> np.ndarray:
            key = blk * nc + coh
            out = np.zeros((nb * nc, f.shape[1]))
            for k in range(f.shape[1]):
                out[:, k] = np.bincount(key, weights=f[:, k], minlength=nb * nc)
            return out.reshape(nb, nc, f.shape[1])

        # -- flows: what each block spends, by the coin's cohorts at the spending block --------------
        s_age = hour[a + sblk] - hour[sch]
        s_band = np.searchsorted(np.asarray(AGE_EDGES), s_age, "right")
        s_groups = self._groups(sval, styp, sch, sday)
        btc = sval.astype(np.float64) / SATS
        created_usd, destroyed_usd = btc * sc, btc * sb
        flow_f = np.stack((np.maximum(created_usd - destroyed_usd, 0.0), np.maximum(destroyed_usd - created_usd, 0.0),
                           created_usd, destroyed_usd), axis=1)
        flows_age = per_block(sblk, s_band, flow_f, NA)
        flows_grp = per_block(sblk, s_groups[0], flow_f, NG)
        for g in s_groups[1:]:
            flows_grp += per_block(sblk, g, flow_f, NG)

        # -- age: hour table swept block by block ----------------------------------------------------
        top = int(hour[b - 1]) + 1
        if self.f_sup.shape[0] < top:
            grow = top - self.f_sup.shape[0]
            self.f_sup = np.concatenate((self.f_sup, np.zeros(grow, np.int64)))
            self.f_cnt = np.concatenate((self.f_cnt, np.zeros(grow, np.int64)))
        from cairn_servers.brk.dates import dateindex_of_day

        hour_basis = self.basis(dateindex_of_day((np.arange(top) + self.h0) // 24))
        delta_age = state_deltas(np.concatenate((np.zeros(cblk.shape[0], np.int64), s_band)), NA)
        c_at = np.searchsorted(cblk, np.arange(nb + 1), "left")
        s_at = np.searchsorted(sblk, np.arange(nb + 1), "left")
        s_hour = hour[sch]
        edges = np.asarray(AGE_EDGES, dtype=np.int64)
        age_out = np.zeros((nb, NA, 7))
        state = self.age_state
        cell_cls = np.zeros(0, np.int64)
        cost = _CostBasis(self, a, b, hour_basis) if (~np.isnan(closes)).any() else None
        for j in range(nb):
            h_abs = a + j
            h = int(hour[h_abs])
            close = closes[j]
            new_day = h_abs == 0 or day[h_abs] != day[h_abs - 1]
            if new_day or j == 0:
                cell_cls = np.where(close == close, np.sign(np.nan_to_num(close) - hour_basis), 0).astype(np.int64)
            if h_abs > 0 and (cost is not None or not new_day):
                hp = int(hour[h_abs - 1])
                if h > hp:
                    lo_c = np.maximum(hp - edges + 1, 0)
                    hi_c = np.maximum(h - edges + 1, 0)
                    for k in np.flatnonzero(hi_c > lo_c).tolist():
                        if cost is not None:
                            cost.move(j, k, int(lo_c[k]), int(hi_c[k]))
                        if not new_day:
                            moved = self._cells(int(lo_c[k]), int(hi_c[k]), hour_basis, cell_cls)
                            state[k] -= moved
                            state[k + 1] += moved
            if new_day:
                state = self._age_from_scratch(h, hour_basis, cell_cls)
            state += delta_age[j]
            lo, hi = c_at[j], c_at[j + 1]
            if hi > lo:
                self.f_sup[h] += int(cval[lo:hi].sum())
                self.f_cnt[h] += hi - lo
            lo, hi = s_at[j], s_at[j + 1]
            if hi > lo:
                np.subtract.at(self.f_sup, s_hour[lo:hi], sval[lo:hi])
                np.subtract.at(self.f_cnt, s_hour[lo:hi], 1)
            age_out[j] = state
        self.age_state = state

        # -- groups: day x group table, reclassified at each day's first block ----------------------
        c_groups = self._groups(cval, ctyp, a + cblk, cday)
        top_day = int(day[b - 1]) + 1 - self.d0
        if self.g_sup.shape[0] < top_day:
            grow = top_day - self.g_sup.shape[0]
            self.g_sup = np.concatenate((self.g_sup, np.zeros((grow, NG), np.int64)))
            self.g_cnt = np.concatenate((self.g_cnt, np.zeros((grow, NG), np.int64)))
        deltas = state_deltas(np.concatenate((c_groups[0], s_groups[0])), NG)
        for k in range(1, len(c_groups)):
            deltas += state_deltas(np.concatenate((c_groups[k], s_groups[k])), NG)
        grp_out = np.zeros((nb, NG, 7))
        bdays = day[a:b]
        starts = np.flatnonzero(np.concatenate(([True], bdays[1:] != bdays[:-1])))
        bounds = np.append(starts, nb)
        state = self.grp_state
        for g0, g1 in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if a + g0 == 0 or day[a + g0] != day[a + g0 - 1]:
                state = self._groups_from_scratch(int(day[a + g0]) + 1, closes[g0])
            run = np.cumsum(np.concatenate((state[None], deltas[g0:g1]), axis=0), axis=0)[1:]
            grp_out[g0:g1] = run
            state = run[-1].copy()
            for blk, val, grp, dd, sign in ((cblk, cval, c_groups, cday, 1), (sblk, sval, s_groups, sday, -1)):
                lo, hi = np.searchsorted(blk, [g0, g1], "left")
                for g in grp:
                    np.add.at(self.g_sup, (dd[lo:hi] - self.d0, g[lo:hi]), sign * val[lo:hi])
                    np.add.at(self.g_cnt, (dd[lo:hi] - self.d0, g[lo:hi]), sign)
        self.grp_state = state

        # -- the rows -------------------------------------------------------------------------------
        allst = np.concatenate((age_out, grp_out[:, :NG - 1]), axis=1)  # (nb, atomic, 7)
        allfl = np.concatenate((flows_age, flows_grp[:, :NG - 1]), axis=1)
        priced = ~np.isnan(closes)
        cl = np.nan_to_num(closes)[:, None]
        nan = np.full(allst.shape[:2], np.nan)
        cols = {
            "supply": allst[:, :, 0], "utxo_count": allst[:, :, 1],
            "realized_cap": np.where(priced[:, None], allst[:, :, 2], nan),
            "supply_in_profit": np.where(priced[:, None], allst[:, :, 3], nan),
            "supply_in_loss": np.where(priced[:, None], allst[:, :, 5], nan),
            "unrealized_profit": np.where(priced[:, None], allst[:, :, 3] / SATS * cl - allst[:, :, 4], nan),
            "unrealized_loss": np.where(priced[:, None], allst[:, :, 6] - allst[:, :, 5] / SATS * cl, nan),
        }
        for i, name in enumerate(FLOWS):
            cols[name] = np.where(priced[:, None], allfl[:, :, i], nan)
        s = self.store
        s.append("height_to_blockhash", chain.hashes(a, b))
        for name in METRICS:
            s.append(f"height_to_{name}", np.ascontiguousarray(cols[name], dtype="<f8"))
        if cost is None:
            rows = np.full((len(COST_METRICS), nb, len(COHORT_IDS)), NO_BUCKET, dtype="<u2")
        else:
            cost.add(cblk, cday, cval, [0, *(NA + g for g in c_groups)], 1)
            cost.add(sblk, sday, sval, [s_band, *(NA + g for g in s_groups)], -1)
            rows = cost.percentiles(priced)
        for name, row in zip(COST_METRICS, rows):
            s.append(f"height_to_{name}", np.ascontiguousarray(row, dtype="<u2"))

    @staticmethod
    def _groups(val: np.ndarray, typ: np.ndarray, height: np.ndarray, day: np.ndarray) -> list[np.ndarray]:
        """The four group columns of each coin: amount band, type, epoch, year (NG - 1: none)."""
        import numpy as np

        amount = np.searchsorted(np.asarray(AMOUNT_EDGES, dtype=np.int64), val, "right")
        type_of = np.full(len(OUTPUT_TYPES), NG - 1, dtype=np.int64)
        for i, t in enumerate(SPENDABLE):
            type_of[OUTPUT_TYPES.index(t)] = G_TYPE + i
        epoch = height // 210_000
        epoch_g = np.where(epoch < EPOCHS, G_EPOCH + epoch, NG - 1)
        year = _year_of_days(int(day.max()) + 1)[day] - FIRST_YEAR if day.shape[0] else day
        year_g = np.where((year >= 0) & (year < YEARS), G_YEAR + year, NG - 1)
        return [amount, type_of[typ], epoch_g.astype(np.int64), year_g.astype(np.int64)]

    def _cells(self, lo: int, hi: int, hour_basis: np.ndarray, cell_cls: np.ndarray) -> np.ndarray:
        """The 7 fields summed over the hour cells [lo, hi)."""
        import numpy as np

        sup = self.f_sup[lo:hi].astype(np.float64)
        r = sup / SATS * hour_basis[lo:hi]
        p, lo_ = cell_cls[lo:hi] == 1, cell_cls[lo:hi] == -1
        return np.array([sup.sum(), float(self.f_cnt[lo:hi].sum()), r.sum(), sup[p].sum(), r[p].sum(),
                         sup[lo_].sum(), r[lo_].sum()])

    def _age_from_scratch(self, h: int, hour_basis: np.ndarray, cell_cls: np.ndarray) -> np.ndarray:
        import numpy as np

        n = h + 1
        band = np.searchsorted(np.asarray(AGE_EDGES), h - np.arange(n), "right")
        sup = self.f_sup[:n].astype(np.float64)
        r = sup / SATS * hour_basis[:n]
        p, lo = cell_cls[:n] == 1, cell_cls[:n] == -1
        out = np.zeros((NA, 7))
        for k, w in enumerate((sup, self.f_cnt[:n].astype(np.float64), r, sup * p, r * p, sup * lo, r * lo)):
            out[:, k] = np.bincount(band, weights=w, minlength=NA)
        return out

    def _groups_from_scratch(self, n_days: int, close: float) -> np.ndarray:
        import numpy as np

        d0 = self.d0  # no coin is older than the chain, none younger than today
        bas = self.basis(np.arange(d0, n_days))
        cls = np.where(close == close, np.sign(np.nan_to_num(close) - bas), 0)[:, None]
        sup = self.g_sup[:n_days - d0].astype(np.float64)
        cnt = self.g_cnt[:n_days - d0].astype(np.float64)
        r = sup / SATS * bas[:, None]
        p, lo = cls == 1, cls == -1
        return np.stack([w.sum(axis=0) for w in (sup, cnt, r, sup * p, r * p, sup * lo, r * lo)], axis=1)


class _CostBasis:
    """Each cohort's supply by cost-basis bucket (``price_bucket`` of the creation price) at every block of a
    chunk, and its min / median / max buckets. The histogram at the chunk's start is rebuilt from the hour and
    day tables (nothing more is checkpointed); then each block adds the same items as the state deltas
    (created +, spent -, age-band crossings moved) as a dense block x atomic column x bucket array over the
    chunk's occupied buckets, a few hundred blocks at a time, summed down the blocks, across each cohort's
    columns and up the buckets."""

    def __init__(self, p: _CohortPass, a: int, b: int, hour_basis: np.ndarray) -> None:
        import numpy as np

        self.a, self.nb, self.d0 = a, b - a, p.d0
        chain = p.chain
        n_days = int(chain.dateindex[b - 1]) + 1 - p.d0
        hb = price_bucket(hour_basis)
        db = price_bucket(p.basis(np.arange(p.d0, p.d0 + n_days)))
        self.lo = int(min(hb.min(initial=NO_BUCKET), db.min()))
        self.nbk = int(max(hb.max(initial=0), db.max())) - self.lo + 1
        self.hb, self.db = hb - self.lo, db - self.lo
        self.f_sup = p.f_sup
        nbk = self.nbk
        start = np.zeros((len(ATOMIC), nbk))
        if a > 0:
            hp = int(p.hour[a - 1])
            band = np.searchsorted(np.asarray(AGE_EDGES), hp - np.arange(hp + 1), "right")
            start[:NA] = np.bincount(band * nbk + self.hb[:hp + 1], weights=p.f_sup[:hp + 1].astype(np.float64),
                                     minlength=NA * nbk).reshape(NA, nbk)
            by_bucket = np.zeros((nbk, NG))
            nd = p.g_sup.shape[0]
            np.add.at(by_bucket, self.db[:nd], p.g_sup.astype(np.float64))
            start[NA:] = by_bucket[:, :NG - 1].T
        self.start = start
        # What the blocks add, each source sorted by block: (block, bucket, signed sats, the columns of each item).
        self.sources: list[tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray | int]]] = []
        self.moves: list[tuple[int, int, int, np.ndarray]] = []

    def move(self, j: int, k: int, lo: int, hi: int) -> None:
        """Block j moves the hour cells [lo, hi) from age band k to k + 1 (before it adds or spends)."""
        self.moves.append((j, k, lo, self.f_sup[lo:hi].copy()))

    def add(self, blk: np.ndarray, day: np.ndarray, val: np.ndarray, cols: list[np.ndarray | int], sign: int) -> None:
        """Items of blocks ``blk`` (sorted) created on ``day``, each in every column of ``cols`` (the group sink
        NA + NG - 1 included: it is dropped at the end)."""
        import numpy as np

        self.sources.append((blk, self.db[day - self.d0], sign * val.astype(np.float64), cols))

    def _moves(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray | int]]:
        """The age-band crossings as one source: the cells leave band k and enter k + 1."""
        import numpy as np

        if not self.moves:
            empty = np.zeros(0, np.int64)
            return empty, empty, empty.astype(np.float64), [empty]
        n = np.array([len(v) for _, _, _, v in self.moves])
        blk = np.repeat(np.array([j for j, _, _, _ in self.moves]), 2 * n)
        col = np.concatenate([np.repeat((k, k + 1), len(v)) for _, k, _, v in self.moves])
        bkt = np.concatenate([np.tile(self.hb[lo:lo + len(v)], 2) for _, _, lo, v in self.moves])
        val = np.concatenate([np.concatenate((-v, v)) for _, _, _, v in self.moves]).astype(np.float64)
        return blk, bkt, val, [col]

    def percentiles(self, priced: np.ndarray) -> np.ndarray:
        """(3, blocks, cohorts) uint16: the min, median and max buckets (``NO_BUCKET`` where the block has no
        close or the cohort no supply). Sums of whole sats stay exact in float64 (below 2**53)."""
        import numpy as np

        nb, nbk, nat, nc = self.nb, self.nbk, len(ATOMIC), len(COHORT_IDS)
        ncol = nat + 1  # and the group sink
        sources = [*self.sources, self._moves()]
        first = np.array([COHORTS[c][0] for c in COHORT_IDS])
        last = np.array([COHORTS[c][-1] for c in COHORT_IDS]) + 1
        single = np.flatnonzero(last - first == 1)
        runs = np.flatnonzero(last - first > 1).tolist()
        out = np.full((3, nb, nc), NO_BUCKET, dtype=np.int64)
        hist = self.start
        step = max(1, HIST_CELLS // (nc * nbk))
        items = np.zeros(nb + 1, np.int64)  # items x columns added before each block
        for blk, _, _, cols in sources:
            items[1:] += np.bincount(blk, minlength=nb) * len(cols)
        np.cumsum(items, out=items)
        j1 = 0
        while j1 < nb:
            j0 = j1
            fit = int(np.searchsorted(items, items[j0] + HIST_ITEMS, "right")) - 1
            j1 = min(nb, j0 + step, max(j0 + 1, fit))
            m = j1 - j0
            keys, vals = [], []
            for blk, bkt, val, cols in sources:
                e0, e1 = np.searchsorted(blk, [j0, j1], "left").tolist()
                if e1 == e0:
                    continue
                base = (blk[e0:e1] - j0) * (ncol * nbk) + bkt[e0:e1]
                for col in cols:
                    keys.append(base + (col if isinstance(col, int) else col[e0:e1]) * nbk)
                    vals.append(val[e0:e1])
            flat = np.bincount(np.concatenate(keys) if keys else np.zeros(0, np.int64),
                               weights=np.concatenate(vals) if vals else None, minlength=m * ncol * nbk)
            d = np.ascontiguousarray(flat.astype(np.float64, copy=False).reshape(m, ncol, nbk)[:, :nat])
            d[0] += hist
            np.cumsum(d, axis=0, out=d)
            hist = d[-1].copy()
            if not priced[j0:j1].any():
                continue
            # min / max: a cohort's are the lowest / highest of its atomic columns' (cheaper than on its sums)
            held = d > 0
            some = held.any(axis=2)
            amin = np.where(some, np.argmax(held, axis=2), nbk)
            amax = np.where(some, nbk - 1 - np.argmax(held[:, :, ::-1], axis=2), -1)
            cmin, cmax = np.empty((m, nc), np.int64), np.empty((m, nc), np.int64)
            cmin[:, single], cmax[:, single] = amin[:, first[single]], amax[:, first[single]]
            for i in runs:
                cmin[:, i] = amin[:, first[i]:last[i]].min(axis=1)
                cmax[:, i] = amax[:, first[i]:last[i]].max(axis=1)
            # median: the first bucket where the running supply reaches half (exact: 0.5 x a sum of sats)
            acc = np.zeros((m, nat + 1, nbk))
            np.cumsum(np.cumsum(d, axis=2), axis=1, out=acc[:, 1:])
            cum = acc[:, last] - acc[:, first]  # (m, cohorts, buckets): running supply up the buckets
            half = cum[:, :, -1:] * 0.5
            ok = (half[:, :, 0] > 0) & priced[j0:j1, None]
            cmed = np.count_nonzero(cum < half, axis=2)
            for i, found in enumerate((cmin, cmed, cmax)):
                out[i, j0:j1] = np.where(ok, found + self.lo, NO_BUCKET)
        return out


# -- definitions (id search, /llms.txt): one line per metric, with its formula --------------------------------
METRIC_LINES = {
    "supply": "supply held by {c}: the sum of their values, in sats",
    "utxo_count": "number of unspent outputs (UTXOs) of {c}",
    "realized_cap": "realized cap of {c}: sum of value x the close of each coin's creation day, in US dollars",
    "realized_price": "realized price of {c}: realized_cap / supply_btc, their average cost basis in US dollars "
                      "per BTC",
    "realized_profit": "realized profit of {c}: over the coins spent, sum of value x (spend-day close - creation-day "
                       "close) where positive, in US dollars",
    "realized_loss": "realized loss of {c}: over the coins spent, sum of value x (creation-day close - spend-day "
                     "close) where positive, in US dollars",
    "net_realized_pnl": "net realized profit and loss of {c}: realized_profit - realized_loss, in US dollars",
    "value_created": "value of the coins of {c} spent, at the spend day's close: sum of value x spend-day close, "
                     "in US dollars",
    "value_destroyed": "value of the coins of {c} spent, at their creation day's close: sum of value x "
                       "creation-day close, in US dollars",
    "sopr": "SOPR spent output profit ratio of {c}: value_created / value_destroyed",
    "unrealized_profit": "unrealized profit of {c}: sum of value x (close - creation-day close) over the coins "
                         "whose creation-day close is below the close, in US dollars",
    "unrealized_loss": "unrealized loss of {c}: sum of value x (creation-day close - close) over the coins whose "
                       "creation-day close is above the close, in US dollars",
    "supply_in_profit": "supply in profit of {c}: value of the coins whose creation-day close is below the close, "
                        "in sats",
    "supply_in_loss": "supply in loss of {c}: value of the coins whose creation-day close is above the close, in sats",
    "mvrv": "MVRV of {c}: supply_usd / realized_cap, market value to realized value",
    "cost_basis_min": "lowest cost basis of {c}: their lowest creation-day close, to a 2.33% bucket, in US dollars",
    "cost_basis_pct50": "median cost basis of {c}: the creation-day close below which half their supply was "
                        "created, to a 2.33% bucket, in US dollars",
    "cost_basis_max": "highest cost basis of {c}: their highest creation-day close, to a 2.33% bucket, in US dollars",
    "nupl": "NUPL net unrealized profit and loss of {c}: 1 - realized_cap / supply_usd",
    "supply_rel_to_circulating_supply": "share of the supply held by {c}: supply / the whole supply",
    "supply_in_profit_rel_to_own_supply": "share of {c} in profit: supply_in_profit / supply",
    "supply_in_loss_rel_to_own_supply": "share of {c} in loss: supply_in_loss / supply",
    "supply_in_profit_rel_to_circulating_supply": "supply in profit of {c} / the whole supply",
    "supply_in_loss_rel_to_circulating_supply": "supply in loss of {c} / the whole supply",
    "net_unrealized_pnl": "net unrealized profit and loss of {c}: unrealized_profit - unrealized_loss, in US dollars",
    "unrealized_profit_rel_to_market_cap": "unrealized profit of {c} / the whole market cap",
    "unrealized_loss_rel_to_market_cap": "unrealized loss of {c} / the whole market cap",
    "net_unrealized_pnl_rel_to_market_cap": "net unrealized profit and loss of {c} / the whole market cap",
    "realized_price_ratio": "realized price ratio of {c}: close / realized_price",
    "realized_gross_pnl": "gross realized profit and loss of {c}: realized_profit + realized_loss, in US dollars",
    "sell_side_risk_ratio": "sell-side risk ratio of {c}: realized_gross_pnl / realized_cap",
    "realized_profit_to_loss_ratio": "realized profit to loss ratio of {c}: realized_profit / realized_loss",
    "realized_profit_rel_to_realized_cap": "realized profit of {c} / their realized_cap",
    "realized_loss_rel_to_realized_cap": "realized loss of {c} / their realized_cap",
    "net_realized_pnl_rel_to_realized_cap": "net realized profit and loss of {c} / their realized_cap",
}
_AGE_WORDS = {"h": "hour", "d": "day", "w": "week", "m": "month", "y": "year"}


def _age_words(label: str) -> str:
    n, unit = label[:-1], _AGE_WORDS[label[-1]]
    return f"{n} {unit}{'' if n == '1' else 's'}"


def _amount_words(label: str) -> str:
    """``10sats`` -> ``10 sats``, ``1k_sats`` -> ``1k sats``, ``1m_sats`` -> ``1M sats``, ``10k_btc`` -> ``10k BTC``."""
    number = label.split("_")[0].removesuffix("sats").removesuffix("sat").removesuffix("btc").replace("m", "M")
    unit = "BTC" if label.endswith("btc") else ("sat" if label == "1sat" else "sats")
    return f"{number} {unit}"


def _cohort_texts() -> dict[str, str]:
    texts = {"sth": "short-term holders' UTXOs (under 150 days old)",
             "lth": "long-term holders' UTXOs (150 days old or more)"}
    for i, name in enumerate(AGE_BANDS):
        if i == 0:
            texts[name] = "UTXOs under 1 hour old"
        elif i == len(AGE_BANDS) - 1:
            texts[name] = "UTXOs over 15 years old"
        else:
            texts[name] = f"UTXOs {_age_words(AGE_LABELS[i - 1])} to {_age_words(AGE_LABELS[i])} old"
    for label in AGE_LABELS:
        texts[f"utxos_over_{label}_old"] = f"UTXOs {_age_words(label)} old or more"
        texts[f"utxos_under_{label}_old"] = f"UTXOs under {_age_words(label)} old"
    words = [_amount_words(x) for x in AMOUNT_LABELS]
    texts["utxos_0sats"] = "UTXOs of 0 sats"
    for i in range(13):
        texts[AMOUNT_BANDS[i + 1]] = f"UTXOs of {words[i]} to under {words[i + 1]}"
    texts["utxos_over_100k_btc"] = "UTXOs of 100k BTC or more"
    for i, label in enumerate(AMOUNT_LABELS):
        texts[f"utxos_over_{label}"] = f"UTXOs of {words[i]} or more"
        texts[f"utxos_under_{label}"] = f"UTXOs of under {words[i]}"
    for t, name in zip(SPENDABLE, TYPE_COHORTS):
        texts[name] = f"unspent {t} outputs"
    for e in range(EPOCHS):
        texts[f"epoch_{e}"] = f"UTXOs created in halving epoch {e} (heights {e * 210_000:,} to {(e + 1) * 210_000 - 1:,})"
    for y in range(YEARS):
        texts[f"class_{FIRST_YEAR + y}"] = f"UTXOs created in {FIRST_YEAR + y} (year class)"
    return {c: texts[c] for c in COHORTS}


def definition(name: str) -> str | None:
    """The line of a cohort id without its unit (``sth_supply``, ``p2pkh_realized_price``), else None."""
    for metric, line in METRIC_LINES.items():
        if name.endswith("_" + metric):
            cohort = name[:-len(metric) - 1]
            if cohort in COHORTS:
                return line.format(c=_cohort_texts()[cohort])
    return None


# Read as ratios, sums or differences of the stored metrics (``cairn_servers.brk.catalog``); BRK's names.
DERIVED = ("realized_price", "mvrv", "nupl", "sopr", "net_realized_pnl", "supply_rel_to_circulating_supply",
           "supply_in_profit_rel_to_own_supply", "supply_in_loss_rel_to_own_supply",
           "supply_in_profit_rel_to_circulating_supply", "supply_in_loss_rel_to_circulating_supply",
           "net_unrealized_pnl", "unrealized_profit_rel_to_market_cap", "unrealized_loss_rel_to_market_cap",
           "net_unrealized_pnl_rel_to_market_cap", "realized_price_ratio", "realized_gross_pnl",
           "sell_side_risk_ratio", "realized_profit_to_loss_ratio", "realized_profit_rel_to_realized_cap",
           "realized_loss_rel_to_realized_cap", "net_realized_pnl_rel_to_realized_cap")


def ids_of(cohorts: Iterable[str], metrics: Iterable[str], sats: Collection[str]) -> set[str]:
    """``<cohort>_<metric>`` for every pair, with ``_btc`` and ``_usd`` for the metrics in sats."""
    metrics = tuple(metrics)
    found = set()
    for c in cohorts:
        for m in metrics:
            found.add(f"{c}_{m}")
            if m in sats:
                found.update((f"{c}_{m}_btc", f"{c}_{m}_usd"))
    return found


def pattern_lines(placeholder: str, metrics: Iterable[str], sats: Collection[str], lines: Mapping[str, str],
                  who: str) -> list[tuple[str, str]]:
    """``<placeholder>_<metric>`` lines for ``/llms.txt``: one per metric, its line said of ``who``."""
    return [(f"{placeholder}_{m}", lines[m].format(c=who) + (" (also `_btc`, `_usd`)" if m in sats else ""))
            for m in metrics]


def all_ids() -> set[str]:
    """Every cohort id the catalogue can serve (folded into a pattern by ``/llms.txt``)."""
    return ids_of(COHORTS, (*METRICS, *COST_METRICS, *DERIVED), SATS_METRICS)


def patterns() -> list[tuple[str, str]]:
    """``<cohort>_<metric>`` lines for ``/llms.txt``: one per metric, the cohort left as a placeholder."""
    return pattern_lines("<cohort>", (*METRICS, *COST_METRICS, *DERIVED), SATS_METRICS, METRIC_LINES, "the cohort")
