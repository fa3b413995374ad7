"""Market series derived from the daily closing price: all-time high, drawdown, moving averages, the Mayer
multiple, returns, CAGR, volatility and dollar-cost averaging (BRK's market and investing families; ids
as in BRK's classic naming, ``dca_*`` as in its current one).

Every series is a function of ``dateindex_to_close`` alone, computed by :func:`compute` over the whole
daily series (a few thousand days: milliseconds and a few MB), so it needs no stored state: the query
interface (``cairn_servers.brk.catalog``) recomputes it whenever the stored prices change (a price
import that rewrites past days is reflected at once, from the first changed day on) and caches it per
price commit. On a coarse date index an id's value is its value on the period's last day with a value
(as ``close``); on height it is the value of the block's day.

Conventions (stated in each id's definition):

* a window counts dateindexes (days) ending at, and including, the day itself; a window that is not
  full, or that holds a day without a close, gives NaN (empty in JSON);
* ``price_ath`` is the running maximum of the daily close (not of the intraday high);
* ``drawdown`` = close / price_ath - 1 (0 at a new high, negative below it, as BRK's ``price_drawdown``);
* ``price_<p>_ema`` uses alpha = 2 / (n + 1), seeded with the first close and NaN for its first n - 1
  closes;
* ``dca_cost_basis_<p>`` is the average price of buying the same dollar amount on every day with a close
  in the last p days (fewer since the first close, as BRK), n / sum(1 / close);
* ``volatility_<w>`` is the sample standard deviation (n - 1) of the daily log returns ln(close_d /
  close_{d-1}) over the last w days, annualised by sqrt(365).

Standard library at import time: ``definitions`` reads :data:`DEFINITIONS` on CLI paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# Moving-average windows: name -> days (BRK's set; 1m = 30 days, 1y = 365, 200w = 1400, 4y = 1460).
MA_WINDOWS: dict[str, int] = {"1w": 7, "8d": 8, "13d": 13, "21d": 21, "1m": 30, "34d": 34, "55d": 55, "89d": 89,
                              "144d": 144, "200d": 200, "1y": 365, "2y": 730, "200w": 1400, "4y": 1460}
# Return lookbacks (BRK's: 1m = 30 days, 3m = 90, 6m = 180, 1y = 365 ...).
RETURN_PERIODS: dict[str, int] = {"1d": 1, "1w": 7, "1m": 30, "3m": 90, "6m": 180, "1y": 365, "2y": 730,
                                  "4y": 1460, "10y": 3650}
CAGR_PERIODS = ("2y", "4y", "10y")  # multi-year returns, also as a compound annual growth rate
VOLATILITY_WINDOWS: dict[str, int] = {"1w": 7, "1m": 30, "1y": 365}
# Dollar-cost averaging: the same dollar amount bought every day of the period (BRK's DCA periods).
DCA_PERIODS = ("1w", "1m", "3m", "6m", "1y", "2y", "4y", "10y")
ANNUAL_DAYS = 365

_SPAN = {"d": "day", "w": "week", "m": "month", "y": "year"}


def _span(name: str) -> str:
    number, unit = name[:-1], _SPAN[name[-1]]
    return f"{number} {unit}{'' if number == '1' else 's'}"


def _definitions() -> dict[str, str]:
    out = {
        "price_ath": "all-time high (ATH) price: the highest daily close so far, in US dollars",
        "drawdown": "drawdown from the all-time high: close / price_ath - 1 (0 at a new high, negative below it)",
        "days_since_ath": "days since the all-time high: days since the last day whose close set price_ath",
        "mayer_multiple": "Mayer multiple: close / price_200d_sma, the price over its 200-day simple moving "
                          "average",
    }
    for name, days in MA_WINDOWS.items():
        span = _span(name)
        out[f"price_{name}_sma"] = (f"{span} simple moving average (SMA) of the daily close: mean of the last "
                                    f"{days} closes, in US dollars")
        out[f"price_{name}_ema"] = (f"{span} exponential moving average (EMA) of the daily close: alpha = "
                                    f"2 / ({days} + 1), in US dollars")
    for name, days in RETURN_PERIODS.items():
        out[f"price_{name}_return"] = (f"{_span(name)} price return: close / close {days} day"
                                       f"{'' if days == 1 else 's'} earlier - 1")
    for name in CAGR_PERIODS:
        days = RETURN_PERIODS[name]
        out[f"price_{name}_cagr"] = (f"{_span(name)} compound annual growth rate (CAGR) of the price: "
                                     f"(1 + price_{name}_return) ^ ({ANNUAL_DAYS} / {days}) - 1")
    for name, days in VOLATILITY_WINDOWS.items():
        out[f"volatility_{name}"] = (f"{_span(name)} price volatility: sample standard deviation of the last "
                                     f"{days} daily log returns ln(close / previous close), annualised "
                                     f"by sqrt({ANNUAL_DAYS})")
    for name in DCA_PERIODS:
        days = RETURN_PERIODS[name]
        out[f"dca_cost_basis_{name}"] = (f"{_span(name)} DCA cost basis: average price paid buying the same dollar "
                                         f"amount every day of the last {days} days (days since the first "
                                         f"close while fewer), the harmonic mean of those closes, in US dollars")
        out[f"dca_return_{name}"] = f"{_span(name)} DCA return: close / dca_cost_basis_{name} - 1"
    for name in CAGR_PERIODS:
        days = RETURN_PERIODS[name]
        out[f"dca_cagr_{name}"] = (f"{_span(name)} DCA compound annual growth rate (CAGR): "
                                   f"(1 + dca_return_{name}) ^ ({ANNUAL_DAYS} / {days}) - 1")
    return out


DEFINITIONS: dict[str, str] = _definitions()
IDS: tuple[str, ...] = tuple(sorted(DEFINITIONS))


def compute(close: np.ndarray) -> dict[str, np.ndarray]:
    """Every market series per dateindex from the daily closes (NaN where a day has no close)."""
    import numpy as np

    c = np.asarray(close, dtype=np.float64)
    n = c.shape[0]
    have = ~np.isnan(c)
    out: dict[str, np.ndarray] = {}

    ath = np.fmax.accumulate(c) if n else c.copy()
    out["price_ath"] = ath
    with np.errstate(invalid="ignore", divide="ignore"):
        out["drawdown"] = np.where(have, c / ath - 1.0, np.nan)
    days = np.arange(n, dtype=np.float64)
    at_high = have & (c == ath)
    last_high = np.maximum.accumulate(np.where(at_high, days, -1.0)) if n else days
    out["days_since_ath"] = np.where(have & (last_high >= 0), days - last_high, np.nan)

    filled = np.where(have, c, 0.0)
    sums = np.concatenate(([0.0], np.cumsum(filled)))
    counts = np.concatenate(([0], np.cumsum(have, dtype=np.int64)))
    for name, w in MA_WINDOWS.items():
        out[f"price_{name}_sma"] = _rolling_mean(c, sums, counts, w)
        out[f"price_{name}_ema"] = _ema(c, w)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["mayer_multiple"] = c / out["price_200d_sma"]

    for name, lag in RETURN_PERIODS.items():
        ret = np.full(n, np.nan)
        if n > lag:
            with np.errstate(invalid="ignore", divide="ignore"):
                ret[lag:] = c[lag:] / c[:-lag] - 1.0
        out[f"price_{name}_return"] = ret
    for name in CAGR_PERIODS:
        years = RETURN_PERIODS[name] / ANNUAL_DAYS
        with np.errstate(invalid="ignore"):
            out[f"price_{name}_cagr"] = np.power(1.0 + out[f"price_{name}_return"], 1.0 / years) - 1.0

    # Window sums of 1 / close summed window by window, not as differences of a running sum: the early
    # closes (cents) would dwarf the late ones (tens of thousands of dollars) and cancel their digits.
    inverse = np.where(have, 1.0 / np.where(have, c, 1.0), 0.0)
    for name in DCA_PERIODS:
        w = RETURN_PERIODS[name]
        lo = np.maximum(np.arange(n) + 1 - w, 0)
        bought = (counts[1:] - counts[lo]).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            cost = np.where(bought > 0, bought / _trailing_sum(inverse, w), np.nan)
            out[f"dca_cost_basis_{name}"] = cost
            out[f"dca_return_{name}"] = c / cost - 1.0
    for name in CAGR_PERIODS:
        years = RETURN_PERIODS[name] / ANNUAL_DAYS
        with np.errstate(invalid="ignore"):
            out[f"dca_cagr_{name}"] = np.power(1.0 + out[f"dca_return_{name}"], 1.0 / years) - 1.0

    log_ret = np.full(n, np.nan)
    if n > 1:
        with np.errstate(invalid="ignore", divide="ignore"):
            log_ret[1:] = np.log(c[1:] / c[:-1])
    for name, w in VOLATILITY_WINDOWS.items():
        out[f"volatility_{name}"] = _rolling_std(log_ret, w) * np.sqrt(ANNUAL_DAYS)
    return out


def _rolling_mean(c: np.ndarray, sums: np.ndarray, counts: np.ndarray, w: int) -> np.ndarray:
    """Mean of the last ``w`` values at each day; NaN until the window is full and holds no gap."""
    import numpy as np

    n = c.shape[0]
    out = np.full(n, np.nan)
    if n >= w:
        full = (counts[w:] - counts[:-w]) == w
        out[w - 1:] = np.where(full, (sums[w:] - sums[:-w]) / w, np.nan)
    return out


def _trailing_sum(x: np.ndarray, w: int) -> np.ndarray:
    """Sum of the last ``w`` values at each day (fewer at the start), each window summed on its own."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    n = x.shape[0]
    padded = np.concatenate((np.zeros(w - 1), x))
    out = np.empty(n)
    step = max(1, (1 << 20) // w)  # bounded temporaries: about a million floats at a time
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        out[lo:hi] = sliding_window_view(padded[lo:hi + w - 1], w).sum(axis=1)
    return out


def _ema(c: np.ndarray, w: int) -> np.ndarray:
    """EMA with alpha = 2 / (w + 1) seeded with the first close; NaN for its first w - 1 closes, on days
    without a close (the average carries over them) and before the first close."""
    import numpy as np

    alpha = 2.0 / (w + 1)
    out = np.full(c.shape[0], np.nan)
    ema = float("nan")
    seen = 0
    for i, v in enumerate(c.tolist()):
        if v != v:  # no close that day
            continue
        ema = v if seen == 0 else alpha * v + (1.0 - alpha) * ema
        seen += 1
        if seen >= w:
            out[i] = ema
    return out


def _rolling_std(x: np.ndarray, w: int) -> np.ndarray:
    """Sample standard deviation of the last ``w`` values; NaN while any is NaN or the window is short."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    n = x.shape[0]
    out = np.full(n, np.nan)
    if n >= w and w > 1:
        for lo in range(0, n - w + 1, 4096):  # bounded temporaries: 4096 x w floats at a time
            hi = min(n - w + 1, lo + 4096)
            windows = sliding_window_view(x[lo:hi + w - 1], w)
            out[lo + w - 1:hi + w - 1] = windows.std(axis=1, ddof=1)
    return out
