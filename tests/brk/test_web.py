"""The web page at / in headless Chromium: it loads the bundled uPlot, queries the API and draws a chart.

The page is driven over the DevTools protocol (``tests/brk/_browser.py``) at 1280, 420 and 400 px wide; each
test measures the page as drawn (the chart's axis labels, the document's width) and saves a screenshot under
the test's tmp_path. Needs the Debian package ``chromium`` (/usr/bin/chromium, ``make browser``); skipped with a
reason where it is absent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.brk.compute import compute
from cairn_servers.brk.http import create_app
from cairn_servers.brk.indexer import index
from cairn_servers.brk.interface import Interface
from cairn_servers.brk.sample import write_mainnet_sample

from ..mcp._http import serving
from ._browser import CHROMIUM, Browser

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="headless Chromium is not installed (make browser, or apt-get install -y chromium)")

PAIR = "/?index=dateindex&ids=block_count,supply_btc&rows=1000"  # 8 days: 2009-01-03, then 01-09 .. 01-15
WIDTHS = (1280, 420)

# Where uPlot drew each axis label, in CSS px of the chart's canvas: a y axis on the left (side 3) ends its
# labels ticks + gap left of the plot, one on the right (side 1) starts them ticks + gap right of it, and
# x labels are centred on their ticks. Text widths are measured in the axis font on a separate canvas.
MEASURE = """(() => {
  const u = plot, r = uPlot.pxRatio, ctx = document.createElement("canvas").getContext("2d");
  const labels = [];
  u.axes.forEach((a, i) => {
    if (!a.show || !a._show) return;
    ctx.font = a.font[0];
    const tick = a.ticks.show ? a.ticks.size : 0;
    (a._values || []).forEach((v, j) => {
      if (v == null) return;
      for (const text of String(v).split("\\n")) {
        const w = ctx.measureText(text).width / r;
        let left;
        if (a.side === 3) left = a._pos - tick - a.gap - w;
        else if (a.side === 1) left = a._pos + tick + a.gap;
        else left = u.bbox.left / r + u.valToPos(a._splits[j], a.scale) - w / 2;
        labels.push({ axis: i, text, left, right: left + w });
      }
    });
  });
  const root = u.root.getBoundingClientRect();
  const doc = document.documentElement;
  return {
    labels, width: u.width, height: u.height, rootRight: root.right,
    scrollWidth: doc.scrollWidth, clientWidth: doc.clientWidth,
    chartWidth: document.getElementById("chart").clientWidth,
    status: document.getElementById("status").textContent,
    legend: u.root.querySelector(".u-legend").textContent,
  };
})()"""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mainnet sample (blocks on 2009-01-03, then none until 2009-01-09), indexed and computed."""
    tmp = tmp_path_factory.mktemp("brk-web")
    write_mainnet_sample(tmp / "blocks")
    index(tmp / "blocks", tmp / "out")
    compute(tmp / "out")
    return tmp / "out"


@pytest.fixture(scope="module")
def site(store: Path) -> Iterator[str]:
    with serving(create_app(Interface(store))) as url:
        yield url.removesuffix("/mcp")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """One Chromium for the module (a launch costs about a second of both cores); each test sets its viewport."""
    with Browser(tmp_path_factory.mktemp("chromium-profile")) as b:
        yield b


def measured(b: Browser, shot: Path) -> dict[str, Any]:
    b.screenshot(shot)
    m: dict[str, Any] = b.evaluate(MEASURE)
    return m


def assert_fits(m: dict[str, Any], shot: Path) -> None:
    """Every axis label lies whole inside the chart, and the page does not scroll sideways."""
    clipped = [lab for lab in m["labels"] if lab["left"] < 0 or lab["right"] > m["width"]]
    assert not clipped, (f"axis labels cut by the chart's edge (width {m['width']}): {clipped}; see {shot}")
    assert m["scrollWidth"] <= m["clientWidth"], f"the page scrolls sideways; see {shot}"
    assert m["width"] <= m["chartWidth"] and m["rootRight"] <= m["clientWidth"], m


def texts(m: dict[str, Any], axis: int) -> list[str]:
    return [lab["text"] for lab in m["labels"] if lab["axis"] == axis]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("width", WIDTHS)
def test_axes_fit_their_labels(site: str, browser: Browser, tmp_path: Path, width: int) -> None:
    browser.viewport(width, 900)
    assert browser.open(site + PAIR) == "8"
    m = measured(browser, tmp_path / f"pair-{width}.png")
    assert_fits(m, tmp_path / f"pair-{width}.png")
    # The right axis (supply_btc, up to 29,500 BTC) reads 30,000 whole, which a fixed 50 px axis cut to "0,000".
    assert "30,000" in texts(m, 2), texts(m, 2)
    assert "20" in texts(m, 1) or "50" in texts(m, 1), texts(m, 1)
    assert m["status"].startswith("rendered 8 rows of block_count, supply_btc on dateindex")
    assert "block_count" in m["legend"] and "supply_btc" in m["legend"]
    if width == 420:
        assert m["width"] <= 420 - 16, m["width"]  # the chart shrank with the window


@pytest.mark.timeout(180)
def test_chart_follows_the_window(site: str, browser: Browser, tmp_path: Path) -> None:
    browser.viewport(1280, 900)
    browser.open(site + PAIR)
    wide = browser.evaluate("plot.width")
    browser.viewport(420, 900)  # no reload: the chart resizes with its container
    narrow = browser.wait_for("plot.width < 420 && plot.width")
    assert wide > 1000 and narrow <= 404, (wide, narrow)
    assert_fits(measured(browser, tmp_path / "resized-420.png"), tmp_path / "resized-420.png")
    browser.viewport(400, 900)  # the narrowest width the page is made for
    browser.wait_for("plot.width < 390 && plot.width")
    assert_fits(measured(browser, tmp_path / "resized-400.png"), tmp_path / "resized-400.png")
    browser.viewport(1280, 900)
    assert browser.wait_for("plot.width > 1000 && plot.width") == wide


@pytest.mark.timeout(180)
def test_days_without_blocks_are_gaps(site: str, browser: Browser) -> None:
    browser.viewport(1280, 900)
    browser.open(site + "/?index=dateindex&ids=block_count&rows=1000")
    data = browser.evaluate("plot.data")
    days = data[0]
    assert all(b - a == 86400 for a, b in zip(days, days[1:])), days  # every day on the x axis, none skipped
    assert len(days) == 13 and data[1][1:6] == [None] * 5, data  # 2009-01-04 .. 01-08: no blocks, null
    assert data[1][0] == 1 and data[1][6] == 14
    assert browser.evaluate("plot.series[1].spanGaps") is False
    gaps = browser.evaluate("plot.series[1]._paths.gaps")  # uPlot's gaps in px: one, from 01-03 to 01-09
    assert len(gaps) == 1 and gaps[0][1] - gaps[0][0] > 300, gaps
    # 2009-01-03 has no neighbour: it is drawn as a point even where points are off for density.
    assert browser.evaluate("plot.series[1].points.filter(plot, 1, false, null)") == [0]
    text = browser.evaluate("document.getElementById('status').textContent")
    assert "(5 periods without blocks left as gaps)" in text, text
    # Weeks: 2008-12-29, 2009-01-05, 2009-01-12 are consecutive, so nothing is added.
    browser.open(site + "/?index=weekindex&ids=block_count&rows=1000")
    assert browser.evaluate("plot.data") == [[1230508800, 1231113600, 1231718400], [1, 168, 421]]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("width", WIDTHS)
def test_one_row_is_readable(site: str, browser: Browser, tmp_path: Path, width: int) -> None:
    browser.viewport(width, 900)
    assert browser.open(site + "/?index=dateindex&ids=supply_btc&rows=1") == "1"
    m = measured(browser, tmp_path / f"one-{width}.png")
    assert_fits(m, tmp_path / f"one-{width}.png")
    y = texts(m, 1)
    assert len(y) >= 3 and len(set(y)) == len(y), y  # distinct ticks, not one label repeated
    values = [float(t.replace(",", "")) for t in y]
    assert min(values) < 29500 < max(values), y  # around the value (29,500 BTC on 2009-01-15)
    assert texts(m, 0)[:3] == ["1/14", "2009", "1/15"], texts(m, 0)  # a day either side, labelled by day
    pos = browser.evaluate("[plot.valToPos(plot.data[0][0], 'x'), plot.valToPos(plot.data[1][0], 'y'),"
                           " plot.bbox.width / uPlot.pxRatio, plot.bbox.height / uPlot.pxRatio]")
    assert abs(pos[0] - pos[2] / 2) < 2 and 0.2 * pos[3] < pos[1] < 0.8 * pos[3], pos  # in the middle
    assert browser.evaluate("plot.series[1].points.size") >= 7
    assert "29,500" in m["legend"] and "2009-01-15" in m["legend"]  # the row is written out, not only drawn
    assert m["status"] == "rendered 1 row of supply_btc on dateindex"


@pytest.mark.timeout(180)
def test_per_height(site: str, browser: Browser, tmp_path: Path) -> None:
    browser.viewport(420, 900)
    assert browser.open(site + "/?index=height&ids=hash_rate&rows=100") == "100"
    m = measured(browser, tmp_path / "height-420.png")
    assert_fits(m, tmp_path / "height-420.png")
    assert browser.evaluate("plot.data[0].length") == 100


@pytest.mark.timeout(180)
def test_errors_in_user_words(site: str, browser: Browser, tmp_path: Path) -> None:
    browser.viewport(420, 900)
    status = "document.getElementById('status')"
    assert browser.open(site + "/?index=height&ids=nope") == "error"
    text = browser.evaluate(f"{status}.textContent")
    assert text.startswith("Unknown vec id 'nope' on height. Did you mean: open?"), text
    assert text.endswith("Type in the vec ids box to see the ids on this index, or pick an example below."), text
    assert "get_" not in text and "/api/" not in text and "`" not in text  # commands are shown as code
    assert browser.evaluate("document.querySelectorAll('#status code').length") >= 1
    assert browser.evaluate(f"{status}.className") == "error"
    assert browser.evaluate("document.querySelector('#chart .uplot')") is None  # no stale chart under it
    browser.screenshot(tmp_path / "error-420.png")
    assert browser.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    # An index the page does not know: said so, and the default one shown.
    assert browser.open(site + "/?index=nope&ids=block_count") == "8"
    assert browser.evaluate(f"{status}.textContent") == (
        "There is no index “nope”; showing dateindex. Pick one from the index menu.")
    # No ids: asked for, without a request.
    browser.evaluate("document.getElementById('ids').value = ' , '; draw()")
    assert browser.evaluate(f"{status}.textContent") == "Type at least one vec id, or pick an example below."


@pytest.mark.timeout(180)
def test_errors_in_user_words_too_large_and_server_gone(store: Path, browser: Browser) -> None:
    status = "document.getElementById('status').textContent"
    with serving(create_app(Interface(store, max_cells=50))) as url:
        base = url.removesuffix("/mcp")
        browser.viewport(1280, 900)
        assert browser.open(base + "/?index=height&ids=hash_rate&rows=100") == "error"
        text = browser.evaluate(status)
        assert text.startswith("This query asks for 100 values"), text
        assert text.endswith("Lower “last rows” or plot fewer ids."), text
        assert "from/to/count" not in text
        assert browser.open(base + "/?index=height&ids=hash_rate&rows=10") == "10"
    # The server has stopped: the next Plot says so instead of a browser's "Failed to fetch".
    browser.evaluate("document.body.dataset.rendered = ''; draw()")
    assert browser.wait_for("document.body.dataset.rendered") == "error"
    assert browser.evaluate(status) == "The brk server did not answer; is brk serve still running?"


@pytest.mark.timeout(180)
def test_tick_labels_stay_short_and_distinct(site: str, browser: Browser) -> None:
    browser.viewport(1280, 900)
    browser.open(site + "/?index=height&ids=difficulty&rows=10")
    def labels(splits: list[float], incr: float) -> list[str]:
        out: list[str] = browser.evaluate(f"tickLabels(plot, {splits}, 1, 30, {incr})")
        return out
    assert labels([0, 5000, 10000], 5000) == ["0", "5,000", "10,000"]
    assert labels([1e20, 1.05e20, 1.1e20], 5e18) == ["100E", "105E", "110E"]  # hash rates: units, not 21 digits
    assert labels([19000000, 19001000, 19002000], 1000) == ["19.000M", "19.001M", "19.002M"]
    assert labels([0.1, 0.15, 0.2], 0.05) == ["0.10", "0.15", "0.20"]
    assert labels([-2e6, 0, 2e6], 2e6) == ["-2M", "0", "2M"]


@pytest.mark.timeout(180)
def test_missing_periods_become_null_rows(site: str, browser: Browser) -> None:
    browser.viewport(1280, 900)
    browser.open(site + "/?index=dateindex&ids=block_count&rows=3")
    jan, apr = 1230768000, 1238544000  # 2009-01-01 and 2009-04-01, UTC
    filled = browser.evaluate(f"fillPeriods('monthindex', [{jan}, {apr}], [[1, 2], [3, 4]])")
    assert filled == {"x": [jan, 1233446400, 1235865600, apr], "cols": [[1, None, None, 2], [3, None, None, 4]],
                      "added": 2}
    # Past MAX_FILL empty periods, each further gap still gets one null row: a gap, never a line across.
    many = browser.evaluate("(() => { const f = fillPeriods('dateindex', [0, 86400 * 300000, 86400 * 300002],"
                            " [[1, 2, 3]]); return [f.added, f.x.length, f.cols[0].slice(-3)]; })()")
    assert many == [200001, 200004, [2, None, 3]], many
