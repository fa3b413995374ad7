"""What brk's two command modules share (``cli``: indexing, ``cli_serve``: serving and queries): the default
output directory, the ``--out``/``--format`` options and printing a result. Standard library only."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    import argparse
    from pathlib import Path
    from typing import Any

OUT_HELP = "output directory (default: $BRK_DATA_DIR or $XDG_DATA_HOME/brk)"


def default_out() -> Path:
    from cairn_servers.core.paths import data_dir

    return data_dir("brk", "BRK_DATA_DIR")


def out_dir(args: argparse.Namespace) -> Path:
    """``--out`` (``~`` expanded), else the default output directory."""
    from pathlib import Path

    return Path(args.out).expanduser() if args.out else default_out()


def out_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", help=OUT_HELP)


def format_arg(p: argparse.ArgumentParser) -> None:
    """``--format FORMAT`` and its short forms ``--json``/``--jsonl``/``--text`` (the three commands' convention)."""
    from cairn_servers.core.cli import add_format

    add_format(p, "brk")


def print_data(data: Any, fmt_flag: str | None) -> None:
    """``data`` on stdout as ``--format`` (or $BRK_OUTPUT_FORMAT, or text on a terminal and json when piped)."""
    from cairn_servers.core.output import choose_format, render
    from cairn_servers.core.sanitize import scrub

    print(scrub(render(data, choose_format(fmt_flag, "BRK_OUTPUT_FORMAT"))))
