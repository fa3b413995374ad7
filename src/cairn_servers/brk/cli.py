"""brk: index a Bitcoin node's block files into columnar vecs.

Commands:
  brk index  [--blocks-dir DIR] --out DIR [--watch] [--jobs N]
                                                     index new blocks (resumes; rolls back on reorgs)
  brk fetch  --rpc-url URL --blocks-dir DIR          mirror a bitcoind's best chain into blk files
  brk sample --blocks N --out DIR [--txs-per-block K] [--pay ADDR:SATS[:COUNT]] [--mainnet]
                                                     write a regtest sample chain (or mainnet 0..589)
  brk status --out DIR                               the committed tip and vec lengths
  brk serve  --out DIR [--bind 127.0.0.1:3110]       HTTP API, web page and MCP (POST /mcp)
  brk run    --blocks-dir DIR --out DIR              index, then serve while following new blocks
  brk mcp    --out DIR [--log-level debug]           MCP over stdio (diagnostics on stderr)
  brk query  --index date --ids close,tx_count --from -30 --format md
  brk ids    [--index INDEX] [--page N]              vec ids (1,000 per page)
  brk indexes                                        indexes and the names they accept
  brk vecid-indexes ID                               the indexes one vec id is on
  brk index-count | id-count | vec-count | version   counts and the version
  brk price  import FILE.csv | fetch --source kraken  daily BTC/USD prices
  brk completion bash|zsh|fish                        a shell completion script
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the stdio servers' start-up path
if TYPE_CHECKING:
    from typing import Any

from cairn_servers.brk.cli_common import format_arg, out_arg, out_dir, print_data
from cairn_servers.core.errors import CairnError

if TYPE_CHECKING:
    import argparse  # imported by build_parser; `brk mcp` starts without it


class _StopOnSignal:
    """SIGINT/SIGTERM ask the indexer to stop at the next block (its batch is committed); a second one stops now."""

    def __init__(self, indexer: Any, say: Any) -> None:
        import signal
        import threading

        self.indexer = indexer
        self.say = say
        self.signum: int | None = None
        self.event = threading.Event()
        self._old = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:  # asked twice: stop now (the last commit stays; nothing is lost)
            raise KeyboardInterrupt
        self.signum = signum
        self.indexer.stop_requested = True
        self.event.set()
        self.say("stopping at the next committed height (press Ctrl-C again to stop at once)")

    def restore(self) -> None:
        """Put the old handlers back; after a signal the process is exiting, and ignores any further one.

        (A late Ctrl-C must not kill a clean exit: Python resets its own handlers to the default action
        while shutting down, but leaves an ignored signal ignored.)
        """
        import signal

        for sig, old in self._old.items():
            signal.signal(sig, old if self.signum is None else signal.SIG_IGN)


def _cmd_index(args: argparse.Namespace) -> int:
    import signal
    from pathlib import Path

    from cairn_servers.brk.blocks.files import resolve_blocks_dir
    from cairn_servers.brk.indexer import Indexer
    from cairn_servers.brk.progress import Progress

    blocks_dir = resolve_blocks_dir(args.blocks_dir, args.network)
    out = out_dir(args)
    progress = Progress(args.progress)
    # One Indexer for every poll: its header set, chain and txid map stay in step with the store.
    indexer = Indexer(blocks_dir, out, durable=not args.no_fsync, commit_blocks=args.commit_every,
                      cache_mb=args.cache_mb, log=progress.log,
                      progress=progress if progress.mode != "none" else None)
    progress.known(indexer.store.lengths["height_to_blockhash"] - 1)  # a run with nothing new reports the tip
    stopper = _StopOnSignal(indexer, progress.log)
    jobs = args.jobs
    if jobs is None:
        from cairn_servers.brk.pipeline import default_jobs

        jobs = default_jobs()
    if jobs >= 2 and not args.no_compute:
        try:
            return _index_pipeline(args, jobs, out, blocks_dir, indexer, progress, stopper)
        finally:
            stopper.restore()
    refresher = None
    if args.watch:  # daily prices in the background (never waited for; failures keep the stored ones)
        from cairn_servers.brk.prices import Refresher

        refresher = Refresher(out)
    try:
        while True:
            if refresher is not None:
                refresher.poke()
            result = indexer.run(max_blocks=args.max_blocks)
            if not args.no_compute and not indexer.stop_requested:
                from cairn_servers.brk.compute import compute

                compute(out, durable=not args.no_fsync, blocks_dir=blocks_dir,
                        progress=progress if progress.mode != "none" else None,
                        stop=lambda: indexer.stop_requested)
            if indexer.stop_requested:
                return _stopped(args, progress, result, stopper)
            if not args.watch or result.indexed_blocks or result.rolled_back_from is not None or result.invalid:
                progress.finish()
                print_data(result.to_dict(), args.format)
                sys.stdout.flush()
            if not args.watch:
                return 0
            if stopper.event.wait(args.interval):
                print(f"brk: stopped at height {result.height} (committed).", file=sys.stderr)
                return 130 if stopper.signum == signal.SIGINT else 0
            progress = Progress(args.progress, quiet_until_work=True)
            progress.known(indexer.store.lengths["height_to_blockhash"] - 1)
            indexer.progress = progress if progress.mode != "none" else None
    finally:
        stopper.restore()


def _stopped(args: argparse.Namespace, progress: Any, result: Any, stopper: _StopOnSignal) -> int:
    import signal

    progress.finish("stopped")
    data = result.to_dict()
    data["stopped"] = signal.Signals(stopper.signum or signal.SIGINT).name
    print_data(data, args.format)
    print(f"brk: stopped at height {result.height} (committed). Run the same command again to resume.",
          file=sys.stderr)
    return 130 if stopper.signum == signal.SIGINT else 0


def _index_pipeline(args: argparse.Namespace, jobs: int, out: Any, blocks_dir: Any, indexer: Any, progress: Any,
                    stopper: _StopOnSignal) -> int:
    """``brk index --jobs N`` (N >= 2): the computed passes run in stage processes beside the indexer
    (``cairn_servers.brk.pipeline``), fed each committed height; the result is printed once they caught up."""
    import signal

    from cairn_servers.brk.pipeline import Pipeline, StageFailed
    from cairn_servers.brk.progress import Progress

    def failed() -> None:  # a stage died: the indexer stops at its next block, then the error is raised
        indexer.stop_requested = True
        stopper.event.set()

    def stopped_by_stage() -> None:  # a stage was sent SIGTERM on its own: the whole job stops
        if stopper.signum is None:
            stopper.signum = signal.SIGTERM
        indexer.stop_requested = True
        stopper.event.set()

    def stop() -> bool:
        return bool(indexer.stop_requested)

    pipeline = Pipeline(out, blocks_dir, jobs, durable=not args.no_fsync,
                        progress=progress if progress.mode != "none" else None, on_failure=failed,
                        on_stop=stopped_by_stage)
    closed = False
    refresher = None
    if args.watch:
        from cairn_servers.brk.prices import Refresher

        refresher = Refresher(out)
    try:
        indexer.on_commit = lambda: pipeline.committed(stop)
        indexer.before_rollback = pipeline.hold
        if progress.mode != "none":
            indexer.progress = pipeline.index_event
        pipeline.committed(stop)  # the stages catch up with what earlier runs committed
        while True:
            if refresher is not None:
                refresher.poke()
            result = indexer.run(max_blocks=args.max_blocks)
            if not indexer.stop_requested and not args.watch:
                pipeline.sync(stop)
            if pipeline.failed is not None:  # reported by close() below
                indexer.stop_requested = True
            elif (result.indexed_blocks or result.rolled_back_from is not None) and not indexer.stop_requested:
                pipeline.committed(stop, now=True)  # --watch: the stages catch up between polls
            if indexer.stop_requested:
                closed = True
                try:
                    pipeline.close(stop=True)
                except StageFailed:  # a stage died: the last progress line says where things stand
                    progress.finish("stopped")
                    raise
                return _stopped(args, progress, result, stopper)
            if not args.watch or result.indexed_blocks or result.rolled_back_from is not None or result.invalid:
                if not args.watch:
                    closed = True
                    pipeline.close()
                progress.finish()
                print_data(result.to_dict(), args.format)
                sys.stdout.flush()
            if not args.watch:
                if not closed:
                    closed = True
                    pipeline.close()
                return 0
            if stopper.event.wait(args.interval):
                closed = True
                pipeline.close(stop=True)
                print(f"brk: stopped at height {result.height} (committed).", file=sys.stderr)
                return 130 if stopper.signum == signal.SIGINT else 0
            if result.indexed_blocks or result.rolled_back_from is not None or result.invalid:
                # A new reporter after a poll that said something (an idle poll keeps the one the stages use).
                progress = Progress(args.progress, quiet_until_work=True)
                progress.known(indexer.store.lengths["height_to_blockhash"] - 1)
                pipeline.set_progress(progress if progress.mode != "none" else None)
                indexer.progress = pipeline.index_event if progress.mode != "none" else None
    except BaseException as exc:
        if not closed:  # an error: the stages stop first, so the error stays the last line on stderr
            pipeline.abandon(wait=0.0 if isinstance(exc, KeyboardInterrupt) else 30.0)
        raise


def _jobs(text: str) -> int:
    import argparse

    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of processes, 1 or more (got {text!r})")
    return n


def _cmd_sample(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cairn_servers.brk.sample import parse_pay, write_mainnet_sample, write_sample

    if args.mainnet:
        summary = write_mainnet_sample(Path(args.out).expanduser())
    else:
        summary = write_sample(Path(args.out).expanduser(), args.blocks, seed=args.seed,
                               max_file_bytes=args.max_file_bytes, txs_per_block=args.txs_per_block,
                               pool_cap=args.pool_cap, pay=[p for text in args.pay for p in parse_pay(text)],
                               spend=args.spend, change=args.change)
    print_data(summary, args.format)
    return 0


def _cmd_fetch(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cairn_servers.brk.blocks.rpc import RpcClient, mirror

    client = RpcClient(args.rpc_url, cookie=args.rpc_cookie, user=args.rpc_user,
                       password=os.environ.get("BRK_RPC_PASSWORD", args.rpc_password or ""), timeout=args.timeout)
    summary = mirror(client, Path(args.blocks_dir).expanduser(), network=args.network, max_blocks=args.max_blocks)
    print_data(summary, args.format)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cairn_servers.brk.vecs import read_manifest

    out = out_dir(args)
    manifest = read_manifest(out)
    meta = manifest.get("meta", {})
    print_data({
        "out": str(out),
        "network": meta.get("network"),
        "height": meta.get("height", -1),
        "tip": meta.get("tip", ""),
        "invalid_blocks": len(meta.get("invalid", [])),
        "vecs": {name: v["length"] for name, v in manifest["vecs"].items()},
    }, args.format)
    return 0


def build_parser() -> argparse.ArgumentParser:
    import argparse

    from cairn_servers.core.cli import EXIT_CODES, add_version, parser_class

    parser = parser_class()(prog="brk", description=__doc__, epilog=EXIT_CODES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_version(parser, "brk")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("index", help="index new blocks from a blocks/ directory",
                       description="Index new blocks of a node's blocks/ directory (read in place, never written). "
                                   "Progress goes to stderr: a bar on a terminal, JSON lines when piped "
                                   "(docs/brk.md lists the fields). Ctrl-C or SIGTERM stops at a committed "
                                   "height (exit 130 or 0); the next run resumes there.")
    p.add_argument("--blocks-dir",
                   help="the node's blocks/ folder (default: $BRK_BLOCKS_DIR, else found where Bitcoin Core keeps "
                        "it: ~/.bitcoin, ~/Library/Application Support/Bitcoin, %%LOCALAPPDATA%%\\Bitcoin, "
                        "%%APPDATA%%\\Bitcoin, with testnet3/testnet4/signet/regtest sub-directories)")
    p.add_argument("--network", help="mainnet, testnet (testnet3), testnet4, signet or regtest: which default "
                                     "blocks/ folder to use; with --blocks-dir, the network its blocks must be")
    out_arg(p)
    p.add_argument("--watch", action="store_true",
                   help="keep polling for new blocks (and refresh daily prices in the background when online; "
                        "$BRK_PRICES=off turns that off)")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between polls with --watch")
    p.add_argument("--commit-every", type=int, default=10_000,
                   help="commit at least every N blocks (default 10000; also every 3 s and 32 MB of block data)")
    p.add_argument("--max-blocks", type=int, help="stop after indexing this many blocks")
    p.add_argument("--no-fsync", action="store_true", help="skip fsync on commit (faster; unsafe on power loss)")
    p.add_argument("--cache-mb", type=int, default=64,
                   help="block cache of the transaction index (RocksDB), in MB (default 64)")
    p.add_argument("--no-compute", action="store_true", help="index raw vecs only (no computed datasets)")
    p.add_argument("--jobs", type=_jobs, metavar="N",
                   help="processes to use (default: the machine's cores). 1: the computed datasets are computed "
                        "after indexing, in this process; 2 or more: they run in two more processes beside the "
                        "indexer (the address and block explorer passes in one), following each committed height")
    p.add_argument("--progress", choices=("auto", "bar", "json", "none"), default="auto",
                   help="progress on stderr: auto (a bar on a terminal, else JSON lines), bar, json or none")
    format_arg(p)
    p.set_defaults(func=_cmd_index)

    p = sub.add_parser("sample", help="write a deterministic regtest sample chain",
                       description="Write a deterministic regtest-magic chain (blk*.dat files) for brk index. With "
                                   "--pay it also pays given addresses, and with --spend spends some of them again "
                                   "with change, so a wallet sees receives, spends and change. Block 0 is the "
                                   "sample's own genesis, not Bitcoin Core's regtest one: give a wallet library "
                                   "its hash (brk serve: GET /api/block-height/0).")
    p.add_argument("--blocks", type=int, default=1000, help="number of blocks (default 1000)")
    p.add_argument("--out", required=True, help="directory to write blk*.dat files into")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--max-file-bytes", type=int, default=128 << 20, help="start a new blk file past this size")
    p.add_argument("--txs-per-block", type=int, metavar="K",
                   help="a mainnet-density chain: every block after the first 100 holds exactly K transactions "
                        "(at most 3000, which keep a block under 4 M weight units); default: a sparse chain of 0-8 per block")
    p.add_argument("--pool-cap", type=int, default=1 << 18,
                   help="with --txs-per-block: at most this many spendable coins kept by the generator "
                        "(bounds its memory; default 262144)")
    p.add_argument("--pay", action="append", default=[], metavar="ADDR:SATS[:COUNT]",
                   help="pay SATS to a regtest address (bcrt1..., m/n... or 2...), COUNT times (default 1), one "
                        "transaction each, spread evenly over heights 101 to the last but one; repeatable, paid in "
                        "the order given (sparse chain only)")
    p.add_argument("--spend", type=int, default=0, metavar="N",
                   help="spend the first N paid outputs again, each 1-12 blocks after it was paid: most of it to "
                        "an outside address, the rest as change to the --change addresses (default 0)")
    p.add_argument("--change", action="append", default=[], metavar="ADDR",
                   help="where the change of --spend goes, each address in turn; repeatable (default: no change)")
    p.add_argument("--mainnet", action="store_true", help="write the bundled mainnet heights 0..589 instead")
    format_arg(p)
    p.set_defaults(func=_cmd_sample)

    p = sub.add_parser("fetch", help="mirror a bitcoind's best chain into blk files over JSON-RPC")
    p.add_argument("--rpc-url", default="http://127.0.0.1:8332/", help="bitcoind RPC endpoint")
    p.add_argument("--rpc-cookie", help="path to the node's .cookie file")
    p.add_argument("--rpc-user")
    p.add_argument("--rpc-password", help="(prefer $BRK_RPC_PASSWORD)")
    p.add_argument("--blocks-dir", required=True, help="local directory to write blk*.dat files into")
    p.add_argument("--network", default="mainnet", help="magic for the written files (default mainnet)")
    p.add_argument("--max-blocks", type=int)
    p.add_argument("--timeout", type=float, default=30.0)
    format_arg(p)
    p.set_defaults(func=_cmd_fetch)

    p = sub.add_parser("status", help="show the committed tip and vec lengths of an output directory")
    out_arg(p)
    format_arg(p)
    p.set_defaults(func=_cmd_status)
    from cairn_servers.brk.cli_serve import add_commands

    add_commands(sub)
    from cairn_servers.core.cli import add_completion

    add_completion(sub, "brk")
    sub.choices["completion"].set_defaults(func=_cmd_completion)
    return parser


def _cmd_completion(args: argparse.Namespace) -> int:
    from cairn_servers.core.cli import completion_script

    sys.stdout.write(completion_script(build_parser(), args.shell))
    return 0


def _fast_mcp(argv: list[str]) -> argparse.Namespace | None:
    """``brk mcp [--out DIR] [--log-level L]`` parsed without argparse (``cairn_servers.core.argv``); anything else
    (``--help``, an unknown flag) returns None and goes through the real parser."""
    if not argv or argv[0] != "mcp":
        return None
    from cairn_servers.core.argv import plain_flags

    found = plain_flags(argv[1:], {"--out": "out", "--log-level": "log_level"})
    if found is None:
        return None
    import types

    from cairn_servers.brk.cli_serve import _cmd_mcp

    return types.SimpleNamespace(command="mcp", func=_cmd_mcp, out=found.get("out"),  # type: ignore[return-value]
                                 log_level=found.get("log_level"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    fast = _fast_mcp(argv)  # the stdio server's start-up path: nothing more to import before serving
    if fast is not None:
        return _run(fast)
    from cairn_servers.core.cli import guard

    return guard(lambda: _run(build_parser().parse_args(argv)))


def _run(args: argparse.Namespace) -> int:
    if not getattr(args, "func", None):
        build_parser().print_help()
        return 0
    try:
        code: int = args.func(args)
        return code
    except CairnError as exc:
        from cairn_servers.core.cli import fail

        return fail("brk", exc)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
