"""brk at scale: `brk index` on dense generated chains of about 1, 5 and 20 million transactions.

For each size N (transactions), with K transactions per block:

1. generate the chain with ``brk sample --blocks ceil(N/K)+101 --txs-per-block K`` (a subprocess), cached
   under ``--cache`` (default ``$XDG_CACHE_HOME/cairn_servers/brk_scale``) so reruns reuse it;
2. ``brk index`` into a fresh output directory, as a user runs it: the raw index and then every computed
   family (``--no-compute``: the raw index only). Wall time, block data bytes, MB/s (block data over the
   whole command's wall time), the time of each stage (``index``, ``computed``, ``utxo``, ``realized``,
   ``addresses``, ``explorer``, from the command's own JSON progress lines) and the peak RSS of every process;
3. with ``--prices``: ``brk price import`` of a synthetic daily series, then ``brk index`` again, which
   computes the realized family (it needs prices) on the indexed store: its wall time and stages;
4. ``brk index`` once more (same flags): the reopen time of an up-to-date store;
5. with ``--compare-no-explorer``: step 2 again into another fresh directory with the block explorer's
   indexes left out (the explorer pass, and the script hashes of the address pass), through the
   benchmark-only environment switch ``CAIRN_BRK_BENCH_NO_EXPLORER=1`` (no user setting: ``brk index``
   always builds every family). ``explorer_cost`` then compares the two runs of the same tree: MB/s
   (wall), the CPU seconds of every process added, and the stage processes' CPU seconds.

``--jobs N`` is passed to every ``brk index`` (default: ``brk index``'s own, the machine's cores): with
N >= 2 the computed families run in stage processes beside the indexer, so stages overlap; each
stage's time is then its span, from its first progress line to its last committed one.

Peak RSS is each process's own (``VmHWM`` from ``/proc``, not ``wait4``'s ``ru_maxrss``, which
inherits the parent's high-water mark): the command's and each child's (the parsing process, the stage
processes), by role in ``processes``; ``total_peak_rss_mb`` adds them all (an upper bound of the whole
job's, as the processes peak at different times); ``peak_together_rss_mb`` is the largest sum of their
resident sizes at one instant (sampled every 50 ms): the whole job's peak. Load averages are taken before and
after each step (the machine may be shared: read figures with them). Sizes run smallest first while
the projected time of the next one (from the rates measured so far) fits in ``--budget`` seconds; the
others are listed as skipped with the reason. Prints one JSON document.

Usage: python benchmarks/brk_scale.py [--sizes 1e6,5e6,20e6] [--txs-per-block 2500] [--budget 600]
                                      [--cache DIR] [--seed 7] [--no-compute] [--prices] [--no-fsync] [--keep]
                                      [--jobs N] [--compare-no-explorer]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cairn_servers.core.heap import memory_kib

REPO = Path(__file__).resolve().parents[1]
WARMUP_BLOCKS = 101  # the dense generator's coinbase-only blocks (coinbase maturity)
GEN_TX_S = 40_000.0  # assumed until measured: generator transactions per second
INDEX_MB_S = 8.0  # assumed until measured: indexer block data MB per second
BYTES_PER_TX = 450.0  # assumed until measured


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process so far, from ``/proc`` (0 if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return []


def _role(pid: int) -> str:
    """What a child of ``brk index`` is: ``parser``, ``stage:PASSES`` or its command line."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return "gone"
    if "cairn_servers.brk.blocks.worker" in argv:
        return "parser"
    if "cairn_servers.brk.pipeline" in argv:
        try:
            return "stage:" + "+".join(json.loads(argv[-1])["passes"])
        except (ValueError, KeyError, IndexError):
            return "stage"
    return " ".join(argv[:3])


def brk(*args: str, timeout: float | None = None, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``brk ARGS``; returns exit code, wall seconds, the child's peak RSS (MB), stdout JSON, stderr tail."""
    env = dict(os.environ)
    env.update(extra_env or {})
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    load0 = _load()
    with tempfile.TemporaryFile("w+") as out, tempfile.NamedTemporaryFile("w+") as err, \
            open(err.name) as err_reader:  # its own offset: follows the stage lines while the child writes
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.brk.cli", *args, "--format", "json"],
                                stdout=out, stderr=err, env=env)
        stage, partial = "index", ""
        stage_rss_kb: dict[str, int] = {}  # the main process's resident size, at its largest in each stage
        hwm_kb = 0
        together_kb = 0  # the largest sum of every process's resident size at one sampling instant
        child_kb: dict[int, int] = {}  # the parsing process(es) brk index starts
        main_cpu = 0.0
        child_cpu: dict[int, float] = {}
        roles: dict[int, str] = {}
        while True:
            partial += err_reader.read()
            *lines, partial = partial.split("\n")
            for line in lines:
                if line.startswith("{") and '"event": "stage"' in line:
                    stage = str(json.loads(line).get("stage", stage))
            stage_rss_kb[stage] = max(stage_rss_kb.get(stage, 0), memory_kib(proc.pid, "VmRSS"))
            hwm_kb = max(hwm_kb, memory_kib(proc.pid, "VmHWM"))
            main_cpu = max(main_cpu, _cpu_s(proc.pid))
            now_kb = memory_kib(proc.pid, "VmRSS")
            for cpid in _children(proc.pid):
                now_kb += memory_kib(cpid, "VmRSS")
                if not roles.get(cpid, "").startswith(("parser", "stage")):  # just forked: not yet exec'd
                    roles[cpid] = _role(cpid)
                child_kb[cpid] = max(child_kb.get(cpid, 0), memory_kib(cpid, "VmHWM"))
                child_cpu[cpid] = max(child_cpu.get(cpid, 0.0), _cpu_s(cpid))
            together_kb = max(together_kb, now_kb)
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        text = out.read()
        err_text = err.read()
        tail = err_text[-2000:]
    code = os.waitstatus_to_exitcode(status)
    try:
        result = json.loads(text) if text.strip() else {}
    except ValueError:
        result = {"stdout": text[-2000:]}
    # ru_maxrss would carry this (parent) process's high-water mark across fork and exec: VmHWM is the
    # child's own (sampled every 50 ms; a peak in the very last 50 ms of a run could be missed).
    return {"code": code, "wall_s": round(wall, 2), "peak_rss_mb": round((hwm_kb or usage.ru_maxrss) / 1024, 1),
            # CPU seconds of the main process and of its parsing process (sampled; the last 50 ms may be
            # missed): on an idle 2-core machine the wall time would be about the larger of the two.
            "main_cpu_s": round(main_cpu, 2),
            "parser_cpu_s": round(sum(c for p, c in child_cpu.items() if roles.get(p) == "parser"), 2),
            "children_peak_rss_mb": round(max(child_kb.values(), default=0) / 1024, 1),
            # every process by role: peak RSS (MB) and CPU seconds (children of one role added)
            "processes": _by_role(hwm_kb, main_cpu, child_kb, child_cpu, roles),
            # an upper bound of the whole command's peak: the peaks of the process and all its children added
            "total_peak_rss_mb": round((hwm_kb + sum(child_kb.values())) / 1024, 1),
            # the whole job's peak: every process's resident size added at the same instant (every 50 ms)
            "peak_together_rss_mb": round(together_kb / 1024, 1),
            "user_s": round(usage.ru_utime, 2), "sys_s": round(usage.ru_stime, 2), "load_before": load0,
            "load_after": _load(), "result": result, "stderr_tail": tail if code else "",
            "stages": _stages(err_text),
            "stage_peak_rss_mb": {name: round(kb / 1024, 1) for name, kb in stage_rss_kb.items()}}


def _by_role(main_kb: int, main_cpu: float, child_kb: dict[int, int], child_cpu: dict[int, float],
             roles: dict[int, str]) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = {"main": {"peak_rss_mb": round(main_kb / 1024, 1),
                                                   "cpu_s": round(main_cpu, 2), "count": 1}}
    for pid, kb in child_kb.items():
        row = table.setdefault(roles.get(pid, "?"), {"peak_rss_mb": 0.0, "cpu_s": 0.0, "count": 0})
        row["peak_rss_mb"] = round(row["peak_rss_mb"] + kb / 1024, 1)
        row["cpu_s"] = round(row["cpu_s"] + child_cpu.get(pid, 0.0), 2)
        row["count"] += 1
    return table


def _stages(stderr: str) -> dict[str, float]:
    """Seconds of each stage of a ``brk index --progress json`` run, from its JSON lines: from the stage's
    first line (the index: the start) to its last ``commit`` (stages of ``--jobs`` >= 2 overlap)."""
    spans: dict[str, list[float]] = {"index": [0.0, 0.0]}
    for line in stderr.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or "elapsed_s" not in event or event.get("event") in ("done", "stopped"):
            continue
        t = float(event["elapsed_s"])
        span = spans.setdefault(str(event["stage"]), [t, t])
        span[1] = max(span[1], t)
    return {name: round(t1 - t0, 2) for name, (t0, t1) in spans.items()}


def _cpu_total(processes: dict[str, dict[str, float]]) -> float:
    return round(sum(row["cpu_s"] for row in processes.values()), 2)


def _without_explorer(blocks_dir: Path, data_bytes: int, flags: list[str], full: dict[str, Any]
                      ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``brk index`` of the same chain into a fresh directory with the block explorer's indexes left out
    (benchmark-only switch), and what the full run cost beyond it."""
    out = Path(tempfile.mkdtemp(prefix="brk_scale_noexp_"))
    try:
        run = brk("index", "--blocks-dir", str(blocks_dir), "--out", str(out), "--progress", "json", *flags,
                  extra_env={"CAIRN_BRK_BENCH_NO_EXPLORER": "1"})
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if run["code"] != 0:
        return {"failed": run["stderr_tail"]}, {}
    base = {"wall_s": run["wall_s"], "mb_s": round(data_bytes / run["wall_s"] / 1e6, 2), "stages_s": run["stages"],
            "cpu_s_all_processes": _cpu_total(run["processes"]), "processes": run["processes"],
            "peak_together_rss_mb": run["peak_together_rss_mb"], "load_before": run["load_before"],
            "load_after": run["load_after"]}
    full_cpu = _cpu_total(full["processes"])
    cost = {"mb_s_with": full["mb_s"], "mb_s_without": base["mb_s"],
            # the speed bar: how much slower the full run indexed than the run without the explorer's indexes
            "mb_s_drop_pct": round(100 * (1 - full["mb_s"] / base["mb_s"]), 1),
            "cpu_s_all_processes_with": full_cpu, "cpu_s_all_processes_without": base["cpu_s_all_processes"],
            "cpu_s_extra_pct": round(100 * (full_cpu / max(base["cpu_s_all_processes"], 1e-9) - 1), 1)}
    return base, cost


def chain(cache: Path, n_tx: int, k: int, seed: int) -> tuple[Path, dict[str, Any]]:
    """The cached blocks directory for ``n_tx`` transactions (generated when missing)."""
    blocks = math.ceil(n_tx / k) + WARMUP_BLOCKS
    where = cache / f"k{k}-blocks{blocks}-seed{seed}"
    done = where / "chain.json"
    if done.exists():
        info = json.loads(done.read_text())
        info["cached"] = True
        return where / "blocks", info
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    run = brk("sample", "--blocks", str(blocks), "--txs-per-block", str(k), "--seed", str(seed),
              "--out", str(where / "blocks"))
    if run["code"] != 0:
        raise SystemExit(f"brk sample failed: {run['stderr_tail']}")
    info = {"blocks": blocks, "transactions": run["result"]["transactions"], "bytes": run["result"]["bytes"],
            "generate_s": run["wall_s"], "generate_cpu_s": round(run["user_s"] + run["sys_s"], 2),
            "generate_peak_rss_mb": run["peak_rss_mb"], "generate_load": run["load_after"]}
    done.write_text(json.dumps(info))
    info["cached"] = False
    return where / "blocks", info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e6,5e6,20e6", help="transaction counts, comma-separated")
    ap.add_argument("--txs-per-block", type=int, default=2500)
    ap.add_argument("--budget", type=float, default=600.0, help="seconds for the whole run (default 600)")
    default_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cairn_servers" / "brk_scale"
    ap.add_argument("--cache", type=Path, default=default_cache, help=f"generated chains (default {default_cache})")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-compute", action="store_true",
                    help="index the raw vecs only (brk index --no-compute); by default every computed family runs")
    ap.add_argument("--no-fsync", action="store_true", help="pass --no-fsync to brk index")
    ap.add_argument("--prices", action="store_true",
                    help="then import a daily price series (brk price import) and time the realized family's run")
    ap.add_argument("--keep", action="store_true", help="keep the output directories (printed)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="brk index --jobs (default: the machine's cores, as brk index)")
    ap.add_argument("--compare-no-explorer", action="store_true",
                    help="also index each size with the block explorer's indexes left out (a benchmark-only "
                         "environment switch) and report what they cost")
    args = ap.parse_args()
    sizes = sorted(int(float(s)) for s in args.sizes.split(","))
    k = args.txs_per_block
    t_start = time.perf_counter()
    gen_rate, index_rate, bytes_per_tx = GEN_TX_S, INDEX_MB_S * 1e6, BYTES_PER_TX
    runs: list[dict[str, Any]] = []
    fsync = ["--no-fsync"] if args.no_fsync else []
    fsync += ["--jobs", str(args.jobs)]  # every brk index of the run
    for n_tx in sizes:
        left = args.budget - (time.perf_counter() - t_start)
        blocks = math.ceil(n_tx / k) + WARMUP_BLOCKS
        cached = (args.cache / f"k{k}-blocks{blocks}-seed{args.seed}" / "chain.json").exists()
        projected = (0 if cached else n_tx / gen_rate) + n_tx * bytes_per_tx / index_rate * 1.1
        if projected > left:
            runs.append({"target_transactions": n_tx, "skipped": f"projected {projected:.0f} s > {left:.0f} s left "
                                                                  f"of the --budget"})
            continue
        blocks_dir, info = chain(args.cache, n_tx, k, args.seed)
        if not info["cached"]:
            gen_rate = info["transactions"] / max(info["generate_s"], 1e-9)
        bytes_per_tx = info["bytes"] / info["transactions"]
        out = Path(tempfile.mkdtemp(prefix="brk_scale_out_"))
        try:
            compute = ["--no-compute"] if args.no_compute else []
            first = brk("index", "--blocks-dir", str(blocks_dir), "--out", str(out), *compute,
                        "--progress", "json", *fsync)
            if first["code"] != 0:
                runs.append({"target_transactions": n_tx, "failed": first})
                continue
            data_bytes = first["result"]["indexed_bytes"]
            index_rate = data_bytes / max(first["wall_s"], 1e-9)
            run: dict[str, Any] = {
                "target_transactions": n_tx, "transactions": info["transactions"], "blocks": info["blocks"],
                "txs_per_block": k, "block_data_bytes": data_bytes, "chain": info,
                "computed": not args.no_compute, "prices": args.prices,
                "index": {"wall_s": first["wall_s"], "stages_s": first["stages"],
                          "stage_peak_rss_mb": first["stage_peak_rss_mb"], "mb_s": round(data_bytes / first["wall_s"] / 1e6, 2),
                          "tx_s": round(info["transactions"] / first["wall_s"]),
                          "peak_rss_mb": first["peak_rss_mb"], "parser_peak_rss_mb": first["children_peak_rss_mb"],
                          "total_peak_rss_mb": first["total_peak_rss_mb"],
                          "peak_together_rss_mb": first["peak_together_rss_mb"], "cpu_s": round(first["user_s"] + first["sys_s"], 2),
                          # under load, wall time overstates: block data MB per CPU second of the child
                          "mb_per_cpu_s": round(data_bytes / max(first["user_s"] + first["sys_s"], 1e-9) / 1e6, 2),
                          "main_cpu_s": first["main_cpu_s"], "parser_cpu_s": first["parser_cpu_s"],
                          "processes": first["processes"],
                          # every process's CPU seconds added (wall time is about this / cores on a busy job)
                          "cpu_s_all_processes": _cpu_total(first["processes"]),
                          # the rate if each process had a core to itself: block data / the busier one's CPU
                          "mb_s_two_free_cores": round(data_bytes / max(first["main_cpu_s"], first["parser_cpu_s"],
                                                                         1e-9) / 1e6, 2),
                          "load_before": first["load_before"], "load_after": first["load_after"]},
            }
            if args.prices and not args.no_compute:  # closes for every day the chains span (from 2024-01-01)
                import datetime as dt

                csv = out / "prices.csv"
                day0 = dt.date(2023, 12, 1)
                csv.write_text("date,price\n" + "".join(
                    f"{day0 + dt.timedelta(days=d)},{40_000 + 25 * d + 900 * ((d * 37) % 11)}\n"
                    for d in range(min(1200, (dt.date.today() - day0).days))))  # never a day in the future
                imported = brk("price", "import", str(csv), "--out", str(out))
                if imported["code"] != 0:
                    raise SystemExit(f"brk price import failed: {imported['stderr_tail']}")
                real = brk("index", "--blocks-dir", str(blocks_dir), "--out", str(out), "--progress", "json", *fsync)
                run["realized"] = {"wall_s": real["wall_s"], "stages_s": real["stages"],
                                   "peak_rss_mb": real["peak_rss_mb"], "main_cpu_s": real["main_cpu_s"],
                                   "total_peak_rss_mb": real["total_peak_rss_mb"],
                                   "peak_together_rss_mb": real["peak_together_rss_mb"], "processes": real["processes"],
                                   "load_after": real["load_after"]}
            again = brk("index", "--blocks-dir", str(blocks_dir), "--out", str(out), *compute,
                        "--progress", "none", *fsync)
            run["reopen"] = {"wall_s": again["wall_s"], "peak_rss_mb": again["peak_rss_mb"],
                             "indexed_blocks": again["result"].get("indexed_blocks"), "load_after": again["load_after"]}
            run["out_bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
            if args.compare_no_explorer and not args.no_compute:
                run["index_no_explorer"], run["explorer_cost"] = _without_explorer(blocks_dir, data_bytes, fsync,
                                                                                   run["index"])
            if args.keep:
                run["out"] = str(out)
            runs.append(run)
        finally:
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)
    report = {
        "benchmark": "brk_scale", "cpus": os.cpu_count(), "jobs": args.jobs, "txs_per_block": k,
        "budget_s": args.budget,
        "computed": not args.no_compute,
        "total_s": round(time.perf_counter() - t_start, 1), "load_end": _load(), "runs": runs,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
