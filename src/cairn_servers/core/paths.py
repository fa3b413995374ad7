"""XDG base directories with per-server environment overrides.

Precedence everywhere: explicit flag > server env var (e.g. ``BLZ_DATA_DIR``) > XDG var > default.
Read at call time, never at import time, so tests can point each run at its own directories.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the stdio servers' start-up
if TYPE_CHECKING:
    from pathlib import Path


def _xdg(var: str, default: str) -> Path:
    from pathlib import Path

    value = os.environ.get(var, "")
    # The XDG spec says relative paths are invalid and must be ignored.
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / default


def data_path(app: str, override_env: str | None = None) -> str:
    """``data_dir`` as a string, computed with ``os.path`` only (for start-up paths that have not
    imported ``pathlib``: it pulls in ``urllib.parse`` and ``ipaddress``)."""
    if override_env and os.environ.get(override_env):
        return os.path.expanduser(os.environ[override_env])
    value = os.environ.get("XDG_DATA_HOME", "")
    base = value if value and os.path.isabs(value) else os.path.join(os.path.expanduser("~"), ".local/share")
    return os.path.join(base, app)


def data_dir(app: str, override_env: str | None = None) -> Path:
    """Where ``app`` keeps its data: ``$<override_env>``, else ``$XDG_DATA_HOME/<app>``."""
    from pathlib import Path

    return Path(data_path(app, override_env))


def cache_dir(app: str, override_env: str | None = None) -> Path:
    """Where ``app`` keeps re-creatable caches: ``$<override_env>``, else ``$XDG_CACHE_HOME/<app>``."""
    from pathlib import Path

    if override_env and os.environ.get(override_env):
        return Path(os.environ[override_env]).expanduser()
    return _xdg("XDG_CACHE_HOME", ".cache") / app
