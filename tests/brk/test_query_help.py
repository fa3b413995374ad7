"""What a new user meets when a query is slightly off (issue 12): suggestions for unknown ids over the
real CLI and the real `brk mcp` stdio server, the `markdown` format alias, and `If-None-Match` with
weak validators, lists and `*` against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cairn_servers.brk.http import create_app, none_match
from cairn_servers.brk.interface import Interface, suggest

from ..mcp._http import serving
from .conftest import mainnet_store

PRICE_HINT = "brk price import"


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return mainnet_store(tmp_path_factory.mktemp("brk_help"))


def _brk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cairn_servers.brk.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_suggest_is_general_and_never_repeats_the_name() -> None:
    ids = ["block_size", "block_size_avg", "fee", "fee_btc", "fee_cumulative", "supply", "tx_count", "close"]
    assert suggest("size", ids)[0] == "block_size"  # suffix of the words
    assert suggest("fee_sats", ids)[:2] == ["fee", "fee_btc"]  # unit stripped
    assert suggest("block", ids)[0] == "block_size"  # prefix of the words
    assert suggest("suply", ids) == ["supply"]  # spelling
    assert suggest("tx", ids) == ["tx_count"]
    for name in ids:
        assert name not in suggest(name, ids)
    assert suggest("zzzz", ids) == []


def test_cli_unknown_ids_get_useful_suggestions(out: Path) -> None:
    r = _brk("query", "--out", str(out), "--index", "height", "--ids", "size")
    assert r.returncode == 3 and r.stdout == ""
    assert "Unknown vec id 'size' on height. Did you mean: block_size" in r.stderr
    assert "Traceback" not in r.stderr
    # A price series before prices exist: no "did you mean: close", but the command that provides it.
    r = _brk("query", "--out", str(out), "--index", "height", "--ids", "close")
    assert r.returncode == 3
    assert "Did you mean" not in r.stderr and PRICE_HINT in r.stderr and "'close'" in r.stderr
    # An id that exists, but on other indexes: say where.
    r = _brk("query", "--out", str(out), "--index", "date", "--ids", "txid")
    assert r.returncode == 3 and "it exists on: txindex" in r.stderr
    r = _brk("query", "--out", str(out), "--index", "height", "--ids", "fee_sats")
    assert r.returncode == 3 and "Did you mean: fee, fee_btc" in r.stderr
    r = _brk("query", "--out", str(out), "--index", "height", "--ids", "block_count", "--to", "2",
             "--format", "markdown")
    assert r.returncode == 0 and r.stdout == "| block_count |\n|---|\n| 1 |\n| 1 |\n"
    r = _brk("ids", "--out", str(out), "--index", "tx", "--format", "markdown")
    assert r.returncode == 0 and "txid" in r.stdout


def _rpc(proc: subprocess.Popen[bytes], msg: dict[str, Any]) -> dict[str, Any]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(msg).encode() + b"\n")
    proc.stdin.flush()
    if "id" not in msg:
        return {}
    while True:
        reply: dict[str, Any] = json.loads(proc.stdout.readline())
        if reply.get("id") == msg["id"]:
            return reply


def test_mcp_get_vecs_suggestions_and_markdown(out: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.brk.cli", "mcp", "--out", str(out)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        init = _rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert "result" in init
        _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools = _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})["result"]["tools"]
        fmt = next(t for t in tools if t["name"] == "get_vecs")["inputSchema"]["properties"]["format"]
        assert fmt["enum"] == ["json", "csv", "tsv", "md", "markdown"]

        def call(args: dict[str, Any]) -> dict[str, Any]:
            reply = _rpc(proc, {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                "params": {"name": "get_vecs", "arguments": args}})
            result: dict[str, Any] = reply["result"]
            return result

        r = call({"index": "height", "ids": "size"})
        assert r["isError"] and "Did you mean: block_size" in r["content"][0]["text"]
        r = call({"index": "date", "ids": "close"})
        text = r["content"][0]["text"]
        assert r["isError"] and PRICE_HINT in text and "Did you mean" not in text
        r = call({"index": "date", "ids": "block_count", "to": 2, "format": "markdown"})
        assert not r.get("isError") and r["content"][0]["text"] == "| block_count |\n|---|\n| 1 |\n| 14 |\n"
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            stream.close()


@pytest.fixture(scope="module")
def base_url(out: Path) -> Iterator[str]:
    with serving(create_app(Interface(out))) as url:
        yield url.removesuffix("/mcp")


def test_if_none_match_weak_comparison(base_url: str) -> None:
    path, params = "/api/vecs/query", {"index": "date", "ids": "block_count", "to": "2"}
    with httpx.Client(base_url=base_url) as c:
        first = c.get(path, params=params)
        etag = first.headers["etag"]
        assert first.status_code == 200 and etag.startswith('"')
        for header in (etag, f"W/{etag}", f'"nope", W/{etag}', f'W/"x",{etag}', "*", f'W/{etag}  ,  "z"'):
            r = c.get(path, params=params, headers={"If-None-Match": header})
            assert r.status_code == 304 and r.content == b"" and r.headers["etag"] == etag, header
            h = c.head(path, params=params, headers={"If-None-Match": header})
            assert h.status_code == 304, header
        for header in ('"nope"', 'W/"nope"', etag[:-1], "", 'W/"0-589-9", "1-589-0"'):
            r = c.get(path, params=params, headers={"If-None-Match": header})
            assert r.status_code == 200 and r.json() == [1, 14], header
        # A validator never hides an error: the unknown id is still a 404.
        r = c.get(path, params={"index": "date", "ids": "size"}, headers={"If-None-Match": "*"})
        assert r.status_code == 404 and "block_size" in r.json()["error"]["message"]


def test_none_match_parser() -> None:
    assert none_match('W/"a"', '"a"') and none_match('"b" , W/"a"', '"a"') and none_match("*", '"a"')
    assert not none_match('"a-"', '"a"') and not none_match(None, '"a"') and not none_match('garbage, "b"', '"a"')
    assert none_match('garbage, "a"', '"a"')


def test_http_markdown_alias_and_extension(base_url: str) -> None:
    with httpx.Client(base_url=base_url) as c:
        md = "| block_count |\n|---|\n| 1 |\n| 14 |\n"
        r = c.get("/api/vecs/query", params={"index": "date", "ids": "block_count", "to": 2, "format": "markdown"})
        assert r.status_code == 200 and r.text == md and r.headers["content-type"].startswith("text/markdown")
        for ext in ("md", "markdown"):
            r = c.get(f"/api/vecs/date-to-block_count.{ext}", params={"to": 2})
            assert r.status_code == 200 and r.text == md
        r = c.get("/api/vecs/date-to-block_count.csv", params={"to": 2})
        assert r.text == "block_count\n1\n14\n" and r.headers["content-type"].startswith("text/csv")
        r = c.get("/api/vecs/date-to-block_count.xml")
        assert r.status_code == 400 and "Unknown format 'xml'" in r.json()["error"]["message"]
        r = c.get("/api/vecs/date-to-block_count.csv", params={"format": "tsv"})
        assert r.status_code == 400
        spec = c.get("/openapi.json").json()
        fmt = next(p for p in spec["paths"]["/api/vecs/query"]["get"]["parameters"] if p["name"] == "format")
        assert "markdown" in fmt["schema"]["enum"]


def test_index_to_id_path_takes_the_declared_parameters(base_url: str) -> None:
    """/api/vecs/INDEX-to-ID is get_vecs with the index and id in the path: the other parameters (aliases
    included) are the declared ones, checked with the same messages; naming the index or id again is refused."""
    with httpx.Client(base_url=base_url) as c:
        r = c.get("/api/vecs/date-to-block_count.CSV", params={"t": 2})
        assert r.status_code == 200 and r.text == "block_count\n1\n14\n"
        r = c.get("/api/vecs/date-to-block_count", params={"f": "-1", "from": "-1"})
        assert r.status_code == 400 and r.json()["error"]["message"] == (
            "Invalid parameter for 'get_vecs': from and f name the same parameter; give one")
        r = c.get("/api/vecs/date-to-block_count", params={"i": "height"})
        assert r.status_code == 400 and "names the index and the id in the path" in r.json()["error"]["message"]
        r = c.get("/api/vecs/date-to-block_count", params={"nope": "1"})
        assert r.status_code == 400 and "nope: is not an allowed property" in r.json()["error"]["message"]
        spec = c.get("/openapi.json").json()["paths"]
        names = [p["name"] for p in spec["/api/vecs/{index}-to-{id}"]["get"]["parameters"]]
        assert names == ["index", "id", "from", "f", "to", "t", "count", "c", "format"]


def test_tables_of_a_date_index_start_with_the_date(out: Path) -> None:
    """csv/tsv/md of a date index carry the date first (the rows are periods: numbers alone do not say
    which), unless the ids name it or --no-date is given; height rows and JSON stay as asked."""
    base = ["query", "--out", str(out), "--ids", "block_count", "--from", "0", "--count", "2"]
    md = _brk(*base, "--index", "week", "--format", "md")
    assert (md.returncode, md.stdout) == (0, "| date | block_count |\n|---|---|\n| 2008-12-29 | 1 |\n| 2009-01-05 | 168 |\n")
    csv = _brk(*base, "--index", "date", "--format", "csv").stdout
    assert csv == "date,block_count\n2009-01-03,1\n2009-01-09,14\n"
    assert _brk(*base, "--index", "date", "--format", "csv", "--no-date").stdout == "block_count\n1\n14\n"
    named = _brk("query", "--out", str(out), "--ids", "block_count,date", "--index", "d", "--from", "0", "--count", "1",
                 "--format", "tsv").stdout
    assert named == "block_count\tdate\n1\t2009-01-03\n"  # named by the user: kept where it was
    assert _brk(*base, "--index", "height", "--format", "csv").stdout == "block_count\n1\n1\n"
    assert _brk(*base, "--index", "date", "--format", "json").stdout == "[1,14]\n"
    assert _brk(*base, "--index", "date", "--jsonl").stdout == '{"block_count":1}\n{"block_count":14}\n'
