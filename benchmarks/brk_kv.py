"""Embedded key-value engines for brk's transaction index: RocksDB (rocksdict) against LMDB (lmdb).

The indexer's access pattern, replayed at scale: keys are random 8-byte txid prefixes, values the
txindex (8 bytes little-endian). Per batch (one committed block range, default 100,000 txs):
* an existence multi-get of the batch's own keys (almost all misses: the collision check),
* a multi-get of as many prevout keys: 80 % recent (the last 20 batches), 20 % very old (uniform
  over everything inserted so far),
* one atomic write of the batch (RocksDB WriteBatch, LMDB write transaction) with the engine's
  "tx count" key.
After loading: close, drop the files from the page cache (posix_fadvise DONTNEED), reopen, and time
cold then hot look-ups of 100,000 uniformly random old keys in multi-gets of 1,000. Each engine runs
in its own process so peak RSS (VmHWM) is its own.

Usage: python benchmarks/brk_kv.py [--keys 5000000] (docs/benchmarks.md: --keys 50000000, about an hour) [--batch 100000] [--cache-mb 256]
       [--engines rocksdb,lmdb] [--dir /tmp/brk-kv]
Prints one JSON object per engine (progress lines go to stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

RECENT_BATCHES = 20


def _keys_at(indexes: "np.ndarray") -> list[bytes]:
    """The keys of txindexes ``indexes``: splitmix64 of the index, so any key is O(1) to recompute."""
    import numpy as np

    with np.errstate(over="ignore"):
        z = indexes.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    raw = z.astype("<u8").tobytes()
    return [raw[i:i + 8] for i in range(0, len(raw), 8)]


def _keys(batch_no: int, n: int) -> list[bytes]:
    import numpy as np

    return _keys_at(np.arange(batch_no * n, (batch_no + 1) * n, dtype=np.uint64))


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _du(path: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def _evict(path: Path) -> None:
    for p in path.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


class RocksEngine:
    def __init__(self, path: Path, cache_mb: int) -> None:
        from cairn_servers.brk.rocks import open_rocksdb

        self.db = open_rocksdb(path, memtable_mb=64, cache_mb=cache_mb)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return self.db[keys]  # type: ignore[no-any-return]

    def write(self, items: list[tuple[bytes, bytes]]) -> None:
        from rocksdict import WriteBatch

        wb = WriteBatch(raw_mode=True)
        for k, v in items:
            wb.put(k, v)
        self.db.write(wb)

    def close(self) -> None:
        self.db.flush()
        self.db.close()


class LmdbEngine:
    def __init__(self, path: Path, cache_mb: int) -> None:
        import lmdb

        path.mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(str(path), map_size=1 << 40, sync=False, metasync=False, writemap=True,
                             readahead=False, max_dbs=0)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        with self.env.begin(buffers=False) as txn:
            get = txn.get
            return [get(k) for k in keys]

    def write(self, items: list[tuple[bytes, bytes]]) -> None:
        items.sort()
        with self.env.begin(write=True) as txn:
            txn.cursor().putmulti(items)

    def close(self) -> None:
        self.env.sync(True)
        self.env.close()


def run_engine(name: str, keys: int, batch: int, cache_mb: int, root: Path) -> dict[str, Any]:
    import numpy as np

    path = root / name
    shutil.rmtree(path, ignore_errors=True)
    cls = RocksEngine if name == "rocksdb" else LmdbEngine
    eng = cls(path, cache_mb)
    rng = np.random.default_rng(12345)
    batches = keys // batch
    t_check = t_look = t_write = 0.0
    looked = found = 0
    t_all = time.perf_counter()
    for b in range(batches):
        new = _keys(b, batch)
        t = time.perf_counter()
        hits = eng.get_many(new)
        t_check += time.perf_counter() - t
        prev: list[bytes] = []
        if b:
            n_recent = batch * 4 // 5
            lo = max(0, b - RECENT_BATCHES) * batch
            recent = rng.integers(lo, b * batch, size=n_recent)
            old = rng.integers(0, b * batch, size=batch - n_recent)
            prev = _keys_at(np.concatenate((recent, old)))
            t = time.perf_counter()
            got = eng.get_many(prev)
            t_look += time.perf_counter() - t
            looked += len(prev)
            found += sum(v is not None for v in got)
        base = b * batch
        items = [(k, (base + i).to_bytes(8, "little")) for i, k in enumerate(new) if hits[i] is None]
        items.append((b"\x00count", (base + batch).to_bytes(8, "little")))
        t = time.perf_counter()
        eng.write(items)
        t_write += time.perf_counter() - t
        if b % 50 == 49 or b == batches - 1:
            done = (b + 1) * batch
            print(json.dumps({"engine": name, "keys": done, "s": round(time.perf_counter() - t_all, 1),
                              "load": os.getloadavg()[0], "rss_mb": _status("VmRSS") >> 20}),
                  file=sys.stderr, flush=True)
    load_s = time.perf_counter() - t_all
    eng.close()
    size = _du(path)
    rss_load = _status("VmHWM")
    _evict(path)
    eng = cls(path, cache_mb)
    probe = _keys_at(rng.integers(0, batches * batch, size=100_000))
    timings = {}
    for label in ("cold", "hot"):
        t = time.perf_counter()
        got = []
        for i in range(0, len(probe), 1000):
            got.extend(eng.get_many(probe[i:i + 1000]))
        timings[label] = (time.perf_counter() - t) / len(probe) * 1e6
        assert all(v is not None for v in got)
    t = time.perf_counter()
    eng.close()
    eng = cls(path, cache_mb)
    reopen = time.perf_counter() - t
    eng.close()
    n = batches * batch
    return {
        "engine": name, "keys": n, "batch": batch, "cache_mb": cache_mb,
        "load_s": round(load_s, 1),
        "insert_keys_per_s": round(n / t_write),
        "existence_check_us_per_key": round(t_check / n * 1e6, 2),
        "lookup_during_load_us_per_key": round(t_look / max(1, looked) * 1e6, 2),
        "lookups_found": f"{found}/{looked}",
        "cold_lookup_us_per_key": round(timings["cold"], 2),
        "hot_lookup_us_per_key": round(timings["hot"], 2),
        "reopen_s": round(reopen, 3),
        "disk_bytes": size, "disk_bytes_per_key": round(size / n, 1),
        "peak_rss_mb": round(rss_load / 2**20), "loadavg_end": os.getloadavg(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=5_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--cache-mb", type=int, default=256)
    ap.add_argument("--engines", default="rocksdb,lmdb")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/brk-kv"))
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_engine(args.one, args.keys, args.batch, args.cache_mb, args.dir)), flush=True)
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    for name in args.engines.split(","):
        subprocess.run([sys.executable, __file__, "--one", name, "--keys", str(args.keys), "--batch",
                        str(args.batch), "--cache-mb", str(args.cache_mb), "--dir", str(args.dir)], check=True)
        shutil.rmtree(args.dir / name, ignore_errors=True)


if __name__ == "__main__":
    main()
