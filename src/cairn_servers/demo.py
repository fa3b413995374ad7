"""`make demo`: each server answering real MCP requests on data the project ships.

Everything happens in a temporary directory (the user's own data dirs are never touched):

* blz indexes Cairn's own documentation (``docs/*.md`` joined into an llms-full.txt) and answers
  ``find`` searches and line retrievals over stdio MCP;
* ctx indexes the same docs folder and answers keyword searches through MCP;
* brk indexes the bundled mainnet blocks 0..589 and answers vec queries through MCP.

The client here is a deliberately tiny newline-delimited JSON-RPC client, so the exchange on the
wire is exactly what is printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


class StdioClient:
    """Spawn an MCP server over stdio, initialize it, and make calls."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        started = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        self._id = 0
        init = self.request(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "cairn-demo", "version": "1"}},
        )
        self.startup_ms = (time.perf_counter() - started) * 1000
        self.server_info = init["serverInfo"]
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self._id += 1
        self._send({"jsonrpc": "2.0", "id": self._id, "method": method, "params": params or {}})
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"server exited (code {self.proc.wait()})")
            message = json.loads(line)
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']['message']}")
                return message["result"]

    def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        if result.get("isError"):
            raise RuntimeError(f"{tool}: {result['content'][0]['text']}")
        if "structuredContent" in result:
            return result["structuredContent"]
        text = result["content"][0]["text"]
        try:
            return json.loads(text)
        except ValueError:
            return text

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def _show(label: str, value: Any) -> None:
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
    lines = text.splitlines()
    if len(lines) > 24:
        lines = [*lines[:24], f"  … ({len(lines) - 24} more lines)"]
    print(f"\n→ {label}")
    print("\n".join("  " + line for line in lines))


def _docs_as_llms_txt(target: Path) -> Path:
    parts = ["# Cairn documentation", "", "> Local context servers for AI agents: blz, ctx, brk.", ""]
    for doc in sorted((REPO / "docs").glob("*.md")):
        parts.append(doc.read_text(encoding="utf-8").replace("\n# ", "\n## ").rstrip())
        parts.append("")
    target.write_text("\n".join(parts), encoding="utf-8")
    return target


def demo_blz(work: Path, env: dict[str, str]) -> None:
    print("\n=== blz: llms.txt documentation search (stdio MCP) ===")
    env = {**env, "BLZ_DATA_DIR": str(work / "blz")}
    llms = _docs_as_llms_txt(work / "llms-full.txt")
    added = subprocess.run([_bin("blz"), "add", "cairn", str(llms), "--json"], env=env, capture_output=True, text=True)
    if added.returncode != 0:
        raise RuntimeError(added.stderr)
    client = StdioClient([_bin("blz"), "mcp"], env)
    try:
        print(f"blz mcp answered initialize in {client.startup_ms:.0f} ms: {client.server_info}")
        tools = client.request("tools/list")["tools"]
        _show("tools/list", [t["name"] for t in tools])
        found = client.call("find", {"query": "exit codes", "source": "cairn", "maxResults": 3})
        _show('find {"query": "exit codes", "source": "cairn"}', [
            {k: hit[k] for k in ("alias", "lines", "headingPath", "score")} for hit in found["hits"]
        ])
        if found["hits"]:
            cite = f"{found['hits'][0]['alias']}:{found['hits'][0]['lines']}"
            got = client.call("find", {"snippets": [cite], "contextMode": "none"})
            _show(f'find {{"snippets": ["{cite}"]}}', got["snippets"][0]["content"])
        _show("run-command stats", client.call("run-command", {"command": "stats"})["stdout"])
    finally:
        client.close()


def _run(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} failed: {done.stderr.strip()}")
    return done.stdout


def demo_ctx(work: Path, env: dict[str, str]) -> None:
    print("\n=== ctx: knowledge base with keyword search and Lua tools (stdio MCP) ===")
    import shutil

    example = work / "ctx-example"
    shutil.copytree(REPO / "examples" / "ctx", example, ignore=shutil.ignore_patterns("data"))
    config = str(example / "ctx.toml")
    _run([_bin("ctx"), "--config", config, "sync", "all", "--json"], env)
    print("synced examples/ctx: a folder of Markdown docs and a Lua connector")
    client = StdioClient([_bin("ctx"), "serve", "mcp", "--stdio", "--config", config], env)
    try:
        print(f"ctx serve mcp --stdio answered initialize in {client.startup_ms:.0f} ms: {client.server_info}")
        _show("tools/list", [t["name"] for t in client.request("tools/list")["tools"]])
        found = client.call("search", {"query": "rotate keys", "limit": 3})
        _show('search {"query": "rotate keys"}', [
            {k: r[k] for k in ("title", "source", "source_id", "score", "snippet")} for r in found["results"]
        ])
        _show("sources", client.call("sources", {}))
        _show('find_mentions (a Lua tool) {"term": "deploy"}', client.call("find_mentions", {"term": "deploy"}))
    finally:
        client.close()


def demo_brk(work: Path, env: dict[str, str]) -> None:
    print("\n=== brk: Bitcoin datasets from block files (stdio MCP) ===")
    chain, out = work / "chain", work / "brk"
    _run([_bin("brk"), "sample", "--mainnet", "--out", str(chain), "--format", "json"], env)
    started = time.perf_counter()
    _run([_bin("brk"), "index", "--blocks-dir", str(chain), "--out", str(out), "--format", "json"], env)
    print(f"indexed the bundled mainnet blocks 0..589 in {time.perf_counter() - started:.2f} s")
    client = StdioClient([_bin("brk"), "mcp", "--out", str(out)], env)
    try:
        print(f"brk mcp answered initialize in {client.startup_ms:.0f} ms: {client.server_info}")
        _show("tools/list", [t["name"] for t in client.request("tools/list")["tools"]])
        _show("get_index_count", client.call("get_index_count", {}))
        _show('get_vecs {"index": "date", "ids": "block_count,tx_count", "from": 0, "count": 3}',
              client.call("get_vecs", {"index": "date", "ids": "block_count,tx_count", "from": 0, "count": 3}))
        _show('get_vecs {"index": "height", "ids": "supply_btc", "from": -1}',
              client.call("get_vecs", {"index": "height", "ids": "supply_btc", "from": -1}))
        _show('get_vecs {"index": "h", "ids": "fee,tx_count", "from": 170, "count": 1, "format": "md"}',
              client.call("get_vecs", {"index": "h", "ids": "fee,tx_count", "from": 170, "count": 1, "format": "md"}))
    finally:
        client.close()


def next_steps(bin_dir: str) -> str:
    """The three commands to try after the demo, on the user's own data (``bin_dir``: where the commands
    are when they are not on the PATH)."""
    where = (f"The commands are in {bin_dir}: add it to your PATH, or install them for daily use with "
             "`pipx install .` (or `uv tool install .`).") if bin_dir else ""
    return "\n".join([
        "Next, try these (each runs on what the clone ships, offline):",
        "  blz add cairn docs/blz.md && blz search \"exit codes\" -s cairn",
        "  ctx --config examples/ctx/ctx.toml sync all && ctx --config examples/ctx/ctx.toml search "
        "\"rotate keys\" --mode hybrid",
        "  brk sample --mainnet --out /tmp/chain && brk index --blocks-dir /tmp/chain --out /tmp/vecs && "
        "brk query --out /tmp/vecs --index date --ids block_count,tx_count --from -5",
        *([where] if where else []),
    ])


def _on_path(name: str) -> bool:
    import shutil

    found = shutil.which(name)
    return found is not None and Path(found).resolve() == Path(_bin(name)).resolve()


def main() -> int:
    if not (REPO / "docs").is_dir() or not (REPO / "examples" / "ctx" / "ctx.toml").is_file():
        sys.stderr.write("cairn demo: error: the demo indexes the documentation and examples of a clone of the "
                         "repository, which an installed package does not include. Run it from a clone: "
                         "`make demo`. The installed commands work anywhere: blz --help, ctx --help, brk --help.\n")
        return 2
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BLZ_", "CTX_", "BRK_"))}
    with tempfile.TemporaryDirectory(prefix="cairn-demo-") as tmp:
        work = Path(tmp)
        env["XDG_DATA_HOME"] = str(work / "xdg-data")
        env["XDG_CONFIG_HOME"] = str(work / "xdg-config")
        env["XDG_CACHE_HOME"] = str(work / "xdg-cache")
        demo_blz(work, env)
        demo_ctx(work, env)
        demo_brk(work, env)
    print("\nDemo finished: every answer above came from a real server over MCP.\n")
    bin_dir = "" if _on_path("blz") else str(Path(_bin("blz")).parent)
    if bin_dir.startswith(str(Path.cwd()) + os.sep):
        bin_dir = os.path.relpath(bin_dir)  # ".venv/bin" from the clone
    print(next_steps(bin_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
