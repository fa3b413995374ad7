"""Daily BTC/USD prices: ``brk price import FILE.csv`` and opt-in fetchers for public exchange APIs.

Prices live in ``OUT/prices/`` (the same crash-safe vec store) as ``dateindex_to_open/high/low/close``
(float64 dollars; a day without a price is NaN). An import merges by date: rows from the first
imported day on are rewritten (manifest first, so an interrupted import leaves the earlier rows and
can simply be run again). Nothing here touches the network unless ``brk price fetch`` is run.

CSV: a header row naming a date column (``date``, ``day``, ``time`` or ``timestamp``: ``YYYY-MM-DD``
or Unix seconds/milliseconds) and ``open``, ``high``, ``low``, ``close`` (``price`` alone fills all
four). Days before 2009-01-09 all map to dateindex 0; the last such row wins.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from pathlib import Path
from typing import Any

from cairn.brk.dates import dateindex_of_date
from cairn.brk.vecs import VecSpec, VecStore
from cairn.core.errors import InvalidInput, NetworkError

FIELDS = ("open", "high", "low", "close")
SOURCES = {
    "kraken": "https://api.kraken.com/0/public/OHLC?pair=XBTUSD&interval=1440",
    "binance": "https://api.binance.com/api/v3/klines?symbol=BTCUSDT&interval=1d&limit=1000",
}
Row = tuple[int, float, float, float, float]  # dateindex, open, high, low, close


def _store(out: Path) -> VecStore:
    return VecStore(out / "prices", [VecSpec(f"dateindex_to_{f}", "dateindex", "<f8") for f in FIELDS])


def _day(text: str) -> dt.date:
    text = text.strip()
    if text.replace(".", "", 1).isdigit():
        seconds = float(text)
        if seconds > 1e11:  # milliseconds
            seconds /= 1000
        return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).date()
    try:
        return dt.date.fromisoformat(text[:10])
    except ValueError:
        raise InvalidInput(f"Unreadable date {text!r}: use YYYY-MM-DD or Unix seconds.") from None


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
    for line, rec in enumerate(reader, start=2):
        try:
            values = [float(str(rec[str(cols[f])]).replace(",", "")) for f in FIELDS]
        except (TypeError, ValueError):
            raise InvalidInput(f"{name} line {line}: a price is not a number ({rec}).") from None
        rows.append((dateindex_of_date(_day(str(rec[date_col]))), *values))  # type: ignore[arg-type]
    if not rows:
        raise InvalidInput(f"{name} holds no price rows.")
    return rows


def save(out: Path, rows: list[Row]) -> dict[str, Any]:
    """Merge ``rows`` into the stored prices; returns what was written."""
    import numpy as np

    if not (out / "manifest.json").exists():
        raise InvalidInput(f"{out} is not a brk output directory. Run `brk index --out {out}` first.")
    store = _store(out)
    have = store.lengths["dateindex_to_close"]
    by_day = {r[0]: r[1:] for r in rows}
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
    return {"days": len(by_day), "first_dateindex": first, "last_dateindex": last,
            "stored_days": store.lengths["dateindex_to_close"]}


def import_csv(out: Path, path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidInput(f"Cannot read {path}: {exc.strerror}. Pass a CSV file of daily prices.") from exc
    return save(out, parse_csv(text, str(path)))


def parse_kraken(body: bytes) -> list[Row]:
    data = json.loads(body)
    if data.get("error"):
        raise NetworkError(f"Kraken answered with an error: {', '.join(data['error'])}.")
    series = [v for k, v in data.get("result", {}).items() if k != "last"]
    if not series:
        raise NetworkError("Kraken's answer holds no OHLC series.")
    return [(dateindex_of_date(_day(str(r[0]))), float(r[1]), float(r[2]), float(r[3]), float(r[4]))
            for r in series[0]]


def parse_binance(body: bytes) -> list[Row]:
    data = json.loads(body)
    if not isinstance(data, list):
        raise NetworkError(f"Binance answered with an error: {data}.")
    return [(dateindex_of_date(_day(str(r[0]))), float(r[1]), float(r[2]), float(r[3]), float(r[4]))
            for r in data]


def fetch(out: Path, source: str, url: str | None = None, *, timeout: float = 30.0) -> dict[str, Any]:
    """Download daily candles from ``source`` (``url`` overrides its endpoint) and merge them."""
    from cairn.core.fetch import fetch as get

    if source not in SOURCES:
        raise InvalidInput(f"Unknown price source {source!r}. Use one of: {', '.join(SOURCES)}.")
    result = get(url or SOURCES[source], timeout=timeout, max_bytes=16 << 20)
    try:
        rows = (parse_kraken if source == "kraken" else parse_binance)(result.body or b"")
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise NetworkError(f"{source} answered with data brk cannot read ({exc}).") from exc
    if not rows:
        raise NetworkError(f"{source} returned no candles.")
    summary = save(out, rows)
    summary["source"] = source
    return summary
