"""Mining: which pool mined each block, and the mining series read from it and from the computed vecs.

**Pool attribution** (a pass of ``brk index``, in ``OUT/mining/``): each block's coinbase transaction is read
from the blk files (the ``blockpos`` vecs give file and offset; the coinbase's size is ``txindex_to_size``), and
its pool is, as BRK and mempool.space decide it from the bundled list ``data/pools-v2.json``:

1. the first coinbase output paying one of a pool's known payout addresses (the first pool listing it);
2. else the first pool (in list order) one of whose coinbase tags occurs in the coinbase's scriptSig (its first
   100 bytes read as Latin-1, compared without case);
3. else ``unknown`` (id 0).

Stored per height: ``height_to_pool`` (the pool's id in the list, u2) and the block hash (finds the fork height
after a reorg: the rows from there on are cut, and the blocks of the new branch attributed). Each block's row
depends on that block alone, so resuming and reorgs need no undo state. The list's sha256 is kept in the
manifest: another list attributes every block again. Memory: one chunk of coinbases at a time.

**Series** (computed when read, ``cairn_servers.brk.catalog``): pool block counts and dominance; hash price and
hash value; inflation rate and annualized issuance; the Puell multiple. Standard library at import: the id
lists and definitions are read on CLI paths.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.core.errors import StorageError

if TYPE_CHECKING:
    import numpy as np


    # cairn_servers.brk.catalog.Source, which imports this module's family through compute: named, not
    # imported, so no import cycle (not even a type-only one) joins them
    Source = Any

POOLS_FILE = Path(__file__).resolve().parent / "data" / "pools-v2.json"
# mempool's ids of pools that mine only test networks (as BRK, left out of the mainnet list).
TESTNET_IDS = frozenset({145, 146, 149, 150, 156, 163})
# Slugs are mempool's rule (the name's letters and digits, lower case); two pools of one name are told apart
# as BRK does.
SLUG_OVERRIDES = {135: "bitcoinindiapool"}
TAG_BYTES = 100  # the scriptSig bytes compared with the tags (BRK keeps the first 100)
CHUNK_BLOCKS = int(os.environ.get("CAIRN_BRK_MINING_CHUNK", "20000"))  # blocks a commit
DAY = 86_400
# Dominance windows (days of block time, as BRK's 1w, 1m, 1y).
WINDOWS = {"1w": 7, "1m": 30, "1y": 365}
TERA = 1e12
BLOCKS_PER_YEAR = 52_560  # 144 x 365
PUELL_DAYS = 365


@dataclass(frozen=True, slots=True)
class Pool:
    id: int
    slug: str
    name: str
    tags: tuple[str, ...]  # lower case
    addresses: tuple[str, ...]


@functools.lru_cache(maxsize=1)
def pools() -> tuple[Pool, ...]:
    """The pools of the bundled list, ``unknown`` (id 0) first, then in list order."""
    entries = json.loads(POOLS_FILE.read_text(encoding="utf-8"))
    out = [Pool(0, "unknown", "Unknown", (), ())]
    taken = {"unknown"}
    for e in entries:
        pid = int(e["id"])
        if pid in TESTNET_IDS:
            continue
        slug = SLUG_OVERRIDES.get(pid) or "".join(c for c in str(e["name"]).lower() if c.isascii() and c.isalnum())
        if slug in taken:
            slug = f"{slug}{pid}"
        taken.add(slug)
        out.append(Pool(pid, slug, str(e["name"]), tuple(str(t).lower() for t in e["tags"]),
                        tuple(str(a) for a in e["addresses"])))
    return tuple(out)


def slugs() -> tuple[str, ...]:
    return tuple(p.slug for p in pools())


@functools.lru_cache(maxsize=1)
def pools_digest() -> str:
    import hashlib

    return hashlib.sha256(POOLS_FILE.read_bytes()).hexdigest()


# -- ids and definitions -------------------------------------------------------------------------------

def pool_ids(slug: str) -> dict[str, tuple[str, str]]:
    """id -> (kind, window) of one pool's ids: kind ``count`` (blocks a height; a period's sum), ``cumulative``
    or ``dominance`` (a height's value; a period's last), over a window of :data:`WINDOWS` or all time ("")."""
    ids = {f"pool_block_count_{slug}": ("count", ""), f"{slug}_blocks_mined": ("count", ""),
           f"pool_block_count_{slug}_cumulative": ("cumulative", ""),
           f"{slug}_blocks_mined_cumulative": ("cumulative", ""), f"{slug}_dominance": ("dominance", "")}
    for w in WINDOWS:
        ids[f"{slug}_dominance_{w}"] = ("dominance", w)
    return ids


@functools.lru_cache(maxsize=1)
def all_pool_ids() -> frozenset[str]:
    """Every pool's ids (``/llms.txt`` folds them into :data:`POOL_PATTERNS`)."""
    return frozenset(i for p in pools() for i in pool_ids(p.slug))


# The pool ids as patterns, for listings that fold them (``cairn_servers.brk.llmstxt``).
POOL_PATTERNS = (
    ("pool_block_count_<pool>", "number of blocks mined by the pool; also `<pool>_blocks_mined`; a period's sum on "
                                "coarse indexes"),
    ("pool_block_count_<pool>_cumulative", "blocks mined by the pool since the genesis block; also "
                                           "`<pool>_blocks_mined_cumulative`"),
    ("<pool>_dominance", "the pool's share of every block mined since the genesis block, in percent"),
    ("<pool>_dominance_<1w|1m|1y>", "the pool's share of the blocks of the last 7, 30 or 365 days of block time, in "
                                    "percent"),
)


def _pool_line(vec_id: str, slug: str, name: str) -> str | None:
    for prefix in (f"pool_block_count_{slug}", f"{slug}_blocks_mined"):
        if vec_id.startswith(prefix):
            rest = vec_id[len(prefix):]
            if rest == "":
                return (f"number of blocks mined by the mining pool {name} (attributed by coinbase tag and payout "
                        f"address)")
            if rest == "_cumulative":
                return f"number of blocks mined by the mining pool {name} since the genesis block, cumulative"
            return None
    if vec_id == f"{slug}_dominance":
        return (f"mining pool {name} dominance, all time: its share of every block mined since the genesis "
                f"block, in percent")
    for w, days in WINDOWS.items():
        if vec_id == f"{slug}_dominance_{w}":
            return (f"mining pool {name} dominance over {days} days: its share of the blocks of the last {days} "
                    f"days of block time, in percent")
    return None


DEFINITIONS = {
    "fees": "transaction fees paid to miners (BRK's name for fee), in sats",
    "hash_price_ths": "hash price: coinbase revenue of the last 24 hours in US dollars per TH/s of hash rate, "
                      "miner revenue per day per terahash",
    "hash_price_phs": "hash price: coinbase revenue of the last 24 hours in US dollars per PH/s of hash rate",
    "hash_value_ths": "hash value: coinbase revenue of the last 24 hours in sats per TH/s of hash rate, "
                      "miner revenue per day per terahash",
    "hash_value_phs": "hash value: coinbase revenue of the last 24 hours in sats per PH/s of hash rate",
    "inflation_rate": "inflation rate: supply / supply one year (365 days of block time) earlier - 1, yearly "
                      "supply growth in percent",
    "annualized_issuance": "annualized issuance: block subsidy of the last 24 hours times 365, new coins a year "
                           "at the current rate, in sats",
    "puell_multiple": "Puell multiple: the day's coinbase issuance in US dollars / its 365-day simple moving "
                      "average, miner revenue against its yearly mean",
}


@functools.lru_cache(maxsize=1)
def _pool_lines() -> dict[str, str]:
    lines = {}
    for p in pools():
        for vec_id in pool_ids(p.slug):
            line = _pool_line(vec_id, p.slug, p.name)
            if line is not None:
                lines[vec_id] = line
    return lines


def definition(vec_id: str) -> str | None:
    """A pool id's line (other mining ids are in :data:`DEFINITIONS`)."""
    return _pool_lines().get(vec_id)


# -- attribution ---------------------------------------------------------------------------------------

def address_script(address: str) -> bytes | None:
    """The output script paying a mainnet address (None for an address this cannot read)."""
    from cairn_servers.brk import script
    from cairn_servers.core.errors import InvalidInput

    try:
        return script.address_script(address, "mainnet")
    except InvalidInput:
        return None


@functools.lru_cache(maxsize=1)
def _matchers() -> tuple[dict[bytes, int], Any, tuple[tuple[int, tuple[str, ...]], ...]]:
    """Payout script -> pool id (the first pool listing it); one pattern finding any tag; (id, tags) in order."""
    import re

    by_script: dict[bytes, int] = {}
    for p in pools():
        for a in p.addresses:
            script = address_script(a)
            if script is not None:
                by_script.setdefault(script, p.id)
    tags = [t for p in pools() for t in p.tags if t]
    any_tag = re.compile("|".join(re.escape(t) for t in sorted(set(tags), key=len, reverse=True)))
    return by_script, any_tag, tuple((p.id, p.tags) for p in pools() if p.tags)


def attribute(script_sig: bytes, outputs: list[bytes]) -> int:
    """The pool id of a block from its coinbase's scriptSig and output scripts (0: unknown)."""
    by_script, any_tag, ordered = _matchers()
    for script in outputs:
        pid = by_script.get(script)
        if pid is not None:
            return pid
    text = script_sig[:TAG_BYTES].decode("latin-1").lower()
    if any_tag.search(text) is None:
        return 0
    for pid, tags in ordered:  # the first pool in list order, as BRK (a tag may occur in another's text)
        for t in tags:
            if t in text:
                return pid
    return 0


def _varint(d: bytes, p: int) -> tuple[int, int]:
    first = d[p]
    if first < 0xFD:
        return first, p + 1
    n = {0xFD: 2, 0xFE: 4, 0xFF: 8}[first]
    return int.from_bytes(d[p + 1:p + 1 + n], "little"), p + 1 + n


def parse_coinbase(block: bytes) -> tuple[bytes, list[bytes]]:
    """(scriptSig, output scripts) of the coinbase of a block (its first bytes: header, count, coinbase)."""
    _, p = _varint(block, 80)
    p += 4  # version
    if block[p] == 0:  # segwit marker and flag
        p += 2
    _, p = _varint(block, p)  # one input
    p += 36
    n, p = _varint(block, p)
    script_sig = block[p:p + n]
    p += n + 4
    count, p = _varint(block, p)
    outs = []
    for _ in range(count):
        p += 8
        n, p = _varint(block, p)
        outs.append(block[p:p + n])
        p += n
    return script_sig, outs


# -- the pass ------------------------------------------------------------------------------------------

class BlocksUnreadable(StorageError):
    """A block's coinbase cannot be read from the blk files (pruned, moved or changed): attribution waits."""


def mining_dir(out: Path) -> Path:
    return out / "mining"


def specs() -> list[Any]:
    from cairn_servers.brk.vecs import VecSpec

    return [VecSpec("height_to_blockhash", "height", "u1", 32), VecSpec("height_to_pool", "height", "<u2")]


def update(out: Path, *, durable: bool = True, blocks_dir: Path | None = None,
           progress: Callable[..., None] | None = None, stop: Callable[[], bool] | None = None
           ) -> dict[str, Any] | None:
    """Bring ``OUT/mining`` up to the raw tip (None when no blocks directory is known: blocks read over RPC).

    Blocks that cannot be read (a pruned or moved blocks directory) leave the attribution where it is, with a
    note on stderr; a store that cannot be written fails as the other passes do."""
    from cairn_servers.core.errors import InvalidInput, NotFound
    from cairn_servers.core.files import write_atomic

    root = mining_dir(out)
    remembered = root / "blocks_dir"
    if blocks_dir is not None:
        root.mkdir(parents=True, exist_ok=True)
        if not remembered.exists() or remembered.read_text() != str(blocks_dir):
            write_atomic(remembered, str(blocks_dir).encode())
    elif remembered.exists():
        blocks_dir = Path(remembered.read_text())
    if blocks_dir is None or not blocks_dir.is_dir():
        return None
    p = None
    try:
        p = _PoolPass(out, blocks_dir, durable)
        return p.run(progress, stop)
    except (BlocksUnreadable, NotFound, InvalidInput) as exc:
        print(f"brk: pool attribution not updated: {exc.message}", file=sys.stderr)
        return None
    finally:
        if p is not None:
            p.close()


class _PoolPass:
    def __init__(self, out: Path, blocks_dir: Path, durable: bool) -> None:
        from cairn_servers.brk.blocks.files import blk_files, read_xor_key
        from cairn_servers.brk.reader import StoreReader
        from cairn_servers.brk.vecs import VecStore

        self.raw = StoreReader(out)
        self.raw.refresh()
        self.n = self.raw.length("height_to_blockhash")
        self.store = VecStore(mining_dir(out), specs(), durable=durable)
        self.key = read_xor_key(blocks_dir)
        self.paths = dict(blk_files(blocks_dir))
        self._fds: dict[int, int] = {}

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self.raw.close()

    def run(self, progress: Callable[..., None] | None, should_stop: Callable[[], bool] | None) -> dict[str, Any]:
        import numpy as np

        from cairn_servers.brk.progress import Stage

        s = self.store
        meta = dict(s.meta)
        meta.setdefault("generation", 0)
        have = s.lengths["height_to_pool"]
        rolled = None
        if meta.get("pools") != pools_digest():  # another list: every block again
            if have:
                meta["generation"] = int(meta["generation"]) + 1
            meta["pools"] = pools_digest()
            s.truncate({name: 0 for name in s.lengths}, meta)
            have = 0
        if have:
            top = min(have, self.n)
            fork = top  # the common tip first (one hash); the whole chain only when it differs
            if top and not np.array_equal(s.read("height_to_blockhash")[top - 1],
                                          self.raw.read("height_to_blockhash", top - 1, top)[0]):
                ours = np.asarray(s.read("height_to_blockhash")[:top])
                theirs = self.raw.read("height_to_blockhash", 0, top)
                differ = np.flatnonzero((ours != theirs).any(axis=1))
                fork = int(differ[0]) if differ.size else top
            if fork < have:
                rolled = fork
                meta["generation"] = int(meta["generation"]) + 1
                s.truncate({name: fork for name in s.lengths}, meta)
        start = s.lengths["height_to_pool"]
        done = 0
        stage = Stage(progress, "mining", self.raw, start, self.n, should_stop)
        while start < self.n:
            stop = min(self.n, start + CHUNK_BLOCKS)
            ids = self._attribute(start, stop)
            s.append("height_to_blockhash", self.raw.read("height_to_blockhash", start, stop))
            s.append("height_to_pool", ids)
            meta["height"] = stop - 1
            from cairn_servers.brk.faults import fault

            fault("mining-commit")  # the crash tests kill here: rows appended, not committed
            s.commit(meta)
            done += stop - start
            start = stop
            if stage.done(stop):
                break
        if done == 0 and s.meta != meta:
            s.commit(meta)
        return {"height": s.lengths["height_to_pool"] - 1, "computed_heights": done, "rolled_back_to": rolled}

    def _attribute(self, a: int, b: int) -> np.ndarray:
        import numpy as np

        from cairn_servers.brk.gather import Rows
        raw = self.raw
        first_tx = raw.read("height_to_first_txindex", a, b).astype(np.int64)
        # The coinbases' sizes only (a chunk's blocks hold millions of transactions).
        sizes = Rows(first_tx).take(raw.root / "vecs" / "txindex_to_size.bin", "<u4",
                                    raw.length("txindex_to_size")).astype(np.int64)
        files, offsets, lengths = self._positions(a, b)
        out = np.zeros(b - a, dtype=np.uint16)
        key = self.key if any(self.key) else None
        for i in range(b - a):
            file_no, offset = int(files[i]), int(offsets[i])
            want = min(int(lengths[i]), 80 + 9 + int(sizes[i]))
            fd = self._fds.get(file_no)
            if fd is None:
                if len(self._fds) >= 32:  # blocks come file after file: a few open at a time, not thousands
                    for old in self._fds.values():
                        os.close(old)
                    self._fds.clear()
                path = self.paths.get(file_no)
                if path is None:
                    raise BlocksUnreadable(f"blk{file_no:05d}.dat is missing from the blocks directory")
                fd = self._fds[file_no] = os.open(path, os.O_RDONLY)
            data = os.pread(fd, want, offset)
            if len(data) != want:
                raise BlocksUnreadable(f"blk{file_no:05d}.dat is shorter than indexed")
            if key is not None:  # Bitcoin Core's XOR obfuscation
                phase = offset % len(key)
                stream = ((key[phase:] + key[:phase]) * (want // len(key) + 1))[:want]
                data = (int.from_bytes(data, "little") ^ int.from_bytes(stream, "little")).to_bytes(want, "little")
            try:
                script_sig, outs = parse_coinbase(data)
            except (IndexError, KeyError) as exc:
                raise BlocksUnreadable(f"height {a + i}: the coinbase in blk{file_no:05d}.dat cannot be read") from exc
            out[i] = attribute(script_sig, outs)
        return out

    def _positions(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(blk file, offset, length) of the chain's blocks at heights [a, b), from the blockpos scan cache
        (its hashes' first 8 bytes sorted once a run; rows read through short-lived maps)."""
        import numpy as np

        from cairn_servers.brk.gather import Rows
        raw = self.raw
        n_pos = raw.length("blockpos_to_hash")
        if not hasattr(self, "_sorted"):
            prefix = np.concatenate([np.ascontiguousarray(raw.read("blockpos_to_hash", i, i + 65536)[:, :8])
                                     .view("<u8").ravel() for i in range(0, n_pos, 65536)] or [np.zeros(0, "<u8")])
            self._order = np.argsort(prefix, kind="stable")
            self._sorted = prefix[self._order]
        if not n_pos:
            raise BlocksUnreadable("the blocks were not read from blk files (no scan cache)")
        hashes = raw.read("height_to_blockhash", a, b)
        want = np.ascontiguousarray(hashes[:, :8]).view("<u8").ravel()
        lo = np.minimum(np.searchsorted(self._sorted, want, "left"), n_pos - 1)
        pos = self._order[lo].astype(np.int64)

        def take(name: str, dtype: str, rows: np.ndarray) -> np.ndarray:
            return Rows(rows).take(raw.root / "vecs" / f"{name}.bin", dtype, raw.length(name))

        full = np.ascontiguousarray(hashes).view("V32").ravel()
        bad = np.flatnonzero(take("blockpos_to_hash", "V32", pos) != full)
        for i in bad.tolist():  # two blocks share the first 8 bytes of their hash (or one is missing)
            j = int(lo[i])
            while j < n_pos and self._sorted[j] == want[i]:
                p = int(self._order[j])
                if bytes(raw.read("blockpos_to_hash", p, p + 1)[0]) == bytes(hashes[i]):
                    pos[i] = p
                    break
                j += 1
            else:
                raise BlocksUnreadable(f"block {bytes(hashes[i])[::-1].hex()} is not in the scan cache")
        return (take("blockpos_to_file", "<u4", pos), take("blockpos_to_offset", "<u8", pos),
                take("blockpos_to_length", "<u4", pos))


# -- the series, read from the stored vecs (``cairn_servers.brk.catalog``) -------------------------------
# Per-height series of the mining family: base id -> in sats. On a coarse index each is a state (the bare id
# is the period's last value, with the usual statistics).
HEIGHT_BASES = {"hash_value_ths": False, "hash_value_phs": False, "inflation_rate": False,
                "annualized_issuance": True}
USD_BASES = {"hash_price_ths": False, "hash_price_phs": False}  # need prices
DAILY = ("puell_multiple",)  # from the daily coinbase issuance and closes (as the market series)


def _pool_rows(src: Source, a: int, b: int) -> tuple[np.ndarray, int]:
    """The pool ids of heights [a, b) the pass has committed, and how many rows are missing at the end."""
    b = min(b, src.heights)
    a = min(a, b)
    got = src.mining.read("height_to_pool", a, b)
    return got, (b - a) - got.shape[0]


def _nan_tail(values: np.ndarray, missing: int) -> np.ndarray:
    import numpy as np

    if not missing:
        return values
    return np.concatenate((values.astype(np.float64), np.full(missing, np.nan)))


def pool_height(src: Source, a: int, b: int, pid: int, kind: str, window: str) -> np.ndarray:
    """A pool's series at heights [a, b): ``count`` (1 when it mined the block), ``cumulative`` (blocks since
    genesis), ``dominance`` (percent of the blocks since genesis, or of the ``window``'s days). NaN where the
    attribution pass has not reached yet."""
    import numpy as np

    rows, missing = _pool_rows(src, a, b)
    mine = rows == pid
    if kind == "count":
        return _nan_tail(mine.astype(np.uint32), missing)
    a = min(a, src.heights)
    stop = a + rows.shape[0]
    if not window:
        before = int(np.count_nonzero(src.mining.read("height_to_pool", 0, a) == pid))
        cum = before + np.cumsum(mine, dtype=np.uint64)
        if kind == "cumulative":
            return _nan_tail(cum, missing)
        return _nan_tail(100.0 * cum / np.arange(a + 1, stop + 1), missing)
    mts = src.comp.read("height_to_mtimestamp", 0, stop).astype(np.int64)
    first = np.searchsorted(mts, mts[a:stop] - WINDOWS[window] * DAY, "right")
    lo = int(first[0]) if first.size else a
    span = np.concatenate(([0], np.cumsum(src.mining.read("height_to_pool", lo, stop) == pid, dtype=np.int64)))
    heights = np.arange(a, stop)
    in_window = span[heights - lo + 1] - span[first - lo]
    return _nan_tail(100.0 * in_window / (heights - first + 1), missing)


def pool_period(src: Source, a: int, b: int, index: str, pid: int, kind: str, window: str) -> np.ndarray:
    """A pool's series on a coarse index: ``count`` is the period's sum, the others the value at its last
    block (a period without blocks keeps the previous one's)."""
    import numpy as np

    first = src.first_heights(index)
    b = min(b, first.shape[0] - 1)
    a = min(a, b)
    h0, h1 = int(first[a]), int(first[b])
    if kind == "count":
        values = pool_height(src, h0, h1, pid, "count", "").astype(np.float64)
        counts = np.diff(first[a:b + 1])
        out = np.zeros(b - a)
        nonempty = counts > 0
        if nonempty.any():
            out[nonempty] = np.add.reduceat(values, (first[a:b][nonempty] - h0).astype(np.int64))
        return out if np.isnan(out).any() else out.astype(np.uint64)
    ends = first[a + 1:b + 1].astype(np.int64) - 1
    ok = ends >= 0
    out = np.full(b - a, np.nan)
    if ok.any():
        lo = int(ends[ok].min())
        values = pool_height(src, lo, int(ends.max()) + 1, pid, kind, window)
        out[ok] = values[ends[ok] - lo]
    return out.astype(np.uint64) if kind == "cumulative" and not np.isnan(out).any() else out


def height_series(src: Source, base: str, a: int, b: int) -> np.ndarray:
    """One of :data:`HEIGHT_BASES` or :data:`USD_BASES` at heights [a, b)."""
    import numpy as np

    b = min(b, src.heights)
    a = min(a, b)
    if a == b:
        return np.zeros(0)
    mts = src.comp.read("height_to_mtimestamp", 0, b).astype(np.int64)
    heights = np.arange(a, b)
    if base == "inflation_rate":  # supply against the last block at least 365 days older
        back = np.searchsorted(mts, mts[a:b] - 365 * DAY, "right") - 1
        lo = max(int(back.min()), 0)
        supply = src.comp.read("height_to_supply", lo, b).astype(np.float64)
        prev = np.where(back >= 0, supply[np.maximum(back, lo) - lo], np.nan)
        now = supply[heights - lo]
        with np.errstate(invalid="ignore", divide="ignore"):
            out: np.ndarray = np.where(prev > 50 * 100_000_000, (now / prev - 1.0) * 100.0, np.nan)
        return out
    first = np.searchsorted(mts, mts[a:b] - DAY, "right")  # the first block of each one's last 24 hours
    lo = int(first.min())
    if base == "annualized_issuance":
        flow = src.comp.read("height_to_subsidy", lo, b).astype(np.float64)
    else:
        flow = src.comp.read("height_to_coinbase", lo, b).astype(np.float64)
        if base.startswith("hash_price"):
            flow = flow / 1e8 * src.price("close", "height", lo, b)
    acc = np.concatenate(([0.0], np.cumsum(flow)))
    day = acc[heights - lo + 1] - acc[first - lo]
    if base == "annualized_issuance":
        return np.asarray(day * 365.0)
    ths = src.comp.read("height_to_hash_rate", a, b).astype(np.float64) / TERA
    with np.errstate(invalid="ignore", divide="ignore"):
        per = np.where(ths > 0, day / ths, np.nan)
    result: np.ndarray = per * 1000.0 if base.endswith("_phs") else per
    return result


def daily(src: Source) -> dict[str, np.ndarray]:
    """The daily mining series (:data:`DAILY`) per dateindex: the Puell multiple."""
    import numpy as np

    from cairn_servers.brk.market import _rolling_mean

    issued = src.aggregate("dateindex", "coinbase", "sum").astype(np.float64) / 1e8
    close = src.daily_price("close")
    n = issued.shape[0]
    c = np.full(n, np.nan)
    c[:min(n, close.shape[0])] = close[:n]
    usd = issued * c
    have = ~np.isnan(usd)
    sums = np.concatenate(([0.0], np.cumsum(np.where(have, usd, 0.0))))
    counts = np.concatenate(([0], np.cumsum(have, dtype=np.int64)))
    sma = _rolling_mean(usd, sums, counts, PUELL_DAYS)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"puell_multiple": np.where(sma > 0, usd / sma, np.nan)}
