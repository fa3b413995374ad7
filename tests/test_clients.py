"""The client configurations in examples/clients: each parses as its client reads it (VS Code's
``servers`` key, the others' ``mcpServers``; stdio entries only, as Claude Desktop takes), and every
server it names starts from the command and arguments given and answers ``initialize`` over stdio."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cairn_servers.brk.indexer import index
from cairn_servers.brk.sample import write_mainnet_sample

REPO = Path(__file__).resolve().parents[1]
CLIENTS = REPO / "examples" / "clients"
FILES = {"claude_desktop_config.json": "mcpServers", "cursor-mcp.json": "mcpServers",
         "vscode-mcp.json": "servers", "claude-code.mcp.json": "mcpServers"}


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("clients")
    (base / "docs").mkdir()
    (base / "docs" / "a.md").write_text("# A\n\nhello\n")
    config = base / "ctx.toml"
    config.write_text(f'[db]\npath = "{base / "kb.sqlite"}"\n[embedding]\nprovider = "disabled"\n'
                      f'[connectors.filesystem.docs]\nroot = "{base / "docs"}"\n')
    write_mainnet_sample(base / "blocks")
    index(base / "blocks", base / "brk")
    return {"/ABSOLUTE/PATH/TO/ctx.toml": str(config), "/ABSOLUTE/PATH/TO/brk-data": str(base / "brk"),
            "BLZ_DATA_DIR": str(base / "blz")}


def test_every_client_has_its_file() -> None:
    assert sorted(p.name for p in CLIENTS.glob("*.json")) == sorted(FILES)


def _initialize(argv: list[str], env: dict[str, str]) -> dict[str, object]:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "config-test", "version": "1"}}}) + "\n")
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline())
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert isinstance(reply, dict)
    return reply


@pytest.mark.parametrize("name", sorted(FILES))
def test_each_server_named_starts_and_answers_initialize(name: str, paths: dict[str, str]) -> None:
    config = json.loads((CLIENTS / name).read_text())
    servers = config[FILES[name]]
    assert set(config) == {FILES[name]} and sorted(servers) == ["blz", "brk", "ctx"]
    env = {**os.environ, "BLZ_DATA_DIR": paths["BLZ_DATA_DIR"],
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for server, entry in servers.items():
        assert "url" not in entry and entry.get("type", "stdio") == "stdio", entry  # stdio entries only
        assert entry["command"] == server
        args = [paths.get(a, a) for a in entry["args"]]
        reply = _initialize([entry["command"], *args], env)
        assert reply["id"] == 1 and "result" in reply, reply
        result = reply["result"]
        assert isinstance(result, dict) and result["serverInfo"]["name"] == server, result
