"""Every vec family through every surface (issue 15): a sample id of each family (cairn_servers.brk.families)
through the ten seed MCP tools (official SDK client over Streamable HTTP), the /api/vecs routes and `brk query`
/ `brk ids` / `brk vecid-indexes`; the families described on the web page, in the MCP instructions and in
`brk ids --help`; the seed's price example before and after prices on the three surfaces; and the
did-you-mean (`size` -> `block_size`, never the asked id) everywhere."""

from __future__ import annotations

import asyncio
import html
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cairn_servers.brk.dates import DATE_INDEXES, HEIGHT_INDEXES
from cairn_servers.brk.compute import compute
from cairn_servers.brk.families import FAMILIES
from cairn_servers.brk.market import IDS as MARKET_IDS
from cairn_servers.brk.http import create_app
from cairn_servers.brk.interface import Interface
from cairn_servers.brk.ops import OPS
from cairn_servers.brk.tools import INSTRUCTIONS
from cairn_servers.core.errors import NotFound

from ..mcp._http import serving
from .conftest import mainnet_store
from ._prices import kraken, kraken_body

pytestmark = pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026")
SAMPLE_IDS = [i for _, ids, _ in FAMILIES for i in ids]
PRICED = {*MARKET_IDS, "close", "market_cap", "supply_usd", "realized_cap", "realized_price", "mvrv", "nupl", "sopr",
          "supply_in_profit", "supply_in_loss", "supply_breakeven",
          # UTXO cohorts: all but supply and utxo_count are dollar series
          "sth_realized_price", "sth_mvrv", "epoch_0_realized_price", "class_2009_supply_in_profit",
          # address cohorts: likewise but supply and addr_count
          "p2pk65_addrs_realized_price", "addrs_over_1btc_nupl", "p2pk65_addrs_mvrv"}
# Mainnet 0..589 spans 2009-01-03 .. 2009-01-15; a price for each day (a few cents apart, as if).
CSV = "date,price\n" + "".join(f"2009-01-{d:02d},{0.5 + d / 100:.2f}\n" for d in range(1, 21))
SEED: dict[str, Any] = {"index": "date", "ids": "close", "from": -1}  # the seed's example


def _brk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cairn_servers.brk.cli", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("brk_surfaces")
    mainnet_store(base, addresses=True)
    return base


def _copy(store: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(store / "out", dest)
    return dest


async def _mcp_ten_tools(url: str, expected: dict[str, Any], ids_on: dict[str, list[str]]) -> None:
    """The ten seed tools over the SDK client: each sample id listed, located and read with the value expected."""
    from mcp import Client

    async with Client(url, cache=None) as client:
        async def call(name: str, args: dict[str, Any] | None = None) -> Any:
            res = await client.call_tool(name, args or {})
            assert not res.is_error, (name, args, res.content)
            text = res.content[0].text  # type: ignore[union-attr]
            try:
                return json.loads(text)
            except ValueError:
                return text

        tools = sorted(t.name for t in (await client.list_tools()).tools)
        assert len(tools) == 16 and "search_vecids" in tools  # the ten seed tools, id search, explorer (4), URPD
        assert client.instructions is not None
        for vec_id in SAMPLE_IDS:
            assert vec_id in client.instructions, vec_id
        all_ids = [i for p in range(20) for i in await call("get_vecids", {"page": p})]
        on_date = [i for p in range(20) for i in await call("get_index_to_vecids", {"index": "date", "page": p})]
        assert await call("get_vecid_count") == len(all_ids)
        assert await call("get_vec_count") == sum(len(v) for v in ids_on.values())
        assert await call("get_index_count") == len(await call("get_indexes")) == 13
        assert (await call("get_accepted_indexes"))["dateindex"] == ["d", "date", "dateindex"]
        assert (await call("get_version")).startswith("v")
        for vec_id in SAMPLE_IDS:
            assert vec_id in all_ids and vec_id in on_date, vec_id
            assert await call("get_vecid_to_indexes", {"id": vec_id}) == ids_on[vec_id], vec_id
            assert await call("get_vecs", {"index": "date", "ids": vec_id, "from": -1}) == expected[vec_id], vec_id
        res = await client.call_tool("get_vecs", {"index": "height", "ids": "size"})
        text = res.content[0].text  # type: ignore[union-attr]
        assert res.is_error and "Did you mean: block_size" in text and "'size'" in text


def test_every_family_on_every_surface(store: Path, tmp_path: Path) -> None:
    out = _copy(store, tmp_path / "out")
    r = _brk("price", "import", str(_csv(tmp_path)), "--out", str(out), "--format", "json")
    assert r.returncode == 0, r.stderr
    compute(out)
    iface = Interface(out)
    expected = {i: OPS["get_vecs"].call(iface, dict(SEED, ids=i)).value() for i in SAMPLE_IDS}
    ids_on = {i: iface.get_vecid_to_indexes(i) for p in range(20) for i in iface.get_vecids(p)}
    assert len(ids_on) == iface.get_vecid_count()
    for vec_id in SAMPLE_IDS:  # each family: on height and every date index (and the epochs, but dollars)
        on = DATE_INDEXES if vec_id in PRICED else HEIGHT_INDEXES
        assert ids_on[vec_id][:len(on) + 1] == ["height", *on], vec_id
        assert expected[vec_id] is not None, vec_id
    assert set(DATE_INDEXES) <= set(HEIGHT_INDEXES)
    # Values one can check by hand on mainnet 0..589: the last day's close, the genesis-inclusive supply.
    assert expected["close"] == 0.65 and expected["supply_btc"] == 29500.0
    assert expected["supply_in_profit"] + expected["supply_in_loss"] + expected["supply_breakeven"] == \
        29500 * 100_000_000
    with serving(create_app(iface)) as url:
        asyncio.run(asyncio.wait_for(_mcp_ten_tools(url, expected, ids_on), 120))
        base = url.removesuffix("/mcp")
        with httpx.Client(base_url=base, timeout=30) as c:
            listed = [i for p in range(20) for i in c.get("/api/vecs/ids", params={"page": p}).json()]
            on_date = [i for p in range(20)
                       for i in c.get("/api/vecs/index-to-ids", params={"index": "date", "page": p}).json()]
            assert c.get("/api/vecs/id-count").json() == len(listed)
            assert c.get("/api/vecs/vec-count").json() == sum(len(v) for v in ids_on.values())
            for vec_id in SAMPLE_IDS:
                assert vec_id in listed and vec_id in on_date
                assert c.get("/api/vecs/id-to-indexes", params={"id": vec_id}).json() == ids_on[vec_id]
                got = c.get("/api/vecs/query", params=dict(SEED, ids=vec_id)).json()
                assert got == expected[vec_id], vec_id
                assert c.get(f"/api/vecs/dateindex-to-{vec_id}", params={"from": -1}).json() == expected[vec_id]
            # The web page describes every family, with a link that plots each example id.
            page = c.get("/").text
            for name, ids, what in FAMILIES:
                assert f"<b>{html.escape(name)}</b>" in page, name
                assert html.escape(what.replace("`", "")) in page, name
                for vec_id in ids:
                    assert f'ids={vec_id}">{vec_id}</a>' in page, vec_id
            r404 = c.get("/api/vecs/query", params={"index": "height", "ids": "size"})
            assert r404.status_code == 404 and "Did you mean: block_size" in r404.json()["error"]["message"]
    # The CLI: one query holding every sample id, `brk ids`, `brk vecid-indexes`, `brk ids --help`.
    r = _brk("query", "--out", str(out), "--index", "date", "--ids", ",".join(SAMPLE_IDS), "--from", "-1",
             "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [[expected[i]] for i in SAMPLE_IDS]
    listed = []
    for p in range(20):
        r = _brk("ids", "--out", str(out), "--index", "date", "--page", str(p), "--format", "json")
        listed += json.loads(r.stdout)
        if not json.loads(r.stdout):
            break
    assert listed == on_date and all(i in listed for i in SAMPLE_IDS)
    r = _brk("vecid-indexes", "supply_in_profit", "--out", str(out), "--format", "json")
    assert json.loads(r.stdout) == ids_on["supply_in_profit"]
    r = _brk("ids", "--help")
    assert r.returncode == 0
    for name, ids, _ in FAMILIES:
        assert name in r.stdout and all(i in r.stdout for i in ids), name
    assert all(i in INSTRUCTIONS for i in SAMPLE_IDS)


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "prices.csv"
    path.write_text(CSV)
    return path


def test_did_you_mean_never_the_asked_id(store: Path) -> None:
    """`size` -> `block_size` (the unit-stripped / word match), and an id asked on the wrong index, or a
    dollar id before prices, is never offered back to the caller as its own suggestion."""
    iface = Interface(store / "out")
    asks = [("height", "size", "block_size"), ("height", "fee_sats", "fee"), ("date", "suply", "supply"),
            ("height", "utxo_count_p2tr_sats", "utxo_count_p2tr"), ("date", "address_count_btc", "address_count")]
    for index_, asked, first in asks:
        with pytest.raises(NotFound) as err:
            OPS["get_vecs"].call(iface, {"index": index_, "ids": asked})
        message = str(err.value)
        assert f"Did you mean: {first}" in message, message
    for index_, asked in [("txindex", "supply_age_gt_10y"), ("date", "close"), ("height", "supply_in_profit"),
                          ("date", "txid"), ("height", "mvrv")]:
        with pytest.raises(NotFound) as err:
            OPS["get_vecs"].call(iface, {"index": index_, "ids": asked})
        message = str(err.value)
        head, _, tail = message.partition("Did you mean:")
        assert asked not in tail.split("?")[0].replace(",", " ").split(), message
    r = _brk("query", "--out", str(store / "out"), "--index", "h", "--ids", "size")
    assert r.returncode == 3 and "Did you mean: block_size" in r.stderr


@pytest.fixture
def price_server() -> Iterator[tuple[str, list[str]]]:
    """Kraken's OHLC answer for 2009-01-01 .. 2009-01-20 on 127.0.0.1 (close = 1.00 + day / 100)."""
    import datetime as dt

    with kraken(kraken_body(dt.date(2009, 1, 1), 20, lambda i: 1 + (i + 1) / 100)) as served:
        yield served


def test_seed_price_example_before_and_after_prices(store: Path, tmp_path: Path,
                                                    price_server: tuple[str, list[str]]) -> None:
    """`get_vecs` index date, ids close, from -1: before any price, a message naming the commands that
    provide it (MCP, HTTP, CLI alike); after `brk price import`, the last day's close; after a fetch
    (from a local server), the fetched close."""
    out = _copy(store, tmp_path / "out")
    iface = Interface(out)
    wanted = ["`brk price import FILE.csv`", "`brk price fetch`", "`brk run`", "`brk index --watch`"]

    def surfaces() -> list[tuple[bool, Any]]:
        answers: list[tuple[bool, Any]] = []
        with serving(create_app(iface)) as url:
            with httpx.Client(timeout=30) as c:
                r = c.get(url.removesuffix("/mcp") + "/api/vecs/query", params=SEED)
                answers.append((r.status_code == 200, r.json() if r.status_code == 200 else
                                r.json()["error"]["message"]))

            async def mcp() -> tuple[bool, Any]:
                from mcp import Client

                async with Client(url, cache=None) as client:
                    res = await client.call_tool("get_vecs", SEED)
                    text = res.content[0].text  # type: ignore[union-attr]
                    return (not res.is_error, json.loads(text) if not res.is_error else text)

            answers.append(asyncio.run(asyncio.wait_for(mcp(), 60)))
        done = _brk("query", "--out", str(out), "--index", "date", "--ids", "close", "--from", "-1", "--format", "json")
        answers.append((done.returncode == 0, json.loads(done.stdout) if done.returncode == 0 else done.stderr))
        return answers

    for ok, message in surfaces():
        assert not ok and "'close'" in message and all(w in message for w in wanted), message
        assert "Did you mean" not in message
    r = _brk("price", "import", str(_csv(tmp_path)), "--out", str(out), "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["changed_days"] == 13
    assert surfaces() == [(True, 0.65)] * 3
    r = _brk("price", "fetch", "--url", price_server[0], "--out", str(out), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["changed_days"] == 13 and price_server[1]
    assert surfaces() == [(True, 1.15)] * 3
    # The same answer fetched again changes nothing (so the realized values are not recomputed).
    r = _brk("price", "fetch", "--url", price_server[0], "--out", str(out), "--format", "json")
    assert json.loads(r.stdout)["changed_days"] == 0
