"""Render service results for people and programs: json, jsonl, text, csv, tsv, md.

Services return plain data (dicts, lists, dataclasses); adapters pick a format with
:func:`choose_format` and print :func:`render`'s string. Each command reads its default format from
one environment variable of one pattern, ``<COMMAND>_OUTPUT_FORMAT`` (:func:`format_env`:
``BLZ_OUTPUT_FORMAT``, ``CTX_OUTPUT_FORMAT``, ``BRK_OUTPUT_FORMAT``); an older name (``BRK_FORMAT``)
is still read when the new one is unset. Tables (csv, tsv, md) take a list of
dicts (columns = keys of the first row, then any new keys in order of appearance) or a list of lists
whose first row is the header.
"""

from __future__ import annotations

import json
import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: `blz search --json` renders without importing typing
if TYPE_CHECKING:
    from typing import Any, TextIO

from cairn_servers.core.cli import FORMAT_ALIASES as FORMAT_ALIASES  # declared with the flags (core.cli)
from cairn_servers.core.cli import FORMATS as FORMATS
from cairn_servers.core.cli import PROGRESS_MODES as PROGRESS_MODES
from cairn_servers.core.cli import format_env as format_env

# Older names of the format variables, still read when the new name is unset.
OLD_FORMAT_ENV = {"BRK_OUTPUT_FORMAT": ("BRK_FORMAT",)}


def env_format(env_var: str) -> str | None:
    """``$env_var``, else the first set older name of it, else None (empty counts as unset)."""
    for name in (env_var, *OLD_FORMAT_ENV.get(env_var, ())):
        value = os.environ.get(name)
        if value:
            return value
    return None


def choose_format(flag: str | None, env_var: str | None = None, stream: TextIO | None = None,
                  formats: tuple[str, ...] = FORMATS) -> str:
    """The output format: the flag, else ``$env_var`` (or an older name), else text on a TTY and json when
    piped. A value outside ``formats`` is refused, from the flag or the variable alike (naming which)."""
    for candidate, origin in ((flag, None), (env_format(env_var) if env_var else None, env_var)):
        if candidate:
            fmt = candidate.lower()
            fmt = FORMAT_ALIASES.get(fmt, fmt)
            if fmt not in formats:
                from cairn_servers.core.errors import InvalidInput

                where = f" in ${origin}" if origin else ""
                raise InvalidInput(f"Unknown output format {candidate!r}{where}. "
                                   f"Use one of: {', '.join(formats)} (markdown = md).")
            return fmt
    stream = stream or sys.stdout
    return "text" if stream.isatty() else "json"


def plain(value: Any) -> Any:
    """Dataclasses (recursively) as dicts; everything else unchanged."""
    if hasattr(type(value), "__dataclass_fields__"):  # dataclasses.is_dataclass, without importing it
        import dataclasses  # 6 ms at import: paid only by a caller that has dataclasses already

        return dataclasses.asdict(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def json_bytes(data: Any) -> bytes:
    """``data`` as compact UTF-8 JSON (``separators=(",", ":")``, non-ASCII as is): an HTTP answer's body.

    By orjson, 5 to 15 times faster than ``json.dumps`` on a document's text, which is most of what a server
    spends on a large answer. A float that is not finite becomes ``null`` (never ``NaN``, which is not JSON).
    What orjson refuses (an integer past 64 bits, a key that is not a string, number or bool) goes through
    ``json.dumps`` instead, which writes the same JSON for everything both accept."""
    import orjson

    try:
        return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def render(data: Any, fmt: str, columns: list[str] | None = None) -> str:
    """``data`` rendered as ``fmt``; the result ends without a trailing newline. ``columns``: the header of
    a table (csv, tsv, md) when ``data`` has no rows to take it from."""
    data = plain(data)
    if fmt == "json":
        return json.dumps(data, indent=2, ensure_ascii=False, default=str)
    if fmt == "jsonl":
        rows = data if isinstance(data, list) else [data]
        return "\n".join(json.dumps(r, ensure_ascii=False, separators=(",", ":"), default=str) for r in rows)
    if fmt == "text":
        return _text(data)
    if fmt in ("csv", "tsv", "md"):
        header, rows = _table(data)
        if not rows and columns:
            header = list(columns)
        if fmt == "md":
            return _markdown(header, rows)
        return _delimited(header, rows, "," if fmt == "csv" else "\t")
    raise ValueError(f"unknown format {fmt!r}")


def _text(data: Any, indent: str = "") -> str:
    if isinstance(data, dict):
        lines = []
        for key, value in data.items():
            if isinstance(value, (dict, list)) and value:
                lines.append(f"{indent}{key}:")
                lines.append(_text(value, indent + "  "))
            else:
                lines.append(f"{indent}{key}: {_scalar(value)}")
        return "\n".join(lines)
    if isinstance(data, list):
        if data and all(isinstance(r, dict) for r in data):
            return "\n\n".join(_text(r, indent) for r in data)
        return "\n".join(f"{indent}- {_scalar(v)}" for v in data)
    return f"{indent}{_scalar(data)}"


def _scalar(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        return ", ".join(str(v) for v in value)  # a cell of names (an id's indexes, a hit's tags) reads as a list
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def _table(data: Any) -> tuple[list[str], list[list[Any]]]:
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        return ["value"], [[data]]
    if data and all(isinstance(r, dict) for r in data):
        data = [_flat(r) for r in data]
        header: list[str] = []
        for row in data:
            for key in row:
                if key not in header:
                    header.append(key)
        return header, [[row.get(k) for k in header] for row in data]
    if data and all(isinstance(r, (list, tuple)) for r in data):
        return [str(h) for h in data[0]], [list(r) for r in data[1:]]
    return ["value"], [[v] for v in data]


def _flat(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A row with nested objects spread into ``parent.child`` columns (a table cell holds one value)."""
    if not any(isinstance(v, dict) for v in row.values()):
        return row if not prefix else {f"{prefix}{k}": v for k, v in row.items()}
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _delimited(header: list[str], rows: list[list[Any]], sep: str) -> str:
    import csv
    import io

    buf = io.StringIO()
    if sep == "\t":
        # TSV: no quoting; tabs and newlines inside values become spaces so columns stay aligned.
        clean = [[_scalar(v).replace("\t", " ").replace("\n", " ") for v in r] for r in [header, *rows]]
        return "\n".join("\t".join(r) for r in clean)
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([[_scalar(v) for v in r] for r in rows])
    return buf.getvalue().rstrip("\n")


def render_columns(header: list[str], columns: list[list[Any]], fmt: str) -> str:
    """csv, tsv or md of column-major data (one list per column, e.g. brk's vecs): a header row, then
    one row per position; no trailing newline. The fast path for large numeric tables: values are
    written with ``str`` (None as empty), without quoting or escaping, so they must not hold the
    separator (numbers, dates and ids do not)."""
    rows = zip(*[_strings(col) for col in columns])
    if fmt == "md":
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    if fmt not in ("csv", "tsv"):
        raise ValueError(f"unknown table format {fmt!r}")
    sep = "," if fmt == "csv" else "\t"
    return sep.join(header) + "\n" + "\n".join(map(sep.join, rows))


def _strings(col: list[Any]) -> list[str]:
    if None in col:
        return ["" if v is None else str(v) for v in col]
    return list(map(str, col))


def _markdown(header: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return _scalar(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


class ProgressBar:
    """Progress of a long command on stderr, as ``brk index`` reports it: a bar on a terminal, JSON lines
    when stderr is piped (``mode`` auto), or either, or nothing (``bar``, ``json``, ``none``). A CLI's
    ``progress`` callback ``(label, done, total)``: ``ctx sync`` and ``ctx embed`` (per stage: a source,
    ``embedding``), ``blz add`` and ``blz update`` (``download``, bytes, total 0 when unknown; ``pages``, a
    crawl's pages tried of those known so far; one stage per source).

    JSON lines: ``{"event": "progress" | "done", "stage": label, "done": n, "total": m, "elapsed_s": s,
    "per_s": rate}``, at most one a second per stage, and always the one that completes a stage
    (``event: done``). An in-process stream without a file descriptor (a test's StringIO) gets nothing
    in auto mode."""

    def __init__(self, stream: TextIO | None = None, mode: str = "auto") -> None:
        import time

        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "json" if _has_fd(self.stream) else "none"
        self.mode = mode
        self.enabled = mode != "none"
        self.last = 0.0
        self.started: dict[str, float] = {}
        self.clock = time.monotonic

    def __call__(self, label: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = self.clock()
        start = self.started.setdefault(label, now)
        finished = total > 0 and done >= total
        if not finished and now - self.last < (0.1 if self.mode == "bar" else 1.0):
            return
        self.last = now
        if self.mode == "json":
            elapsed = now - start
            self.stream.write(json.dumps({"event": "done" if finished else "progress", "stage": label, "done": done,
                                          "total": total, "elapsed_s": round(elapsed, 2),
                                          "per_s": round(done / elapsed, 1) if elapsed > 0 else None}) + "\n")
            self.stream.flush()
            if finished:  # a later stage of the same name (blz update --all: one per source) starts its own clock
                del self.started[label]
            return
        width = 30
        if total > 0:
            filled = min(width, int(width * done / total))
            self.stream.write(f"\r{label[:30]:<30} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        else:
            self.stream.write(f"\r{label[:30]:<30} {done:,}")
        if finished:
            self.stream.write("\n")
            del self.started[label]
        self.stream.flush()


def _has_fd(stream: TextIO) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return False
    return True
