"""Daily BTC/USD prices: ``brk price import FILE.csv`` and opt-in fetchers for public exchange APIs.

Prices live in ``OUT/prices/`` (the same crash-safe vec store) as ``dateindex_to_open/high/low/close``
(float64 dollars; a day without a price is NaN). An import merges by date: rows from the first
imported day on are rewritten (manifest first, so an interrupted import leaves the earlier rows and
can simply be run again). Nothing here touches the network unless ``brk price fetch`` is run.

CSV: a header row naming a date column (``date``, ``day``, ``time`` or ``timestamp``: ``YYYY-MM-DD``
or Unix seconds/milliseconds) and ``open``, ``high``, ``low``, ``close`` (``price`` alone fills all
four). Days before 2009-01-09 all map to dateindex 0; the last such row wins. Every price must be
a positive finite number under 10^15 dollars with high >= low, each day may appear once and none may
lie in the future: anything else is refused naming the line, and nothing is written.

``brk run`` and ``brk index --watch`` keep prices fresh by themselves (:class:`Refresher`): a fetch in a
background thread with a short timeout, at most once an interval, whose failures are silent (the stored
prices stay; a line at ``--log-level debug``). ``$BRK_PRICES`` = ``off`` turns it off, or names the source
(``kraken``, the default, or ``binance``); ``$BRK_PRICE_URL`` overrides the endpoint and
``$BRK_PRICE_INTERVAL`` the seconds between fetches (default 3600).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

from cairn_servers.brk.dates import dateindex_of_date
from cairn_servers.brk.vecs import VecSpec, VecStore
from cairn_servers.core.errors import CairnError, InvalidInput, NetworkError

FIELDS = ("open", "high", "low", "close")
SOURCES = {
    "kraken": "https://api.kraken.com/0/public/OHLC?pair=XBTUSD&interval=1440",
    "binance": "https://api.binance.com/api/v3/klines?symbol=BTCUSDT&interval=1d&limit=1000",
}
Row = tuple[int, float, float, float, float]  # dateindex, open, high, low, close
MAX_CSV_BYTES = 16 << 20  # 17 years of daily rows are ~400 KB
MAX_PRICE = 1e15  # dollars per bitcoin; larger ones (1e308) made market caps overflow to infinity


def _store(out: Path) -> VecStore:
    return VecStore(out / "prices", [VecSpec(f"dateindex_to_{f}", "dateindex", "<f8") for f in FIELDS])


def _day(text: str) -> dt.date:
    text = text.strip()
    if text.replace(".", "", 1).isdigit():
        seconds = float(text)
        if seconds > 1e11:  # milliseconds
            seconds /= 1000
        try:
            return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).date()
        except (OverflowError, OSError, ValueError):  # past year 9999 (99999999999999999999)
            raise InvalidInput(f"Unreadable date {text[:40]!r}: the timestamp is out of range. Use YYYY-MM-DD "
                               "or Unix seconds.") from None
    try:
        return dt.date.fromisoformat(text[:10])
    except ValueError:
        raise InvalidInput(f"Unreadable date {text[:40]!r}: use YYYY-MM-DD or Unix seconds.") from None


def _check_row(values: list[float], where: str) -> None:
    """Refuse prices no market gives (``where`` names the line): not finite, not positive, absurdly
    large, or a high below the low."""
    for name, v in zip(FIELDS, values):
        if not math.isfinite(v) or v <= 0 or v >= MAX_PRICE:
            why = "is not a finite number" if not math.isfinite(v) else \
                "is not positive" if v <= 0 else f"is over {MAX_PRICE:.0e} dollars"
            raise InvalidInput(f"{where}: the {name} price {v!r} {why}. Prices are positive dollar amounts.")
    if values[1] < values[2]:
        raise InvalidInput(f"{where}: the high {values[1]!r} is below the low {values[2]!r}.")


def _check_day(day: dt.date, where: str, seen: set[dt.date]) -> None:
    if day in seen:
        raise InvalidInput(f"{where}: {day.isoformat()} appears a second time; give each day once.")
    if day > dt.datetime.now(dt.timezone.utc).date() + dt.timedelta(days=1):
        raise InvalidInput(f"{where}: {day.isoformat()} is in the future.")
    seen.add(day)


def parse_csv(text: str, name: str = "CSV") -> list[Row]:
    reader = csv.DictReader(io.StringIO(text))
    header = {h.strip().lower(): h for h in (reader.fieldnames or [])}
    date_col = next((header[k] for k in ("date", "day", "time", "timestamp") if k in header), None)
    if date_col is None:
        raise InvalidInput(f"{name} has no date column. The header needs date (or time/timestamp) and "
                           f"open,high,low,close (or price).")
    cols = {f: header.get(f) or header.get("price") for f in FIELDS}
    missing = [f for f, c in cols.items() if c is None]
    if missing:
        raise InvalidInput(f"{name} lacks the column(s) {', '.join(missing)}. Use open,high,low,close or price.")
    rows: list[Row] = []
    seen: set[dt.date] = set()
    records = iter(reader)
    while True:
        try:
            rec = next(records)
        except StopIteration:
            break
        except csv.Error as exc:  # a field over csv's 128 KiB limit, a NUL byte
            # line_num counts the lines read before the one that failed
            raise InvalidInput(f"{name} line {reader.line_num + 1}: {exc}. Is this a CSV of daily prices?") from None
        where = f"{name} line {reader.line_num}"
        try:
            values = [float(str(rec[str(cols[f])]).replace(",", "")) for f in FIELDS]
        except (TypeError, ValueError):
            shown = ",".join(str(v) for v in rec.values())
            raise InvalidInput(f"{where}: a price is not a number ({shown[:200]}).") from None
        _check_row(values, where)
        try:
            day = _day(str(rec[date_col]))
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: {exc.message}") from None
        _check_day(day, where, seen)
        rows.append((dateindex_of_date(day), *values))  # type: ignore[arg-type]
    if not rows:
        raise InvalidInput(f"{name} holds no price rows.")
    return rows


def save(out: Path, rows: list[Row]) -> dict[str, Any]:
    """Merge ``rows`` into the stored prices; returns what was written.

    Days whose four prices are already stored as given are left alone (``changed_days`` counts the
    others), so the realized values are recomputed only from the first day that really changed."""
    import numpy as np

    if not (out / "manifest.json").exists():
        raise InvalidInput(f"{out} is not a brk output directory. Run `brk index --out {out}` first.")
    store = _store(out)
    have = store.lengths["dateindex_to_close"]
    by_day = {r[0]: r[1:] for r in rows}
    days = len(by_day)
    if have:
        stored = np.stack([store.read(f"dateindex_to_{f}") for f in FIELDS], axis=1)
        by_day = {d: v for d, v in by_day.items()
                  if d >= have or not np.array_equal(stored[d], np.asarray(v, dtype=np.float64))}
    if not by_day:
        return {"days": days, "changed_days": 0, "first_dateindex": None, "last_dateindex": None,
                "stored_days": have}
    first, last = min(by_day), max(by_day)
    start = min(first, have)
    end = max(last + 1, have)
    table = np.full((end - start, 4), np.nan)
    if have > start:
        for j, f in enumerate(FIELDS):
            table[: have - start, j] = store.read(f"dateindex_to_{f}")[start:have]
    for day, values in by_day.items():
        table[day - start] = values
    store.truncate({f"dateindex_to_{f}": start for f in FIELDS}, store.meta)
    for j, f in enumerate(FIELDS):
        store.append(f"dateindex_to_{f}", table[:, j])
    store.commit({"updated": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
    return {"days": days, "changed_days": len(by_day), "first_dateindex": first, "last_dateindex": last,
            "stored_days": store.lengths["dateindex_to_close"]}


def import_csv(out: Path, path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CSV_BYTES + 1)
    except OSError as exc:
        raise InvalidInput(f"Cannot read {path}: {exc.strerror}. Pass a CSV file of daily prices.") from exc
    if len(raw) > MAX_CSV_BYTES:
        raise InvalidInput(f"{path} is over {MAX_CSV_BYTES >> 20} MiB; a CSV of daily prices since 2009 is a few "
                           "hundred KB. Check the file.")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InvalidInput(f"{path} line {line}: byte 0x{raw[exc.start]:02x} is not UTF-8. Save the CSV as "
                           "UTF-8.") from None
    return save(out, parse_csv(text, str(path)))


def parse_kraken(body: bytes) -> list[Row]:
    data = json.loads(body)
    if data.get("error"):
        raise NetworkError(f"Kraken answered with an error: {', '.join(data['error'])}.")
    series = [v for k, v in data.get("result", {}).items() if k != "last"]
    if not series:
        raise NetworkError("Kraken's answer holds no OHLC series.")
    return _checked([(_day(str(r[0])), [float(r[1]), float(r[2]), float(r[3]), float(r[4])]) for r in series[0]],
                    "Kraken")


def parse_binance(body: bytes) -> list[Row]:
    data = json.loads(body)
    if not isinstance(data, list):
        raise NetworkError(f"Binance answered with an error: {data}.")
    return _checked([(_day(str(r[0])), [float(r[1]), float(r[2]), float(r[3]), float(r[4])]) for r in data],
                    "Binance")


def _checked(days: list[tuple[dt.date, list[float]]], source: str) -> list[Row]:
    """An exchange's candles, held to the same rules as an imported CSV (a bad one fails the fetch)."""
    seen: set[dt.date] = set()
    rows: list[Row] = []
    for n, (day, values) in enumerate(days, start=1):
        try:
            _check_row(values, f"{source}'s candle {n}")
            _check_day(day, f"{source}'s candle {n}", seen)
        except InvalidInput as exc:
            raise NetworkError(f"{exc.message} The stored prices were kept.") from None
        rows.append((dateindex_of_date(day), values[0], values[1], values[2], values[3]))
    return rows


def fetch(out: Path, source: str, url: str | None = None, *, timeout: float = 30.0,
          lock: Any = None) -> dict[str, Any]:
    """Download daily candles from ``source`` (``url`` overrides its endpoint) and merge them (holding
    ``lock()``, a context manager, while writing, when given)."""
    from cairn_servers.core.fetch import fetch as get

    if source not in SOURCES:
        raise InvalidInput(f"Unknown price source {source!r}. Use one of: {', '.join(SOURCES)}.")
    result = get(url or SOURCES[source], timeout=timeout, max_bytes=16 << 20)
    try:
        rows = (parse_kraken if source == "kraken" else parse_binance)(result.body or b"")
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise NetworkError(f"{source} answered with data brk cannot read ({exc}).") from exc
    if not rows:
        raise NetworkError(f"{source} returned no candles.")
    if lock is None:
        summary = save(out, rows)
    else:
        with lock():
            summary = save(out, rows)
    summary["source"] = source
    return summary


class Refresher:
    """Daily prices kept fresh while ``brk run`` / ``brk index --watch`` follow the chain.

    :meth:`poke` (called between polls) starts a fetch in a daemon thread when the last one is older
    than the interval and none is running, and returns at once: indexing never waits for the network.
    The download has a short timeout; the merge takes the computer's lock (so a compute never sees half
    an update) and writes only the days that changed. Failures (offline, refused, a bad answer) leave
    the stored prices as they are and are logged at debug level only, once per interval at most.
    """

    def __init__(self, out: Path, *, source: str | None = None, url: str | None = None,
                 interval: float | None = None, timeout: float = 10.0) -> None:
        setting = (source or os.environ.get("BRK_PRICES", "") or "kraken").strip().lower()
        self.enabled = setting not in ("off", "0", "no", "none", "false")
        self.source = setting if setting in SOURCES else "kraken"
        self.url = url or os.environ.get("BRK_PRICE_URL") or None
        if interval is None:
            try:
                interval = float(os.environ.get("BRK_PRICE_INTERVAL", "") or 3600)
            except ValueError:
                interval = 3600.0
        self.interval = interval
        self.timeout = timeout
        self.out = out
        self.attempts = 0
        self.updates = 0
        self.last_error: str | None = None
        self._last = float("-inf")
        self._thread: threading.Thread | None = None

    def poke(self) -> bool:
        """Start a background fetch if one is due; True when one was started. Never blocks."""
        if not self.enabled or (self._thread is not None and self._thread.is_alive()):
            return False
        if not (self.out / "manifest.json").exists():
            return False  # nothing indexed yet: prices would have nowhere to go (tried again at the next poke)
        now = time.monotonic()
        if now - self._last < self.interval:
            return False
        self._last = now
        self._thread = threading.Thread(target=self._fetch, name="brk-prices", daemon=True)
        self._thread.start()
        return True

    def join(self, timeout: float | None = None) -> None:
        """Wait for a running fetch (tests; shutdown does not wait)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _fetch(self) -> None:
        from cairn_servers.brk.compute import computed_dir, locked
        from cairn_servers.core import log
        from cairn_servers.core.sanitize import scrub

        self.attempts += 1
        try:
            summary = fetch(self.out, self.source, self.url, timeout=self.timeout,
                            lock=lambda: locked(computed_dir(self.out)))
        except (CairnError, OSError, ValueError) as exc:
            self.last_error = scrub(getattr(exc, "message", str(exc)))
            log.debug(f"price refresh from {self.source} failed (stored prices kept): {self.last_error}")
            return
        self.last_error = None
        if summary["changed_days"]:
            self.updates += 1
            log.info(f"prices refreshed from {self.source}: {summary['changed_days']} day(s) changed")
