"""What every connector is built from: :class:`Entry` and :class:`Item`, the :class:`Connector`
protocol, the registry of connector types (:func:`register`), helpers for globs and text decoding, and
:func:`file_item`, which turns a file's bytes into an Item (documents through ``cairn_servers.ctx.extract``)
counting what it leaves out in :class:`Skips`.

The connector modules (``filesystem``, ``git``, ``script``) import this module, never the package,
so the package can import them (to register the built-ins) without an import cycle.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from cairn_servers.ctx.config import ConnectorConfig

if TYPE_CHECKING:
    from cairn_servers.ctx.reader import Reader


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
    sections: int = 0  # extracted pages/slides/sheets: headings at this level never share a chunk


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
    # Optional: "path: skipped: reason" lines for the sync report (a corrupt PDF, a file over its cap).
    # warnings: list[str]

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


MAX_WARNINGS = 200  # per source and sync; the rest are counted


class Skips:
    """What a scan left out: a count, and a warning line per file worth telling the user about."""

    def __init__(self) -> None:
        self.skipped = 0
        self.warnings: list[str] = []
        self._untold = 0
        self._reader: Reader | None = None

    def reader(self) -> Reader:
        """This connector's document reader: one worker process per connector (per source and sync)."""
        if self._reader is None:
            import weakref

            from cairn_servers.ctx.reader import Reader

            self._reader = Reader()
            weakref.finalize(self, self._reader.stop)  # the worker ends with the connector
        return self._reader

    def reset(self) -> None:
        self.skipped, self.warnings, self._untold = 0, [], 0

    def warn(self, rel: str, reason: str, *, skipped: bool = True) -> None:
        self.skipped += int(skipped)
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(f"{rel}: {'skipped: ' if skipped else ''}{reason}")
            return
        self._untold += 1
        more = f"... and {self._untold} more files (warnings are listed for the first {MAX_WARNINGS})"
        if self._untold == 1:
            self.warnings.append(more)
        else:
            self.warnings[-1] = more


def file_cap(rel: str, max_file_bytes: int, max_document_bytes: int) -> tuple[int, str]:
    """The size cap for a file and the config key that sets it."""
    from cairn_servers.ctx.extract import BINARY_FORMATS, format_of

    if format_of(rel) in BINARY_FORMATS:
        return max_document_bytes, "max_document_bytes"
    return max_file_bytes, "max_file_bytes"


def too_big(skips: Skips, rel: str, size: int, cap: tuple[int, str]) -> bool:
    """True (with a warning) when ``size`` is over ``cap``."""
    if size <= cap[0]:
        return False
    skips.warn(rel, f"{_mb(size)} is over the {_mb(cap[0])} cap ({cap[1]})")
    return True


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n:,} bytes"


def file_item(data: bytes, rel: str, skips: Skips, fmt: str | None = None, **fields: Any) -> Item | None:
    """An :class:`Item` for a file's bytes: text as is, documents through extraction.

    ``fmt`` overrides the format the name suggests (a Lua connector's ``format``). Returns None,
    counted in ``skips``, for a binary text file (silently, as always) or a document that gives no
    text (with a warning naming the file and the reason). ``fields`` are the other Item fields.
    """
    from cairn_servers.ctx.chunk import title_of

    fmt = fmt if fmt is not None else _format(rel)
    name = rel.rsplit("/", 1)[-1]
    if fmt is None:
        body = decode(data)
        if body is None:
            skips.skipped += 1
            return None
        return Item(source_id=rel, body=body, title=fields.pop("title", None) or title_of(body, name), **fields)
    from cairn_servers.ctx.extract import Skipped

    try:
        doc = skips.reader().extract(data, name, fmt)
    except Skipped as exc:
        skips.warn(rel, exc.reason)
        return None
    if doc.warning:
        skips.warn(rel, doc.warning, skipped=False)
    metadata = {**doc.metadata, **fields.pop("metadata", {})}
    if "author" in metadata and not fields.get("author"):
        fields["author"] = metadata.pop("author")
    metadata.pop("author", None)
    return Item(source_id=rel, body=doc.body, title=fields.pop("title", None) or doc.title or name,
                metadata=metadata, sections=doc.sections, **fields)


def _format(rel: str) -> str | None:
    from cairn_servers.ctx.extract import format_of

    return format_of(rel)


def decode(data: bytes) -> str | None:
    """Text of a file, or None when it looks binary (a NUL byte in the first 8 KiB)."""
    if b"\x00" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")
