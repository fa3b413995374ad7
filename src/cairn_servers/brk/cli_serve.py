"""brk commands of the query side: serve, run, mcp, price, and one command per operation of
``cairn_servers.brk.ops.OPS`` that has a CLI name (query, ids, indexes, vecid-indexes, ...).

Imports stay inside the command functions so ``brk --help`` and the indexing commands stay light.
"""

from __future__ import annotations

import os
import sys
import threading

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from pathlib import Path

from cairn_servers.brk.cli_common import format_arg, out_arg, out_dir, print_data
from cairn_servers.core.errors import CairnError

DEFAULT_BIND = "127.0.0.1:3110"
QUERY_FORMAT_HELP = ("json, jsonl (one object per row), text (= md), csv, tsv or md (markdown = md; default: "
                     "$BRK_OUTPUT_FORMAT, else md on a terminal, else json); a table of a date index starts with "
                     "its date column (--no-date: without it)")


def _ready(out: Path) -> Path:
    """Check the output directory is indexed and bring its computed vecs up to the raw tip."""
    from cairn_servers.brk.compute import compute
    from cairn_servers.brk.vecs import read_manifest

    read_manifest(out)  # a clear error when nothing was indexed there
    compute(out)
    return out


def _interface(args: argparse.Namespace) -> Any:
    from cairn_servers.brk.interface import Interface

    return Interface(_ready(out_dir(args)))


def _log(args: argparse.Namespace) -> None:
    from cairn_servers.core import log

    log.configure(args.log_level, "BRK_LOG", "brk")


def _cmd_serve(args: argparse.Namespace) -> int:
    from cairn_servers.brk.http import serve_dir
    from cairn_servers.core.serve import parse_bind

    _log(args)
    host, port = parse_bind(args.bind, 3110)
    serve_dir(_ready(out_dir(args)), host, port, allow_remote=args.allow_remote)
    return 0


def follow(blocks_dir: Path, out: Path, interval: float, stop: threading.Event,
           log: Callable[[str], None] | None = None, refresher: Any = None) -> None:
    """Index and compute new blocks every ``interval`` seconds until ``stop`` is set (and refresh daily
    prices in the background: ``cairn_servers.brk.prices.Refresher``)."""
    from cairn_servers.brk.compute import compute
    from cairn_servers.brk.indexer import Indexer
    from cairn_servers.core.errors import CairnError

    from cairn_servers.core.sanitize import scrub

    from cairn_servers.brk.prices import Refresher

    say = log or (lambda msg: print(f"brk: {msg}", file=sys.stderr, flush=True))
    indexer: Indexer | None = Indexer(blocks_dir, out)
    refresher = refresher or Refresher(out)  # daily prices in the background: never waited for, failures silent
    while not stop.is_set():
        refresher.poke()
        try:
            if indexer is None:  # reload from the last commit: a failed run left memory ahead of disk
                indexer = Indexer(blocks_dir, out)
            result = indexer.run()
            compute(out, blocks_dir=blocks_dir)
            if result.indexed_blocks or result.rolled_back_from is not None:
                say(f"indexed {result.indexed_blocks} blocks; tip {result.height}")
        except CairnError as exc:  # keep serving what is committed; try again next poll
            say(f"indexing failed: {scrub(exc.message)}")
            indexer = None
        stop.wait(interval)


def _cmd_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cairn_servers.brk.http import serve_dir
    from cairn_servers.brk.indexer import Indexer
    from cairn_servers.core.serve import parse_bind

    _log(args)
    host, port = parse_bind(args.bind, 3110)
    out = out_dir(args)
    from cairn_servers.brk.blocks.files import resolve_blocks_dir

    blocks_dir = resolve_blocks_dir(args.blocks_dir, args.network)
    from cairn_servers.brk.prices import Refresher

    refresher = Refresher(out)
    refresher.poke()  # prices arrive while the first pass indexes (from the next poll on a new store)
    result = Indexer(blocks_dir, out).run()  # the first pass before listening
    print(f"brk: indexed {result.indexed_blocks} blocks; tip {result.height}", file=sys.stderr, flush=True)
    _ready(out)
    stop = threading.Event()
    thread = threading.Thread(target=follow, args=(blocks_dir, out, args.interval, stop),
                              kwargs={"refresher": refresher}, daemon=True, name="brk-follow")
    thread.start()
    try:
        serve_dir(out, host, port, allow_remote=args.allow_remote)
    finally:
        stop.set()
        thread.join(30)
    return 0


class _OpenedLater:
    """The ``Interface`` of ``out``, opened (computing first if behind) right after ``initialize`` is
    answered: numpy, the catalog and the compute pass would otherwise delay the client's first reply by
    tens of milliseconds. Every tool call comes later, so it always finds the store open; if opening
    failed, each call reports why."""

    def __init__(self, out: str) -> None:
        self.out = out
        self._interface: Any = None
        self._error: Exception | None = None
        self._lock = threading.Lock()

    def open(self) -> None:
        from cairn_servers.brk.interface import Interface
        from cairn_servers.core import log
        from cairn_servers.core.errors import CairnError

        with self._lock:
            if self._interface is not None:
                return
            try:
                from pathlib import Path

                self._interface = Interface(_ready(Path(self.out)))
                log.info(f"opened the store (tip {self._interface.tip()})")
            except CairnError as exc:
                self._error = exc
                log.error(f"cannot open the store: {exc.message}")

    def __getattr__(self, name: str) -> Any:
        if self._interface is None:
            self.open()
            if self._interface is None:
                from cairn_servers.core.errors import StorageError

                raise StorageError(f"The brk store could not be opened: {getattr(self._error, 'message', '')}")
        return getattr(self._interface, name)


def _cmd_mcp(args: argparse.Namespace) -> int:
    from cairn_servers.brk.tools import build_server
    from cairn_servers.mcp.stdio import serve_stdio

    from cairn_servers.core.paths import data_path

    _log(args)
    out = os.path.expanduser(args.out) if args.out else data_path("brk", "BRK_DATA_DIR")  # str: no pathlib yet
    if not os.path.exists(os.path.join(out, "manifest.json")):  # fail now, not at the first tool call
        from cairn_servers.core.errors import StorageError

        raise StorageError(f"{out} has no manifest.json. Run `brk index --out {out}` first.")
    interface = _OpenedLater(out)
    return serve_stdio(build_server(interface), after_first=interface.open)  # type: ignore[arg-type]


# The end of an unknown-id message, as MCP and HTTP clients read it (cairn_servers.brk.interface)
MCP_LISTING = "List them with get_index_to_vecids."
# Indexes whose rows are periods of time: a table (csv, tsv, md) of them starts with a date column.
DATE_INDEXES = ("dateindex", "weekindex", "monthindex", "quarterindex", "semesterindex", "yearindex", "decadeindex")


def _query_format(flag: str | None) -> str:
    """``brk query``'s format: the flag, else $BRK_OUTPUT_FORMAT (or the older $BRK_FORMAT), checked as
    every command's is, else md on a terminal and json when piped (text = md)."""
    from cairn_servers.core.output import FORMAT_ALIASES, FORMATS, choose_format

    if flag:  # a value the operation does not know is refused by its declaration, as on MCP and HTTP
        fmt = FORMAT_ALIASES.get(flag.lower(), flag.lower())
    else:
        fmt = choose_format(None, "BRK_OUTPUT_FORMAT") if _env_set() else ("md" if sys.stdout.isatty() else "json")
    return "md" if fmt == "text" else fmt if fmt in FORMATS else flag or fmt


def _env_set() -> bool:
    from cairn_servers.core.output import env_format

    return env_format("BRK_OUTPUT_FORMAT") is not None


def _with_date(op: Any, wire: dict[str, Any]) -> None:
    """A table of a date index (``--index week --format md``) gets the ``date`` column first, unless the
    ids name it already or ``--no-date`` is given: rows of numbers without their period are unreadable."""
    from cairn_servers.brk.interface import Interface

    index = wire.get("index") or wire.get("i")
    ids = wire.get("ids") if "ids" in wire else wire.get("v")
    if not isinstance(index, str) or not isinstance(ids, (str, list)):
        return
    accepted = Interface.get_accepted_indexes()
    name = next((k for k, names in accepted.items() if index.strip().lower() in names), None)
    words = [w for part in ([ids] if isinstance(ids, str) else ids) if isinstance(part, str)
             for w in part.replace(",", " ").split()]
    if name in DATE_INDEXES and words and "date" not in words:
        wire["ids" if "ids" in wire else "v"] = ",".join(["date", *words])


def _cmd_op(args: argparse.Namespace) -> int:
    """Run the operation the sub-command declares: its arguments checked by the declaration (the same
    messages as MCP and HTTP), on the store of ``--out`` unless it needs none."""
    from cairn_servers.brk.ops import answer
    from cairn_servers.core.ops import cli_args

    op = args.op
    wire = cli_args(op, args)
    renders = "render" in op.extra
    jsonl = False
    if renders:  # the operation has its own renderer (get_vecs: json/csv/tsv/md) and --format is its parameter
        fmt = _query_format(wire.get("format"))
        jsonl = fmt == "jsonl"
        wire["format"] = "json" if jsonl else fmt
        if fmt in ("csv", "tsv", "md") and not getattr(args, "no_date", False):
            _with_date(op, wire)
    target = _interface(args) if op.extra.get("store", True) else None
    try:
        result = op.call(target, wire, "cli")
    except CairnError as exc:  # a message naming an MCP tool, in command-line words
        index = wire.get("index") or wire.get("i")
        exc.message = exc.message.replace(MCP_LISTING, f"List them with `brk ids --index {index}`."
                                          if isinstance(index, str) else "List them with `brk ids --index INDEX`.")
        raise
    if jsonl:  # one object per row: {"date": ..., "tx_count": ...}
        import json

        sys.stdout.write("".join(json.dumps(dict(zip(result.ids, row)), separators=(",", ":")) + "\n"
                                 for row in zip(*result.columns)))
    elif renders:
        text = answer(op, result)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        print_data(op.extra.get("cli_value", _same)(result), args.format)
    return 0


def _same(value: Any) -> Any:
    return value


def _cmd_price(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cairn_servers.brk import prices

    out = out_dir(args)
    if args.action == "import":
        if not args.file:
            from cairn_servers.core.errors import InvalidInput

            raise InvalidInput("brk price import needs a CSV file: brk price import FILE.csv --out DIR")
        summary = prices.import_csv(out, Path(args.file).expanduser())
    else:
        summary = prices.fetch(out, args.source, args.url)
    print_data(summary, args.format)
    return 0


def add_commands(sub: Any) -> None:
    from cairn_servers.brk.ops import OPS
    from cairn_servers.core.ops import add_subcommand

    def log_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--log-level", metavar="LEVEL",
                       help="diagnostics on stderr: error, warn (default), info, debug, off (or $BRK_LOG)")

    def bind_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--bind", default=DEFAULT_BIND, help=f"HOST:PORT to listen on (default {DEFAULT_BIND})")
        p.add_argument("--allow-remote", action="store_true", help="allow binding beyond loopback")
        log_arg(p)

    p = sub.add_parser("serve", help="serve the HTTP API, the web page and MCP at /mcp")
    out_arg(p)
    bind_args(p)
    import argparse

    from cairn_servers.core.connections import env_help

    p.epilog, p.formatter_class = env_help("BRK"), argparse.RawDescriptionHelpFormatter
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("run", help="index, then serve while following new blocks")
    p.add_argument("--blocks-dir", help="the node's blocks/ folder (default: $BRK_BLOCKS_DIR, else found as for "
                                        "`brk index`)")
    p.add_argument("--network", help="which default blocks/ folder to use (as for `brk index`)")
    out_arg(p)
    bind_args(p)
    p.add_argument("--interval", type=float, default=5.0,
                   help="seconds between polls for new blocks (daily prices are refreshed in the background when "
                        "online; $BRK_PRICES=off turns that off)")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("mcp", help="serve the MCP tools over stdio")
    out_arg(p)
    log_arg(p)
    p.set_defaults(func=_cmd_mcp)

    for op in OPS.on("cli"):
        p = add_subcommand(sub, op)
        if op.extra.get("store", True):
            out_arg(p)
        for action in p._actions:
            if action.option_strings:
                action.required = False  # a missing parameter is refused by the declaration, as on MCP and HTTP
            if action.dest == "op_format":
                action.help = QUERY_FORMAT_HELP
        if "render" in op.extra:  # --format is the operation's own parameter: the short forms point at it
            for name in ("json", "jsonl", "text"):
                p.add_argument(f"--{name}", dest="op_format", action="store_const", const=name,
                               help=f"same as --format {name}")
            p.add_argument("--no-date", action="store_true",
                           help="no date column first in a table (csv, tsv, md) of a date index")
        else:
            format_arg(p)
        if op.cli == "ids":  # the families of ids, described once (cairn_servers.brk.families)
            import argparse

            from cairn_servers.brk.families import help_text

            p.epilog = help_text()
            p.formatter_class = argparse.RawDescriptionHelpFormatter
        p.set_defaults(func=_cmd_op)

    p = sub.add_parser("price", help="import or fetch daily BTC/USD prices")
    p.add_argument("action", choices=["import", "fetch"])
    p.add_argument("file", nargs="?", help="CSV file (import): date,open,high,low,close")
    out_arg(p)
    p.add_argument("--source", default="kraken", help="fetch: kraken or binance (network access, opt-in)")
    p.add_argument("--url", help="fetch: override the source's endpoint URL")
    format_arg(p)
    p.set_defaults(func=_cmd_price)
