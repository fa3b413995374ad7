"""`brk price import` refuses bad CSVs with a message naming the line (never a traceback, never stored),
and no brk surface ever writes Infinity or NaN into JSON, whatever the stored prices hold.

Regressions from an independent audit: a Latin-1 byte, a 300 KB field and the timestamp
99999999999999999999 were tracebacks; NaN, inf, 1e400, negative prices, high < low and duplicate days
were stored; with `inf` or `1e308` stored, the HTTP API, `brk query --format json` and MCP wrote
`Infinity`. The price fetch sends URL user info as Basic auth and never shows it.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.brk import prices
from cairn_servers.brk.cli import main

from ._prices import kraken_body

HEADER = b"date,open,high,low,close\n"
GOOD = b"2009-01-12,3,4,2,3.5\n"


@pytest.fixture(scope="module")
def base_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("brk_prices_input")
    assert main(["sample", "--blocks", "30", "--out", str(base / "blocks"), "--format", "json"]) == 0
    assert main(["index", "--blocks-dir", str(base / "blocks"), "--out", str(base / "out"), "--no-compute",
                 "--format", "json", "--progress", "none"]) == 0
    return base / "out"


@pytest.fixture
def out(base_out: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(base_out, tmp_path / "out")
    return tmp_path / "out"


def _strict(text: str) -> Any:
    """``json.loads`` that refuses NaN and Infinity, as every JSON parser but Python's does."""
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in JSON: {text[:200]}")

    return json.loads(text, parse_constant=refuse)


BAD = [
    (HEADER + GOOD + b"2009-01-13,3,4,2,3\xe9\n", "line 3: byte 0xe9 is not UTF-8. Save the CSV as UTF-8."),
    (HEADER + b"2009-01-13,3,4,2," + b"9" * 300_000 + b"\n", "line 2: field larger than field limit (131072)."),
    (HEADER + b"99999999999999999999,3,4,2,3\n",
     "line 2: Unreadable date '99999999999999999999': the timestamp is out of range."),
    (HEADER + GOOD + b"2009-01-13,nan,4,2,3\n", "line 3: the open price nan is not a finite number."),
    (HEADER + b"2009-01-13,3,inf,2,3\n", "line 2: the high price inf is not a finite number."),
    (HEADER + b"2009-01-13,3,4,2,1e400\n", "line 2: the close price inf is not a finite number."),
    (HEADER + b"2009-01-13,3,4,2,1e308\n", "line 2: the close price 1e+308 is over 1e+15 dollars."),
    (HEADER + b"2009-01-13,3,4,-2,3\n", "line 2: the low price -2.0 is not positive."),
    (HEADER + b"2009-01-13,0,4,2,3\n", "line 2: the open price 0.0 is not positive."),
    (HEADER + b"2009-01-13,3,2,4,3\n", "line 2: the high 2.0 is below the low 4.0."),
    (HEADER + GOOD + b"2009-01-13,3,4,2,3\n2009-01-12,5,6,4,5\n",
     "line 4: 2009-01-12 appears a second time; give each day once."),
    (HEADER + b"1231718400,3,4,2,3\n2009-01-12,5,6,4,5\n", "line 3: 2009-01-12 appears a second time"),
    (HEADER + b"2999-01-01,3,4,2,3\n", "line 2: 2999-01-01 is in the future."),
    (HEADER + GOOD + b"2009-01-13,3,4,2,x\n", "line 3: a price is not a number (2009-01-13,3,4,2,x)."),
]


@pytest.mark.parametrize("data, message", BAD, ids=[m.split(": ", 1)[1][:40] for _, m in BAD])
def test_a_bad_csv_is_refused_naming_the_line_and_nothing_is_stored(
        out: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, message: str) -> None:
    good = tmp_path / "good.csv"
    good.write_bytes(HEADER + b"2009-01-03,1,2,0.5,1.5\n")
    assert main(["price", "import", str(good), "--out", str(out), "--format", "json"]) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in sorted((out / "prices").iterdir()) if p.is_file()}
    bad = tmp_path / "bad.csv"
    bad.write_bytes(data)
    assert main(["price", "import", str(bad), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"brk: error: {bad} {message}"), captured.err
    assert captured.out == "" and "Traceback" not in captured.err
    assert {p.name: p.read_bytes() for p in sorted((out / "prices").iterdir()) if p.is_file()} == before


def test_a_bad_csv_gives_no_traceback_from_the_real_command(out: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_bytes(HEADER + b"2009-01-13,3,4,2," + b"9" * 300_000 + b"\n")
    r = subprocess.run([sys.executable, "-m", "cairn_servers.brk.cli", "price", "import", str(bad), "--out", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr == f"brk: error: {bad} line 2: field larger than field limit (131072). " \
                                             "Is this a CSV of daily prices?\n", r.stderr


def test_a_csv_over_the_size_cap_is_refused(out: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "big.csv"
    big.write_bytes(HEADER + b"# padding\n" * (2 << 20))
    assert main(["price", "import", str(big), "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith(f"brk: error: {big} is over 16 MiB;")


def test_fetched_candles_are_held_to_the_same_rules(out: Path) -> None:
    """A source answering a non-finite or negative price fails the fetch; the stored prices stay."""
    from cairn_servers.core.errors import NetworkError

    from ._prices import kraken

    prices.save(out, [(4, 3.0, 4.0, 2.0, 3.5)])
    before = {p.name: p.read_bytes() for p in sorted((out / "prices").iterdir()) if p.is_file()}
    for close in (float("inf"), -5.0):
        body = kraken_body(dt.date(2009, 1, 9), 3, lambda i, c=close: c if i == 1 else 2.0)
        with kraken(body) as (url, seen):
            with pytest.raises(NetworkError, match="Kraken's candle 2: the open price .* The stored prices were kept"):
                prices.fetch(out, "kraken", url)
            assert seen == ["/0/public/OHLC"]
    assert {p.name: p.read_bytes() for p in sorted((out / "prices").iterdir()) if p.is_file()} == before


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/0/public/OHLC"
    finally:
        server.shutdown()
        server.server_close()


def test_price_fetch_sends_url_user_info_as_basic_auth_and_never_shows_it(
        out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = kraken_body(dt.date(2009, 1, 9), 3, lambda i: 2.0 + i)
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(self.headers.get("Authorization", ""))
            ok = self.headers.get("Authorization") == "Basic " + base64.b64encode(b"u:S3cretPW").decode()
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(body) if ok else 0))
            self.end_headers()
            if ok:
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    for url in _serve(Handler):
        good = url.replace("http://", "http://u:S3cretPW@")
        assert main(["price", "fetch", "--url", good, "--out", str(out), "--format", "json"]) == 0
        assert _strict(capsys.readouterr().out)["days"] == 3
        bad = url.replace("http://", "http://u:WrongPW@")
        assert main(["price", "fetch", "--url", bad, "--out", str(out)]) == 5
        err = capsys.readouterr().err
        assert "HTTP 401" in err and "WrongPW" not in err and "***@127.0.0.1" in err, err
    assert seen[0] == "Basic " + base64.b64encode(b"u:S3cretPW").decode()


def test_infinity_and_nan_never_reach_json(out: Path, tmp_path: Path) -> None:
    """Prices stored before imports refused them (inf, 1e308, NaN), written straight into the store,
    read as null on the HTTP API, `brk query --format json` and MCP over stdio."""
    import httpx

    from tests.hardening._servers import spawn_brk_http, spawn_brk_stdio

    prices.save(out, [(0, 1.0, 1.0, 1.0, 1.0), (1, float("inf"), float("inf"), 1.0, float("inf")),
                      (2, 1e308, 1e308, 1e308, 1e308), (4, float("nan"), 2.0, 1.0, float("-inf"))])
    from cairn_servers.brk.compute import compute

    compute(out)
    expected_close = [1.0, None, 1e308, None, None]
    r = subprocess.run([sys.executable, "-m", "cairn_servers.brk.cli", "query", "--out", str(out), "--index", "date",
                        "--ids", "close,open", "--format", "json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert _strict(r.stdout)[0][:5] == expected_close
    server = spawn_brk_http(out, tmp_path / "http")
    try:
        resp = httpx.get(f"{server.url}/api/vecs/query", params={"index": "date", "ids": "close,open,market_cap"},
                         timeout=30)
        assert resp.status_code == 200, resp.text
        data = _strict(resp.text)
        assert data[0][:5] == expected_close and data[1][:5] == [1.0, None, 1e308, None, None]
        assert all(v is None or v == v for v in data[2])  # market_cap: 1e308 x supply overflows -> null
        resp = httpx.get(f"{server.url}/api/vecs/date-to-close", timeout=30)
        assert _strict(resp.text)[:5] == expected_close
    finally:
        server.close()
    stdio = spawn_brk_stdio(out, tmp_path / "stdio")
    try:
        stdio.initialize()
        reply = stdio.request("tools/call", {"name": "get_vecs", "arguments": {"index": "date", "ids": "close"}})
        assert "result" in reply and not reply["result"].get("isError"), reply
        assert _strict(reply["result"]["content"][0]["text"])[:5] == expected_close
    finally:
        stdio.close()
