"""`make demo` is a README command: it must keep working, with real answers from every server."""

from __future__ import annotations

import subprocess
import sys


def test_demo_shows_each_server_answering() -> None:
    done = subprocess.run([sys.executable, "-m", "cairn_servers.demo"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for banner in ("=== blz", "=== ctx", "=== brk"):
        assert banner in out
    assert '"headingPath"' in out and "Exit codes" in out  # blz found and retrieved its own docs
    assert '"source_id": "auth.md"' in out  # ctx keyword search over the example docs
    assert "29500.0" in out  # brk: supply at height 589 of the bundled mainnet sample
    assert out.rstrip().endswith("every answer above came from a real server over MCP.")
