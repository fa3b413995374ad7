"""blz: local llms.txt documentation search with exact line citations.

Output is text on a terminal and JSON when piped; --format (json, jsonl, text, csv, tsv, md) or its
short forms --json, --jsonl and --text override it (or set BLZ_OUTPUT_FORMAT). Data lives in
$BLZ_DATA_DIR, else $XDG_DATA_HOME/blz.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any, TextIO

from cairn_servers.core.errors import CairnError

if TYPE_CHECKING:
    import argparse  # imported by build_parser: `blz mcp` starts without it

# Only these imports are paid on every call; everything else is imported by the command using it.

def _store() -> Any:
    from cairn_servers.blz.store import Store
    from cairn_servers.core.paths import data_dir

    return Store(data_dir("blz", "BLZ_DATA_DIR"))


def _help_line(summary: str) -> str:
    """An operation's summary as a command list line: ``Totals over all sources.`` -> ``totals over all sources``."""
    line = summary.rstrip(".")
    return line if line[1:2].isupper() else line[:1].lower() + line[1:]


def _parser_class(out: TextIO, err: TextIO) -> type[argparse.ArgumentParser]:
    """An ArgumentParser printing help to ``out`` and usage errors to ``err`` (not sys.*), so that
    blz can run in-process (tests, benchmarks) and capture everything."""
    from cairn_servers.core.cli import parser_class

    class Parser(parser_class()):  # type: ignore[misc]
        def _print_message(self, message: str, file: Any = None) -> None:
            if message:
                (err if file is sys.stderr else out).write(message)

        def _parse_optional(self, arg_string: str) -> Any:
            # A search query excluding its first word ("-class hooks") is one argument holding a space.
            # argparse reads it as an option when its first letters are a short one ("-hooks x" as -h,
            # "-sync x" as -s with "ync x"); an argument with a space before any "=" is never an option.
            if arg_string[:1] == "-" and arg_string[1:2] != "-" and " " in arg_string.split("=", 1)[0]:
                return None
            return super()._parse_optional(arg_string)

    return Parser


def build_parser(out: TextIO | None = None, err: TextIO | None = None,
                 only: str | None = None) -> argparse.ArgumentParser:
    """``blz``'s parser: one sub-command per operation of :data:`cairn_servers.blz.ops.OPS` with a CLI name
    (arguments, flags and help from the declaration), plus ``mcp``. With ``only``, that sub-command
    alone: argparse builds a whole parser per sub-command, and ``blz search`` needs one of fifteen."""
    import argparse

    from cairn_servers.blz.ops import OPS
    from cairn_servers.core.ops import add_subcommand

    from cairn_servers.core.cli import EXIT_CODES, add_completion, add_format, add_version

    P = _parser_class(out or sys.stdout, err or sys.stderr)
    fmt = P(add_help=False)
    add_format(fmt.add_argument_group("output"), "blz", suppress=True)

    p = P(prog="blz", description=__doc__, epilog=EXIT_CODES,
          formatter_class=argparse.RawDescriptionHelpFormatter, parents=[fmt])
    add_version(p, "blz")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=P)
    for op in OPS.on("cli"):
        if only is None or op.cli == only:
            sp = add_subcommand(sub, op, parents=[fmt], help=op.extra.get("help") or _help_line(op.summary))
            if any(p.name == "progress" for p in op.params):  # blz add: the download
                from cairn_servers.core.cli import PROGRESS_MODES

                sp.add_argument("--progress", choices=PROGRESS_MODES, default="auto",
                                help="download progress on stderr: auto (a bar on a terminal, else JSON lines), "
                                     "bar, json or none")
    if only is not None and only != "mcp":
        return p
    add_completion(sub, "blz")
    m = sub.add_parser("mcp", help="serve the MCP tools over stdio: find, toc, diff, list-sources, lookup, "
                       "source-add, source-refresh, run-command, learn-blz")
    m.add_argument("--log-level", metavar="LEVEL",
                   help="diagnostics on stderr: error, warn (default), info, debug, off (or $BLZ_LOG)")
    return p


def _mcp(log_level: str | None, err: TextIO) -> int:
    """``blz mcp [--log-level LEVEL]``: serve over stdio until stdin closes."""
    from cairn_servers.core import log

    try:
        log.configure(log_level, "BLZ_LOG", "blz")
    except CairnError as exc:
        from cairn_servers.core.cli import fail

        return fail("blz", exc, err)
    from cairn_servers.blz.tools import serve

    return serve()


def run(argv: list[str], out: TextIO, err: TextIO) -> int:
    """Run blz with ``argv``, writing to ``out``/``err``; returns the exit code (no sys.exit)."""
    if argv == ["mcp"]:  # the server's start-up path: skip building the parser
        return _mcp(None, err)
    from cairn_servers.blz.ops import OPS

    command = argv[0] if argv and OPS.by_surface_name("cli", argv[0]) is not None else None
    parser = build_parser(out, err, only=command)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version (0) or a usage error (2)
        return int(exc.code or 0)
    if not args.command:
        parser.print_help(out)
        return 0
    if args.command == "mcp":
        return _mcp(args.log_level, err)
    if args.command == "completion":
        from cairn_servers.core.cli import completion_script

        out.write(completion_script(build_parser(out, err), args.shell))
        return 0
    from cairn_servers.blz.render import run_op
    from cairn_servers.core.ops import cli_args

    fmt = getattr(args, "format", None)
    if not fmt:
        from cairn_servers.core.output import choose_format

        try:
            fmt = choose_format(None, "BLZ_OUTPUT_FORMAT", out)
        except CairnError as exc:
            from cairn_servers.core.cli import fail

            return fail("blz", exc, err)
    progress = None
    if getattr(args, "progress", None):
        from cairn_servers.core.output import ProgressBar

        bar = ProgressBar(err, mode=args.progress)
        # a download counts bytes, a crawl (blz add --crawl, blz update of a crawled source) pages tried / known
        progress = ((lambda got, total, unit: bar("pages" if unit == "pages" else "download", got, total or 0))
                    if bar.enabled else None)
    try:
        return run_op(args.op, _store(), cli_args(args.op, args), fmt, out, err, progress=progress)
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["mcp"]:  # the stdio server's start-up path: nothing more to import before serving
        return _mcp(None, sys.stderr)
    from cairn_servers.core.cli import guard

    return guard(lambda: run(args, sys.stdout, sys.stderr))

if __name__ == "__main__":
    sys.exit(main())
