"""Names that could become paths, in ctx and brk: connector and tool names, source and document ids,
brk index and vec names (HTTP and MCP) and --out paths. Each bad name is refused with a clear error
(or simply not found) and nothing is read or written outside the data folders.

(blz aliases are covered in test_security_blz.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ._servers import HttpServer, StdioServer

pytestmark = pytest.mark.timeout(120)

TRAVERSAL = ["../x", "..", "../../etc/passwd", "/etc/passwd", "a/b", "a\\b", "..\\..\\x", "C:\\x", "CON",
             "aux.txt", "nul", "LPT1", "x\u0000y", "", " ", "-rf", "~", "%2e%2e%2fx", "x" * 300, "caf\u00e9"]
BAD_NAMES = [n for n in TRAVERSAL if n not in ("nul",)]  # 'nul' is a plain lowercase name for ctx


def _ctx(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", *args, "--config", str(cfg), "--json"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("kind", ["connector", "tool"])
def test_ctx_config_names_that_are_not_names_are_refused(kind: str, tmp_path: Path) -> None:
    from cairn_servers.core.errors import InvalidInput
    from cairn_servers.ctx.config import load

    (tmp_path / "docs").mkdir()
    (tmp_path / "t.lua").write_text('tool = {name = "t", description = "d", parameters = {}}\n'
                                    "function tool.execute(p, c) return {} end\n")
    refused = 0
    cfg = tmp_path / "ctx.toml"
    for name in [n for n in BAD_NAMES if "\u0000" not in n] + ["CON", "Docs", "a.b"]:
        key = json.dumps(name)  # a TOML quoted key holds anything
        body = (f'[connectors.filesystem.{key}]\nroot = "docs"\n' if kind == "connector"
                else f'[tools.script.{key}]\npath = "t.lua"\n')
        cfg.write_text(f'[db]\npath = "kb.sqlite"\n{body}')
        with pytest.raises(InvalidInput, match="names use lowercase letters, digits"):
            load(cfg)
        refused += 1
    assert refused == len(BAD_NAMES) + 2
    res = _ctx(cfg, "sources")  # the command line says the same, with exit code 2
    assert res.returncode == 2 and "names use lowercase letters, digits" in res.stderr, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctx.toml", "docs", "t.lua"]  # no database, no dirs


def test_ctx_source_and_document_ids_stay_data(tmp_path: Path) -> None:
    """A Lua connector may name its items anything: ids are stored as text, never used as paths, and
    `get` with a path-like id is just not found."""
    conn = tmp_path / "conn.lua"
    conn.write_text(
        "connector = {}\n"
        "function connector.scan(config)\n"
        "  local items = {}\n"
        "  for i, id in ipairs(config.ids) do\n"
        "    items[#items + 1] = {source_id = id, title = 'T' .. i, body = 'traversaltoken' .. i .. ' body'}\n"
        "  end\n"
        "  return items\n"
        "end\n")
    ids = ["../../../../tmp/pwned", "/etc/passwd", "..\\..\\win", "CON", "aux.txt", "a/../../b", "~/.ssh/id_rsa"]
    cfg = tmp_path / "ctx.toml"
    cfg.write_text(f'[db]\npath = "kb.sqlite"\n[connectors.script.items]\npath = "{conn}"\n'
                   f'ids = {json.dumps(ids)}\n')
    before = set(tmp_path.parent.iterdir())
    res = _ctx(cfg, "sync", "all")
    assert res.returncode == 0, res.stderr
    assert set(tmp_path.parent.iterdir()) == before and not Path("/tmp/pwned").exists()
    found = json.loads(_ctx(cfg, "search", "traversaltoken1").stdout)
    assert [h["source_id"] for h in found] == [ids[0]]
    assert len(found[0]["id"]) == 32 and all(c in "0123456789abcdef" for c in found[0]["id"])
    for bad in ids + ["../kb.sqlite", "%2e%2e/kb.sqlite", "' OR 1=1 --"]:
        got = _ctx(cfg, "get", bad)
        assert got.returncode in (2, 3), (bad, got.returncode, got.stderr)
        assert got.stderr.startswith("ctx: error: ") and "Traceback" not in got.stderr, got.stderr
        assert "root:x:0:0" not in got.stdout + got.stderr


def test_ctx_tool_names_over_http_and_mcp(ctx_http: HttpServer, ctx_stdio: StdioServer) -> None:
    with httpx.Client(timeout=30) as client:
        for name in ["..%2F..%2Fetc%2Fpasswd", "..", "CON", "aux.txt", "%00", "search%2F..%2Fget", "echo.lua"]:
            r = client.post(f"{ctx_http.url}/tools/{name}", json={})
            if r.request.url.path == "/":  # the client resolved /tools/.. to the root URL, which speaks MCP
                assert r.status_code == 400 and r.json()["error"]["code"] == -32600, (name, r.text[:200])
                continue
            assert r.status_code in (404, 405), (name, r.status_code, r.text[:200])
            assert r.json()["error"]["code"] in ("not_found", "method_not_allowed"), r.text
    for name in TRAVERSAL + ["../echo", "echo/../search", "find_mentions.lua"]:
        reply = ctx_stdio.request("tools/call", {"name": name, "arguments": {}})
        assert "error" in reply or reply["result"].get("isError"), (name, reply)
    assert ctx_http.alive() and ctx_stdio.alive()


def test_brk_index_and_vec_names(brk_http: HttpServer, brk_stdio: StdioServer) -> None:
    names = TRAVERSAL + ["manifest", "manifest.json", "../manifest", "vecs/height_to_blockhash",
                         "height_to_blockhash.bin", "blockpos_to_hash", "*", "%", "_"]
    with httpx.Client(timeout=30) as client:
        for name in names:
            for path, params in [("/api/vecs/query", {"index": name, "ids": "difficulty"}),
                                 ("/api/vecs/query", {"index": "height", "ids": name}),
                                 ("/api/vecs/id-to-indexes", {"id": name}),
                                 ("/api/vecs/index-to-ids", {"index": name})]:
                r = client.get(brk_http.url + path, params=params)
                assert r.status_code in (400, 404), (path, params, r.status_code, r.text[:200])
                assert r.json()["error"]["code"] in ("bad_request", "not_found")
        for raw in ["/api/vecs/..%2F..%2Fmanifest.json", "/web/..%2F..%2Fhttp.py", "/web/../../cli.py",
                    "/web/%2e%2e/vecs.py", "/web/index.html%00"]:
            r = client.get(brk_http.url + raw)
            assert r.status_code == 404, (raw, r.status_code)
            assert "import" not in r.text and '"vecs"' not in r.text
    tools = {t["name"] for t in brk_stdio.request("tools/list")["result"]["tools"]}
    called = 0
    for tool in sorted(tools):
        for arg in ("index", "id", "ids"):
            reply = brk_stdio.request("tools/call", {"name": tool, "arguments": {arg: "../../etc/passwd"}})
            text = json.dumps(reply)
            assert "root:x:0:0" not in text
            called += 1
    assert called == 3 * len(tools) and brk_stdio.alive() and brk_http.alive()


def test_brk_out_paths(tmp_path: Path) -> None:
    from cairn_servers.brk.sample import write_sample

    blocks = tmp_path / "blocks"
    write_sample(blocks, 50, seed=2)
    a_file = tmp_path / "plain-file"
    a_file.write_text("not a folder")
    cases = {str(a_file): 7, str(a_file / "sub"): 7, "/proc/brk-out": 7}
    for out, code in cases.items():
        res = subprocess.run([sys.executable, "-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(blocks),
                              "--out", out], capture_output=True, text=True, timeout=60)
        assert res.returncode == code, (out, res.returncode, res.stderr)
        assert res.stderr.startswith("brk: error: Cannot use") and "Traceback" not in res.stderr, res.stderr
    assert a_file.read_text() == "not a folder"
    # Odd but legal folder names work and stay where they were asked to be.
    for name in ["CON", "aux.txt", "a b", "caf\u00e9", "-dash", "x/../y"]:
        odd = tmp_path / "outs" / name
        res = subprocess.run([sys.executable, "-m", "cairn_servers.brk.cli", "index", "--blocks-dir", str(blocks),
                              "--out", str(odd), "--format", "json"], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, (name, res.stderr)
        assert (Path(os.path.normpath(odd)) / "manifest.json").is_file()
    assert sorted(p.name for p in (tmp_path / "outs").iterdir()) == sorted(
        ["CON", "aux.txt", "a b", "caf\u00e9", "-dash", "x", "y"])
