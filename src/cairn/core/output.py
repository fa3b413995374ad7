"""Render service results for people and programs: json, jsonl, text, csv, tsv, md.

Services return plain data (dicts, lists, dataclasses); adapters pick a format with
:func:`choose_format` and print :func:`render`'s string. Tables (csv, tsv, md) take a list of
dicts (columns = keys of the first row, then any new keys in order of appearance) or a list of lists
whose first row is the header.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

FORMATS = ("json", "jsonl", "text", "csv", "tsv", "md")
FORMAT_ALIASES = {"markdown": "md"}


def choose_format(flag: str | None, env_var: str | None = None, stream: TextIO | None = None) -> str:
    """The output format: the flag, else ``$env_var``, else text on a TTY and json when piped."""
    for candidate in (flag, os.environ.get(env_var) if env_var else None):
        if candidate:
            fmt = candidate.lower()
            fmt = FORMAT_ALIASES.get(fmt, fmt)
            if fmt not in FORMATS:
                from cairn.core.errors import InvalidInput

                raise InvalidInput(f"Unknown output format {candidate!r}. "
                                   f"Use one of: {', '.join(FORMATS)} (markdown = md).")
            return fmt
    stream = stream or sys.stdout
    return "text" if stream.isatty() else "json"


def plain(value: Any) -> Any:
    """Dataclasses (recursively) as dicts; everything else unchanged."""
    import dataclasses  # 6 ms at import: kept off the CLI's start-up path

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def render(data: Any, fmt: str) -> str:
    """``data`` rendered as ``fmt``; the result ends without a trailing newline."""
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
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def _table(data: Any) -> tuple[list[str], list[list[Any]]]:
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        return ["value"], [[data]]
    if data and all(isinstance(r, dict) for r in data):
        header: list[str] = []
        for row in data:
            for key in row:
                if key not in header:
                    header.append(key)
        return header, [[row.get(k) for k in header] for row in data]
    if data and all(isinstance(r, (list, tuple)) for r in data):
        return [str(h) for h in data[0]], [list(r) for r in data[1:]]
    return ["value"], [[v] for v in data]


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


def _markdown(header: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return _scalar(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


class ProgressBar:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal: a CLI's ``progress``
    callback ``(label, done, total)`` for a long service call (ctx sync and embed)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.last = 0.0

    def __call__(self, label: str, done: int, total: int) -> None:
        import time

        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self.last < 0.1:
            return
        self.last = now
        width = 30
        filled = int(width * done / total) if total else width
        self.stream.write(f"\r{label[:30]:<30} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
