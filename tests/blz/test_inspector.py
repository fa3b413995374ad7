"""The official MCP Inspector CLI lists and calls the blz tools over stdio (`blz mcp`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.blz import sources
from cairn_servers.blz.store import Store

REPO = Path(__file__).resolve().parents[2]
NODE_BIN = REPO / ".tools" / "node" / "node_modules" / ".bin"
INSPECTOR = NODE_BIN / "mcp-inspector"

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(not (NODE_BIN / "node").exists() or not INSPECTOR.exists(),
                       reason=f"project-local Node tools missing ({NODE_BIN}); run `make test` to install them"),
    pytest.mark.timeout(120),
]


def inspector(data_root: Path, *args: str) -> Any:
    env = dict(os.environ, PATH=f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}", BLZ_DATA_DIR=str(data_root))
    cmd = [str(INSPECTOR), "--cli", "-e", f"BLZ_DATA_DIR={data_root}", sys.executable, "-m", "cairn_servers.blz.cli", "mcp", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
    assert proc.returncode == 0, f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
    return json.loads(proc.stdout)


def test_inspector_lists_and_calls_blz_tools(tmp_path: Path, data_root: Path) -> None:
    doc = tmp_path / "guide.txt"
    doc.write_text("# Guide\n\n## Hooks\n\nHooks let you use state.\n")
    store = Store(data_root)
    sources.add(store, "guide", str(doc))
    store.close()

    listed = inspector(data_root, "--method", "tools/list")
    assert {t["name"] for t in listed["tools"]} == {"find", "toc", "diff", "list-sources", "lookup", "source-add", "source-refresh", "run-command",
                                                      "learn-blz"}

    found = inspector(data_root, "--method", "tools/call", "--tool-name", "find", "--tool-arg", "query=hooks",
                      "--tool-arg", "source=guide")
    hit = found["structuredContent"]["hits"][0]
    assert (hit["alias"], hit["lines"], hit["headingPath"]) == ("guide", "3-5", ["Guide", "Hooks"])

    ran = inspector(data_root, "--method", "tools/call", "--tool-name", "run-command", "--tool-arg", "command=list")
    assert ran["structuredContent"]["exitCode"] == 0 and ran["structuredContent"]["stdout"].startswith("guide ")

    learned = inspector(data_root, "--method", "tools/call", "--tool-name", "learn-blz")
    assert learned["structuredContent"]["flags"]["source"] == ["guide"]

    templates = inspector(data_root, "--method", "resources/templates/list")
    assert templates["resourceTemplates"][0]["uriTemplate"] == "blz://sources/{alias}"
    prompts = inspector(data_root, "--method", "prompts/list")
    assert prompts["prompts"][0]["name"] == "discover-docs"
