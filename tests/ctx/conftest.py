"""Helpers for ctx tests: config files, real directory trees, real git repositories; the two storage
backends' fixtures (``ctx_backend``: SQLite, and a real PostgreSQL + pgvector started once per session)
are in tests/_pg.py."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .._pg import drop_database as drop_database  # re-exported for the ctx tests and benchmarks
from .._pg import pg_database as pg_database
from ..mcp._http import free_port as free_port  # re-exported for the ctx tests
from ..mcp._http import serving as _serving

GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def git(repo: Path, *args: str, when: str | None = None) -> str:
    """Run git in ``repo`` as a fixed test identity (optionally at a fixed commit time)."""
    env = dict(os.environ, **GIT_ENV)
    if when:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = when
    out = subprocess.run(
        ["git", "-c", "user.name=Ada Lovelace", "-c", "user.email=ada@example.org", "-c", "init.defaultBranch=main",
         *args],
        cwd=repo, env=env, check=True, capture_output=True, text=True,
    )
    return out.stdout


def make_repo(path: Path, files: dict[str, str], when: str = "2024-03-01T12:00:00Z") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    write(path, files)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial", when=when)
    return path


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


def config_file(tmp_path: Path, body: str, name: str = "ctx.toml") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


def synced(config: Path) -> Path:
    """``config`` after a sync of all its sources, each of which must succeed."""
    from cairn_servers.ctx.service import Service

    svc = Service.from_config(config)
    try:
        assert all(r.ok for r in svc.sync("all").sources)
    finally:
        svc.close()
    return config


@pytest.fixture
def docs_tree(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    write(root, {
        "guide/install.md": "# Installing\n\nRun the installer with pip. Requires Python 3.11.\n",
        "guide/auth.md": "# Authentication\n\nJWT tokens are signed with the server key. Rotate keys monthly.\n",
        "notes.txt": "Meeting notes: the deployment pipeline uses blue-green releases.\n",
        "src/app.py": "print('not included by default globs')\n",
    })
    return root




@contextlib.contextmanager
def serving(app: object) -> Iterator[str]:
    """Run an ASGI app on a real uvicorn server on a free 127.0.0.1 port; yields ``http://127.0.0.1:PORT``."""
    with _serving(app, path="") as base:
        yield base


# ---- storage backends ------------------------------------------------------------------------------
# The backend fixtures (pg_server, ctx_backend, ctx_module_backend) live in tests/_pg.py, registered by
# tests/conftest.py so the hardening tests can take them too.


@pytest.fixture(autouse=True)
def _sqlite_unless_parametrised(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that takes neither backend fixture runs on SQLite, even while a module-scoped PostgreSQL
    run (``ctx_module_backend``) has $CTX_DATABASE_URL set for its module."""
    if not {"ctx_backend", "ctx_module_backend", "pg_server"} & set(request.fixturenames):
        monkeypatch.delenv("CTX_DATABASE_URL", raising=False)
