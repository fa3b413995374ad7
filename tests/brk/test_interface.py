"""The query interface on mainnet 0..589: exact values, shapes, formats, aliases, ranges, pagination,
errors with suggestions, the size cap, prices (CSV import and an exchange fetcher against a local
HTTP server), and the CLI commands built on it."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.brk import interface as iface_mod
from cairn_servers.brk import prices
from cairn_servers.brk.cli import main
from cairn_servers.brk.interface import Interface
from cairn_servers.brk.ops import OPS, render_vecs
from cairn_servers.core.errors import InvalidInput, NetworkError, NotFound, TooLarge

from .conftest import mainnet_store

BTC = 100_000_000


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return mainnet_store(tmp_path_factory.mktemp("brk_iface"))


@pytest.fixture(scope="module")
def q(out: Path) -> Interface:
    return Interface(out)


def get(iface: Interface, args: dict[str, Any] | None = None, /, **kwargs: Any) -> Any:
    """get_vecs as every surface runs it: the declaration checks the wire arguments (aliases included), the
    Interface answers with columns, and the one renderer gives the JSON value or the csv/tsv/md text."""
    result = OPS["get_vecs"].call(iface, {**(args or {}), **kwargs})
    return result.value() if result.format == "json" else render_vecs(result)


def test_exact_values(q: Interface) -> None:
    assert get(q, index="date", ids="date", to=2) == ["2009-01-03", "2009-01-09"]
    assert get(q, index="date", ids="block_count", to=2) == [1, 14]  # blocks on 2009-01-03 and 2009-01-09
    assert get(q, index="date", ids="block_count_cumulative", **{"from": -1}) == 590
    assert get(q, index="height", ids="supply", **{"from": 589}) == 29_500 * BTC
    assert get(q, index="height", ids="supply_btc", **{"from": -1}) == 29_500.0
    coinbase = get(q, index="height", ids="coinbase")
    assert len(coinbase) == 590 and sum(coinbase) == 29_500 * BTC
    assert get(q, index="decade", ids="supply_btc") == 29_500.0
    assert get(q, index="month", ids="tx_count") == 605
    assert get(q, index="height", ids="blockhash", to=1) == \
        "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f"
    assert get(q, index="height", ids="timestamp", to=1) == 1231006505
    assert get(q, index="height", ids="date", f=1, c=1) == "2009-01-09"
    # Aggregates over the 14 blocks of 2009-01-09: intervals are exact integers from the timestamps.
    ts = get(q, index="height", ids="timestamp", to=15)
    intervals = [b - a for a, b in zip(ts, ts[1:])]
    got = get(q, index="d", ids="block_interval_min,block_interval_max,block_interval_avg", f=1, c=1)
    assert got == [[max(min(intervals), 0)], [max(intervals)], [sum(intervals) / 14]]
    s = sorted(intervals)
    assert get(q, index="d", ids="block_interval_median", f=1, c=1) == (s[6] + s[7]) / 2
    assert get(q, index="week", ids="date", to=3) == ["2008-12-29", "2009-01-05", "2009-01-12"]
    assert get(q, index="difficultyepoch", ids="first_height") == 0
    assert get(q, index="txindex", ids="fee", f=-1) == 0
    assert get(q, index="out", ids="value_btc", to=1) == 50.0


def test_shapes_ranges_and_aliases(q: Interface) -> None:
    heights = get(q, index="h", ids="first_txindex")
    assert len(heights) == 590
    assert get(q, i="h", v="first-txindex", f="-3") == heights[-3:]
    assert get(q, {"index": "height", "ids": "first_txindex", "from": "10", "count": "5"}) == heights[10:15]
    assert get(q, index="height", ids="first_txindex", f=10, t=-575) == heights[10:15]
    assert get(q, index="height", ids="first_txindex", f=10, t=12, c=100) == heights[10:12]  # to wins
    assert get(q, index="height", ids="first_txindex", f=-1000) == heights  # clamped
    assert get(q, index="height", ids="first_txindex", f=700) == []
    assert get(q, index="HEIGHT", ids=["First_TxIndex", "tx_count"], f=-2) == [heights[-2:], [1, 1]]
    matrix = get(q, index="height", ids="first_txindex tx_count", f=-1)
    assert matrix == [[heights[-1]], [get(q, index="height", ids="tx_count", f=-1)]]  # always a matrix
    for name in ("d", "date", "dateindex", "DATE", "w", "week", "m", "q", "s", "y", "decade", "difficulty",
                 "halving", "tx", "in", "out", "h"):
        get(q, index=name, ids="first_height" if name not in ("tx", "in", "out", "h") else
                   {"tx": "fee", "in": "outputindex", "out": "value", "h": "fee"}[name], f=-1)


def test_formats(q: Interface) -> None:
    ids = "date,block_count,supply_btc"
    csv = get(q, index="date", ids=ids, to=2, format="csv")
    assert csv == "date,block_count,supply_btc\n2009-01-03,1,50.0\n2009-01-09,14,750.0\n"
    assert get(q, index="date", ids=ids, to=2, format="tsv") == csv.replace(",", "\t")
    md = "| date | block_count | supply_btc |\n|---|---|---|\n| 2009-01-03 | 1 | 50.0 |\n| 2009-01-09 | 14 | 750.0 |\n"
    assert get(q, index="date", ids=ids, to=2, format="md") == md
    assert get(q, index="date", ids=ids, to=2, format="markdown") == md
    assert get(q, index="date", ids="block_count", to=1, format="csv") == "block_count\n1\n"
    with pytest.raises(InvalidInput, match='format: "xml" is not one of "json", "csv", "tsv", "md", "markdown"'):
        get(q, index="date", ids="block_count", format="xml")
    with pytest.raises(InvalidInput, match="Unknown format 'xml'"):  # a path's .xml (the HTTP route checks it)
        iface_mod.normalize_format("xml")


def test_metadata_and_pagination(q: Interface, monkeypatch: pytest.MonkeyPatch) -> None:
    assert q.get_index_count() == 13 == len(q.get_indexes())
    accepted = q.get_accepted_indexes()
    assert accepted["dateindex"] == ["d", "date", "dateindex"] and accepted["outputindex"] == ["out", "outputindex"]
    ids = [i for p in range(10) for i in q.get_vecids(p)]  # the analytics families fill several pages
    assert len(q.get_vecids()) == 1000 and q.get_vecids(9) == []
    assert ids == sorted(ids) and len(ids) == q.get_vecid_count() and "supply_btc" in ids
    assert q.get_vec_count() == sum(len(q.get_vecid_to_indexes(i)) for i in ids)
    assert q.get_vecid_to_indexes("supply_btc") == ["height", "dateindex", "weekindex", "monthindex",
                                                    "quarterindex", "semesterindex", "yearindex", "decadeindex",
                                                    "difficultyepoch", "halvingepoch"]
    assert q.get_vecid_to_indexes("txid") == ["txindex"]
    assert "txid" not in q.get_index_to_vecids("date") and "txid" in q.get_index_to_vecids("tx")
    assert q.get_vecids("0") == ids[:1000]
    # Pages never overlap (the reference returned too much from page 1 on).
    monkeypatch.setattr(iface_mod, "PAGE_SIZE", 100)
    full, rest = divmod(len(ids), 100)
    pages = [q.get_vecids(p) for p in range(full + 2)]
    assert [len(p) for p in pages] == [100] * full + [rest, 0]
    assert sum(pages, []) == ids
    with pytest.raises(InvalidInput, match="page must be 0 or more"):
        q.get_vecids(-1)


def test_errors(q: Interface) -> None:
    with pytest.raises(NotFound, match=r"Unknown index 'dat'\. Did you mean: date, dateindex"):
        get(q, index="dat", ids="close")
    with pytest.raises(NotFound, match=r"Unknown vec id 'suply' on dateindex\. Did you mean: supply"):
        get(q, index="date", ids="suply")
    with pytest.raises(NotFound, match=r"'blockhash' is not available on dateindex; it exists on: height"):
        get(q, index="date", ids="blockhash")
    with pytest.raises(NotFound, match="brk price import"):
        get(q, index="date", ids="close")
    with pytest.raises(NotFound, match=r"Did you mean: tx_count"):
        q.get_vecid_to_indexes("tx_cont")
    with pytest.raises(InvalidInput, match="from must be an integer, got 'x'"):
        get(q, index="h", ids="fee", f="x")
    with pytest.raises(InvalidInput, match="count must be 0 or more"):
        get(q, index="h", ids="fee", count=-1)
    with pytest.raises(InvalidInput, match="needs ids"):
        get(q, index="h", ids=" , ")
    with pytest.raises(InvalidInput, match="index: is required"):
        get(q, ids="fee")
    with pytest.raises(InvalidInput, match="needs an index"):
        get(q, index=" ", ids="fee")
    with pytest.raises(InvalidInput, match="index and i name the same parameter; give one"):
        get(q, {"i": "h", "index": "date", "ids": "fee"})


def test_size_cap(out: Path) -> None:
    small = Interface(out, max_cells=1000)
    assert len(get(small, index="h", ids="fee,tx_count", c=500)[0]) == 500
    with pytest.raises(TooLarge, match=r"asks for 1,180 values \(2 ids x 590 rows\); the limit is 1,000"):
        get(small, index="h", ids="fee,tx_count")


def test_opening_keeps_names_not_readers(out: Path, q: Interface) -> None:
    """Opening a store keeps the ids and the indexes each is on; an index's readers are made when a query
    first reads it (regression: every (index, id) pair was a Vec with its closures, 10,818 of them and 5.5 MiB
    once the analytics landed, made before `brk mcp` answered tools/list)."""
    import tracemalloc

    tracemalloc.start()
    try:
        fresh = Interface(out)
        opened = tracemalloc.get_traced_memory()[0]
        assert fresh.get_vec_count() == q.get_vec_count() == 31_870  # pools' 13,652, cohorts' 5,440 + 1,960
        assert [fresh.get_vecids(p) for p in range(11)] == [q.get_vecids(p) for p in range(11)]
        assert fresh.get_vecid_to_indexes("fee") == q.get_vecid_to_indexes("fee")
        listed = tracemalloc.get_traced_memory()[0]
        # One index's readers are made: dateindex's.
        assert get(fresh, index="date", ids="supply_btc_avg,fee_p90", f=-1) == [[27_650.0], [0.0]]
        read = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert opened < 1.5 * 2**20, f"{opened / 2**20:.2f} MiB"
    assert listed - opened < 64 * 2**10, f"{(listed - opened) / 2**10:.0f} KiB"  # listing makes no reader
    assert read - listed < 1 * 2**20, f"{(read - listed) / 2**20:.2f} MiB"  # one index's readers, not all


def test_opening_a_store_leaves_archive_modules_out(out: Path) -> None:
    """`brk mcp` opens its store as `_ready` + `Interface` do: neither keeps shutil (and the bz2 and lzma it
    imports, 0.5 MiB) in the process (regression: cairn_servers.brk.addresses imported it at module level)."""
    import subprocess
    import sys

    code = ("import sys; from pathlib import Path; from cairn_servers.brk.cli_serve import _ready; "
            "from cairn_servers.brk.interface import Interface; q = Interface(_ready(Path(sys.argv[1]))); "
            "assert q.get_vecid_count() > 1000; print(sorted({'shutil', 'bz2', 'lzma'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_concurrent_first_reads(out: Path, q: Interface) -> None:
    """Threads that first read the same indexes at once (each index's readers made once, under the lock)
    get what a warm interface answers."""
    asks = [("h", "fee,supply_btc,blockhash"), ("date", "supply_btc,fee_sum,date"), ("week", "fee_p90"),
            ("difficulty", "tx_count_cumulative"), ("tx", "fee_rate,txid"), ("out", "value_btc")] * 4
    want = [get(q, index=i, ids=ids, f=-3) for i, ids in asks]
    fresh = Interface(out)
    barrier = threading.Barrier(len(asks))
    got: list[Any] = [None] * len(asks)

    def ask(k: int) -> None:
        barrier.wait()
        got[k] = get(fresh, index=asks[k][0], ids=asks[k][1], f=-3)

    threads = [threading.Thread(target=ask, args=(k,)) for k in range(len(asks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got == want


@pytest.fixture
def priced(out: Path, tmp_path: Path) -> Iterator[Path]:
    """A copy of the store so price imports do not leak into the module fixture."""
    import shutil

    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    yield copy


def test_price_import(priced: Path, tmp_path: Path) -> None:
    csv = tmp_path / "p.csv"
    csv.write_text("Date,Open,High,Low,Close\n2009-01-03,1,2,0.5,1.5\n2009-01-12,3,4,2,3.5\n"
                   "2009-01-15,5,6,4,5.5\n")
    assert prices.import_csv(priced, csv) == {"days": 3, "first_dateindex": 0, "last_dateindex": 7,
                                              "stored_days": 8, "changed_days": 3}
    q = Interface(priced)
    assert get(q, index="d", ids="close", to=5) == [1.5, None, None, None, 3.5]
    assert get(q, index="week", ids="open,high,low,close") == [[1.0, None, 3.0], [2.0, None, 6.0],
                                                                   [0.5, None, 2.0], [1.5, None, 5.5]]
    assert get(q, index="d", ids="market_cap", f=-1) == 29_500 * 5.5
    assert get(q, index="d", ids="supply_usd", f=-1) == 29_500 * 5.5
    assert get(q, index="h", ids="close", to=1) == 1.5
    assert get(q, index="d", ids="coinbase_usd", to=1) == 50 * 1.5
    # A second import merges by date.
    csv.write_text("timestamp,price\n1231718400,9\n")  # 2009-01-12 as Unix seconds
    prices.import_csv(priced, csv)
    assert get(Interface(priced), index="d", ids="close,open", f=4, c=1) == [[9.0], [9.0]]
    csv.write_text("when,open\n1,2\n")
    with pytest.raises(InvalidInput, match="no date column"):
        prices.import_csv(priced, csv)


def test_prices_after_an_index_was_read(priced: Path, tmp_path: Path) -> None:
    """An interface that has read an index before prices arrive serves that index's dollar ids after the
    import (its readers are made again with prices; regression for the readers made on first use)."""
    q = Interface(priced)
    assert get(q, index="d", ids="supply_btc", to=1) == 50.0
    with pytest.raises(NotFound, match="brk price import"):
        get(q, index="d", ids="supply_usd")
    count = q.get_vec_count()
    csv = tmp_path / "p.csv"
    csv.write_text("Date,Price\n2009-01-03,1.5\n")
    prices.import_csv(priced, csv)
    assert get(q, index="d", ids="close,supply_usd", to=1) == [[1.5], [75.0]]
    assert "supply_usd" in [i for p in range(40) for i in q.get_index_to_vecids("d", p)]  # the cohorts fill pages
    assert q.get_vec_count() > count
    assert q.get_vecid_to_indexes("close")[:2] == ["height", "dateindex"]


class _Kraken(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = json.dumps({"error": [], "result": {"XXBTZUSD": [
            [1231718400, "3.0", "4.0", "2.0", "3.5", "3", "1", 1],
            [1231977600, "5.0", "6.0", "4.0", "5.5", "5", "1", 1]], "last": 1231977600}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_price_fetch_against_local_server(priced: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Kraken)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/0/public/OHLC"
        summary = prices.fetch(priced, "kraken", url)
        assert summary == {"days": 2, "first_dateindex": 4, "last_dateindex": 7, "stored_days": 8,
                           "changed_days": 2, "source": "kraken"}
        assert get(Interface(priced), index="d", ids="close", f=4) == [3.5, None, None, 5.5]
        with pytest.raises(NetworkError, match="Binance answered with an error"):
            prices.fetch(priced, "binance", url)  # a dict, not Binance's list of klines
    finally:
        server.shutdown()
        server.server_close()


def test_cli(out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", "--out", str(out), "--index", "date", "--ids", "block_count,supply_btc", "--from", "-2",
                 "--format", "md"]) == 0
    assert capsys.readouterr().out == ("| date | block_count | supply_btc |\n|---|---|---|\n| 2009-01-14 | 129 | 25750.0 |\n"
                                       "| 2009-01-15 | 75 | 29500.0 |\n")
    assert main(["query", "--out", str(out), "-i", "h", "-v", "supply_btc", "-f", "-1"]) == 0
    assert json.loads(capsys.readouterr().out) == 29500.0
    assert main(["ids", "--out", str(out), "--index", "tx", "--format", "json"]) == 0
    assert "txid" in json.loads(capsys.readouterr().out)
    assert main(["indexes", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["halvingepoch"] == ["halving", "halvingepoch"]
    assert main(["query", "--out", str(out), "-i", "h", "-v", "clos"]) == 3
    assert capsys.readouterr().err == ("brk: error: Unknown vec id 'clos' on height. Did you mean: close? Dollar prices "
                                       "appear after `brk price import FILE.csv` (a daily CSV) or `brk price fetch` "
                                       "(downloads them from Kraken); `brk run` and `brk index --watch` fetch them "
                                       "by themselves when online. List them with `brk ids --index h`.\n")


@pytest.mark.parametrize("name", ["BRK_OUTPUT_FORMAT", "BRK_FORMAT"])
def test_query_reads_the_format_variable_and_its_older_name(name: str, out: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # Regression (merge of the ops refactor): `brk query` read only $BRK_FORMAT again.
    for var in ("BRK_OUTPUT_FORMAT", "BRK_FORMAT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(name, "csv")
    assert main(["query", "--out", str(out), "-i", "date", "-v", "block_count,supply_btc", "-f", "-2"]) == 0
    assert capsys.readouterr().out == "date,block_count,supply_btc\n2009-01-14,129,25750.0\n2009-01-15,75,29500.0\n"
    monkeypatch.setenv(name, "text")  # text is md for a table
    assert main(["query", "--out", str(out), "-i", "date", "-v", "block_count", "-f", "-1"]) == 0
    assert capsys.readouterr().out == "| date | block_count |\n|---|---|\n| 2009-01-15 | 75 |\n"
