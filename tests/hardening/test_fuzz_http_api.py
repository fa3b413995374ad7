"""HTTP API fuzzing with schemathesis against the live ctx and brk servers' /openapi.json.

For every operation the servers document, schemathesis generates schema-conforming requests
(positive) and schema-violating ones (negative: wrong types, missing required parameters, bad
bodies) and sends them to the real server process on a free loopback port. Properties:

* no 5xx answer, ever;
* every error (4xx) on the API routes is the documented envelope ``{"error": {"code", "message"}}``
  (``details`` optional) with a JSON content type; on ``/mcp`` it is a JSON-RPC error;
* every 200 JSON answer parses; the server is alive afterwards.

Counts: ``EXAMPLES`` per operation and mode (25 in ``make test``, 250 with CAIRN_STRESS=1).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

from ._servers import STRESS, HttpServer
from .test_fuzz_protocol import check_message, sse_messages

pytestmark = [pytest.mark.timeout(1200 if STRESS else 120),
              pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.filterwarnings("ignore::UserWarning")]

EXAMPLES = 250 if STRESS else 25


def check_response(method: str, path: str, status: int, ctype: str, body: bytes, *, text_errors: bool = False,
                   documented: frozenset[int] = frozenset()) -> None:
    """``text_errors``: the operation documents plain-text errors (brk's Esplora-compatible routes, as Esplora);
    ``documented``: its statuses in /openapi.json (a 5xx there is an answer, e.g. 501 for a broadcast)."""
    where = f"{method} {path} -> {status}"
    assert status < 500 or status in documented, f"{where}: {body[:500]!r}"
    if text_errors and status >= 400:
        assert ctype.startswith("text/plain") and body.strip(), f"{where}: {ctype} {body[:300]!r}"
        return
    if path == "/mcp" or (path == "/" and method == "POST"):  # the root URL speaks MCP as /mcp does
        if ctype.startswith("application/json"):
            check_message(json.loads(body))
        elif ctype.startswith("text/event-stream"):
            for msg in sse_messages(body.decode()):
                check_message(msg)
        return
    if status >= 400:
        assert ctype.startswith("application/json"), f"{where}: error without a JSON body ({ctype}): {body[:300]!r}"
        err = json.loads(body)
        assert isinstance(err, dict) and set(err) == {"error"}, f"{where}: {err}"
        inner = err["error"]
        assert isinstance(inner, dict) and set(inner) <= {"code", "message", "details"}, f"{where}: {err}"
        assert isinstance(inner.get("code"), str) and inner["code"], f"{where}: {err}"
        assert isinstance(inner.get("message"), str) and inner["message"], f"{where}: {err}"
    elif status == 200 and ctype.startswith("application/json"):
        json.loads(body)


@pytest.mark.parametrize("app", ["brk", "ctx"])
def test_openapi_fuzz(app: str, request: pytest.FixtureRequest) -> None:
    import schemathesis
    from schemathesis import GenerationMode
    from schemathesis.core.result import Ok

    server: HttpServer = request.getfixturevalue(f"{app}_http")
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    spec = httpx.get(server.url + "/openapi.json", timeout=30).json()
    text_errors = {(method.upper(), path) for path, ops in spec["paths"].items() for method, o in ops.items()
                   if isinstance(o, dict) and any("(text)" in r.get("description", "") for r in o.get("responses", {}).values())}
    documented = {(method.upper(), path): frozenset(int(c) for c in o.get("responses", {}) if c.isdigit())
                  for path, ops in spec["paths"].items() for method, o in ops.items() if isinstance(o, dict)}
    statuses: dict[int, int] = {}
    operations = 0
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for result in schema.get_all_operations():
            assert isinstance(result, Ok), f"{app}: /openapi.json has an invalid operation: {result.err()}"
            op = result.ok()
            operations += 1
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

                @given(case=op.as_strategy(generation_mode=mode))
                @settings(max_examples=EXAMPLES, deadline=None, derandomize=not STRESS, database=None,
                          suppress_health_check=list(HealthCheck))
                def fuzz(case: Any) -> None:
                    kwargs = case.as_transport_kwargs(base_url=server.url)
                    r = client.request(kwargs["method"], kwargs["url"], params=kwargs.get("params"),
                                       headers=kwargs.get("headers"), content=kwargs.get("data") or kwargs.get("content"),
                                       json=kwargs.get("json"), cookies=kwargs.get("cookies"))
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                    check_response(case.method.upper(), op.path, r.status_code, r.headers.get("content-type", ""),
                                   r.content, text_errors=(case.method.upper(), op.path) in text_errors,
                                   documented=documented.get((case.method.upper(), op.path), frozenset()))

                try:
                    fuzz()
                except Unsatisfiable:  # no parameters to violate: nothing negative to send
                    assert mode is GenerationMode.NEGATIVE
    print(f"{app}: {operations} operations, statuses {statuses}")
    assert operations >= 8 and sum(statuses.values()) >= operations * 2
    assert statuses.get(200, 0) > 0 and statuses.get(400, 0) > 0, statuses
    assert server.alive(), server.stderr_tail()
    assert httpx.get(server.url + "/health").status_code == 200


# -- regressions found by this fuzzer ------------------------------------------------------------------

def test_lua_tool_host_errors_keep_their_status(ctx_http: HttpServer) -> None:
    """An uncaught bad-input error from a host function (``context.search('')``) was a 500 "extension"
    error; a huge integer parameter raised OverflowError converting to Lua (500 "internal")."""
    r = httpx.post(ctx_http.url + "/tools/find_mentions", json={"term": ""})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request", r.text
    assert "query is empty" in r.json()["error"]["message"]
    r = httpx.post(ctx_http.url + "/tools/echo", json={"text": "a", "times": -(10**25)})
    assert r.status_code == 400 and "Lua integer" in r.json()["error"]["message"], r.text
    r = httpx.post(ctx_http.url + "/tools/echo", json={"text": "ab", "times": 2})
    assert r.status_code == 200 and r.json()["result"] == {"text": "abab", "n": 2}, r.text
