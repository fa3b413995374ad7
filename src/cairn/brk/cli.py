"""brk: index a Bitcoin node's block files into columnar vecs.

Commands:
  brk index  --blocks-dir DIR --out DIR [--watch]   index new blocks (resumes; rolls back on reorgs)
  brk fetch  --rpc-url URL --blocks-dir DIR          mirror a bitcoind's best chain into blk files
  brk sample --blocks N --out DIR [--mainnet]        write a regtest sample chain (or mainnet 0..589)
  brk status --out DIR                               the committed tip and vec lengths
  brk serve  --out DIR [--bind 127.0.0.1:3110]       HTTP API, web page and MCP (POST /mcp)
  brk run    --blocks-dir DIR --out DIR              index, then serve while following new blocks
  brk mcp    --out DIR                               MCP over stdio
  brk query  --index date --ids close,tx_count --from -30 --format md
  brk ids    [--index INDEX] [--page N]              vec ids (1,000 per page)
  brk indexes                                        indexes and the names they accept
  brk price  import FILE.csv | fetch --source kraken  daily BTC/USD prices
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from cairn.core.errors import CairnError


def _default_out() -> Path:
    from cairn.core.paths import data_dir

    return data_dir("brk", "BRK_DATA_DIR")


def _default_blocks() -> Path:
    return Path(os.environ.get("BRK_BLOCKS_DIR", str(Path.home() / ".bitcoin" / "blocks")))


def _print(data: Any, fmt_flag: str | None) -> None:
    from cairn.core.output import choose_format, render
    from cairn.core.sanitize import scrub

    print(scrub(render(data, choose_format(fmt_flag, "BRK_FORMAT"))))


def _cmd_index(args: argparse.Namespace) -> int:
    from cairn.brk.indexer import Indexer

    blocks_dir = Path(args.blocks_dir).expanduser()
    out = Path(args.out).expanduser() if args.out else _default_out()
    # One Indexer for every poll: its header set, chain and txid map stay in step with the store.
    indexer = Indexer(blocks_dir, out, durable=not args.no_fsync, commit_blocks=args.commit_every,
                      cache_mb=args.cache_mb)
    while True:
        result = indexer.run(max_blocks=args.max_blocks)
        if not args.no_compute:
            from cairn.brk.compute import compute

            compute(out, durable=not args.no_fsync)
        if not args.watch or result.indexed_blocks or result.rolled_back_from is not None or result.invalid:
            _print(result.to_dict(), args.format)
            sys.stdout.flush()
        if not args.watch:
            return 0
        time.sleep(args.interval)


def _cmd_sample(args: argparse.Namespace) -> int:
    from cairn.brk.sample import write_mainnet_sample, write_sample

    if args.mainnet:
        summary = write_mainnet_sample(Path(args.out).expanduser())
    else:
        summary = write_sample(Path(args.out).expanduser(), args.blocks, seed=args.seed,
                               max_file_bytes=args.max_file_bytes)
    _print(summary, args.format)
    return 0


def _cmd_fetch(args: argparse.Namespace) -> int:
    from cairn.brk.blocks.rpc import RpcClient, mirror

    client = RpcClient(args.rpc_url, cookie=args.rpc_cookie, user=args.rpc_user,
                       password=os.environ.get("BRK_RPC_PASSWORD", args.rpc_password or ""), timeout=args.timeout)
    summary = mirror(client, Path(args.blocks_dir).expanduser(), network=args.network, max_blocks=args.max_blocks)
    _print(summary, args.format)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from cairn.brk.vecs import read_manifest

    out = Path(args.out).expanduser() if args.out else _default_out()
    manifest = read_manifest(out)
    meta = manifest.get("meta", {})
    _print({
        "out": str(out),
        "network": meta.get("network"),
        "height": meta.get("height", -1),
        "tip": meta.get("tip", ""),
        "invalid_blocks": len(meta.get("invalid", [])),
        "vecs": {name: v["length"] for name, v in manifest["vecs"].items()},
    }, args.format)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="brk", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--format", help="json, jsonl, text, csv, tsv or md (default: text on a TTY, else json)")

    p = sub.add_parser("index", help="index new blocks from a blocks/ directory")
    p.add_argument("--blocks-dir", default=str(_default_blocks()),
                   help="the node's blocks/ folder (default: $BRK_BLOCKS_DIR or ~/.bitcoin/blocks)")
    p.add_argument("--out", help="output directory (default: $BRK_DATA_DIR or $XDG_DATA_HOME/brk)")
    p.add_argument("--watch", action="store_true", help="keep polling for new blocks")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between polls with --watch")
    p.add_argument("--commit-every", type=int, default=10_000,
                   help="commit at least every N blocks (default 10000; also every 3 s and 64 MB)")
    p.add_argument("--max-blocks", type=int, help="stop after indexing this many blocks")
    p.add_argument("--no-fsync", action="store_true", help="skip fsync on commit (faster; unsafe on power loss)")
    p.add_argument("--cache-mb", type=int, default=256,
                   help="block cache of the transaction index (RocksDB), in MB (default 256)")
    p.add_argument("--no-compute", action="store_true", help="index raw vecs only (no computed datasets)")
    common(p)
    p.set_defaults(func=_cmd_index)

    p = sub.add_parser("sample", help="write a deterministic regtest sample chain")
    p.add_argument("--blocks", type=int, default=1000, help="number of blocks (default 1000)")
    p.add_argument("--out", required=True, help="directory to write blk*.dat files into")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--max-file-bytes", type=int, default=128 << 20, help="start a new blk file past this size")
    p.add_argument("--mainnet", action="store_true", help="write the bundled mainnet heights 0..589 instead")
    common(p)
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
    common(p)
    p.set_defaults(func=_cmd_fetch)

    p = sub.add_parser("status", help="show the committed tip and vec lengths of an output directory")
    p.add_argument("--out", help="output directory (default: $BRK_DATA_DIR or $XDG_DATA_HOME/brk)")
    common(p)
    p.set_defaults(func=_cmd_status)
    from cairn.brk.cli_serve import add_commands

    add_commands(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        code: int = args.func(args)
        return code
    except CairnError as exc:
        if os.environ.get("CAIRN_RAISE_ERRORS"):
            raise
        from cairn.core.sanitize import scrub

        print(f"brk: {scrub(exc.message)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
