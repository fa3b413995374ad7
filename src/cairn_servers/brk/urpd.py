"""URPD, the UTXO realized price distribution: a UTXO cohort's supply by creation price at one height.

Every coin is priced as in the cohorts (``cairn_servers.brk.cohorts``): the close of its creation day, else the
last earlier close, else 0 (created before the first close). The cohorts pass keeps, in its checkpoints
``cohorts/state/cohorts-<H>.bin``, the supply and UTXO count per creation hour and per creation day x group; a
query reads the newest checkpoint at or below the height asked for and adds only the blocks from there (the
pass keeps one checkpoint per ``URPD_EVERY`` heights besides its log-spaced ones, so that is fewer than
``URPD_EVERY`` blocks), never the chain from block 0. The closes are the ones the pass used (its copy).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.core.errors import Conflict, InvalidInput, NotFound

if TYPE_CHECKING:
    import numpy as np

    from cairn_servers.brk.utxo import _Chain

MAX_PER_DECADE = 1000
ADVANCE_BLOCKS = 2000  # blocks read at a time while advancing from a checkpoint


def _cohort_columns(cohort: str) -> tuple[int, ...]:
    from cairn_servers.brk.cohorts import COHORTS, NA

    if cohort == "all":
        return tuple(range(NA))  # the age bands hold every coin once
    cols = COHORTS.get(cohort)
    if cols is None:
        raise NotFound(f"Unknown cohort {cohort!r}: give all or a UTXO cohort id, e.g. sth, lth, utxos_1d_to_1w_old, "
                       f"utxos_1btc_to_10btc, p2pkh, epoch_0, class_2009 (the <cohort> of the <cohort>_supply ids).")
    return cols


def _asked(height: int | str | None, date: str | None) -> int | dt.date | None:
    """The height or the day asked for, checked for form (None: the tip)."""
    from cairn_servers.brk.esplora import parse_int

    if height is not None and date is not None:
        raise InvalidInput("Give a height or a date, not both.")
    if height is not None:
        return parse_int(height, "height")
    if date is None:
        return None
    try:
        return dt.date.fromisoformat(str(date).strip())
    except ValueError:
        raise InvalidInput(f"Invalid date {str(date)[:40]!r}: give YYYY-MM-DD.") from None


def _target(heights_day: np.ndarray, tip: int, asked: int | dt.date | None) -> int:
    """The height asked for: a height, the last block of a day (or of the last earlier day with blocks), or
    the tip."""
    import numpy as np

    from cairn_servers.brk.dates import date_of_dateindex, dateindex_of_date

    if asked is None:
        return tip
    if isinstance(asked, int):
        if asked > tip:
            raise NotFound(f"Height {asked} is past the cohorts' tip ({tip}).")
        return asked
    first, last = date_of_dateindex(int(heights_day[0])), date_of_dateindex(int(heights_day[tip]))
    if asked < first:
        raise NotFound(f"No block on or before {asked}: the chain starts on {first}.")
    if asked > last:
        raise NotFound(f"{asked} is after the tip's day ({last}, height {tip}).")
    return int(np.searchsorted(heights_day[:tip + 1], dateindex_of_date(asked), "right")) - 1


def urpd(out: Path, cohort: str, height: int | str | None = None, date: str | None = None,
         per_decade: int | str = 10) -> dict[str, Any]:
    """The supply of ``cohort`` by creation-price bucket at ``height`` (or at the last block of ``date``)."""
    import numpy as np

    from cairn_servers.brk import cohorts as co
    from cairn_servers.brk.dates import date_of_dateindex
    from cairn_servers.brk.esplora import parse_int
    from cairn_servers.brk.reader import StoreReader
    from cairn_servers.brk.utxo import _Chain, _heights_of

    cols = _cohort_columns(cohort)
    asked = _asked(height, date)
    k = parse_int(per_decade, "per_decade", minimum=1)
    if k > MAX_PER_DECADE:
        raise InvalidInput(f"Invalid per_decade {k}: it must be at most {MAX_PER_DECADE}.")
    out = Path(out)
    store = StoreReader(co.cohorts_dir(out))
    try:
        store.refresh()
        done = store.length("height_to_blockhash") if store.exists else 0
        if done == 0:
            raise NotFound("No UTXO cohorts computed yet: run `brk index`.")
        close = store.read("dateindex_to_close").astype(np.float64)
        if not (~np.isnan(close)).any():
            raise NotFound("No prices: the URPD prices each coin at its creation day's close. Import daily prices "
                           "with `brk price import FILE.csv` (or `brk price fetch`), then run `brk index`.")
        hashes = store.read("height_to_blockhash", 0, done)
        state_at = int(store.meta.get("state", done))
    finally:
        store.close()
    chain = _Chain(out)
    try:
        tip = min(done, chain.n) - 1
        target = _target(chain.dateindex, tip, asked)
        if not np.array_equal(chain.hashes(target, target + 1)[0], hashes[target]):
            raise Conflict("The cohorts are being recomputed after a reorganization: retry after `brk index`.")
        state_dir = co.cohorts_dir(out) / "state"
        for _ in range(5):  # the pass may drop a checkpoint between the listing and the read
            usable = [h for h in _heights_of(state_dir, "cohorts-") if h <= min(target + 1, state_at)]
            start = usable[-1] if usable else 0
            try:
                tables = co._read_state(state_dir / f"cohorts-{start}.bin") if start else None
                break
            except FileNotFoundError:
                continue
        else:
            raise Conflict("The cohorts' checkpoints are being rewritten: retry.")
        age = cols[0] < co.NA
        sup, cnt = _advance(chain, tables, start, target + 1, age)
        basis = co._filled(close)

        def price(days: np.ndarray) -> np.ndarray:
            result: np.ndarray = basis[np.minimum(days, basis.shape[0] - 1)]
            return result

        h0, d0 = int(chain.mts[0]) // 3600, int(chain.dateindex[0])
        if age:
            from cairn_servers.brk.dates import dateindex_of_day

            h = int(chain.mts[target]) // 3600 - h0
            band = np.searchsorted(np.asarray(co.AGE_EDGES), h - np.arange(h + 1), "right")
            held = (band >= cols[0]) & (band <= cols[-1])
            cell_price = price(dateindex_of_day((np.arange(h + 1) + h0) // 24))
            p, s, c = cell_price[held], sup[:h + 1][held], cnt[:h + 1][held]
        else:
            g = np.asarray(cols) - co.NA
            p = price(np.arange(d0, d0 + sup.shape[0]))
            s, c = sup[:, g].sum(axis=1), cnt[:, g].sum(axis=1)
        day_of = int(chain.dateindex[target])
        today = float(close[day_of]) if day_of < close.shape[0] and not np.isnan(close[day_of]) else None
        return _buckets(cohort, target, date_of_dateindex(day_of).isoformat(), today, k, start, p, s, c)
    finally:
        chain.close()


def _advance(chain: _Chain, tables: tuple[np.ndarray, ...] | None, a: int, b: int,
             age: bool) -> tuple[np.ndarray, np.ndarray]:
    """The hour table (``age``) or the day x group table, supply and count, after heights [a, b)."""
    import numpy as np

    from cairn_servers.brk import cohorts as co
    from cairn_servers.brk.utxo import OPRETURN

    h0, d0 = int(chain.mts[0]) // 3600, int(chain.dateindex[0])
    hour = chain.mts[:b] // 3600 - h0
    if age:
        rows = int(hour[b - 1]) + 1
        sup, cnt = (tables[0], tables[1]) if tables else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        shape: tuple[int, ...] = (rows,)
    else:
        rows = int(chain.dateindex[b - 1]) + 1 - d0
        sup, cnt = (tables[2], tables[3]) if tables else (np.zeros((0, co.NG), np.int64),) * 2
        shape = (rows, co.NG)
    if sup.shape[0] < rows:
        grow = np.zeros((rows - sup.shape[0], *shape[1:]), np.int64)
        sup, cnt = np.concatenate((sup, grow)), np.concatenate((cnt, grow))
    start = a
    while start < b:
        stop = min(chain.chunk_end(start), start + ADVANCE_BLOCKS, b)
        cblk, cval, ctyp = chain.created(start, stop)
        _, sval, styp, sch = chain.spent(start, stop)
        ck, sk = ctyp != OPRETURN, styp != OPRETURN
        cval, ctyp, ch = cval[ck].astype(np.int64), ctyp[ck], start + cblk[ck]
        sval, styp, sch = sval[sk].astype(np.int64), styp[sk], sch[sk]
        if age:
            np.add.at(sup, hour[ch], cval)
            np.add.at(cnt, hour[ch], 1)
            np.subtract.at(sup, hour[sch], sval)
            np.subtract.at(cnt, hour[sch], 1)
        else:
            day = chain.dateindex
            for val, typ, hh, sign in ((cval, ctyp, ch, 1), (sval, styp, sch, -1)):
                for g in co._CohortPass._groups(val, typ, hh, day[hh]):
                    np.add.at(sup, (day[hh] - d0, g), sign * val)
                    np.add.at(cnt, (day[hh] - d0, g), sign)
        start = stop
    return sup, cnt


def _buckets(cohort: str, height: int, date: str, close: float | None, per_decade: int, start: int,
             price: np.ndarray, sup: np.ndarray, cnt: np.ndarray) -> dict[str, Any]:
    """The answer: one row per non-empty bucket ``[floor, floor x 10 ** (1 / per_decade))``, cheapest first."""
    import numpy as np

    from cairn_servers.brk.cohorts import PRICE_FLOOR, SATS

    held = cnt > 0
    price, sup, cnt = price[held], sup[held], cnt[held]
    with np.errstate(divide="ignore"):
        k = np.floor(per_decade * np.log10(np.maximum(price, PRICE_FLOOR) / PRICE_FLOOR)).astype(np.int64)
    k = np.where(price > 0, k + 1, 0)  # 0: created before the first close (price 0)
    keys, inverse = np.unique(k, return_inverse=True)
    s = np.bincount(inverse, weights=sup.astype(np.float64), minlength=keys.shape[0])
    c = np.bincount(inverse, weights=cnt.astype(np.float64), minlength=keys.shape[0])
    r = np.bincount(inverse, weights=sup / SATS * price, minlength=keys.shape[0])
    floors = np.where(keys == 0, 0.0, PRICE_FLOOR * 10.0 ** ((np.maximum(keys, 1) - 1) / per_decade))
    rows = [{"price_floor": float(f), "supply": int(x), "supply_btc": float(x) / SATS, "utxo_count": int(n),
             "realized_cap": float(v)} for f, x, n, v in zip(floors, s, c, r)]
    total = int(s.sum())
    return {"cohort": cohort, "height": height, "date": date, "close": close, "per_decade": per_decade,
            "supply": total, "supply_btc": total / SATS, "realized_cap": float(r.sum()),
            "from_checkpoint": start, "blocks_read": height + 1 - start, "buckets": rows}
