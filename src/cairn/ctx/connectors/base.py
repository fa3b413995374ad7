"""What every connector is built from: :class:`Entry` and :class:`Item`, the :class:`Connector`
protocol, the registry of connector types (:func:`register`), and helpers for globs and text decoding.

The connector modules (``filesystem``, ``git``, ``script``) import this module, never the package,
so the package can import them (to register the built-ins) without an import cycle.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

from cairn.ctx.config import ConnectorConfig


@dataclass
class Item:
    """A document as a connector delivers it; ``updated_at`` is unix seconds."""

    source_id: str
    body: str
    title: str | None = None
    author: str | None = None
    source_url: str | None = None
    updated_at: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Entry:
    """A listed document: id, change fingerprint, and how to read it (None = skip it after all)."""

    source_id: str
    fingerprint: str
    load: Callable[[], Item | None]


class Connector(Protocol):
    """What the sync engine needs from a connector instance."""

    config: ConnectorConfig
    skipped: int  # entries left out by policy (size cap, binary, symlink) during the last scan

    def scan(self) -> Iterable[Entry]:
        """Every document currently in the source. Raising means: the source is unavailable."""
        ...


Factory = Callable[[ConnectorConfig], Connector]
_TYPES: dict[str, Factory] = {}


def register(ctype: str, factory: Factory) -> None:
    """Make ``[connectors.<ctype>.<name>]`` instances build with ``factory``."""
    _TYPES[ctype] = factory


@lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """A compiled regex for a ``/``-separated glob: ``**`` spans directories, ``*`` and ``?`` do not."""
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 2)
            if end == -1:
                out.append(re.escape(c))
                i += 1
            else:
                body = pattern[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z")


class Matcher:
    """Include/exclude glob policy over relative POSIX paths."""

    def __init__(self, include: list[str], exclude: list[str]) -> None:
        self.include = [glob_regex(p) for p in include]
        self.exclude = [glob_regex(p) for p in exclude]

    def __call__(self, rel: str) -> bool:
        return any(p.match(rel) for p in self.include) and not any(p.match(rel) for p in self.exclude)

    def excludes_dir(self, rel_dir: str) -> bool:
        """True when everything under ``rel_dir`` is excluded (``dir/**`` style patterns)."""
        probe = rel_dir + "/\x00"
        return any(p.match(probe) for p in self.exclude)


def decode(data: bytes) -> str | None:
    """Text of a file, or None when it looks binary (a NUL byte in the first 8 KiB)."""
    if b"\x00" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")
