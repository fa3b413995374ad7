"""A command line read without argparse, for the stdio servers' start-up (``brk mcp``, ``ctx serve mcp
--stdio``): argparse, with its help formatter's ``shutil``, ``bz2``, ``lzma`` and ``locale``, and a
whole CLI's sub-commands built before the first reply, would cost those servers a good part of their
start-up. Only the plain forms are read here; anything else goes to the real parser. Standard library
only (nothing at all is imported).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any


def plain_flags(args: list[str], options: dict[str, str], switches: dict[str, str] | None = None
                ) -> dict[str, Any] | None:
    """``args`` as ``{dest: value}`` when they are only ``options`` (``--flag VALUE`` or ``--flag=VALUE``)
    and ``switches`` (``--flag``, true when given), each at most once; flags maps to dest. None for
    anything else, which the caller hands to argparse: ``--help``, an unknown flag (argparse's
    abbreviations included), a repeated one, a missing or empty value, or a value starting with ``-``
    (argparse would read it as a flag). Absent flags are left out of the result."""
    switches = switches or {}
    found: dict[str, Any] = {}
    rest = list(args)
    while rest:
        flag, eq, value = rest[0].partition("=")
        if flag in switches and not eq:
            if switches[flag] in found:
                return None
            found[switches[flag]] = True
            rest = rest[1:]
            continue
        dest = options.get(flag)
        if dest is None or dest in found:
            return None
        if not eq:
            if len(rest) < 2 or rest[1].startswith("-"):
                return None
            value, rest = rest[1], rest[1:]
        if not value:
            return None
        found[dest] = value
        rest = rest[1:]
    return found
