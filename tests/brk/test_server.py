"""brk's server: HTTP routes (ETag/304, CORS, errors, OpenAPI), the MCP tools (the ten seed tools and
search_vecids) through the official SDK client over Streamable HTTP and over stdio (`brk mcp`), the conformance suite's generic scenarios
against `brk serve`'s /mcp, and readers under load while the indexer appends blocks."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cairn_servers.brk.compute import compute
from cairn_servers.brk.http import create_app
from cairn_servers.brk.indexer import Indexer
from cairn_servers.brk.interface import Interface
from cairn_servers.brk.sample import write_sample

from ..mcp._http import free_port, serving
from ..mcp.test_conformance import CONFORMANCE, NODE_BIN, node_env, parse_results, wait_listening
from .conftest import mainnet_store

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore:.*(removed|deprecated) as of 2026")


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return mainnet_store(tmp_path_factory.mktemp("brk_server"))


@pytest.fixture(scope="module")
def base_url(out: Path) -> Iterator[str]:
    with serving(create_app(Interface(out))) as url:
        yield url.removesuffix("/mcp")


def test_http_routes(base_url: str) -> None:
    with httpx.Client(base_url=base_url) as c:
        r = c.get("/api/vecs/query", params={"index": "date", "ids": "date,block_count", "to": "2"})
        assert r.status_code == 200 and r.json() == [["2009-01-03", "2009-01-09"], [1, 14]]
        assert r.headers["access-control-allow-origin"] == "*"
        etag = r.headers["etag"]
        assert etag == '"0-589-0"'
        again = c.get("/api/vecs/query", params={"index": "date", "ids": "date"}, headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b""
        r = c.get("/api/vecs/query", params={"i": "h", "v": "supply_btc", "f": "-1"})
        assert r.json() == 29500.0
        r = c.get("/api/vecs/height-to-supply-btc", params={"from": "-2", "format": "csv"})
        assert r.text == "supply_btc\n29450.0\n29500.0\n" and r.headers["content-type"].startswith("text/csv")
        r = c.get("/api/vecs/dateindex-to-block_count", params={"count": 2, "format": "tsv"})
        assert r.text == "block_count\n1\n14\n" and "tab-separated" in r.headers["content-type"]
        r = c.get("/api/vecs/d-to-block-count", params={"to": 1, "format": "md"})
        assert r.text == "| block_count |\n|---|\n| 1 |\n"
        assert c.get("/api/vecs/index-count").json() == 13
        ids = [i for p in range(10) for i in c.get("/api/vecs/ids", params={"page": p}).json()]
        assert c.get("/api/vecs/id-count").json() == len(ids) and ids == sorted(ids)
        assert c.get("/api/vecs/ids", params={"page": 9}).json() == [] and "supply_age_gt_10y" in ids
        assert c.get("/api/vecs/vec-count").json() > len(ids)
        assert c.get("/api/vecs/indexes").json()[0] == "height"
        assert c.get("/api/vecs/accepted-indexes").json()["weekindex"] == ["w", "week", "weekindex"]
        assert "txid" in c.get("/api/vecs/index-to-ids", params={"index": "tx"}).json()
        assert c.get("/api/vecs/id-to-indexes", params={"id": "txid"}).json() == ["txindex"]
        assert c.get("/version").json().startswith("v")
        assert c.get("/health").json() == {"status": "ok", "height": 589, "version": c.get("/version").json()}
        r = c.get("/api/vecs/query", params={"index": "date", "ids": "suply"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        assert "Did you mean: supply" in r.json()["error"]["message"]
        r = c.get("/api/vecs/query", params={"index": "date", "ids": "supply", "from": "x"})
        assert r.status_code == 400 and r.json()["error"]["message"] == "from must be an integer, got 'x'."
        r = c.get("/api/vecs/nonsense")
        assert r.status_code == 400 and "INDEX-to-ID" in r.json()["error"]["message"]
        r = c.options("/api/vecs/query", headers={"Origin": "https://example.org",
                                                  "Access-Control-Request-Method": "GET"})
        assert r.status_code == 204 and r.headers["access-control-allow-origin"] == "*"
        spec = c.get("/openapi.json").json()
        assert spec["openapi"].startswith("3.") and "/api/vecs/{index}-to-{id}" in spec["paths"]
        assert "uPlot" in c.get("/web/uPlot.iife.min.js").text and c.get("/web/x.js").status_code == 404
        assert "<canvas" not in c.get("/").text and "app.js" in c.get("/").text
        _check_web_caching(c)


def _check_web_caching(c: Any) -> None:
    """The page links each file by its content's hash: kept for a year under that link, revalidated (ETag)
    under any other, so a new release's files load at once and unchanged ones cost a 304."""
    import hashlib
    import re
    from importlib import resources

    page = c.get("/")
    assert page.headers["cache-control"] == "no-cache"
    links = dict(re.findall(r'"/web/([\w.]+)\?v=([0-9a-f]+)"', page.text))
    assert {"app.js", "uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE.txt"} <= set(links), page.text
    for name, tag in links.items():
        body = resources.files("cairn_servers.brk").joinpath("web", name).read_bytes()
        assert tag == hashlib.sha256(body).hexdigest()[:16], name
        linked = c.get(f"/web/{name}", params={"v": tag})
        assert linked.content == body and "immutable" in linked.headers["cache-control"]
        assert linked.headers["etag"] == f'"{tag}"'
        other = c.get(f"/web/{name}", params={"v": "0" * 16})  # a page of an older release
        assert other.content == body and other.headers["cache-control"] == "no-cache"
        again = c.get(f"/web/{name}", headers={"If-None-Match": f'W/"{tag}"'})
        assert again.status_code == 304 and again.content == b""


async def _every_tool(server: Any) -> None:
    from mcp import Client

    async with Client(server, cache=None) as client:
        assert client.server_info is not None and client.server_info.name == "brk"
        assert client.instructions is not None and "vecs" in client.instructions and "index" in client.instructions
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        assert tools == sorted(["get_accepted_indexes", "get_index_count", "get_index_to_vecids", "get_indexes",
                                "get_vec_count", "get_vecid_count", "get_vecid_to_indexes", "get_vecids", "get_vecs",
                                "get_version",  # the ten seed tools, then id search and the block explorer
                                "search_vecids", "get_address", "get_address_utxos", "get_block", "get_tx", "get_urpd"])

        async def call(name: str, args: dict[str, Any] | None = None) -> Any:
            res = await client.call_tool(name, args or {})
            assert not res.is_error, res.content
            text = res.content[0].text  # type: ignore[union-attr]
            try:
                return json.loads(text)
            except ValueError:
                return text

        assert await call("get_index_count") == 13
        ids = [i for p in range(10) for i in await call("get_vecids", {"page": p})]
        assert await call("get_vecid_count") == len(ids)
        assert await call("get_vec_count") > len(ids)
        assert await call("get_vecs", {"i": "h", "v": "utxo_count_p2pk65", "f": "-1"}) == 591
        assert (await call("get_indexes"))[:2] == ["height", "dateindex"]
        assert (await call("get_accepted_indexes"))["dateindex"] == ["d", "date", "dateindex"]
        assert await call("get_vecids", {"page": 9}) == []
        assert "txid" in await call("get_index_to_vecids", {"index": "tx", "page": "0"})
        assert await call("get_vecid_to_indexes", {"id": "txid"}) == ["txindex"]
        assert (await call("get_version")).startswith("v")
        assert await call("get_vecs", {"index": "date", "ids": "block_count", "to": 2}) == [1, 14]
        assert await call("get_vecs", {"i": "h", "v": "supply_btc", "f": "-1"}) == 29500.0
        assert await call("get_vecs", {"index": "d", "ids": ["date", "block_count"], "count": 1}) == \
            [["2009-01-03"], [1]]
        assert await call("get_vecs", {"index": "date", "ids": "block_count", "to": 2, "format": "csv"}) == \
            "block_count\n1\n14\n"
        res = await client.call_tool("get_vecs", {"index": "date", "ids": "suply"})
        assert res.is_error and "Did you mean: supply" in res.content[0].text  # type: ignore[union-attr]


def test_sdk_client_over_http(base_url: str) -> None:
    asyncio.run(asyncio.wait_for(_every_tool(f"{base_url}/mcp"), 60))


def test_sdk_client_over_stdio(out: Path) -> None:
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "cairn_servers.brk.cli", "mcp", "--out", str(out)])
    asyncio.run(asyncio.wait_for(_every_tool(params), 60))


@pytest.mark.node
@pytest.mark.timeout(150)
@pytest.mark.skipif(not CONFORMANCE.exists() or not (NODE_BIN / "node").exists(),
                    reason="project-local Node tools missing; run `make test` to install them")
def test_conformance_generic_scenarios(out: Path, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    cmd = [sys.executable, "-m", "cairn_servers.brk.cli", "serve", "--out", str(out), "--bind", f"127.0.0.1:{port}"]
    with log.open("wb") as fh:
        server = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        wait_listening(port, server, log)
        results_dir = tmp_path / "results"
        for scenario in ("server-initialize", "ping", "tools-list", "dns-rebinding-protection"):
            subprocess.run([str(CONFORMANCE), "server", "--url", f"http://127.0.0.1:{port}/mcp", "--scenario",
                            scenario, "-o", str(results_dir)], capture_output=True, text=True, timeout=60,
                           env=node_env(), cwd=tmp_path)
    finally:
        server.terminate()
        server.wait(timeout=10)
    results = parse_results(results_dir)
    assert set(results) == {"server-initialize", "ping", "tools-list", "dns-rebinding-protection"}, log.read_text()
    failed = [s.describe() for s in results.values() if not s.ok]
    assert not failed, "\n".join(failed)


def test_readers_while_the_indexer_appends(tmp_path: Path) -> None:
    """5 HTTP clients for 3 s while blocks are indexed and computed: no errors, the tip moves."""
    blocks, out = tmp_path / "blocks", tmp_path / "out"
    write_sample(blocks, 600, seed=5)
    indexer = Indexer(blocks, out, durable=False)
    indexer.run(max_blocks=100)
    compute(out, durable=False)
    stop = threading.Event()

    def append() -> None:
        while not stop.is_set() and indexer.run(max_blocks=10).indexed_blocks:
            compute(out, durable=False)
            time.sleep(0.02)

    errors: list[str] = []
    tips: list[int] = []
    queries = [{"index": "height", "ids": "supply_btc,tx_count,fee_rate", "from": "-50"},
               {"index": "dateindex", "ids": "block_count,date,hash_rate_median", "from": "-30"},
               {"index": "txindex", "ids": "fee,txid", "from": "-100"},
               {"index": "week", "ids": "tx_count_cumulative,supply", "format": "csv", "from": "-10"}]
    with serving(create_app(Interface(out))) as url:
        base = url.removesuffix("/mcp")

        def client(n: int) -> None:
            with httpx.Client(base_url=base, timeout=10) as c:
                end = time.monotonic() + 3
                i = n
                while time.monotonic() < end:
                    r = c.get("/api/vecs/query", params=queries[i % len(queries)])
                    i += 1
                    if r.status_code != 200:
                        errors.append(f"{r.status_code} {r.text}")
                    tips.append(c.get("/health").json()["height"])

        writer = threading.Thread(target=append)
        writer.start()
        readers = [threading.Thread(target=client, args=(n,)) for n in range(5)]
        for t in readers:
            t.start()
        for t in readers:
            t.join()
        stop.set()
        writer.join()
    assert not errors, errors[:5]
    assert min(tips) >= 99 and max(tips) > min(tips)


@pytest.mark.timeout(120)
def test_brk_run_indexes_serves_and_follows(tmp_path: Path) -> None:
    """`brk run`: index, serve, and pick up blocks appended to the files afterwards."""
    blocks, out = tmp_path / "blocks", tmp_path / "out"
    write_sample(blocks, 150, seed=9, spread_blocks=400)
    port = free_port()
    log = tmp_path / "run.log"
    cmd = [sys.executable, "-m", "cairn_servers.brk.cli", "run", "--blocks-dir", str(blocks), "--out", str(out),
           "--bind", f"127.0.0.1:{port}", "--interval", "0.2"]
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        wait_listening(port, proc, log)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            assert c.get("/health").json()["height"] == 149
            first = c.get("/api/vecs/query", params={"index": "h", "ids": "supply", "from": "-1"})
            write_sample(blocks, 260, seed=9, spread_blocks=400)  # the same chain, 110 blocks longer
            deadline = time.monotonic() + 30
            while c.get("/health").json()["height"] != 259 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert c.get("/health").json()["height"] == 259, log.read_text()
            r = c.get("/api/vecs/query", params={"index": "h", "ids": "supply", "from": "149", "count": "1"},
                      headers={"If-None-Match": first.headers["etag"]})
            assert r.status_code == 200 and r.json() == first.json()  # the tip moved, so no 304
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    # A stop the user asked for (SIGTERM) is a graceful shutdown and a clean exit.
    assert proc.returncode == 0 and "Traceback" not in log.read_text(), log.read_text()
