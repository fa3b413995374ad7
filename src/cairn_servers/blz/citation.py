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
