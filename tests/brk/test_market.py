"""Market series (cairn_servers.brk.market): each recomputed here in plain Python from the daily closes, on a
generated 3,700-day random walk with gaps (long enough for the 4-year windows and the 10-year return), and
end to end on mainnet 0..589 with imported prices: `brk query` on days, weeks and heights, `brk ids`, the
definitions, and a price import that rewrites a past day (in process and over a running HTTP server)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
from pathlib import Path

import httpx
import pytest

from cairn_servers.brk import market, prices
from cairn_servers.brk.catalog import INDEXES, ids
from cairn_servers.brk.cli import main
from cairn_servers.brk.compute import compute
from cairn_servers.brk.definitions import definition
from cairn_servers.brk.http import create_app
from cairn_servers.brk.interface import Interface
from cairn_servers.brk.ops import OPS

from ..mcp._http import serving
from .conftest import mainnet_store

DAYS = 3700
GAPS = {1000, 2500, 2501}  # days without a close
REQUIRED = ("price_ath", "drawdown", "price_200d_sma", "mayer_multiple", "price_1y_return", "volatility_1m")


def _walk() -> list[float | None]:
    """Cents to tens of thousands of dollars, as bitcoin's history (the DCA sums mix both scales)."""
    rnd = random.Random(31)
    price, out = 0.05, []
    for day in range(DAYS):
        price *= math.exp(rnd.gauss(0.0035, 0.03))
        out.append(None if day in GAPS else round(price, 6))
    return out


def _sma(c: list[float | None], d: int, w: int) -> float | None:
    window = c[d - w + 1:d + 1] if d >= w - 1 else []
    if len(window) < w or any(v is None for v in window):
        return None
    return math.fsum(v for v in window if v is not None) / w


def _ema(c: list[float | None], w: int) -> list[float | None]:
    out: list[float | None] = []
    ema, seen = 0.0, 0
    for v in c:
        if v is None:
            out.append(None)
            continue
        ema = v if seen == 0 else 2 / (w + 1) * v + (1 - 2 / (w + 1)) * ema
        seen += 1
        out.append(ema if seen >= w else None)
    return out


def _ret(c: list[float | None], d: int, lag: int) -> float | None:
    now, then = c[d], c[d - lag] if d >= lag else None
    return None if now is None or then is None else now / then - 1


def _vol(c: list[float | None], d: int, w: int) -> float | None:
    if d < w:
        return None
    rets = []
    for i in range(d - w + 1, d + 1):
        a, b = c[i - 1], c[i]
        if a is None or b is None:
            return None
        rets.append(math.log(b / a))
    mean = math.fsum(rets) / w
    return math.sqrt(math.fsum((r - mean) ** 2 for r in rets) / (w - 1)) * math.sqrt(365)


def _expected(c: list[float | None], d: int, emas: dict[str, list[float | None]]) -> dict[str, float | None]:
    """Every market id on day ``d``, from the closes, by the definitions' formulas."""
    known = [v for v in c[:d + 1] if v is not None]
    ath = max(known) if known else None
    now = c[d]
    exp: dict[str, float | None] = {"price_ath": ath}
    exp["drawdown"] = None if now is None or ath is None else now / ath - 1
    high_day = max(i for i in range(d + 1) if c[i] is not None and c[i] == ath) if ath is not None else 0
    exp["days_since_ath"] = None if now is None else float(d - high_day)
    for name, w in market.MA_WINDOWS.items():
        exp[f"price_{name}_sma"] = _sma(c, d, w)
        exp[f"price_{name}_ema"] = emas[name][d]
    sma200 = exp["price_200d_sma"]
    exp["mayer_multiple"] = None if now is None or sma200 is None else now / sma200
    for name, lag in market.RETURN_PERIODS.items():
        exp[f"price_{name}_return"] = _ret(c, d, lag)
    for name in market.CAGR_PERIODS:
        r = exp[f"price_{name}_return"]
        exp[f"price_{name}_cagr"] = None if r is None else (1 + r) ** (365 / market.RETURN_PERIODS[name]) - 1
    for name, w in market.VOLATILITY_WINDOWS.items():
        exp[f"volatility_{name}"] = _vol(c, d, w)
    for name in market.DCA_PERIODS:
        bought = [v for v in c[max(d - market.RETURN_PERIODS[name] + 1, 0):d + 1] if v is not None]
        cost = len(bought) / math.fsum(1 / v for v in bought) if bought else None
        exp[f"dca_cost_basis_{name}"] = cost
        exp[f"dca_return_{name}"] = None if now is None or cost is None else now / cost - 1
    for name in market.CAGR_PERIODS:
        r = exp[f"dca_return_{name}"]
        exp[f"dca_cagr_{name}"] = None if r is None else (1 + r) ** (365 / market.RETURN_PERIODS[name]) - 1
    return exp


def _same(got: float, want: float | None) -> bool:
    if want is None:
        return math.isnan(got)
    return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)


def test_every_series_against_plain_python() -> None:
    import numpy as np

    c = _walk()
    series = market.compute(np.array([math.nan if v is None else v for v in c]))
    assert set(series) == set(market.IDS) and all(s.shape == (DAYS,) for s in series.values())
    emas = {name: _ema(c, w) for name, w in market.MA_WINDOWS.items()}
    # Sampled days: the start, every window's first full day and the day before it, around the gaps, the end.
    edges = {w + k for w in (*market.MA_WINDOWS.values(), *market.RETURN_PERIODS.values()) for k in (-2, -1, 0, 1)}
    days = sorted({*range(0, 12), *range(0, DAYS, 97), *edges, *(g + k for g in GAPS for k in range(-1, 9)),
                   *(g + 200 for g in GAPS), *(g + 201 for g in GAPS), *range(DAYS - 5, DAYS)} & set(range(DAYS)))
    for d in days:
        for vec_id, want in _expected(c, d, emas).items():
            assert _same(float(series[vec_id][d]), want), (vec_id, d, float(series[vec_id][d]), want)
    # Windows not yet full are NaN; the first full one has a value (the walk has no gap before day 1000).
    assert math.isnan(series["price_200d_sma"][198]) and not math.isnan(series["price_200d_sma"][199])
    assert math.isnan(series["price_1y_return"][364]) and not math.isnan(series["price_1y_return"][365])
    assert math.isnan(series["volatility_1m"][29]) and not math.isnan(series["volatility_1m"][30])
    assert not math.isnan(series["price_10y_return"][DAYS - 1]) and not math.isnan(series["price_4y_sma"][2499])
    assert math.isnan(series["price_4y_sma"][DAYS - 1])  # its window holds the days without a close
    # A drawdown is never positive and is 0 exactly on the days a new high is set.
    dd = series["drawdown"][~np.isnan(series["drawdown"])]
    assert dd.max() == 0.0 and dd.min() < -0.3
    assert market.compute(np.array([]))["price_ath"].shape == (0,)


def _cli(out: Path, *argv: str) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main([*argv, "--out", str(out)])
    return code, stdout.getvalue(), stderr.getvalue()


def _query(out: Path, index: str, vec_ids: tuple[str, ...]) -> list[list[float | None]]:
    code, stdout, stderr = _cli(out, "query", "--index", index, "--ids", ",".join(vec_ids), "--format", "json")
    assert code == 0, stderr
    result: list[list[float | None]] = json.loads(stdout)
    return result


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("brk_market")
    mainnet_store(base)
    return base / "out"


def test_end_to_end_on_mainnet(out: Path, tmp_path: Path) -> None:
    """Mainnet 0..589 covers dateindexes 0..7 (2009-01-03, then 2009-01-09 .. 2009-01-15)."""
    code, stdout, _ = _cli(out, "ids", "--index", "date", "--format", "json")
    assert code == 0 and not set(market.IDS) & set(json.loads(stdout))  # no prices: no market ids
    code, _, stderr = _cli(out, "query", "--index", "date", "--ids", "drawdown")
    assert code == 3 and "brk price import" in stderr and "Traceback" not in stderr  # not_found, naming the fix
    closes = [10.0, 12.0, 11.0, 15.0, 14.0, 9.0, 13.0, 16.0]  # a close per dateindex 0..7
    prices.save(out, [(d, p, p, p, p) for d, p in enumerate(closes)])
    compute(out)
    listed = [i for p in range(40) for i in json.loads(_cli(out, "ids", "--index", "date", "--page", str(p),
                                                             "--format", "json")[1])]
    assert set(market.IDS) <= set(listed) and set(REQUIRED) <= set(listed)
    every = {vec_id for name in INDEXES for vec_id in ids(name, True)}
    assert all(definition(i) for i in market.IDS) and set(market.IDS) <= every
    iface = Interface(out)
    for vec_id in REQUIRED:
        assert iface.get_vecid_to_indexes(vec_id) == ["height", "dateindex", "weekindex", "monthindex",
                                                      "quarterindex", "semesterindex", "yearindex", "decadeindex"]
    # Id search finds them by description (top 3).
    asked = (("all time high price", "price_ath"), ("drawdown from the all-time high", "drawdown"),
             ("200 day simple moving average", "price_200d_sma"), ("mayer multiple", "mayer_multiple"),
             ("1 year price return", "price_1y_return"), ("monthly volatility", "volatility_1m"),
             ("dollar cost averaging 4 years", "dca_cost_basis_4y"))
    for question, expected_id in asked:
        found = OPS["search_vecids"].call(iface, {"q": question, "limit": 3}, "http")
        assert expected_id in [hit["id"] for hit in found], (question, found)
    emas = {name: _ema(list(closes), w) for name, w in market.MA_WINDOWS.items()}
    names = market.IDS
    day_rows = _query(out, "date", names)
    for j, vec_id in enumerate(names):
        for d in range(len(closes)):
            want = _expected(list(closes), d, emas)[vec_id]
            got = day_rows[j][d]
            assert got is None if want is None else got is not None and math.isclose(got, want, rel_tol=1e-9), \
                (vec_id, d, got, want)
    assert day_rows[names.index("price_ath")] == [10, 12, 12, 15, 15, 15, 15, 16]
    assert day_rows[names.index("days_since_ath")] == [0, 0, 1, 0, 1, 2, 3, 0]
    assert day_rows[names.index("price_200d_sma")] == [None] * 8  # window not full: empty
    # Weeks: the value of the week's last day (2009-01-03 is in week 0, 01-09..01-11 in week 1, 01-12..15 in 2).
    week = _query(out, "week", ("drawdown", "price_1w_sma", "close"))
    assert week[0] == [day_rows[names.index("drawdown")][d] for d in (0, 3, 7)]
    assert week[1] == [None, None, day_rows[names.index("price_1w_sma")][7]] and week[2] == [10, 15, 16]
    # Heights: the value of the block's day.
    code, stdout, _ = _cli(out, "query", "--index", "height", "--ids", "date,drawdown", "--format", "json")
    dates, dd = json.loads(stdout)
    first_of_day = {date: i for i, date in reversed(list(enumerate(dates)))}
    assert sorted(first_of_day) == sorted(set(dates)) and len(first_of_day) == len(closes)
    for k, date in enumerate(sorted(first_of_day)):
        assert dd[first_of_day[date]] == day_rows[names.index("drawdown")][k]
    assert iface.get_vecs("date", "close,price_ath", 2, 3).value() == [[11.0], [12.0]]
    with serving(create_app(iface)) as url, httpx.Client(base_url=url.removesuffix("/mcp"), timeout=30) as http:
        route = "/api/vecs/dateindex-to-price_ath"
        before = http.get(route, params={"from": 2, "to": 3})
        assert before.json() == 12.0
        assert http.get(route, params={"from": 2, "to": 3},
                        headers={"If-None-Match": before.headers["etag"]}).status_code == 304
        # A price import that rewrites a past day: the series follow from that day on, without a recompute,
        # in the running server too (a new ETag: the old one gets the new answer, not a 304).
        prices.save(out, [(2, 20.0, 20.0, 20.0, 20.0)])
        after = http.get(route, params={"from": 2, "to": 3}, headers={"If-None-Match": before.headers["etag"]})
        assert after.status_code == 200 and after.json() == 20.0 and after.headers["etag"] != before.headers["etag"]
    assert iface.get_vecs("date", "close,price_ath", 2, 3).value() == [[20.0], [20.0]]
    again = _query(out, "date", ("price_ath", "drawdown", "price_1d_return"))
    assert again[0] == [10, 12, 20, 20, 20, 20, 20, 20]
    assert again[1][3] == pytest.approx(15 / 20 - 1) and again[2][2] == pytest.approx(20 / 12 - 1)
