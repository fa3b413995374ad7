"""Config discovery: ``--config``, ``$CTX_CONFIG``, ``./config/ctx.toml``, ``./.ctx/ctx.toml`` (and Context
Harness's ``./.ctx/config.toml``), ``$XDG_CONFIG_HOME/ctx/ctx.toml`` (and ``config.toml``), in that order;
each place found on its own, each one winning over those after it, and the error naming every place."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cairn_servers.core.errors import NotFound
from cairn_servers.ctx import config as cfg

PY = sys.executable

# in order of precedence (after --config and $CTX_CONFIG); "xdg/" is $XDG_CONFIG_HOME
PLACES = ["config/ctx.toml", ".ctx/ctx.toml", ".ctx/config.toml", "xdg/ctx/ctx.toml", "xdg/ctx/config.toml"]


def place(root: Path, rel: str) -> Path:
    """A config at ``rel`` whose database is named after the place, so the one loaded is known."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[db]\npath = "{rel.replace("/", "_")}.sqlite"\n')
    return path


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    monkeypatch.chdir(root)
    monkeypatch.delenv("CTX_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(root / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # ~/.config must not be the tester's
    return root


def loaded(root: Path) -> str:
    conf = cfg.load(None)
    assert conf.db.path is not None
    return Path(conf.db.path).name


@pytest.mark.parametrize("rel", PLACES)
def test_each_place_is_found(work: Path, rel: str) -> None:
    path = place(work, rel)
    assert cfg.resolve_path(None).resolve() == path.resolve()
    assert loaded(work) == rel.replace("/", "_") + ".sqlite"
    # relative paths in the file resolve against its own directory
    assert Path(cfg.load(None).db.path or "").parent.resolve() == path.parent.resolve()


def test_precedence(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for rel in PLACES:
        place(work, rel)
    for rel in PLACES:  # the first place wins; remove it and the next one does
        assert loaded(work) == rel.replace("/", "_") + ".sqlite"
        (work / rel).unlink()
    explicit = place(work, "elsewhere/env.toml")
    flag = place(work, "elsewhere/flag.toml")
    place(work, "config/ctx.toml")
    monkeypatch.setenv("CTX_CONFIG", str(explicit))
    assert loaded(work) == "elsewhere_env.toml.sqlite"  # $CTX_CONFIG beats every place
    assert Path(cfg.load(flag).db.path or "").name == "elsewhere_flag.toml.sqlite"  # --config beats $CTX_CONFIG


def test_xdg_defaults_to_home_config_and_ignores_a_relative_value(work: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    home_conf = place(tmp_path / "home", ".config/ctx/ctx.toml")
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")
    assert cfg.resolve_path(None) == home_conf
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert cfg.resolve_path(None) == home_conf


def test_none_found_lists_the_places(work: Path, tmp_path: Path) -> None:
    with pytest.raises(NotFound) as caught:
        cfg.load(None)
    xdg = work / "xdg" / "ctx"
    assert caught.value.message == (
        f"No config file found; looked in ./config/ctx.toml, ./.ctx/ctx.toml, ./.ctx/config.toml, "
        f"{xdg}/ctx.toml, {xdg}/config.toml. Run `ctx init` to create ./config/ctx.toml, pass --config PATH, "
        "or set $CTX_CONFIG.")
    # a named file that is missing says so, not the search
    with pytest.raises(NotFound, match=r"^No config file at .*nope\.toml\. Run `ctx init`"):
        cfg.load(work / "nope.toml")


def test_cli_finds_the_dot_ctx_config_and_reports_none(work: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CTX_CONFIG"}
    r = subprocess.run([PY, "-m", "cairn_servers.ctx.cli", "sources", "--json"], cwd=work, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and r.stdout == "", r
    assert r.stderr.startswith("ctx: error: No config file found; looked in ./config/ctx.toml, ./.ctx/ctx.toml")
    (work / ".ctx").mkdir()
    (work / ".ctx" / "ctx.toml").write_text('[db]\npath = "kb.sqlite"\n[connectors.filesystem.notes]\nroot = "."\n')
    r = subprocess.run([PY, "-m", "cairn_servers.ctx.cli", "sources", "--json"], cwd=work, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [s["source"] for s in json.loads(r.stdout)] == ["filesystem:notes"]
