"""The suite on several workers (pytest-xdist: ``make test`` runs one worker process per core).

Each worker is a process of its own that runs a share of the tests; the tests of one module may land
on different workers, and a session or module fixture runs once in each worker that needs it. A test
stays xdist-safe by keeping to these rules:

- temporary files only under ``tmp_path`` / ``tmp_path_factory`` (a directory per worker), never a
  fixed path such as ``/tmp/NAME``, ``~`` or the checkout; XDG dirs are per test already;
- ports from a ``free_port()`` helper (the kernel's choice of a free port) or a server bound to
  port 0, never a fixed port number;
- environment changes through ``monkeypatch`` (undone after the test), never ``os.environ[...] =``;
- PostgreSQL through the ``pg_server`` fixture (one throwaway server per worker) and ``pg_database``
  (a database named after the worker's pid);
- a costly artefact that tests only read goes through :func:`shared_artefact`: built once per run
  under a file lock, then shared by every worker (copy a file before changing it, as with
  ``test_data``);
- no test relies on another test having run before it, in this process or any other
  (``make test-random`` checks that).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

# "gw0", "gw1", ... in an xdist worker; "" in a serial run (``make test-serial``, ``-n 0``).
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def run_dir(factory: pytest.TempPathFactory) -> Path:
    """The temporary directory of this whole run. Under xdist each worker's basetemp is
    ``<run>/popen-gwN``, so their common parent belongs to this run alone; in a serial run (or a
    pytest started by a test, which inherits ``PYTEST_XDIST_WORKER``) it is the basetemp itself."""
    base = factory.getbasetemp()
    return base.parent if WORKER and base.name == f"popen-{WORKER}" else base


def shared_artefact(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Path]) -> Path:
    """What ``build(folder)`` returns (a path under ``folder``), built once per run whichever worker
    asks first, while the others wait on a file lock, then reused by all of them. Only for artefacts
    that tests read and never change."""
    from filelock import FileLock

    folder = run_dir(factory) / f"shared-{name}"
    done = folder.with_name(folder.name + ".built")  # beside, not inside: the artefact stays as built
    with FileLock(str(folder.with_name(folder.name + ".lock")), timeout=600):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed part-way
            folder.mkdir(parents=True)
            result = build(folder)
            done.write_text(result.relative_to(folder).as_posix())
        return folder / done.read_text()
