"""The web page at / in headless Chromium: it loads the bundled uPlot, queries the API and draws a chart.

Needs the Debian package ``chromium`` (/usr/bin/chromium); skipped with a reason where it is absent.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from cairn_servers.brk.compute import compute
from cairn_servers.brk.http import create_app
from cairn_servers.brk.indexer import index
from cairn_servers.brk.interface import Interface
from cairn_servers.brk.sample import write_mainnet_sample

from ..mcp._http import serving

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="headless Chromium is not installed (apt-get install -y chromium)")


def _dump_dom(url: str, profile: Path) -> str:
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage",
           f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--dump-dom", url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.timeout(180)
def test_page_draws_a_chart(tmp_path: Path) -> None:
    write_mainnet_sample(tmp_path / "blocks")
    index(tmp_path / "blocks", tmp_path / "out")
    compute(tmp_path / "out")
    with serving(create_app(Interface(tmp_path / "out"))) as url:
        base = url.removesuffix("/mcp")
        dom = _dump_dom(f"{base}/?index=dateindex&ids=block_count,supply_btc&rows=1000", tmp_path / "p1")
        assert 'data-rendered="8"' in dom, dom[-3000:]  # 8 days: 2009-01-03, 2009-01-09 .. 2009-01-15
        assert "rendered 8 rows of block_count, supply_btc on dateindex" in dom
        assert re.search(r'<div class="uplot[^"]*"', dom) and "<canvas" in dom
        assert "block_count" in dom and "supply_btc" in dom  # the legend
        # Per height, and an error shown on the page (not a blank chart) for an unknown id.
        dom = _dump_dom(f"{base}/?index=height&ids=hash_rate&rows=100", tmp_path / "p2")
        assert 'data-rendered="100"' in dom and "<canvas" in dom
        dom = _dump_dom(f"{base}/?index=height&ids=nope", tmp_path / "p3")
        assert 'data-rendered="error"' in dom and "Unknown vec id" in dom
