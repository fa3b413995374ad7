"""`make demo` is a README command: it must keep working, with real answers from every server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_demo_shows_each_server_answering() -> None:
    done = subprocess.run([sys.executable, "-m", "cairn_servers.demo"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for banner in ("=== blz", "=== ctx", "=== brk"):
        assert banner in out
    assert '"headingPath"' in out and "Exit codes" in out  # blz found and retrieved its own docs
    assert '"source_id": "auth.md"' in out  # ctx keyword search over the example docs
    assert "29500.0" in out  # brk: supply at height 589 of the bundled mainnet sample
    assert "every answer above came from a real server over MCP.\n\nNext, try these" in out
    steps = out.split("Next, try these (each runs on what the clone ships, offline):\n")[1].splitlines()
    assert [s.split()[0] for s in steps[:3]] == ["blz", "ctx", "brk"]
    assert steps[3].startswith("The commands are in ") and "`pipx install .`" in steps[3]


def test_the_next_steps_the_demo_prints_run(tmp_path: Path) -> None:
    """The three commands the demo suggests, run as printed (in a copy of what they read, so the clone
    stays clean; /tmp/chain and /tmp/vecs moved into the test's directory)."""
    from cairn_servers.demo import next_steps

    (tmp_path / "docs").mkdir()
    shutil.copy(REPO / "docs" / "blz.md", tmp_path / "docs" / "blz.md")
    shutil.copytree(REPO / "examples" / "ctx", tmp_path / "examples" / "ctx", ignore=shutil.ignore_patterns("data"))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("BLZ_", "CTX_", "BRK_"))},
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for line in next_steps("").splitlines()[1:]:
        command = line.strip().replace("/tmp/chain", str(tmp_path / "chain")).replace("/tmp/vecs", str(tmp_path / "vecs"))
        r = subprocess.run(["bash", "-c", command + " --format text"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0 and "error" not in r.stderr, (command, r.stderr)
        assert r.stdout.strip() and "No results" not in r.stdout, (command, r.stdout)
