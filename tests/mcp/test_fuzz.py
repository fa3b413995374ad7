"""Bad input: malformed and mistyped messages at both transports; every reply is well-formed JSON-RPC.

Hypothesis draws truncated JSON, wrong types for every field, huge ids, unknown methods and calls before
initialize. Bounded: ~250 messages per target by default, ten times more with CAIRN_STRESS=1.
"""

from __future__ import annotations

import copy
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn_servers.mcp import jsonrpc as rpc
from cairn_servers.mcp.http import mcp_app

from ._demo_server import build
from ._http import serving, sse_messages

DEMO = Path(__file__).with_name("_demo_server.py")
STRESS = os.environ.get("CAIRN_STRESS", "") not in ("", "0")
EXAMPLES = 400 if STRESS else 40
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not STRESS, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

METHODS = ["initialize", "ping", "tools/list", "tools/call", "resources/list", "resources/templates/list",
           "resources/read", "resources/subscribe", "resources/unsubscribe", "prompts/list", "prompts/get",
           "completion/complete", "logging/setLevel", "notifications/initialized", "notifications/cancelled",
           "notifications/progress", "server/discover", "nope", ""]
TOOLS = ["echo", "add", "fail", "crash", "media", "later", "shout", "noisy", "missing"]  # none that block
VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "1.0"]

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
                      max_leaves=8)
good_ids = st.integers(-1000, 1000) | st.integers(min_value=10**18, max_value=10**300) | st.text(max_size=10)
bad_ids = st.none() | st.booleans() | st.floats(allow_nan=False, allow_infinity=False) | st.lists(st.integers(), max_size=2)

GOOD_PARAMS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "initialize": st.fixed_dictionaries({"protocolVersion": st.sampled_from(VERSIONS), "capabilities": st.just({}),
                                         "clientInfo": st.just({"name": "f", "version": "0"})}),
    "tools/call": st.fixed_dictionaries({"name": st.sampled_from(TOOLS), "arguments": st.fixed_dictionaries({}, optional={
        "text": st.text(max_size=20), "a": st.integers(), "b": st.integers(-10, 60),
        "levels": st.lists(st.sampled_from(["debug", "info", "error", "loud"]), max_size=3)})},
        optional={"_meta": st.fixed_dictionaries({"progressToken": good_ids})}),
    "resources/read": st.fixed_dictionaries({"uri": st.sampled_from(["demo://note", "demo://logo", "demo://colors/red",
                                                                     "demo://colors/x", "x://y"])}),
    "prompts/get": st.fixed_dictionaries({"name": st.sampled_from(["greet", "pair", "nope"]),
                                          "arguments": st.dictionaries(st.sampled_from(["who", "style"]), st.text(max_size=5))}),
    "completion/complete": st.fixed_dictionaries({
        "ref": st.sampled_from([{"type": "ref/prompt", "name": "greet"}, {"type": "ref/resource", "uri": "demo://colors/{name}"}]),
        "argument": st.fixed_dictionaries({"name": st.sampled_from(["style", "name", "x"]), "value": st.text(max_size=3)})}),
    "logging/setLevel": st.fixed_dictionaries({"level": st.sampled_from(["debug", "error", "emergency"])}),
    "notifications/cancelled": st.fixed_dictionaries({"requestId": good_ids}),
}
for _m in ("tools/list", "resources/list", "resources/templates/list", "prompts/list"):
    GOOD_PARAMS[_m] = st.fixed_dictionaries({}, optional={"cursor": st.sampled_from(["dG9vbHM6Mg==", "bad", ""])})
for _m in ("resources/subscribe", "resources/unsubscribe"):
    GOOD_PARAMS[_m] = GOOD_PARAMS["resources/read"]


@st.composite
def mutated(draw: st.DrawFn, msg: dict[str, Any]) -> dict[str, Any]:
    """Replace or delete 0-3 fields anywhere in a valid message: wrong types for every field, in turn."""
    msg = copy.deepcopy(msg)  # drawn values may be shared (sampled_from); never mutate them in place
    for _ in range(draw(st.integers(0, 3))):
        holders = [msg] + [v for v in (msg.get("params"),) if isinstance(v, dict)]
        holders += [v for h in holders[1:] for v in h.values() if isinstance(v, dict)]
        holder = holders[draw(st.integers(0, len(holders) - 1))]
        if not holder:
            continue
        key = draw(st.sampled_from(sorted(holder)))
        if draw(st.booleans()):
            del holder[key]
        else:
            holder[key] = draw(values | bad_ids if key == "id" else values)
    return msg


@st.composite
def raw_messages(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from(METHODS))
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": draw(good_ids), "method": method}
    params = GOOD_PARAMS.get(method)
    if params is not None:
        msg["params"] = draw(params)
    if method.startswith("notifications/") and draw(st.booleans()):
        del msg["id"]
    msg = draw(mutated(msg))
    how = draw(st.sampled_from(["whole"] * 7 + ["batch", "truncated", "garbage", "value"]))
    if how == "batch":
        return json.dumps([msg, draw(mutated({"jsonrpc": "2.0", "id": 1, "method": "ping"}))]).encode()
    if how == "value":
        return json.dumps(draw(values)).encode()
    if how == "garbage":
        return draw(st.binary(min_size=1, max_size=40)).replace(b"\n", b" ").replace(b"\r", b" ").strip() or b"x"
    text = json.dumps(msg).encode()
    if how == "truncated":
        return text[: draw(st.integers(1, len(text) - 1))]
    return text


def check_well_formed(msg: Any) -> None:
    """A JSON-RPC response (or a server notification/request): the shape a client can always parse."""
    if isinstance(msg, list):
        assert msg, "empty batch reply"
        for item in msg:
            check_well_formed(item)
        return
    assert isinstance(msg, dict) and msg.get("jsonrpc") == "2.0", msg
    if "method" in msg:
        assert isinstance(msg["method"], str)
        return
    assert "id" in msg and (msg["id"] is None or rpc.is_valid_id(msg["id"])), msg
    assert ("result" in msg) != ("error" in msg), msg
    if "error" in msg:
        err = msg["error"]
        assert isinstance(err, dict) and isinstance(err.get("code"), int) and not isinstance(err["code"], bool), msg
        assert isinstance(err.get("message"), str) and err["message"], msg
        assert err["code"] != rpc.INTERNAL_ERROR, f"bad input reached a bug: {msg}"
    else:
        assert isinstance(msg["result"], dict), msg


def expected_id(raw: bytes) -> tuple[bool, Any]:
    """(is a single valid request, its id) for a raw message."""
    try:
        msg = json.loads(raw)
    except ValueError:
        return False, None
    return (rpc.kind(msg) == "request", msg.get("id") if isinstance(msg, dict) else None)


# -- stdio ---------------------------------------------------------------------------------------

class StdioTarget:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(DEMO)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.fence = 0
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def write(self, raw: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def exchange(self, raw: bytes) -> list[Any]:
        """Send one message, then a ping fence; return every message received until both are answered."""
        self.fence += 1
        fence = f"fence-{self.fence}"
        is_request, want = expected_id(raw)
        self.write(raw)
        self.write(json.dumps({"jsonrpc": "2.0", "id": fence, "method": "ping"}).encode())
        got: list[Any] = []
        seen_fence = seen_reply = False
        while not (seen_fence and (seen_reply or not is_request)):
            line = self.lines.get(timeout=20)
            assert line, "the server closed stdout"
            msg = json.loads(line)
            check_well_formed(msg)
            if isinstance(msg, dict) and "method" in msg and "id" in msg:  # a server-to-client request
                self.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -1, "message": "no"}}).encode())
                continue
            if isinstance(msg, dict) and msg.get("id") == fence:
                assert msg.get("result") == {}, msg
                seen_fence = True
                continue
            got.append(msg)
            if is_request and isinstance(msg, dict) and msg.get("id") == want and type(msg.get("id")) is type(want):
                seen_reply = True
        return got

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(20)


INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "f", "version": "0"}}}


def tally(replies: list[Any], codes: dict[Any, int]) -> None:
    """Count the replies by outcome: an error code, ``isError`` or ``ok``."""
    for msg in replies:
        for item in msg if isinstance(msg, list) else [msg]:
            key = item["error"]["code"] if "error" in item else ("isError" if item.get("result", {}).get("isError") else "ok")
            codes[key] = codes.get(key, 0) + 1


@pytest.fixture(scope="module")
def stdio_ready() -> Iterator[StdioTarget]:
    target = StdioTarget()
    assert target.exchange(json.dumps(INIT).encode())[0]["result"]["protocolVersion"] == "2025-11-25"
    yield target
    assert target.close() == 0


@given(batch=st.lists(raw_messages(), min_size=1, max_size=10))
@FUZZ
def test_stdio_survives_bad_input(stdio_ready: StdioTarget, batch: list[bytes]) -> None:
    for raw in batch:
        replies = stdio_ready.exchange(raw)
        for msg in replies:
            check_well_formed(msg)


@given(raw=raw_messages())
@settings(FUZZ, max_examples=max(EXAMPLES // 4, 10))
def test_stdio_uninitialized_session_answers_everything(raw: bytes) -> None:
    target = StdioTarget()  # a fresh process per example: every call happens before initialize
    try:
        is_request, _ = expected_id(raw)
        replies = target.exchange(raw)
        assert len(replies) <= 1
        if is_request:
            assert len(replies) == 1
    finally:
        assert target.close() == 0


# -- HTTP ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["stateless", "stateful"])
def http_target(request: pytest.FixtureRequest) -> Iterator[tuple[str, httpx.Client, dict[str, str]]]:
    with serving(mcp_app(build(), stateless=request.param == "stateless")) as url, httpx.Client(timeout=20) as client:
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        if request.param == "stateful":
            headers["mcp-session-id"] = client.post(url, json=INIT, headers=headers).headers["mcp-session-id"]
        yield url, client, headers
        pong = client.post(url, json={"jsonrpc": "2.0", "id": "last", "method": "ping"}, headers=headers)
        assert pong.status_code == 200 and pong.json() == {"jsonrpc": "2.0", "id": "last", "result": {}} or \
            sse_messages(pong.text)[-1]["result"] == {}


@given(batch=st.lists(st.tuples(raw_messages(), st.sampled_from(
    ["application/json, text/event-stream", "application/json", "text/event-stream"]),
    st.sampled_from(["keep", "keep", "keep", "drop", "bogus"])), min_size=1, max_size=10))
@FUZZ
def test_http_survives_bad_input(http_target: tuple[str, httpx.Client, dict[str, str]],
                                 batch: list[tuple[bytes, str, str]]) -> None:
    for raw, accept, session in batch:
        post_one(http_target, raw, accept, session)


def post_one(http_target: tuple[str, httpx.Client, dict[str, str]], raw: bytes, accept: str, session: str) -> None:
    url, client, base = http_target
    headers = {**base, "accept": accept}
    if "mcp-session-id" in headers and session != "keep":
        headers.pop("mcp-session-id")
        if session == "bogus":
            headers["mcp-session-id"] = "bogus"
    r = client.post(url, content=raw, headers=headers)
    assert r.status_code in (200, 202, 400, 404), (r.status_code, r.text)
    is_request, want = expected_id(raw)
    if r.status_code == 202:
        assert r.content == b"" and not is_request, (raw, headers)
        return
    if r.headers["content-type"].startswith("text/event-stream"):
        replies = sse_messages(r.text)
        for msg in replies:
            check_well_formed(msg)
        assert replies and replies[-1].get("id") == want and "method" not in replies[-1]
    else:
        reply = r.json()
        check_well_formed(reply)
        if is_request and r.status_code == 200:
            assert reply["id"] == want


def test_fuzz_reaches_every_layer() -> None:
    """The drawn messages reach past framing into dispatch and handlers: the same strategy and example
    budget as the tests above, run here on its own server so this holds alone and in any order."""
    codes: dict[Any, int] = {}
    target = StdioTarget()
    try:
        assert target.exchange(json.dumps(INIT).encode())[0]["result"]["protocolVersion"] == "2025-11-25"

        @given(batch=st.lists(raw_messages(), min_size=1, max_size=10))
        @FUZZ
        def run(batch: list[bytes]) -> None:
            for raw in batch:
                tally(target.exchange(raw), codes)

        run()
    finally:
        assert target.close() == 0
    print(codes)
    assert {rpc.PARSE_ERROR, rpc.INVALID_REQUEST, rpc.METHOD_NOT_FOUND, rpc.INVALID_PARAMS, "ok"} <= set(codes), codes
