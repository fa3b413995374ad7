"""The shipped example (examples/ctx/ctx.toml) runs every ctx command the README shows on it, semantic
ones included: it uses the default offline ``minilm`` provider, not ``disabled``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_readme_commands_run_on_the_example(tmp_path: Path) -> None:
    root = tmp_path / "example"
    shutil.copytree(REPO / "examples" / "ctx", root, ignore=shutil.ignore_patterns("data"))
    config = root / "ctx.toml"
    assert 'provider = "minilm"' in config.read_text()

    def ctx(*args: str) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "--config", str(config), *args],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert r.returncode == 0, (args, r.stderr)
        return r

    synced = json.loads(ctx("sync", "all", "--json", "--progress", "none").stdout)
    assert synced["embedding"]["model"].startswith("minilm") and synced["embedding"]["pending"] == 0
    assert json.loads(ctx("search", "rotate keys", "--json").stdout)
    hybrid = json.loads(ctx("search", "deploy procedure", "--mode", "hybrid", "--explain", "--json").stdout)
    assert hybrid and hybrid[0]["explain"]["fusion"] and any(r["explain"]["vector"] for r in hybrid)
    assert json.loads(ctx("search", "how do I join the VPN", "--mode", "semantic", "--json").stdout)
    assert json.loads(ctx("get", hybrid[0]["id"], "--json").stdout)["id"] == hybrid[0]["id"]
    ctx("export", "--vectors", "-o", str(tmp_path / "kb.jsonl"))
    kinds = {json.loads(line).get("type") for line in (tmp_path / "kb.jsonl").read_text().splitlines()}
    assert "vector" in kinds, kinds
    assert "deploy" in ctx("tool", "test", "find_mentions", "--param", "term=deploy", "--text").stdout.lower()
    assert "deploy" in ctx("agent", "show", "oncall", "--arg", "topic=deploy", "--text").stdout
    assert 'provider = "minilm"' in ctx("config", "show", "--text").stdout
