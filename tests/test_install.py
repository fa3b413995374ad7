"""The README's daily-use install: the package built from the clone and installed into a fresh
environment puts ``blz``, ``ctx`` and ``brk`` on that environment's PATH, and they run outside the
repository; ``python -m cairn_servers.demo`` there explains that the demo needs a clone, without a
traceback.

Tests talk only to 127.0.0.1, so the install is done offline, as pip does it for ``pip install .``
(``pipx install .`` runs the same pip in an environment of its own): the wheel is built from a copy
of the clone's files with the setuptools of the test environment (``--no-build-isolation``), then
installed with ``--no-index`` into a new virtual environment. Its dependencies cannot be downloaded
here; a ``.pth`` file lets the new environment import those of the test environment, the package
itself only from its own install (checked below).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)  # type: ignore[call-overload,no-any-return]


def test_pip_install_puts_the_three_commands_on_path(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    clone.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, clone / name)
    shutil.copytree(REPO / "src", clone / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                  "--quiet", "-w", str(tmp_path / "wheels"), str(clone)])
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "wheels").glob("cairn_servers-0.1.0-*.whl")

    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)]).returncode == 0
    installed = _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                      "--no-index", "--no-deps", "--quiet", str(wheel)])
    assert installed.returncode == 0, installed.stderr
    site = Path(_run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
                     ).stdout.strip())
    (site / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    elsewhere = tmp_path / "elsewhere"  # not the clone: nothing found through the working directory
    elsewhere.mkdir()
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(tmp_path),
           "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    for command in ("blz", "ctx", "brk"):
        assert shutil.which(command, path=env["PATH"]) == str(venv / "bin" / command)
        r = _run([command, "--version"], cwd=elsewhere, env=env)
        assert (r.returncode, r.stdout, r.stderr) == (0, f"{command} 0.1.0\n", "")
    where = _run(["python", "-c", "import cairn_servers; print(cairn_servers.__file__)"], cwd=elsewhere, env=env)
    assert where.stdout.startswith(str(site)), where.stdout  # the installed copy, not the clone's src/

    (elsewhere / "notes.txt").write_text("# Notes\n\n## Deploy\n\nRotate the keys before a deploy.\n")
    assert _run(["blz", "add", "notes", "notes.txt"], cwd=elsewhere, env=env).returncode == 0
    found = _run(["blz", "search", "rotate keys", "--format", "tsv"], cwd=elsewhere, env=env)
    assert found.returncode == 0 and "notes\t" in found.stdout, found.stderr

    demo = _run(["python", "-m", "cairn_servers.demo"], cwd=elsewhere, env=env)
    assert demo.returncode == 2 and "Traceback" not in demo.stderr
    assert demo.stderr.startswith("cairn demo: error: the demo indexes the documentation and examples of a clone")
    assert "`make demo`" in demo.stderr
