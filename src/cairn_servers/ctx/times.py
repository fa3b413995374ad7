"""Times in ctx: parsing what users and connectors give (dates, ISO 8601, unix seconds) and showing stored ones.

A leaf module (standard library only): the service, its adapters and the connectors all use it.
"""

from __future__ import annotations

from datetime import datetime, timezone

from cairn_servers.core.errors import InvalidInput


def iso(ts: int | None) -> str:
    """Unix seconds as ``YYYY-MM-DDTHH:MM:SSZ``, the year always four digits (``0500-01-01``: strftime's
    ``%Y`` writes ``500``, which ISO 8601 readers, :func:`parse_time` included, refuse)."""
    d = datetime.fromtimestamp(ts or 0, tz=timezone.utc)
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}Z"


# Dates ctx can store and compare: years 1 to 9999 (SQLite and numpy hold them as 64-bit integers).
MIN_TIME = -62_135_596_800  # 0001-01-01T00:00:00Z
MAX_TIME = 253_402_300_799  # 9999-12-31T23:59:59Z


def parse_time(value: str | int | float | None, name: str) -> int | None:
    """``2024-05-01``, an ISO 8601 datetime (UTC unless it says otherwise) or unix seconds.

    Anything else, or a time outside years 1-9999, is ``InvalidInput`` naming ``name``.
    """
    if value is None or value == "":
        return None
    hint = "Use YYYY-MM-DD, an ISO 8601 time or unix seconds (years 1 to 9999)."
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidInput(f"{name} must be a date string or unix seconds, not {type(value).__name__}. {hint}")
    if isinstance(value, str) and value.isascii() and value.isdigit():
        if len(value) > 20:
            raise InvalidInput(f"{name} {value[:24]}... is out of range. {hint}")
        value = int(value)
    if isinstance(value, int):
        if not MIN_TIME <= value <= MAX_TIME:
            shown = str(value) if len(str(value)) <= 24 else str(value)[:24] + "..."
            raise InvalidInput(f"{name} {shown} is out of range. {hint}")
        return value
    text = value.strip().replace("Z", "+00:00")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"{name} {value[:60]!r} is not a date. {hint}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    try:
        seconds = int(when.timestamp())
    except (OverflowError, OSError, ValueError):
        raise InvalidInput(f"{name} {value[:60]!r} is out of range. {hint}") from None
    if not MIN_TIME <= seconds <= MAX_TIME:  # 0001-01-01T00:00-05:00 is still in year 0 in UTC
        raise InvalidInput(f"{name} {value[:60]!r} is out of range. {hint}")
    return seconds
