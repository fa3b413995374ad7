"""Aliases and citations: ``alias:120-142``, ``alias:1-3,5-9`` (1-based, inclusive)."""

from __future__ import annotations

import re

from cairn_servers.core.errors import InvalidInput

_ALIAS = re.compile(r"[a-z0-9_][a-z0-9_-]{0,63}\Z")
# Windows device names: a folder called "con" or "aux" cannot be created or opened there.
_RESERVED = re.compile(r"(con|prn|aux|nul|com[0-9]|lpt[0-9])\Z")
_RANGE = re.compile(r"\s*(\d{1,9})\s*(?:-\s*(\d{1,9})\s*)?\Z")


def check_alias(alias: str) -> str:
    """``alias`` lower-cased, once it is safe to use as a directory name."""
    norm = alias.strip().lower()
    if not _ALIAS.match(norm):
        raise InvalidInput(
            f"Invalid alias {alias!r}: use 1-64 characters from a-z, 0-9, '_' and '-', not starting "
            "with '-' (for example: react, bun-docs).")
    if _RESERVED.match(norm):
        raise InvalidInput(f"Invalid alias {alias!r}: {norm.upper()} is a reserved device name on Windows "
                           f"(CON, PRN, AUX, NUL, COM0-9, LPT0-9). Choose another alias, e.g. {norm}-docs.")
    return norm


def parse_citation(text: str) -> tuple[str, list[tuple[int, int]]]:
    """``("alias", [(start, end), ...])`` from ``alias:120-142`` or ``alias:1-3,5-9``; a single
    line ``alias:7`` is ``7-7``. The alias is matched case-insensitively."""
    alias, sep, spec = text.strip().rpartition(":")
    if not sep or not alias:
        raise InvalidInput(f"Invalid citation {text!r}: expected alias:START-END, e.g. react:120-142.")
    alias = check_alias(alias)
    ranges: list[tuple[int, int]] = []
    for part in spec.split(","):
        m = _RANGE.match(part)
        if not m:
            raise InvalidInput(f"Invalid line range {part.strip()!r} in {text!r}: expected START-END "
                               "with 1-based line numbers, e.g. 120-142 or 1-3,5-9.")
        start = int(m.group(1))
        end = int(m.group(2)) if m.group(2) else start
        if start < 1 or end < start:
            raise InvalidInput(f"Invalid line range {part.strip()!r} in {text!r}: lines start at 1 and "
                               "END must not be below START.")
        ranges.append((start, end))
    return alias, ranges


def merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted ranges with overlapping or adjacent ones joined."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


# -- durable citations: alias:120-142@V and heading anchors alias#hooks/use-effect ---------------------

_VERSION = re.compile(r"v?(\d{1,9})\Z", re.IGNORECASE)
_ANCHOR = re.compile(r"[\w-]+(?:/[\w-]+)*\Z")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_HAS_CAMEL = re.compile(r"[a-z0-9][A-Z]")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_MDX_COMMENT = re.compile(r"\{/\*.*?\*/\}")  # react.dev's explicit heading ids: {/*initial-render*/}
_NOT_WORD = re.compile(r"[\W_]+")


class Ref:
    """A parsed citation: ``alias:ranges[@version]`` (``anchor`` None) or ``alias#anchor``."""

    __slots__ = ("alias", "ranges", "version", "anchor")

    def __init__(self, alias: str, ranges: list[tuple[int, int]], version: int | None = None,
                 anchor: str | None = None) -> None:
        self.alias, self.ranges, self.version, self.anchor = alias, ranges, version, anchor


def parse_ref(text: str) -> Ref:
    """A citation as :class:`Ref`: ``alias:120-142``, ``alias:1-3,5-9@4`` (lines as they were in
    version 4), or ``alias#hooks/use-effect`` (a section by its heading path)."""
    raw = text.strip()
    hash_at, colon_at = raw.find("#"), raw.find(":")
    if hash_at > 0 and (colon_at == -1 or hash_at < colon_at):
        alias, anchor = check_alias(raw[:hash_at]), raw[hash_at + 1:].strip().strip("/").lower()
        if "@" in anchor:
            raise InvalidInput(f"Invalid citation {text!r}: an anchor names a section in every version; drop "
                               f"the @VERSION (e.g. {alias}#{anchor.split('@')[0]}).")
        if not _ANCHOR.match(anchor):
            raise InvalidInput(f"Invalid anchor {anchor!r} in {text!r}: expected heading slugs separated by "
                               "'/', e.g. react#hooks/use-effect (find and toc give them).")
        return Ref(alias, [], None, anchor)
    body, at, version = raw.rpartition("@")
    if not at:
        return Ref(*parse_citation(raw))
    m = _VERSION.match(version.strip())
    if not m or int(m.group(1)) < 1:
        raise InvalidInput(f"Invalid version {version.strip()!r} in {text!r}: expected @N with N a version "
                           "number from 1 (e.g. react:120-142@3; find gives each hit's version).")
    return Ref(*parse_citation(body), int(m.group(1)))


def slug(text: str) -> str:
    """One heading as an anchor segment: link targets and punctuation dropped, camelCase split,
    lower-cased words joined by '-' (``useEffect`` -> ``use-effect``, ``Props & refs`` -> ``props-refs``);
    MDX comments (``{/*id*/}``) dropped."""
    if "](" in text:
        text = _LINK.sub(r"\1", text)
    if "{/*" in text:
        text = _MDX_COMMENT.sub("", text)
    if _HAS_CAMEL.search(text):  # most headings have none: searching is cheaper than substituting
        text = _CAMEL.sub(r"\1-\2", text)
    return _NOT_WORD.sub("-", text).strip("-").lower() or "_"


def section_anchors(rows: list[tuple[bool, tuple[str, ...]]]) -> list[str]:
    """The anchor of each section, from ``(starts at a heading, heading path)`` in file order: a
    section starting a heading (or a new path, such as a page's title) gets its path slugged, made
    unique with ``-2``, ``-3``... in file order; a section continuing the one before (a long
    section's later window) shares its anchor; one outside any heading has none ("")."""
    seen: set[str] = set()
    bases: dict[tuple[str, ...], str] = {}  # a path -> its slugged form (paths share their parents)

    def based(path: tuple[str, ...]) -> str:
        found = bases.get(path)
        if found is None:
            found = bases[path] = (based(path[:-1]) + "/" if len(path) > 1 else "") + slug(path[-1])
        return found

    out: list[str] = []
    prev_path: tuple[str, ...] | None = None
    prev = ""
    for head, path in rows:
        if not path:
            prev, prev_path = "", path
        elif head or path != prev_path:
            base = anchor = based(path)
            n = 2
            while anchor in seen:
                anchor = f"{base}-{n}"
                n += 1
            seen.add(anchor)
            prev, prev_path = anchor, path
        out.append(prev)
    return out
