"""The command-line conventions ``blz``, ``ctx`` and ``brk`` share, in one place:

* ``--version`` prints ``<command> 0.1.0`` (:func:`add_version`);
* ``--format FORMAT`` (json, jsonl, text, csv, tsv, md; markdown = md) with ``--json``, ``--jsonl`` and
  ``--text`` as its short forms (:func:`add_format`); the default comes from ``<COMMAND>_OUTPUT_FORMAT``,
  checked as ``--format`` is (:func:`cairn_servers.core.output.choose_format`), else text on a terminal
  and JSON when piped;
* every error is one line on stderr, ``<command>: error: <message>`` (:func:`fail`), with the exit
  code of its kind (:data:`EXIT_CODES`); a search or query with no results is not an error: exit 0
  and an empty answer (``[]``, a header row, ``No results.``);
* ``completion bash|zsh|fish`` prints a completion script generated from the parser (:func:`add_completion`);
* a reader that goes away (``brk status | head -1``) ends the command quietly with exit 141, 128 +
  SIGPIPE, as a C tool killed by the signal would (:func:`guard`).

Standard library only, and nothing beyond ``sys``/``os`` at import: every command imports it.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import Any, NoReturn, TextIO

    from cairn_servers.core.errors import CairnError

# The exit codes of every command, as their --help epilog lists them (the classes in core/errors.py).
EXIT_CODES = """\
exit codes:
  0  ok (also a search or query with no results: an empty answer, not an error)
  1  internal error          2  invalid input or usage  3  not found
  4  conflict (exists)       5  network error           6  timeout
  7  storage error (or validation found problems)       8  extension (Lua) error
  9  too large               10 unauthorized            130 interrupted (Ctrl-C)
  141 the reader of the output went away (e.g. `| head -1`)"""

BROKEN_PIPE = 141  # 128 + SIGPIPE

# The output formats of every command (rendered by cairn_servers.core.output), here with the flags so
# that building a parser does not import the renderers (and json).
FORMATS = ("json", "jsonl", "text", "csv", "tsv", "md")
FORMAT_ALIASES = {"markdown": "md"}
PROGRESS_MODES = ("auto", "bar", "json", "none")  # --progress (cairn_servers.core.output.ProgressBar)


def format_env(command: str) -> str:
    """The variable holding ``command``'s default output format: ``BLZ_OUTPUT_FORMAT`` for ``blz``."""
    return f"{command.upper()}_OUTPUT_FORMAT"


def version_text(prog: str) -> str:
    """What ``<prog> --version`` prints: ``blz 0.1.0``."""
    from cairn_servers import __version__

    return f"{prog} {__version__}"


def add_version(parser: argparse.ArgumentParser, prog: str) -> None:
    """``--version`` on the top-level parser."""
    parser.add_argument("--version", action="version", version=version_text(prog),
                        help="print the version and exit")


def parser_class(base: type[argparse.ArgumentParser] | None = None) -> type[argparse.ArgumentParser]:
    """An ArgumentParser (``base``, else argparse's) whose usage errors say ``blz: error: ...`` for
    every sub-command too (argparse would say ``blz list: error:``): one prefix for every error."""
    import argparse

    class Parser(base or argparse.ArgumentParser):  # type: ignore[misc]
        def error(self, message: str) -> NoReturn:
            self.print_usage(sys.stderr)
            self._print_message(f"{self.prog.split()[0]}: error: {message}\n", sys.stderr)
            raise SystemExit(2)

    return Parser


def format_value(text: str) -> str:
    """An argparse ``type`` for ``--format``: lower-cased, ``markdown`` read as ``md``."""
    value = text.lower()
    return FORMAT_ALIASES.get(value, value)


def add_format(parser: argparse.ArgumentParser | Any, command: str, *, formats: tuple[str, ...] | None = None,
               dest: str = "format", suppress: bool = False, help: str | None = None) -> None:
    """``--format FORMAT`` and its short forms ``--json``/``--jsonl``/``--text``, mutually exclusive, on
    ``parser`` (a parser or an argument group). ``suppress``: leave ``dest`` unset when not given (for
    options a parent parser shares with its sub-commands)."""
    import argparse

    formats = formats or FORMATS
    default = argparse.SUPPRESS if suppress else None
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--format", dest=dest, default=default, type=format_value, choices=formats,
                       metavar="FORMAT",
                       help=help or f"output format: {', '.join(formats)} (markdown = md; default: "
                       f"${format_env(command)}, else text on a terminal, json when piped)")
    for name in ("json", "jsonl", "text"):
        group.add_argument(f"--{name}", dest=dest, action="store_const", const=name, default=default,
                           help=f"same as --format {name}")


SHELLS = ("bash", "zsh", "fish")


def add_completion(subparsers: Any, prog: str) -> None:
    """The ``completion SHELL`` sub-command: a completion script generated from the parser by shtab."""
    p = subparsers.add_parser(
        "completion", help="print the shell completion script (bash, zsh or fish)",
        description=f"Print a completion script for {prog}, generated from its parser. Install it with, e.g.:\n"
                    f"  bash: {prog} completion bash > ~/.local/share/bash-completion/completions/{prog}\n"
                    f"  zsh:  {prog} completion zsh > \"${{fpath[1]}}/_{prog}\"\n"
                    f"  fish: {prog} completion fish > ~/.config/fish/completions/{prog}.fish")
    p.add_argument("shell", choices=SHELLS, help="bash, zsh or fish")
    import argparse

    p.formatter_class = argparse.RawDescriptionHelpFormatter


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """``parser``'s completion script for ``shell`` (shtab; imported here, never at start-up)."""
    import shtab

    return str(shtab.complete(parser, shell=shell))


def fail(prog: str, exc: CairnError, err: TextIO | None = None) -> int:
    """Report ``exc`` as ``<prog>: error: <message>`` on ``err`` (stderr); returns its exit code. Re-raises
    when ``CAIRN_RAISE_ERRORS`` asks for tracebacks."""
    from cairn_servers.core.errors import raise_errors
    from cairn_servers.core.sanitize import scrub

    if raise_errors():
        raise exc
    (err or sys.stderr).write(f"{prog}: error: {scrub(exc.message)}\n")
    return exc.exit_code


def guard(body: Callable[[], int]) -> int:
    """Run a command's ``body`` and flush stdout, ending quietly when the reader went away: exit 141
    instead of a ``BrokenPipeError`` traceback (and no "Exception ignored" at interpreter exit),
    130 on Ctrl-C."""
    try:
        code = body()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return BROKEN_PIPE
    except KeyboardInterrupt:
        return 130


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the flush at interpreter exit finds nothing to fail on."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError):  # no file descriptor (an in-process test's StringIO): nothing to flush
        pass
