"""Every vec id the query interface serves, on every index, and how to read its rows.

A ``Source`` holds the readers of one output directory (raw store, computed store, prices) and the
per-tip caches; a ``Vec`` reads rows ``[start, stop)`` of one id on one index, by a recipe from its index's
``table`` (made when a query first reads that index; ``ids`` lists an index without keeping any). Three kinds:

* stored: a slice of a raw or computed vec (``os.pread``, committed rows only);
* derived per row: ``_btc`` (sats / 1e8), ``_usd`` (btc x the period's close), ``block_count``,
  ``date``, hex hashes;
* period aggregates over heights: for a base series X on a coarse index, ``X_sum``, ``X_avg``,
  ``X_min``, ``X_max``, ``X_median``, ``X_p10/_p25/_p75/_p90``, ``X_cumulative``; the bare ``X`` is
  the sum for flows, the last value for states and the average for levels. They are reduced from the
  stored height vecs and cached per tip; when the tip grows only the last period onwards is redone;
* market series (``cairn_servers.brk.market``): computed from the daily closes, cached per price commit;
* mining series (``cairn_servers.brk.mining``): pool block counts and dominance from the per-block pool ids,
  hash price and value, inflation and issuance from the computed vecs, the Puell multiple (a daily series).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.brk.compute import CUMULATED, TYPE_COUNTS, computed_dir
from cairn_servers.brk.addresses import COUNT_IDS, addresses_dir
from cairn_servers.brk import addrcohorts, cohorts, mining
from cairn_servers.brk.utxo import AGE_IDS, COIN_FLOWS, PROFIT_IDS, SUPPLY_TYPES, realized_dir, utxo_dir
from cairn_servers.brk.dates import DATE_INDEXES, HEIGHT_INDEXES, first_day_of_period, format_days, period_of_height
from cairn_servers.brk.reader import StoreReader

if TYPE_CHECKING:
    import numpy as np

INDEXES = ("height", "dateindex", "weekindex", "monthindex", "quarterindex", "semesterindex", "yearindex",
           "decadeindex", "difficultyepoch", "halvingepoch", "txindex", "inputindex", "outputindex")
ACCEPTED: dict[str, tuple[str, ...]] = {
    "height": ("h", "height"),
    "dateindex": ("d", "date", "dateindex"),
    "weekindex": ("w", "week", "weekindex"),
    "monthindex": ("m", "month", "monthindex"),
    "quarterindex": ("q", "quarter", "quarterindex"),
    "semesterindex": ("s", "semester", "semesterindex"),
    "yearindex": ("y", "year", "yearindex"),
    "decadeindex": ("decade", "decadeindex"),
    "difficultyepoch": ("difficulty", "difficultyepoch"),
    "halvingepoch": ("halving", "halvingepoch"),
    "txindex": ("tx", "txindex"),
    "inputindex": ("in", "inputindex"),
    "outputindex": ("out", "outputindex"),
}
STATS = ("sum", "avg", "min", "max", "median", "p10", "p25", "p75", "p90")
QUANTILES = {"median": 0.5, "p10": 0.1, "p25": 0.25, "p75": 0.75, "p90": 0.9}
SATS_PER_BTC = 100_000_000.0

# Base series per height: id -> (store, vec name, kind, in sats). kind: flow (bare = sum), state
# (bare = last value of the period), level (bare = average).
BASES: dict[str, tuple[str, str, str, bool]] = {
    "block_count": ("", "", "flow", False),
    "block_size": ("raw", "height_to_size", "flow", False),
    "block_weight": ("raw", "height_to_weight", "flow", False),
    "block_vbytes": ("comp", "height_to_block_vbytes", "flow", False),
    "tx_count": ("raw", "height_to_tx_count", "flow", False),
    "input_count": ("comp", "height_to_input_count", "flow", False),
    "output_count": ("comp", "height_to_output_count", "flow", False),
    **{name: ("comp", f"height_to_{name}", "flow", False) for name in TYPE_COUNTS},
    "fee": ("raw", "height_to_fee", "flow", True),
    "fees": ("raw", "height_to_fee", "flow", True),  # BRK's name
    "coinbase": ("comp", "height_to_coinbase", "flow", True),
    "subsidy": ("comp", "height_to_subsidy", "flow", True),
    "supply": ("comp", "height_to_supply", "state", True),
    "utxo_count": ("comp", "height_to_utxo_count", "state", False),
    "difficulty": ("raw", "height_to_difficulty", "state", False),
    "block_interval": ("comp", "height_to_block_interval", "level", False),
    "hash_rate": ("comp", "height_to_hash_rate", "level", False),
    "fee_rate": ("comp", "height_to_fee_rate", "level", False),
    # On-chain analytics (cairn_servers.brk.utxo): the UTXO set, coin age, age bands.
    **{f"supply_{t}": ("utxo", f"height_to_supply_{t}", "state", True) for t in SUPPLY_TYPES},
    **{f"utxo_count_{t}": ("utxo", f"height_to_utxo_count_{t}", "state", False) for t in SUPPLY_TYPES},
    "unspendable_supply": ("utxo", "height_to_unspendable_supply", "state", True),
    "spent_value": ("utxo", "height_to_spent_value", "flow", True),
    **{name: ("utxo", f"height_to_{name}", "flow", False) for name in COIN_FLOWS},
    "liveliness": ("utxo", "height_to_liveliness", "state", False),
    "vaultedness": ("utxo", "height_to_vaultedness", "state", False),
    **{name: ("utxo", f"height_to_{name}", "state", True) for name in AGE_IDS},
    # Addresses (cairn_servers.brk.addresses): counts after each block; new_address_count is a flow.
    **{name: ("addr", f"height_to_{name}", "flow" if name == "new_address_count" else "state", False)
       for name in COUNT_IDS},
    # Mining (cairn_servers.brk.mining): computed when read.
    **{name: ("mining", "", "state", sats) for name, sats in mining.HEIGHT_BASES.items()},
}
# Dollar series at creation prices (present with prices): realized_cap is absent where a height's day
# has no close.
REALIZED_BASES: dict[str, tuple[str, str, str, bool]] = {
    "realized_cap": ("realized", "height_to_realized_cap", "state", False),
    "realized_value_destroyed": ("realized", "height_to_realized_value_destroyed", "flow", False),
    "value_destroyed_usd": ("realized", "height_to_value_destroyed_usd", "flow", False),
    # Spendable supply (sats) whose creation-day close is below / above / equal to the day's close.
    **{name: ("realized", f"height_to_{name}", "state", True) for name in PROFIT_IDS},
    **{name: ("mining", "", "state", sats) for name, sats in mining.USD_BASES.items()},
}
# UTXO cohorts (cairn_servers.brk.cohorts): ``<cohort>_<metric>``, a sum of stored atomic columns. Name -> (store,
# metric, kind, in sats); only the bare id on coarse indexes (no per-period statistics: thousands of ids already).
COHORT_BASES: dict[str, tuple[str, str, str, bool]] = {
    f"{cohort}_{metric}": ("cohorts", metric, "state" if metric in cohorts.STATES else "flow",
                           metric in cohorts.SATS_METRICS)
    for cohort in cohorts.COHORTS for metric in cohorts.METRICS}
COHORT_BASES.update({f"{cohort}_{metric}": ("cohorts", metric, "state", False)
                     for cohort in cohorts.COHORTS for metric in cohorts.COST_METRICS})  # one column each
COHORT_READ_ROWS = 1 << 16  # rows of every atomic cohort read at a time (4.5 MB): a whole chain is never held
COHORT_OF = {f"{cohort}_{metric}": cohort for cohort in cohorts.COHORTS
             for metric in (*cohorts.METRICS, *cohorts.COST_METRICS)}
# Address cohorts (cairn_servers.brk.addrcohorts): the same, over ``OUT/addrcohorts``.
ADDR_COHORT_BASES: dict[str, tuple[str, str, str, bool]] = {
    f"{cohort}_{metric}": ("addrcohorts", metric, "state" if metric in addrcohorts.STATES else "flow",
                           metric in addrcohorts.SATS_METRICS)
    for cohort in addrcohorts.COHORTS for metric in addrcohorts.METRICS}
ADDR_COHORT_OF = {f"{cohort}_{metric}": cohort for cohort in addrcohorts.COHORTS for metric in addrcohorts.METRICS}
ALL_BASES = {**BASES, **REALIZED_BASES, **COHORT_BASES, **ADDR_COHORT_BASES}
# Flows with a stored running sum (``X_cumulative``) and the store holding it.
CUMULATIVE_STORE = {**{name: "comp" for name in (*CUMULATED, "subsidy", "fees")}, "block_count": "",
                    **{name: "utxo" for name in COIN_FLOWS}}
CUMULATIVE_NAME = {"fees": "fee"}  # a base whose stored running sum has another name
RAW_HEIGHT = {"timestamp": "height_to_timestamp", "bits": "height_to_bits", "block_version": "height_to_version",
              "first_txindex": "height_to_first_txindex", "first_inputindex": "height_to_first_inputindex",
              "first_outputindex": "height_to_first_outputindex"}
RAW_TX = {"height": "txindex_to_height", "tx_version": "txindex_to_version", "locktime": "txindex_to_locktime",
          "tx_size": "txindex_to_size", "tx_weight": "txindex_to_weight", "tx_vsize": "txindex_to_vsize",
          "input_count": "txindex_to_input_count", "output_count": "txindex_to_output_count",
          "first_inputindex": "txindex_to_first_inputindex", "first_outputindex": "txindex_to_first_outputindex",
          "fee": "txindex_to_fee"}
PRICES = ("open", "high", "low", "close")

Recipe = tuple[Any, ...]  # (function, *args): function(source, start, stop, *args) -> numpy array or list
BARE = {"flow": "sum", "state": "last", "level": "avg"}  # what a base series' bare id is on a coarse index
# The suffixed ids of a base series on a coarse index (flows: every stat and the running sum).
NAMED_STATS = {kind: (*(s for s in STATS if kind == "flow" or s != "sum"),
                      *(("cumulative",) if kind == "flow" else ())) for kind in BARE}


@dataclass(frozen=True, slots=True)
class Vec:
    id: str
    index: str
    recipe: Recipe

    def read(self, src: Source, start: int, stop: int) -> Any:
        return run(self.recipe, src, start, stop)


class Source:
    """The readers of one output directory and the caches keyed on its committed tip."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.raw = StoreReader(out)
        self.comp = StoreReader(computed_dir(out))
        self.prices = StoreReader(out / "prices")
        self.utxo = StoreReader(utxo_dir(out))
        self.realized = StoreReader(realized_dir(out))
        self.addr = StoreReader(addresses_dir(out))
        self.mining = StoreReader(mining.mining_dir(out))
        self.cohorts = StoreReader(cohorts.cohorts_dir(out))
        self.addrcohorts = StoreReader(addrcohorts.addrcohorts_dir(out))
        self._lock = threading.Lock()
        self._cache: dict[Any, tuple[int, Any]] = {}
        self.generation = -1
        self.heights = 0
        self.price_version = 0  # bumped on every price commit seen: the market series are keyed on it
        self.price_tag = ""  # the price manifest's modification time (hex ns): part of the HTTP ETag
        self.refresh()

    def refresh(self) -> bool:
        """Pick up new commits; True when anything changed (callers rebuild id lists then)."""
        changed = self.raw.refresh()
        changed = self.comp.refresh() or changed
        if self.prices.refresh():
            changed = True
            with self._lock:
                self.price_version += 1
                self.price_tag = _manifest_tag(self.out / "prices")
                # The closes per period and the market series follow a price import at once (the realized
                # values follow at the next compute, which bumps its generation).
                for key in [k for k in self._cache if isinstance(k, tuple) and k[0] in ("price", "market", "market_period")]:
                    del self._cache[key]
                for key in [k for k in self._cache if isinstance(k, tuple) and k[0] == "agg" and k[2] in mining.USD_BASES]:
                    del self._cache[key]  # hash price: coinbases at the day's close
        changed = self.utxo.refresh() or changed
        changed = self.realized.refresh() or changed
        changed = self.addr.refresh() or changed
        changed = self.mining.refresh() or changed
        if self.cohorts.refresh():
            changed = True
            with self._lock:  # the cohort pass commits after the served tip: its periods read before are redone
                for key in [k for k in self._cache if isinstance(k, tuple) and k[0] == "agg" and k[2] in COHORT_OF]:
                    del self._cache[key]
        if self.addrcohorts.refresh():
            changed = True
            with self._lock:  # the address cohorts follow the address pass: their periods read before are redone
                for key in [k for k in self._cache
                            if isinstance(k, tuple) and k[0] == "agg" and k[2] in ADDR_COHORT_OF]:
                    del self._cache[key]
        if changed:
            with self._lock:
                # Each store's generation only grows (a reorg or a price change bumps it): so does the sum.
                gen = sum(int(r.meta.get("generation", 0))
                          for r in (self.comp, self.utxo, self.realized, self.addr, self.mining, self.cohorts,
                                    self.addrcohorts))
                if gen != self.generation or self.prices.exists != self._cache.get("prices", (0, None))[1]:
                    self._cache.clear()
                    self._cache["prices"] = (0, self.prices.exists)
                self.generation = gen
                # The analytics pass commits just after the computer: serve the heights both hold.
                self.heights = min(self.comp.length("height_to_blockhash"),
                                   self.utxo.length("height_to_blockhash"))
        return changed

    @property
    def mining_behind(self) -> int:
        """Heights served whose pool the attribution pass has not committed yet (0 when caught up or not run)."""
        if not self.mining.exists:
            return 0
        return max(0, self.heights - self.mining.length("height_to_pool"))

    @property
    def has_prices(self) -> bool:
        return self.prices.exists and self.prices.length("dateindex_to_close") > 0

    def tip(self) -> int:
        return self.heights - 1

    # -- index lengths and height -> period maps ------------------------------------------------
    def length(self, index: str) -> int:
        n = self.heights
        if index == "height":
            return n
        if index in HEIGHT_INDEXES:
            return 0 if n == 0 else int(self.periods(index)[-1]) + 1
        return self.raw.length({"txindex": "txindex_to_txid", "inputindex": "inputindex_to_outputindex",
                                "outputindex": "outputindex_to_value"}[index])

    def periods(self, index: str) -> np.ndarray:
        """Period of every committed height (extended incrementally as heights arrive)."""
        import numpy as np

        def build(prev: np.ndarray | None, have: int, n: int) -> np.ndarray:
            dateindex = self.comp.read("height_to_dateindex", have, n)
            part = period_of_height(index, np.arange(have, n), dateindex)
            return part if prev is None else np.concatenate((prev, part))

        result: np.ndarray = self._incremental(("periods", index), build)
        return result

    def first_heights(self, index: str) -> np.ndarray:
        """``first[p]`` = first height of period p; ``first[P]`` = heights (empty periods: next start)."""
        import numpy as np

        key = ("first", index)
        n = self.heights
        with self._lock:
            hit = self._cache.get(key)
        if hit and hit[0] == n:
            result: np.ndarray = hit[1]
            return result
        per = self.periods(index)
        count = int(per[-1]) + 1 if n else 0
        first = np.searchsorted(per, np.arange(count + 1), "left")
        with self._lock:
            self._cache[key] = (n, first)
        return first

    def _incremental(self, key: Any, build: Callable[[Any, int, int], Any]) -> Any:
        n = self.heights
        with self._lock:
            hit = self._cache.get(key)
        if hit and hit[0] == n:
            return hit[1]
        have, prev = hit if hit and hit[0] < n else (0, None)
        value = build(prev, have, n)
        with self._lock:
            self._cache[key] = (n, value)
        return value

    # -- height series ---------------------------------------------------------------------------
    def height_values(self, base: str, start: int, stop: int) -> np.ndarray:
        import numpy as np

        store, name, _, _ = ALL_BASES[base]
        stop = min(stop, self.heights)
        if store == "mining":
            return mining.height_series(self, base, start, stop)
        if store == "cohorts":
            return self._cohort(name, COHORT_OF[base], start, stop)
        if store == "addrcohorts":
            return self._cohort(name, ADDR_COHORT_OF[base], start, stop, self.addrcohorts, addrcohorts.COHORTS)
        if base == "block_count":
            return np.ones(max(stop - start, 0), dtype=np.uint32)
        result: np.ndarray = self._reader(store).read(name, start, stop)
        if store in ("realized", "addr"):
            start = min(start, stop)
            if result.shape[0] < stop - start:  # no prices (blocks) yet, or the pass is catching up
                result = np.concatenate((result, np.full(stop - start - result.shape[0], np.nan)))
            if base == "realized_cap":  # absent where the day has no close
                result = np.where(np.isnan(self.price("close", "height", start, stop)), np.nan, result)
        return result

    def _cohort(self, metric: str, cohort: str, start: int, stop: int, reader: StoreReader | None = None,
                columns: dict[str, tuple[int, ...]] | None = None) -> np.ndarray:
        """A cohort's metric at heights [start, stop): the sum of its atomic columns (NaN where the pass lags).
        UTXO cohorts unless ``reader`` and ``columns`` say another pass's (the address cohorts)."""
        import numpy as np

        reader = self.cohorts if reader is None else reader
        start = min(start, stop)
        out = np.full(stop - start, np.nan)
        if not reader.exists or f"height_to_{metric}" not in reader.vecs:
            return out
        cols = (cohorts.COHORTS if columns is None else columns)[cohort]
        step = COHORT_READ_ROWS
        for a in range(start, stop, step):
            rows = reader.read(f"height_to_{metric}", a, min(a + step, stop))
            if columns is None and metric in cohorts.COST_METRICS:  # a bucket per cohort id, read as its floor price
                part = cohorts.bucket_floor(rows[:, cohorts.COHORT_IDS.index(cohort)])
            else:
                part = rows[:, cols[0]] if len(cols) == 1 else rows[:, cols[0]:cols[-1] + 1].sum(axis=1)
            out[a - start:a - start + part.shape[0]] = part
            if part.shape[0] < min(a + step, stop) - a:
                break
        return out

    def _reader(self, store: str) -> StoreReader:
        return {"raw": self.raw, "comp": self.comp, "utxo": self.utxo, "realized": self.realized,
                "addr": self.addr}[store]

    def cumulative(self, base: str, start: int, stop: int) -> np.ndarray:
        """Running sum of a flow at heights [start, stop)."""
        import numpy as np

        stop = min(stop, self.heights)
        if base == "block_count":
            return np.arange(start + 1, stop + 1, dtype=np.uint64)
        store = CUMULATIVE_STORE.get(base)
        if store is None:  # not stored: a running sum kept per tip (one number a block)
            def build(prev: np.ndarray | None, have: int, n: int) -> np.ndarray:
                part = self.height_values(base, have, n)
                base0 = prev[-1] if prev is not None and prev.shape[0] else 0
                acc = np.cumsum(np.concatenate(([base0], part)))[1:]
                return acc if prev is None else np.concatenate((prev, acc))

            full: np.ndarray = self._incremental(("cum", base), build)
            return full[start:stop]
        name = CUMULATIVE_NAME.get(base, base)
        result: np.ndarray = self._reader(store).read(f"height_to_{name}_cumulative", start, stop)
        return result

    def aggregate(self, index: str, base: str, stat: str) -> np.ndarray:
        """One statistic of a base series for every period of ``index`` (cached per tip)."""
        import numpy as np

        def build(prev: np.ndarray | None, have: int, n: int) -> np.ndarray:
            first = self.first_heights(index)
            count = first.shape[0] - 1
            # Redo from the period holding the last height seen before (it may have grown).
            p0 = 0 if prev is None or have == 0 else int(self.periods(index)[have - 1])
            part = self._reduce(index, base, stat, first, p0, count)
            return part if prev is None else np.concatenate((prev[:p0], part))

        result: np.ndarray = self._incremental(("agg", index, base, stat), build)
        return result

    def _reduce(self, index: str, base: str, stat: str, first: np.ndarray, p0: int, p1: int) -> np.ndarray:
        import numpy as np

        kind = ALL_BASES[base][2]
        ends = first[p0 + 1:p1 + 1]
        if stat in ("last", "cumulative"):
            idx = ends.astype(np.int64) - 1
            if stat == "cumulative" and kind == "flow":
                ok = idx >= 0
                if not ok.any():
                    return np.zeros(idx.shape[0], dtype=np.uint64)
                lo = int(idx[ok].min())
                window = self.cumulative(base, lo, int(idx.max()) + 1)
                vals = np.zeros(idx.shape[0], dtype=window.dtype)
                vals[ok] = window[idx[ok] - lo]
                return vals
            ok = idx >= 0
            if not ok.any():
                return np.full(idx.shape[0], np.nan)
            lo = int(idx[ok].min())
            window = self.height_values(base, lo, int(idx.max()) + 1)
            if ok.all():  # keep integer series integral
                return window[idx - lo]
            out = np.full(idx.shape[0], np.nan)
            out[ok] = window[idx[ok] - lo]
            return out
        h0, h1 = int(first[p0]), int(first[p1])
        values = self.height_values(base, h0, h1)
        starts = first[p0:p1] - h0
        counts = np.diff(first[p0:p1 + 1])
        nonempty = counts > 0
        s = starts[nonempty].astype(np.int64)
        if stat == "sum":
            out_sum = np.zeros(p1 - p0, dtype=np.float64 if values.dtype.kind == "f" else np.uint64)
            if s.size:
                out_sum[nonempty] = np.add.reduceat(values.astype(out_sum.dtype), s)
            return out_sum
        out = np.full(p1 - p0, np.nan)
        if not s.size:
            return out
        fvals = values.astype(np.float64)
        if stat == "avg":
            out[nonempty] = np.add.reduceat(fvals, s) / counts[nonempty]
        elif stat == "min":
            out[nonempty] = np.minimum.reduceat(fvals, s)
        elif stat == "max":
            out[nonempty] = np.maximum.reduceat(fvals, s)
        else:
            q = QUANTILES[stat]
            group = np.repeat(np.arange(p1 - p0), counts)
            order = np.lexsort((fvals, group))
            ordered = fvals[order]
            c = counts[nonempty]
            pos = q * (c - 1)
            lo_i = np.floor(pos).astype(np.int64)
            hi = np.minimum(lo_i + 1, c - 1)
            frac = pos - lo_i
            out[nonempty] = ordered[s + lo_i] + (ordered[s + hi] - ordered[s + lo_i]) * frac
        return out

    # -- prices ------------------------------------------------------------------------------------
    def price(self, field: str, index: str, start: int, stop: int) -> np.ndarray:
        """OHLC per period of a date index, or per height (the height's day)."""
        import numpy as np

        if index == "height":
            di = self.comp.read("height_to_dateindex", start, stop).astype(np.int64)
            daily = self.daily_price(field)
            out = np.full(di.shape[0], np.nan)
            ok = di < daily.shape[0]
            out[ok] = daily[di[ok]]
            return out
        return self.period_price(index, field)[start:stop]

    def daily_price(self, field: str) -> np.ndarray:
        return self.prices.read(f"dateindex_to_{field}").astype("<f8")

    def period_price(self, index: str, field: str) -> np.ndarray:
        """OHLC of each period of a date index: first open, max high, min low, last close."""
        import numpy as np

        n_periods = self.length(index)
        with self._lock:
            hit = self._cache.get(("price", index, field))
        if hit and hit[0] == self.heights:
            cached: np.ndarray = hit[1]
            return cached
        daily = self.daily_price(field)
        out = np.full(n_periods, np.nan)
        if daily.shape[0]:
            from cairn_servers.brk.dates import period_of_dateindex

            per = period_of_dateindex(index, np.arange(daily.shape[0]))
            ok = ~np.isnan(daily) & (per < n_periods)
            p, v = per[ok], daily[ok]
            if field == "high":
                np.fmax.at(out, p, v)
            elif field == "low":
                np.fmin.at(out, p, v)
            elif field == "open":
                out[p[::-1]] = v[::-1]  # the first day's value wins
            else:
                out[p] = v  # the last day's value wins
        with self._lock:
            self._cache[("price", index, field)] = (self.heights, out)
        return out

    def market_daily(self) -> dict[str, np.ndarray]:
        """Every market series per dateindex (``cairn_servers.brk.market``), cached per price commit."""
        key = ("market", self.price_version)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            series: dict[str, np.ndarray] = hit[1]
            return series
        from cairn_servers.brk import market

        series = market.compute(self.daily_price("close"))
        with self._lock:
            for old in [k for k in self._cache if isinstance(k, tuple) and k[:1] == ("market",)]:
                del self._cache[old]  # one price version's series at a time
            self._cache[key] = (0, series)
        return series

    def mining_daily(self) -> dict[str, np.ndarray]:
        """The daily mining series (``cairn_servers.brk.mining.daily``), cached per tip and price commit."""
        key = ("mining_daily",)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] == self.heights and hit[1][0] == self.price_version:
            cached: dict[str, np.ndarray] = hit[1][1]
            return cached
        series = mining.daily(self)
        with self._lock:
            self._cache[key] = (self.heights, (self.price_version, series))
        return series

    def market(self, name: str, index: str, start: int, stop: int) -> np.ndarray:
        """A market series per height (the block's day) or per period of a date index (its last day
        with a value, as ``close``)."""
        import numpy as np

        daily = (self.mining_daily() if name in mining.DAILY else self.market_daily())[name]
        if index == "height":
            di = self.comp.read("height_to_dateindex", start, stop).astype(np.int64)
            out = np.full(di.shape[0], np.nan)
            ok = di < daily.shape[0]
            out[ok] = daily[di[ok]]
            return out
        if index == "dateindex":
            n_days = self.length(index)
            result = np.full(max(min(stop, n_days) - start, 0), np.nan)
            part = daily[start:min(stop, n_days)]
            result[:part.shape[0]] = part
            return result
        key = ("market_period", index, name)  # one entry per id and index, replaced when the tip or prices move
        with self._lock:
            hit = self._cache.get(key)
        if hit is None or hit[0] != self.heights or hit[1][0] != self.price_version:
            from cairn_servers.brk.dates import period_of_dateindex

            n_periods = self.length(index)
            per_period = np.full(n_periods, np.nan)
            per = period_of_dateindex(index, np.arange(daily.shape[0]))
            ok = ~np.isnan(daily) & (per < n_periods)
            per_period[per[ok]] = daily[ok]  # the last day with a value wins
            with self._lock:
                self._cache[key] = (self.heights, (self.price_version, per_period))
        else:
            per_period = hit[1][1]
        sliced: np.ndarray = per_period[start:stop]
        return sliced

    def dates(self, index: str, start: int, stop: int) -> list[str]:
        import numpy as np

        if index == "height":
            from cairn_servers.brk.dates import day_nums

            return format_days(day_nums(self.comp.read("height_to_dateindex", start, stop)))
        return format_days(first_day_of_period(index, np.arange(start, stop)))


def _manifest_tag(root: Path) -> str:
    """A store's last commit, as the modification time of its manifest in hex nanoseconds ("" when none)."""
    import os

    try:
        return f"{os.stat(root / 'manifest.json').st_mtime_ns:x}"
    except OSError:
        return ""


# -- the entries -------------------------------------------------------------------------------------
# An entry's reader is a recipe, a tuple ``(function, *args)`` read as ``function(src, start, stop, *args)``;
# recipes nest (``_btc`` of an aggregate). They cost a tuple each where closures cost a function object,
# cells and a Vec: an index's table is built on first use (``table``), and listing ids builds no reader.


def run(recipe: Recipe, src: Source, a: int, b: int) -> Any:
    return recipe[0](src, a, b, *recipe[1:])


def _btc(src: Source, a: int, b: int, sats: Recipe) -> Any:
    return run(sats, src, a, b) / SATS_PER_BTC


def _usd(src: Source, a: int, b: int, btc: Recipe, index: str) -> Any:
    return run(btc, src, a, b) * src.price("close", index, a, b)


def _hex(src: Source, a: int, b: int, store: str, name: str) -> list[str]:
    reader = src.raw if store == "raw" else src.comp
    return [bytes(row[::-1]).hex() for row in reader.read(name, a, b)]


def _stored(src: Source, a: int, b: int, store: str, name: str) -> Any:
    return (src.raw if store == "raw" else src.comp).read(name, a, b)


def _dates(src: Source, a: int, b: int, index: str) -> list[str]:
    return src.dates(index, a, b)


def _height(src: Source, a: int, b: int, base: str) -> np.ndarray:
    return src.height_values(base, a, b)


def _cumulative(src: Source, a: int, b: int, base: str) -> np.ndarray:
    return src.cumulative(base, a, b)


def _agg(src: Source, a: int, b: int, index: str, base: str, stat: str) -> np.ndarray:
    return src.aggregate(index, base, stat)[a:b]


def _price(src: Source, a: int, b: int, field: str, index: str) -> np.ndarray:
    return src.price(field, index, a, b)


def _market(src: Source, a: int, b: int, name: str, index: str) -> np.ndarray:
    return src.market(name, index, a, b)


def _pool(src: Source, a: int, b: int, pid: int, kind: str, window: str) -> np.ndarray:
    return mining.pool_height(src, a, b, pid, kind, window)


def _pool_period(src: Source, a: int, b: int, index: str, pid: int, kind: str, window: str) -> np.ndarray:
    return mining.pool_period(src, a, b, index, pid, kind, window)


def _pools(row: dict[str, Recipe], index: str) -> None:
    """Every pool's block counts and dominance (``cairn_servers.brk.mining``) on ``height`` or a coarse index."""
    for pool in mining.pools():
        for vec_id, (kind, window) in mining.pool_ids(pool.slug).items():
            if index == "height":
                row[vec_id] = (_pool, pool.id, kind, window)
            else:
                row[vec_id] = (_pool_period, index, pool.id, kind, window)


def _first_height(src: Source, a: int, b: int, index: str) -> np.ndarray:
    return src.first_heights(index)[a:b]


def _ratio(src: Source, a: int, b: int, num: Recipe, den: Recipe, minus_one: bool) -> np.ndarray:
    import numpy as np

    n = np.asarray(run(num, src, a, b), dtype=np.float64)
    d = np.asarray(run(den, src, a, b), dtype=np.float64)
    out: np.ndarray = np.divide(n, d, out=np.full(n.shape, np.nan), where=(d != 0) & ~np.isnan(d))
    return 1.0 - out if minus_one else out


def _combine(src: Source, a: int, b: int, x: Recipe, y: Recipe, sign: float) -> np.ndarray:
    """x + sign x y."""
    import numpy as np

    result: np.ndarray = (np.asarray(run(x, src, a, b), dtype=np.float64)
                          + sign * np.asarray(run(y, src, a, b), dtype=np.float64))
    return result


def _fee_rate(src: Source, a: int, b: int) -> np.ndarray:
    """A transaction's fee per virtual byte (sat/vB)."""
    fee = src.raw.read("txindex_to_fee", a, b).astype("<f8")
    vsize = src.raw.read("txindex_to_vsize", a, b).astype("<f8")
    result: np.ndarray = fee / vsize
    return result


def table(index: str, prices: bool) -> dict[str, Recipe]:
    """id -> recipe of every vec on ``index``, for a store with (or without) prices."""
    row: dict[str, Recipe] = {}
    if index == "height":
        row["blockhash"] = (_hex, "raw", "height_to_blockhash")
        row["date"] = (_dates, "height")
        row["difficulty"] = (_stored, "raw", "height_to_difficulty")
        for vec_id, name in RAW_HEIGHT.items():
            row[vec_id] = (_stored, "raw", name)
        for base, (_, _, kind, sats) in BASES.items():
            _unit_variants(row, index, base, (_height, base), sats, prices, "")
            if kind == "flow":
                _unit_variants(row, index, base, (_cumulative, base), sats, False, "_cumulative")
        _pools(row, index)
        _cohorts(row, index, prices)
        _addr_cohorts(row, index, prices)
        if prices:
            for field in PRICES:
                row[field] = (_price, field, index)
            row["market_cap"] = row["supply_usd"]
            _realized(row, index)
            _market_ids(row, index)
    elif index in HEIGHT_INDEXES:
        dated = index in DATE_INDEXES
        usd = prices and dated
        row["first_height"] = (_first_height, index)
        if dated:
            row["date"] = (_dates, index)
        for base, (_, _, kind, sats) in BASES.items():
            _unit_variants(row, index, base, (_agg, index, base, BARE[kind]), sats, usd, "")
            for stat in NAMED_STATS[kind]:
                _unit_variants(row, index, base, (_agg, index, base, stat), sats, usd, f"_{stat}")
        _pools(row, index)
        _cohorts(row, index, usd)
        _addr_cohorts(row, index, usd)
        if usd:
            for field in PRICES:
                row[field] = (_price, field, index)
            row["market_cap"] = row["supply_usd"]
            _realized(row, index)
            _market_ids(row, index)
    elif index == "txindex":
        row["txid"] = (_hex, "raw", "txindex_to_txid")
        for vec_id, name in RAW_TX.items():
            row[vec_id] = (_stored, "raw", name)
        row["fee_btc"] = (_btc, (_stored, "raw", "txindex_to_fee"))
        row["fee_rate"] = (_fee_rate,)
    elif index == "inputindex":
        row["outputindex"] = (_stored, "raw", "inputindex_to_outputindex")
    elif index == "outputindex":
        row["value"] = (_stored, "raw", "outputindex_to_value")
        row["value_btc"] = (_btc, (_stored, "raw", "outputindex_to_value"))
        row["type"] = (_stored, "raw", "outputindex_to_type")
    return row


def ids(index: str, prices: bool) -> list[str]:
    """The sorted ids of ``index`` (its table is built and dropped: recipes are tuples, nothing stays)."""
    return sorted(table(index, prices))


def _realized(row: dict[str, Recipe], index: str) -> None:
    """Realized value and its ratios on ``height`` or a date index (a store with prices)."""
    for base, (_, _, kind, sats) in REALIZED_BASES.items():
        if index == "height":
            _unit_variants(row, index, base, (_height, base), sats, True, "")
            continue
        _unit_variants(row, index, base, (_agg, index, base, BARE[kind]), sats, True, "")
        for stat in NAMED_STATS[kind]:
            if stat != "cumulative":
                _unit_variants(row, index, base, (_agg, index, base, stat), sats, True, f"_{stat}")
    row["realized_price"] = (_ratio, row["realized_cap"], row["supply_btc"], False)
    row["mvrv"] = (_ratio, row["market_cap"], row["realized_cap"], False)
    row["nupl"] = (_ratio, row["realized_cap"], row["market_cap"], True)
    row["sopr"] = (_ratio, row["value_destroyed_usd"], row["realized_value_destroyed"], False)


def _cohorts(row: dict[str, Recipe], index: str, usd: bool) -> None:
    """Every UTXO cohort's metrics (``cairn_servers.brk.cohorts``): supply and counts always, the dollar ones
    and the ratios with prices."""
    for base, (_, metric, kind, sats) in COHORT_BASES.items():
        if not usd and metric not in ("supply", "utxo_count"):
            continue
        read: Recipe = (_height, base) if index == "height" else (_agg, index, base, BARE[kind])
        _unit_variants(row, index, base, read, sats, usd, "")
    for c in cohorts.COHORTS:
        row[f"{c}_supply_rel_to_circulating_supply"] = (_ratio, row[f"{c}_supply"], row["supply"], False)
    if not usd:
        return

    def r(c: str, m: str) -> Recipe:
        return row[f"{c}_{m}"]

    for c in cohorts.COHORTS:
        ratios = {
            "realized_price": (r(c, "realized_cap"), r(c, "supply_btc")),
            "mvrv": (r(c, "supply_usd"), r(c, "realized_cap")),
            "sopr": (r(c, "value_created"), r(c, "value_destroyed")),
            "supply_in_profit_rel_to_own_supply": (r(c, "supply_in_profit"), r(c, "supply")),
            "supply_in_loss_rel_to_own_supply": (r(c, "supply_in_loss"), r(c, "supply")),
            "supply_in_profit_rel_to_circulating_supply": (r(c, "supply_in_profit"), row["supply"]),
            "supply_in_loss_rel_to_circulating_supply": (r(c, "supply_in_loss"), row["supply"]),
            "unrealized_profit_rel_to_market_cap": (r(c, "unrealized_profit"), row["supply_usd"]),
            "unrealized_loss_rel_to_market_cap": (r(c, "unrealized_loss"), row["supply_usd"]),
            "realized_profit_to_loss_ratio": (r(c, "realized_profit"), r(c, "realized_loss")),
            "realized_profit_rel_to_realized_cap": (r(c, "realized_profit"), r(c, "realized_cap")),
            "realized_loss_rel_to_realized_cap": (r(c, "realized_loss"), r(c, "realized_cap")),
        }
        for m, (num, den) in ratios.items():
            row[f"{c}_{m}"] = (_ratio, num, den, False)
        row[f"{c}_nupl"] = (_ratio, r(c, "realized_cap"), r(c, "supply_usd"), True)
        row[f"{c}_net_realized_pnl"] = (_combine, r(c, "realized_profit"), r(c, "realized_loss"), -1.0)
        row[f"{c}_realized_gross_pnl"] = (_combine, r(c, "realized_profit"), r(c, "realized_loss"), 1.0)
        row[f"{c}_net_unrealized_pnl"] = (_combine, r(c, "unrealized_profit"), r(c, "unrealized_loss"), -1.0)
        row[f"{c}_realized_price_ratio"] = (_ratio, (_price, "close", index), r(c, "realized_price"), False)
        row[f"{c}_sell_side_risk_ratio"] = (_ratio, r(c, "realized_gross_pnl"), r(c, "realized_cap"), False)
        row[f"{c}_net_unrealized_pnl_rel_to_market_cap"] = (_ratio, r(c, "net_unrealized_pnl"), row["supply_usd"],
                                                             False)
        row[f"{c}_net_realized_pnl_rel_to_realized_cap"] = (_ratio, r(c, "net_realized_pnl"), r(c, "realized_cap"),
                                                             False)


def _addr_cohorts(row: dict[str, Recipe], index: str, usd: bool) -> None:
    """Every address cohort's metrics (``cairn_servers.brk.addrcohorts``): supply and address counts always, the
    dollar ones and the ratios with prices."""
    for base, (_, metric, kind, sats) in ADDR_COHORT_BASES.items():
        if not usd and metric not in ("supply", "addr_count"):
            continue
        read: Recipe = (_height, base) if index == "height" else (_agg, index, base, BARE[kind])
        _unit_variants(row, index, base, read, sats, usd, "")
    for c in addrcohorts.COHORTS:
        for alias, metric in addrcohorts.ALIASES.items():
            row[f"{c}_{alias}"] = row[f"{c}_{metric}"]
        row[f"{c}_supply_rel_to_circulating_supply"] = (_ratio, row[f"{c}_supply"], row["supply"], False)
        if not usd:
            continue
        r = row.__getitem__
        row[f"{c}_realized_price"] = (_ratio, r(f"{c}_realized_cap"), r(f"{c}_supply_btc"), False)
        row[f"{c}_mvrv"] = (_ratio, r(f"{c}_supply_usd"), r(f"{c}_realized_cap"), False)
        row[f"{c}_nupl"] = (_ratio, r(f"{c}_realized_cap"), r(f"{c}_supply_usd"), True)
        row[f"{c}_sopr"] = (_ratio, r(f"{c}_value_created"), r(f"{c}_value_destroyed"), False)
        row[f"{c}_net_realized_pnl"] = (_combine, r(f"{c}_realized_profit"), r(f"{c}_realized_loss"), -1.0)


def _market_ids(row: dict[str, Recipe], index: str) -> None:
    """The market series (``cairn_servers.brk.market``) on ``height`` or a date index (a store with prices)."""
    from cairn_servers.brk.market import IDS

    for name in (*IDS, *mining.DAILY):
        row[name] = (_market, name, index)


def _unit_variants(row: dict[str, Recipe], index: str, base: str, read: Recipe, sats: bool, usd: bool,
                   suffix: str) -> None:
    """``base+suffix`` and, for sats series, ``base_btc+suffix`` and (with prices) ``base_usd+suffix``."""
    row[base + suffix] = read
    if sats:
        btc = (_btc, read)
        row[f"{base}_btc{suffix}"] = btc
        if usd and suffix != "_cumulative":
            row[f"{base}_usd{suffix}"] = (_usd, btc, index)
