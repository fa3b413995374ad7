"""Lua connectors: `connector.scan(config)` items synced like any source (incremental, deletions, errors),
HTTP only to allowed hosts, environment variables only when allow-listed."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from cairn_servers.ctx.service import Service

from .conftest import config_file
from .test_http import EXAMPLE

pytestmark = pytest.mark.usefixtures("ctx_backend")  # every test on SQLite and on PostgreSQL

FAQ = EXAMPLE / "connectors" / "faq.lua"


def svc_for(tmp_path: Path, body: str) -> Service:
    return Service.from_config(config_file(tmp_path, f'[db]\npath = "kb.sqlite"\n{body}'))


def entries_toml(entries: list[dict[str, str]]) -> str:
    rows = ", ".join("{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in e.items()) + " }" for e in entries)
    return f"entries = [{rows}]\n"


def faq(tmp_path: Path, entries: list[dict[str, str]], extra: str = "") -> Service:
    return svc_for(tmp_path, f'[connectors.script.faq]\npath = "{FAQ}"\n{entries_toml(entries)}{extra}')


def test_items_are_indexed_searchable_and_synced_incrementally(tmp_path: Path) -> None:
    first = [{"id": "vpn", "question": "How do I reach the VPN?", "answer": "Use WireGuard.", "updated": "2024-05-01"},
             {"id": "desk", "question": "Where do I sit?", "answer": "Any free desk on floor two."}]
    svc = faq(tmp_path, first)
    report = svc.sync("faq").sources[0]
    assert report.ok and (report.added, report.updated, report.deleted) == (2, 0, 0)
    hit = svc.search("WireGuard")[0]
    assert (hit.source, hit.source_id, hit.title) == ("script:faq", "vpn", "How do I reach the VPN?")
    assert hit.updated_at == "2024-05-01T00:00:00Z"
    assert svc.get(hit.id).body == "# How do I reach the VPN?\n\nUse WireGuard.\n"
    svc.close()

    svc = faq(tmp_path, first)
    again = svc.sync("faq").sources[0]
    assert (again.added, again.updated, again.unchanged) == (0, 0, 2)
    svc.close()

    changed = [{"id": "vpn", "question": "How do I reach the VPN?", "answer": "Use Tailscale now."}]
    svc = faq(tmp_path, changed)
    third = svc.sync("faq").sources[0]
    assert (third.added, third.updated, third.deleted) == (0, 1, 1)
    assert [h.source_id for h in svc.search("Tailscale")] == ["vpn"]
    assert svc.search("WireGuard") == [] and svc.search("desk") == []
    svc.close()


@pytest.fixture
def json_server() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    payload = json.dumps([{"id": "remote", "question": "Is this remote?", "answer": "Fetched over HTTP."}]).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            seen.append(self.headers.get("accept", ""))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/faq.json", seen
    finally:
        server.shutdown()
        server.server_close()


def test_http_reaches_allowed_hosts_only(tmp_path: Path, json_server: tuple[str, list[str]]) -> None:
    url, seen = json_server
    svc = faq(tmp_path, [], f'url = "{url}"\nallow_hosts = ["127.0.0.1"]\n')
    report = svc.sync("faq").sources[0]
    assert report.ok and report.added == 1, report.error
    assert seen == ["application/json"]
    assert svc.search("fetched")[0].source_url == url
    svc.close()

    (tmp_path / "b").mkdir()
    blocked = faq(tmp_path / "b", [], f'url = "{url}"\n')
    report = blocked.sync("faq").sources[0]
    assert not report.ok and report.error_code == "bad_request"  # the host error keeps its class
    assert "host '127.0.0.1' is not allowed" in (report.error or "") and "allow_hosts" in (report.error or "")
    assert len(seen) == 1  # the request was never sent
    blocked.close()


def _script(tmp_path: Path, body: str, extra: str = "", timeout: float = 5) -> Service:
    path = tmp_path / "c.lua"
    path.write_text("connector = {}\nfunction connector.scan(config)\n" + body + "\nend\n")
    return svc_for(tmp_path, f'[connectors.script.c]\npath = "{path}"\ntimeout = {timeout}\n{extra}')


@pytest.mark.parametrize("body, code, fragment", [
    ("return {{source_id = 'a'}}", "extension", "item 1 (a): body must be a string"),
    ("return {{body = 'x'}}", "extension", "item 1: source_id must be a non-empty string"),
    ("return {{source_id = 'a', body = 'x'}, {source_id = 'a', body = 'y'}}", "extension", "'a' was returned twice"),
    ("return {{source_id = 'a', body = 'x', colour = 'red'}}", "extension", "unknown field(s) colour"),
    ("return {{source_id = 'a', body = 'x', updated_at = 'soon'}}", "extension", "updated_at 'soon' is not a date"),
    ("return 'nope'", "extension", "must return a list of items"),
    ("error('the tracker is down')", "extension", "the tracker is down"),
    ("while true do end", "timeout", "exceeded its time limit of 0.2 s"),
    # issue 20: C loops the hook cannot see, and numeric-string sizes, fail the source (they reported ok)
    ("table.move({}, 1, 1e10, 1, {}) return {}", "timeout", "exceeded its time limit of 0.2 s"),
    ("return {{source_id = 'a', body = string.rep('x', '30000000')}}", "extension", "over the sandbox limit"),
])
def test_bad_scripts_fail_their_source_alone(tmp_path: Path, body: str, code: str, fragment: str) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nkept\n")
    svc = _script(tmp_path, body, '[connectors.filesystem.docs]\nroot = "docs"\n', timeout=0.2)
    by = {r.source: r for r in svc.sync("all").sources}
    assert by["filesystem:docs"].ok
    bad = by["script:c"]
    assert not bad.ok and bad.error_code == code and fragment in (bad.error or ""), bad.error
    svc.close()


def test_env_exposes_only_allow_listed_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTX_TEST_PUBLIC", "visible")
    monkeypatch.setenv("CTX_TEST_SECRET", "hunter2")
    body = ("return {{source_id = 'env', body = 'public=' .. tostring(env.get('CTX_TEST_PUBLIC')) .. "
            "' secret=' .. tostring(env.get('CTX_TEST_SECRET'))}}")
    svc = _script(tmp_path, body, 'allow_env = ["CTX_TEST_PUBLIC"]\n')
    assert svc.sync("c").sources[0].ok
    doc = svc.get(svc.search("public")[0].id)
    assert doc.body == "public=visible secret=nil"
    svc.close()


def test_config_keys_reach_the_script_and_json_round_trips(tmp_path: Path) -> None:
    body = ("local t = json.decode(json.encode({n = config.count, tags = config.tags}))\n"
            "return {{source_id = 'cfg', body = 'count ' .. t.n .. ' tags ' .. table.concat(t.tags, ','), "
            "metadata = {tags = t.tags}}}")
    svc = _script(tmp_path, body, 'count = 3\ntags = ["a", "b"]\n')
    assert svc.sync("c").sources[0].ok
    doc = svc.get(svc.search("count")[0].id)
    assert doc.body == "count 3 tags a,b" and doc.metadata == {"tags": ["a", "b"]}
    svc.close()
