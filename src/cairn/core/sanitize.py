"""Scrub what a client sees: no absolute home paths, no data roots, no credentials in URLs.

Servers register their data roots once (``register_root(data_dir, "<blz-data>")``); every string
that leaves through MCP, HTTP or ``run-command`` output then passes through :func:`scrub`.
"""

from __future__ import annotations

import os
import re

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any

_roots: dict[str, str] = {}
# scheme://user:password@host or scheme://token@host -> scheme://***@host. The scheme is bounded so
# a long run of letters costs linear time (unbounded, 200 KB of "a" took 28 s to scrub).
_URL_CREDENTIALS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]{0,31}://)[^/\s@:]+(?::[^/\s@]*)?@")


def register_root(path: str | os.PathLike[str], placeholder: str) -> None:
    """Show ``path`` (and anything under it) as ``placeholder`` in scrubbed output."""
    resolved = os.path.realpath(os.fspath(path))
    _roots[resolved] = placeholder
    _roots[os.path.abspath(os.fspath(path))] = placeholder


def clear_roots() -> None:
    """Forget every registered root (tests)."""
    _roots.clear()


def scrub(text: str) -> str:
    """``text`` with credentials in URLs masked, data roots replaced and ``$HOME`` shown as ``~``."""
    if "@" in text:  # no credential without one; skipping the regex halves scrub time on search results
        text = _URL_CREDENTIALS.sub(r"\1***@", text)
    # Longest roots first so a nested root wins over its parent.
    for root in sorted(_roots, key=len, reverse=True):
        if root and root != os.sep:
            text = _replace_path(text, root, _roots[root])
    home = os.path.expanduser("~")
    if home and home != os.sep:
        text = _replace_path(text, home, "~")
    return text


def _replace_path(text: str, path: str, placeholder: str) -> str:
    # Only whole path components: "/root" must not turn "/rootfs" into "~fs".
    if path not in text:
        return text
    return re.sub(re.escape(path) + r"(?![\w.-])", lambda _: placeholder, text)


def scrub_obj(value: Any) -> Any:
    """:func:`scrub` applied to every string inside dicts, lists and tuples."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: scrub_obj(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_obj(v) for v in value]
    return value
