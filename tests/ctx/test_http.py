"""The HTTP API of `ctx serve mcp` on a real uvicorn server on a free loopback port.

Built on the shipped example (examples/ctx: a Markdown folder, the `faq` Lua connector and the
`find_mentions` Lua tool), copied to a temporary folder and synced.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from cairn_servers.core.errors import InvalidInput
from cairn_servers.ctx import config
from cairn_servers.ctx.http import create_app

from .conftest import free_port, serving, synced

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "ctx"
SLOW_TOOL = """
tool = {description = "spins", parameters = {{name = "seconds", type = "number", required = true}}}
function tool.execute(params, context) while true do end end
"""


def example_kb(base: Path) -> Path:
    """The example folder copied to ``base`` with a slow Lua tool added, synced; returns its config."""
    root = base / "example"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("data"))
    (root / "tools" / "spin.lua").write_text(SLOW_TOOL)
    cfg = root / "ctx.toml"
    cfg.write_text(cfg.read_text().replace('provider = "minilm"', 'provider = "disabled"', 1)  # keyword only
                   + '\n[tools.script.spin]\npath = "tools/spin.lua"\ntimeout = 0.3\n')
    return synced(cfg)


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory, ctx_module_backend: str) -> Path:
    """The example knowledge base, on each storage backend in turn (``ctx_module_backend``)."""
    return example_kb(tmp_path_factory.mktemp("kb"))


@pytest.fixture(scope="module")
def url(kb: Path) -> Iterator[str]:
    with serving(create_app(config.load(kb))) as base:
        yield base


def post(url: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=10, **kw)


def error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"], body
    assert "Traceback" not in r.text
    return dict(body["error"])


def test_health(url: str) -> None:
    r = httpx.get(f"{url}/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_search_returns_ranked_documents_with_every_field(url: str) -> None:
    r = post(url, "/tools/search", {"query": "rotate signing keys", "limit": 3})
    assert r.status_code == 200
    results = r.json()["results"]
    assert results[0]["source_id"] == "auth.md" and results[0]["score"] == 1.0
    assert set(results[0]) == {"id", "score", "title", "source", "source_id", "updated_at", "snippet", "source_url",
                               "location"}
    assert len(results) <= 3


def test_search_filters_by_source_and_dates(url: str) -> None:
    both = post(url, "/tools/search", {"query": "laptop deploy"}).json()["results"]
    assert {h["source"] for h in both} == {"filesystem:handbook", "script:faq"}
    only = post(url, "/tools/search", {"query": "laptop deploy", "filters": {"source": "faq"}}).json()["results"]
    assert {h["source"] for h in only} == {"script:faq"}
    same = post(url, "/tools/search", {"query": "laptop deploy", "source": "script:faq"}).json()["results"]
    assert same == only
    assert post(url, "/tools/search", {"query": "deploy", "filters": {"until": "2000-01-01"}}).json() == {"results": []}
    assert post(url, "/tools/search", {"query": "deploy", "filters": {"since": "2000-01-01"}}).json()["results"]


@pytest.mark.parametrize("body, parameter, fragment", [
    ({}, None, "query: is required"),
    ({"query": "x", "mode": "fuzzy"}, "mode", "mode:"),
    ({"query": "x", "limit": 0}, "limit", "limit: 0 is less than the minimum of 1"),
    ({"query": "x", "limit": "5"}, "limit", "expected integer, got string"),
    ({"query": "x", "colour": "red"}, None, "colour"),
    ({"query": "x", "filters": {"since": []}}, "filters.since", "filters.since"),
])
def test_search_validation_names_the_parameter(url: str, body: dict[str, Any], parameter: str | None,
                                               fragment: str) -> None:
    err = error(post(url, "/tools/search", body), 400, "bad_request")
    assert fragment in err["message"]
    if parameter:
        assert err["details"]["parameter"] == parameter


def test_search_errors_from_the_service(url: str) -> None:
    err = error(post(url, "/tools/search", {"query": "x", "mode": "semantic"}), 400, "embeddings_disabled")
    assert "embedding" in err["message"].lower()
    err = error(post(url, "/tools/search", {"query": "x", "source": "nowhere"}), 404, "not_found")
    assert "Unknown source 'nowhere'" in err["message"]
    error(post(url, "/tools/search", {"query": "x", "filters": {"since": "yesterday"}}), 400, "bad_request")


def test_get_returns_the_document_with_its_chunks(url: str) -> None:
    hit = post(url, "/tools/search", {"query": "VPN WireGuard"}).json()["results"][0]
    doc = post(url, "/tools/get", {"id": hit["id"]}).json()
    assert doc["id"] == hit["id"] and doc["source"] == "script:faq" and "WireGuard" in doc["body"]
    assert doc["metadata"] == {"tags": ["network"]}
    assert doc["chunks"] and doc["chunks"][0]["ordinal"] == 0
    err = error(post(url, "/tools/get", {"id": "0" * 32}), 404, "not_found")
    assert "No document with id" in err["message"]
    assert error(post(url, "/tools/get", {}), 400, "bad_request")["details"]["parameter"] == "id"


def test_sources(url: str) -> None:
    sources = httpx.get(f"{url}/tools/sources").json()["sources"]
    by = {s["source"]: s for s in sources}
    assert by["filesystem:handbook"]["doc_count"] == 3 and by["script:faq"]["doc_count"] == 2
    assert all(s["healthy"] and s["configured"] for s in sources)


def test_tools_list_has_builtins_and_lua_tools_with_schemas(url: str) -> None:
    tools = {t["name"]: t for t in httpx.get(f"{url}/tools/list").json()["tools"]}
    assert list(tools)[:3] == ["search", "get", "sources"]
    assert tools["search"]["builtin"] is True and tools["search"]["parameters"]["required"] == ["query"]
    lua = tools["find_mentions"]
    assert lua["builtin"] is False and lua["description"].startswith("List the documents")
    assert lua["parameters"] == {
        "type": "object", "additionalProperties": False, "required": ["term"],
        "properties": {
            "term": {"type": "string", "description": "word or phrase to look for"},
            "limit": {"type": "integer", "default": 5, "description": "maximum number of documents"},
            "mode": {"type": "string", "default": "keyword", "enum": ["keyword", "semantic", "hybrid"]},
        }}


def test_lua_tool_call(url: str) -> None:
    r = post(url, "/tools/find_mentions", {"term": "deploy", "limit": 2})
    assert r.status_code == 200, r.text
    result = r.json()["result"]
    assert result["heading"] == "Mentions: deploy" and result["count"] == 2
    assert [d["title"] for g in result["groups"] for d in g["documents"]] == ["Deploying", "On-call"]
    err = error(post(url, "/tools/find_mentions", {"limit": 2}), 400, "bad_request")
    assert "term: is required" in err["message"]
    assert err["details"] == {"tool": "find_mentions", "parameter": "term"}
    err = error(post(url, "/tools/find_mentions", {"term": "x", "mode": "psychic"}), 400, "bad_request")
    assert err["details"]["parameter"] == "mode"


def test_lua_timeout_is_408_and_the_server_keeps_serving(url: str) -> None:
    started = time.monotonic()
    err = error(post(url, "/tools/spin", {"seconds": 5}), 408, "timeout")
    assert time.monotonic() - started < 4  # a 0.3 s budget, with slack for a busy machine
    assert "exceeded its time limit of 0.3 s" in err["message"]
    assert httpx.get(f"{url}/health").status_code == 200


def test_generic_route_serves_builtins_too(url: str) -> None:
    assert post(url, "/tools/sources", {}).json() == httpx.get(f"{url}/tools/sources").json()
    err = error(post(url, "/tools/nope", {}), 404, "not_found")
    assert "No tool named 'nope'" in err["message"]


def test_bodies_that_are_not_json_objects(url: str) -> None:
    headers = {"content-type": "application/json"}
    err = error(httpx.post(f"{url}/tools/search", content=b'{"query": ', headers=headers), 400, "bad_request")
    assert err["message"].startswith("The request body is not valid JSON")
    error(httpx.post(f"{url}/tools/search", content=b"\xff\xfe", headers=headers), 400, "bad_request")
    err = error(httpx.post(f"{url}/tools/search", content=b'["query"]', headers=headers), 400, "bad_request")
    assert "must be a JSON object" in err["message"]
    err = error(httpx.post(f"{url}/tools/search", content=b'{"query": "x"}', headers={"content-type": "text/plain"}),
                415, "unsupported_media_type")
    assert "Content-Type: application/json" in err["message"]
    err = error(httpx.post(f"{url}/tools/search", content=b"query=x"), 415, "unsupported_media_type")


def test_bodies_over_the_limit_are_413(url: str) -> None:
    big = b'{"query": "' + b"x" * (2 << 20) + b'"}'
    error(httpx.post(f"{url}/tools/search", content=big, headers={"content-type": "application/json"}), 413, "too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap applies while reading
        yield b'{"query": "'
        for _ in range(40):
            yield b"y" * 65536
        yield b'"}'

    error(httpx.post(f"{url}/tools/search", content=chunks(), headers={"content-type": "application/json"}),
          413, "too_large")


def test_unknown_routes_and_methods_use_the_envelope(url: str) -> None:
    assert "No route GET /nope" in error(httpx.get(f"{url}/nope"), 404, "not_found")["message"]
    error(httpx.get(f"{url}/tools/search"), 405, "method_not_allowed")
    error(httpx.delete(f"{url}/tools/get"), 405, "method_not_allowed")


def test_cors_default_allows_loopback_pages_only(url: str) -> None:
    """Issue 20 item 9: with no cors_origins set, only pages served from this machine may read the
    API through the browser; any other website gets no CORS grant (preflight refused)."""
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    for origin in ("http://localhost", "http://localhost:3000", "http://127.0.0.1:8080", "http://[::1]:5173"):
        r = httpx.options(f"{url}/tools/search", headers={"Origin": origin, **preflight})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin, (origin, r.headers)
        r = post(url, "/tools/search", {"query": "deploy"}, headers={"Origin": origin})
        assert r.headers["access-control-allow-origin"] == origin
    for origin in ("https://chat.example", "http://localhost.evil.example", "http://127.0.0.1.evil.example:80",
                   "https://localhost:3000", "null"):
        r = httpx.options(f"{url}/tools/search", headers={"Origin": origin, **preflight})
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers, (origin, r.headers)
        r = post(url, "/tools/search", {"query": "deploy"}, headers={"Origin": origin})
        assert "access-control-allow-origin" not in r.headers, origin
        r = httpx.post(f"{url}/tools/find_mentions", json={"term": "deploy"}, headers={"Origin": origin})
        assert "access-control-allow-origin" not in r.headers, origin
        # Without a token, a page of another site runs nothing (the rule of /mcp: this machine's pages,
        # any scheme or port, and the listed origins); CORS alone would only hide the answer.
        if origin == "https://localhost:3000":
            assert r.status_code == 200, r.text
        else:
            assert error(r, 403, "forbidden")["message"].startswith(f"Origin {origin!r} is not allowed: a web page "
                                                                    "of another site cannot call this server")


def test_cors_star_is_an_explicit_choice(kb: Path) -> None:
    conf = config.load(kb)
    with serving(create_app(conf, cors_origins=["*"])) as base:
        r = httpx.options(f"{base}/tools/search", headers={"Origin": "https://chat.example",
                                                           "Access-Control-Request-Method": "POST",
                                                           "Access-Control-Request-Headers": "content-type"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"


def test_cors_origins_config_is_validated(tmp_path: Path) -> None:
    cfg = tmp_path / "ctx.toml"
    cfg.write_text('[server]\ncors_origins = ["http://localhost:*", "https://app.example", "*"]\n')
    assert config.load(cfg).server.cors_origins == ("http://localhost:*", "https://app.example", "*")
    assert config.load(_toml(tmp_path, "")).server.cors_origins == config.LOOPBACK_ORIGINS
    for bad in ('"https://app.example/"', '"app.example"', '"https://a.example/path"', '"https://a.example:port"', '""'):
        with pytest.raises(InvalidInput, match="cors_origins"):
            config.load(_toml(tmp_path, f"[server]\ncors_origins = [{bad}]\n"))


def _toml(base: Path, text: str) -> Path:
    path = base / "other.toml"
    path.write_text(text)
    return path


def test_cors_can_be_restricted_or_turned_off(kb: Path) -> None:
    conf = config.load(kb)
    with serving(create_app(conf, cors_origins=["https://app.example"])) as base:
        ok = httpx.get(f"{base}/health", headers={"Origin": "https://app.example"})
        assert ok.headers["access-control-allow-origin"] == "https://app.example"
        other = httpx.get(f"{base}/health", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
    with serving(create_app(conf, cors_origins=[])) as base:
        r = httpx.get(f"{base}/health", headers={"Origin": "https://app.example"})
        assert "access-control-allow-origin" not in r.headers


def test_bearer_token(kb: Path) -> None:
    with serving(create_app(config.load(kb), auth_token="s3cret-token")) as base:
        err = error(httpx.get(f"{base}/tools/list"), 401, "unauthorized")
        assert "Authorization: Bearer" in err["message"]
        assert httpx.get(f"{base}/tools/list").headers["www-authenticate"] == "Bearer"
        error(httpx.get(f"{base}/tools/list", headers={"Authorization": "Bearer wrong"}), 401, "unauthorized")
        error(httpx.get(f"{base}/tools/list", headers={"Authorization": "Basic s3cret-token"}), 401, "unauthorized")
        error(httpx.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}), 401, "unauthorized")
        good = {"Authorization": "Bearer s3cret-token"}
        assert httpx.get(f"{base}/tools/list", headers=good).status_code == 200
        assert httpx.get(f"{base}/tools/list", headers={"Authorization": "bearer s3cret-token"}).status_code == 200
        assert httpx.get(f"{base}/health").status_code == 200  # liveness stays open
        pre = httpx.options(f"{base}/tools/search", headers={"Origin": "http://localhost:3000",
                                                             "Access-Control-Request-Method": "POST"})
        assert pre.status_code == 200  # preflights carry no token


def test_token_from_the_environment_wins(kb: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTX_AUTH_TOKEN", "from-env")
    assert config.load(kb).server.auth_token == "from-env"
    assert "from-env" not in repr(config.load(kb))


def test_internal_errors_hide_the_traceback(kb: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from cairn_servers.core.ops import Op

    app = create_app(config.load(kb))

    def broken(svc: Any, params: dict[str, Any]) -> Any:
        raise RuntimeError("secret internals at /home/someone")

    app.state.toolbox.ops["broken"] = Op(broken, name="broken", mcp="broken", description="fails",
                                         schema={"type": "object", "properties": {}, "additionalProperties": False})
    with serving(app) as base:
        err = error(post(base, "/tools/broken", {}), 500, "internal")
        assert err["message"] == "Internal error (RuntimeError). The server log has the details."
        assert httpx.get(f"{base}/health").status_code == 200
    assert "RuntimeError: secret internals" in capfd.readouterr().err


def test_openapi_describes_every_route(url: str, kb: Path) -> None:
    doc = httpx.get(f"{url}/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    app = create_app(config.load(kb))
    routes = {r.path for r in app.routes}  # type: ignore[attr-defined]
    assert routes <= set(doc["paths"]), routes - set(doc["paths"])
    assert doc["paths"]["/tools/search"]["post"]["requestBody"]["content"]["application/json"]["schema"][
        "required"] == ["query"]
    assert "/tools/find_mentions" in doc["paths"] and "408" in doc["paths"]["/tools/find_mentions"]["post"]["responses"]
    assert doc["components"]["schemas"]["Error"]["properties"]["error"]["required"] == ["code", "message"]


def test_concurrent_requests_each_get_their_answer(url: str) -> None:
    queries = ["deploy", "VPN", "laptop", "rotate keys", "incident", "tokens"] * 10

    def one(q: str) -> list[str]:
        r = post(url, "/tools/search", {"query": q, "limit": 1})
        assert r.status_code == 200, r.text
        return [h["title"] for h in r.json()["results"]]

    with ThreadPoolExecutor(20) as pool:
        got = list(pool.map(one, queries))
    expected = {q: one(q) for q in set(queries)}
    assert got == [expected[q] for q in queries]
    lua = list(ThreadPoolExecutor(8).map(lambda i: post(url, "/tools/find_mentions", {"term": "deploy"}).status_code,
                                         range(16)))
    assert lua == [200] * 16


# ---- the command ---------------------------------------------------------------------------------


def _ctx(*args: str) -> list[str]:
    return [sys.executable, "-m", "cairn_servers.ctx.cli", *args]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO / "src"))


def test_ctx_serve_mcp_prints_the_address_serves_and_stops_on_sigterm(kb: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(_ctx("serve", "mcp", "--config", str(kb), "--bind", f"127.0.0.1:{port}"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    try:
        line = proc.stderr.readline().decode()  # type: ignore[union-attr]
        assert line.strip() == f"ctx listening on http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while True:
            try:
                r = httpx.post(f"http://127.0.0.1:{port}/tools/search", json={"query": "deploy"})
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert r.json()["results"][0]["title"] == "Deploying"
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status reports the signal
        assert proc.wait(10) in (0, -signal.SIGTERM)
        assert proc.stdout.read() == b""  # type: ignore[union-attr]
        assert b"Traceback" not in proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_remote_binds_need_the_flag_and_a_token(kb: Path) -> None:
    r = subprocess.run(_ctx("serve", "mcp", "--config", str(kb), "--bind", "0.0.0.0:0"), capture_output=True,
                       text=True, env=_env(), timeout=30)
    assert r.returncode == 2 and "not a loopback address" in r.stderr and "--allow-remote" in r.stderr
    env = {k: v for k, v in _env().items() if k != "CTX_AUTH_TOKEN"}
    r = subprocess.run(_ctx("serve", "mcp", "--config", str(kb), "--bind", "0.0.0.0:0", "--allow-remote"),
                       capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 2 and "without an auth token" in r.stderr


def test_semantic_and_hybrid_run_in_the_pool_and_reuse_the_vector_matrix(tmp_path: Path) -> None:
    from cairn_servers.ctx import vectorfile
    from cairn_servers.ctx.service import Service

    root = tmp_path / "example"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("data"))
    cfg = root / "ctx.toml"
    cfg.write_text(cfg.read_text().replace('provider = "disabled"', 'provider = "local"'))
    svc = Service.from_config(cfg)
    assert all(r.ok for r in svc.sync("all").sources)
    conf = config.load(cfg)
    db = str(conf.db.path.resolve())

    def matrix() -> object:
        (m,) = [v for k, v in vectorfile._files.items() if k[0] == db]
        return m

    with serving(create_app(conf)) as base:
        sem = post(base, "/tools/search", {"query": "connect to the VPN", "mode": "semantic", "limit": 1}).json()
        assert sem["results"][0]["source_id"] == "vpn"
        first = matrix()
        hyb = post(base, "/tools/search", {"query": "wireguard profile", "mode": "hybrid", "limit": 3}).json()
        assert hyb["results"][0]["source_id"] == "vpn"
        assert matrix() is first  # nothing changed: no reload
        (root / "docs" / "printing.md").write_text("# Printing\n\nThe office printer needs a badge tap.\n")
        assert all(r.ok for r in svc.sync("all").sources)  # another process's sync, in effect
        after = post(base, "/tools/search", {"query": "printer badge", "mode": "semantic", "limit": 1}).json()
        assert after["results"][0]["source_id"] == "printing.md"
        assert matrix() is not first  # the generation moved: the new rows applied once
    svc.close()


def test_docs_cover_every_route_error_code_and_server_key(kb: Path) -> None:
    from dataclasses import fields

    from cairn_servers.ctx.config import ServerConfig

    text = (REPO / "docs" / "ctx.md").read_text()
    app = create_app(config.load(kb))
    for route in app.routes:
        assert f"{route.path}`" in text, route.path  # type: ignore[attr-defined]
    for code in ("bad_request", "embeddings_disabled", "unauthorized", "not_found", "method_not_allowed", "timeout",
                 "too_large", "unsupported_media_type", "extension", "internal"):
        assert f"`{code}`" in text, code
    for f in fields(ServerConfig):
        assert f"`{f.name}`" in text, f.name
    for api in ("context.search(", "context.get(", "context.sources()", "context.config", "json.encode(",
                "json.decode(", "log.debug/info/warn/error", "http.get(", "http.post(", "env.get("):
        assert api in text, api


def test_health_does_not_wait_for_a_search(url: str, kb: Path) -> None:
    """Every tool runs off the event loop, on both backends (a keyword search on PostgreSQL is a round trip
    to the database): /health, asked while searches of 256 distinct words run back to back, answers in a
    fraction of a search's time."""
    import threading
    import time

    stop = threading.Event()
    searches: list[float] = []

    def search_loop() -> None:
        n = 0
        with httpx.Client(timeout=60) as client:
            while not stop.is_set():
                n += 1  # new words each time: no cached plan or ranking
                query = " ".join(f"deploy{n}w{i}" for i in range(255)) + " deploy"
                t0 = time.monotonic()
                r = client.post(f"{url}/tools/search", json={"query": query})
                searches.append(time.monotonic() - t0)
                assert r.status_code == 200, r.text

    worker = threading.Thread(target=search_loop)
    worker.start()
    health: list[float] = []
    try:
        time.sleep(0.3)
        with httpx.Client(timeout=30) as client:
            for _ in range(15):
                t0 = time.monotonic()
                assert client.get(f"{url}/health").status_code == 200
                health.append(time.monotonic() - t0)
                time.sleep(0.03)
    finally:
        stop.set()
        worker.join(60)
    health.sort()
    searches.sort()
    print(f"search median {searches[len(searches) // 2] * 1000:.1f} ms; /health median {health[7] * 1000:.1f} ms")
    assert searches and health[7] < max(0.02, searches[len(searches) // 2] / 3), (health, searches)
