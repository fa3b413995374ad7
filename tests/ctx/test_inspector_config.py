"""The MCP Inspector takes ``--config`` for itself: README tells users to pass ctx's configuration as
``-e CTX_CONFIG=...`` instead. Both halves checked with the real Inspector CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NODE_BIN = REPO / ".tools" / "node" / "node_modules" / ".bin"
INSPECTOR = NODE_BIN / "mcp-inspector"
CTX = str(Path(sys.executable).with_name("ctx"))

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(not (NODE_BIN / "node").exists() or not INSPECTOR.exists(),
                       reason=f"project-local Node tools missing ({NODE_BIN}); run `make test` to install them"),
    pytest.mark.timeout(120),
]


def test_ctx_config_reaches_ctx_through_the_environment(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nhello\n")
    config = tmp_path / "kb.toml"
    config.write_text('[db]\npath = "kb.sqlite"\n[embedding]\nprovider = "disabled"\n'
                      '[connectors.filesystem.docs]\nroot = "docs"\n')
    env = dict(os.environ, PATH=f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    clash = subprocess.run([str(INSPECTOR), "--cli", CTX, "serve", "mcp", "--stdio", "--config", str(config),
                            "--method", "tools/list"], capture_output=True, text=True, timeout=60, env=env)
    assert clash.returncode != 0 and "--config cannot be combined" in clash.stdout + clash.stderr
    works = subprocess.run([str(INSPECTOR), "--cli", "-e", f"CTX_CONFIG={config}", CTX, "serve", "mcp", "--stdio",
                            "--method", "tools/list"], capture_output=True, text=True, timeout=60, env=env)
    assert works.returncode == 0, works.stdout + works.stderr
    assert {"search", "get", "sources"} <= {t["name"] for t in json.loads(works.stdout)["tools"]}
