"""``blz add`` piped: the download's progress in JSON lines on stderr, as ``brk index`` reports;
``--progress none`` quiet; stdout carries the answer alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_a_piped_add_reports_json_lines_on_stderr(tmp_path: Path) -> None:
    doc = tmp_path / "llms.txt"
    doc.write_text("# Big\n\n" + "\n".join(f"line {i} about hooks" for i in range(20000)) + "\n")
    env = {**os.environ, "BLZ_DATA_DIR": str(tmp_path / "data")}
    blz = str(Path(sys.executable).with_name("blz"))
    r = subprocess.run([blz, "add", "big", str(doc), "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["alias"] == "big"
    lines = [json.loads(line) for line in r.stderr.splitlines()]
    size = doc.stat().st_size
    assert lines[-1] == {**lines[-1], "event": "done", "stage": "download", "done": size, "total": size}
    quiet = subprocess.run([blz, "add", "big", str(doc), "--force", "--json", "--progress", "none"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == ""
