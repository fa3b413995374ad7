"""The indexer: best-chain blocks in, raw vecs per height / tx / input / output out.

One run: scan blk files for new records (headers go to the ``blockpos`` vecs, so the next run does
not rescan), select the best chain by cumulative work, roll the store back to the fork height if the
chain changed, then parse and append blocks from there in batches, committing each batch. A block
that fails to parse, or spends an output that does not exist, is reported with its file and offset,
marked invalid (it and its descendants are never chosen again), and chain selection runs again.

Prevouts resolve through the transaction index (``cairn_servers.brk.txindex``: txid -> txindex in an
embedded RocksDB under ``<out>/txindex``, then ``txindex_to_first_outputindex`` and
``txindex_to_output_count`` from the vecs), so input values, spends and fees are exact while memory
stays bounded: blocks are parsed in chunks of a few MB, each chunk's prevouts are looked up at once,
and only the current batch's own transactions are kept in memory.

The vecs and the index commit as one: the vecs first (their manifest is the commit point), then the
index in one atomic batch recording how many transactions it holds. A rollback removes the rolled-back
transactions from the index before the vecs shrink. So the index never holds more than the vecs, and
opening re-inserts the few it may lack (a kill between the two writes) from ``txindex_to_txid``.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn_servers.brk.blocks.chain import HeaderInfo, best_chain, pow_ok
from cairn_servers.brk.blocks.files import MAGICS, MAX_NOTES, Scan, blk_files, detect_network, read_xor_key, unxor
from cairn_servers.brk.blocks.worker import ParseWorker
from cairn_servers.brk.blocks.parser import (
    COINBASE_VOUT,
    NULL_HASH,
    Block,
    MalformedBlock,
    Packed,
    difficulty,
    hash_hex,
    pack,
    parse_block,
    parse_header,
)
from cairn_servers.brk.faults import fault as _fault
from cairn_servers.brk.txindex import DEFAULT_CACHE_MB, TxIndex
from cairn_servers.brk.vecs import VecSpec, VecStore
from cairn_servers.core.errors import InvalidInput, StorageError
from cairn_servers.core.heap import trim_heap


def _hash_vec(name: str, index: str) -> VecSpec:
    """A vec of 32-byte hashes (internal byte order), stored as 32 x u1 per row."""
    return VecSpec(name, index, "u1", 32)

NO_OUTPUT = (1 << 64) - 1  # inputindex_to_outputindex of a coinbase input
_OUT_SHIFT = 24  # txid map value: first_outputindex << 24 | output_count
SCAN_BATCH = 10_000  # new block positions appended to the store at a time while a blk file is scanned
# Random reads of committed vecs go through short-lived memory maps of at most this many rows each:
# the pages a map touches count in the process's resident size until it is unmapped, so one map over
# a whole look-up (hundreds of thousands of random rows of a file of many GB) would grow with the chain.
_GATHER_ROWS = 4096
_TXID_STEP = 1 << 16  # transactions re-inserted into (or removed from) the index per engine batch

SPECS: list[VecSpec] = [
    _hash_vec("height_to_blockhash", "height"),
    VecSpec("height_to_timestamp", "height", "<u4"),
    VecSpec("height_to_bits", "height", "<u4"),
    VecSpec("height_to_difficulty", "height", "<f8"),
    VecSpec("height_to_version", "height", "<i4"),
    VecSpec("height_to_size", "height", "<u4"),
    VecSpec("height_to_weight", "height", "<u4"),
    VecSpec("height_to_tx_count", "height", "<u4"),
    VecSpec("height_to_fee", "height", "<u8"),
    VecSpec("height_to_first_txindex", "height", "<u8"),
    VecSpec("height_to_first_inputindex", "height", "<u8"),
    VecSpec("height_to_first_outputindex", "height", "<u8"),
    _hash_vec("txindex_to_txid", "txindex"),
    VecSpec("txindex_to_height", "txindex", "<u4"),
    VecSpec("txindex_to_version", "txindex", "<i4"),
    VecSpec("txindex_to_locktime", "txindex", "<u4"),
    VecSpec("txindex_to_size", "txindex", "<u4"),
    VecSpec("txindex_to_weight", "txindex", "<u4"),
    VecSpec("txindex_to_vsize", "txindex", "<u4"),
    VecSpec("txindex_to_input_count", "txindex", "<u4"),
    VecSpec("txindex_to_output_count", "txindex", "<u4"),
    VecSpec("txindex_to_first_inputindex", "txindex", "<u8"),
    VecSpec("txindex_to_first_outputindex", "txindex", "<u8"),
    VecSpec("txindex_to_fee", "txindex", "<u8"),
    VecSpec("inputindex_to_outputindex", "inputindex", "<u8"),
    VecSpec("outputindex_to_value", "outputindex", "<u8"),
    VecSpec("outputindex_to_type", "outputindex", "u1"),
    # The scan cache: every framed block found in the files, in discovery order.
    _hash_vec("blockpos_to_hash", "blockpos"),
    _hash_vec("blockpos_to_prevhash", "blockpos"),
    VecSpec("blockpos_to_bits", "blockpos", "<u4"),
    VecSpec("blockpos_to_file", "blockpos", "<u4"),
    VecSpec("blockpos_to_offset", "blockpos", "<u8"),
    VecSpec("blockpos_to_length", "blockpos", "<u4"),
]


@dataclass
class IndexResult:
    """What one ``index`` run did."""

    network: str
    height: int  # tip height after the run (-1: empty)
    tip: str  # tip hash (display order), "" when empty
    indexed_blocks: int = 0
    indexed_bytes: int = 0
    rolled_back_from: int | None = None  # previous tip height when a reorg rolled the store back
    fork_height: int | None = None
    invalid: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class _BlockReader:
    """One blk file read with ``pread``: unlike a memory map, nothing read stays in the process."""

    def __init__(self, path: Path, key: bytes) -> None:
        self.path = path
        self.key = key
        self._fd = os.open(path, os.O_RDONLY)

    def read(self, offset: int, length: int) -> bytes:
        data = os.pread(self._fd, length, offset)
        if len(data) != length:
            raise InvalidInput(f"{self.path}: record at offset {offset} (+{length} bytes) runs past the end of the file")
        return unxor(data, self.key, offset)

    def close(self) -> None:
        os.close(self._fd)


def open_store(out: Path, *, durable: bool = True) -> VecStore:
    """The vec store of an output directory, truncated to its last committed state."""
    return VecStore(out, SPECS, durable=durable)


class _RecentTxids:
    """Txid maps (txid -> first_outputindex << 24 | output_count) as sorted numpy columns, newest part first on
    look-up, up to ``limit`` transactions (the oldest parts are dropped past it).

    The indexer keeps two: the current batch's own transactions (a part per chunk, unbounded: a batch is a
    few tens of MB of blocks), and the last committed batches' (a part per batch, up to ``recent_txs``): most
    inputs spend recent outputs, and this answers them without the engine. Compact, so its memory is a few MB
    however the chain grows: per part, three numpy columns sorted by the txid's first 8 bytes (the prefix,
    the whole txid, the value: 48 bytes a transaction, where a dict of bytes keys took about 240). A prefix
    hit is checked against the whole txid, so a shared prefix only sends that txid to the next source."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.batches: deque[tuple[Any, Any, Any]] = deque()  # (prefixes, txids, values), oldest first
        self.count = 0

    def add(self, txmap: dict[bytes, int]) -> None:
        import numpy as np

        if txmap:
            self.add_columns(np.frombuffer(b"".join(txmap), dtype="S32"),
                             np.fromiter(txmap.values(), dtype=np.uint64, count=len(txmap)))

    def add_columns(self, keys: Any, values: Any) -> None:
        """One part: ``keys`` (S32 txids, each once) and their ``values`` (uint64)."""
        import numpy as np

        if not keys.shape[0] or self.limit <= 0:
            return
        prefixes = _prefixes(keys)
        order = np.argsort(prefixes, kind="stable")
        self.batches.append((prefixes[order], keys[order], values[order]))
        self.count += keys.shape[0]
        while len(self.batches) > 1 and self.count > self.limit:
            self.count -= len(self.batches.popleft()[0])

    def find(self, keys: Any) -> tuple[Any, Any]:
        """(found, value) of each of ``keys`` (S32): its latest value, newest part first."""
        import numpy as np

        n = keys.shape[0]
        values = np.zeros(n, dtype=np.uint64)
        open_ = np.ones(n, dtype=bool)  # not yet answered
        if not n or not self.batches:
            return ~open_, values
        prefixes = _prefixes(keys)
        for bp, bk, bv in reversed(self.batches):
            rows = np.flatnonzero(open_)
            if rows.size == 0:
                break
            pos = np.searchsorted(bp, prefixes[rows])
            pos[pos == bp.size] = 0
            hit = bk[pos] == keys[rows]
            if hit.any():
                rows, pos = rows[hit], pos[hit]
                open_[rows] = False
                values[rows] = bv[pos]
        return ~open_, values

    def lookup(self, want: set[bytes]) -> dict[bytes, int]:
        import numpy as np

        if not want or not self.batches:
            return {}
        asked = list(want)
        found, values = self.find(np.frombuffer(b"".join(asked), dtype="S32"))
        rows = np.flatnonzero(found)
        return dict(zip([asked[i] for i in rows.tolist()], values[rows].tolist()))

    def columns(self) -> tuple[Any, Any]:
        """Every txid held and its latest value (keys S32, values uint64), each txid once."""
        import numpy as np

        if not self.batches:
            return np.zeros(0, dtype="S32"), np.zeros(0, dtype=np.uint64)
        keys = np.concatenate([bk for _, bk, _ in reversed(self.batches)])  # newest part first
        values = np.concatenate([bv for _, _, bv in reversed(self.batches)])
        if len(self.batches) == 1:
            return keys, values
        _, first = np.unique(keys, return_index=True)  # the newest part's row of a repeated txid
        return keys[first], values[first]

    def as_dict(self) -> dict[bytes, int]:
        keys, values = self.columns()
        return dict(zip(keys.view("V32").tolist(), values.tolist()))

    def clear(self) -> None:
        self.batches.clear()
        self.count = 0


def _prefixes(keys: Any) -> Any:
    """The first 8 bytes of each S32 txid, as little-endian uint64 (a sort key)."""
    import numpy as np

    return np.ascontiguousarray(keys).view("<u8")[::4].copy() if keys.shape[0] else np.zeros(0, dtype="<u8")


def _hashes(raw: bytes) -> list[bytes]:
    return [raw[i:i + 32] for i in range(0, len(raw), 32)]


class _Batch:
    """Rows of the blocks parsed since the last commit (typed arrays; hashes and headers as lists)."""

    def __init__(self) -> None:
        from array import array

        self.h: dict[str, list[Any]] = {k: [] for k in ("hash", "time", "bits", "diff", "version", "size",
                                                        "weight", "ntx")}
        self.txids = bytearray()  # 32 bytes a transaction
        # Typed arrays, not lists: 1-8 bytes a value instead of ~36 (a pointer and an int object), so
        # a batch of 32 MB of blocks holds ~12 MB of columns instead of ~60 MB.
        self.tx_height = array("I")
        self.tx_version = array("i")
        self.tx_locktime = array("I")
        self.tx_size = array("I")
        self.tx_weight = array("I")
        self.tx_inputs = array("I")
        self.tx_outputs = array("I")
        self.spent = array("Q")
        self.out_value = array("Q")
        self.out_type = array("B")
        self.pos: list[int] = []  # blockpos of each block, to report where a bad one lives
        self.bytes = 0
        # txid -> first_outputindex << 24 | output_count: this batch's own txs (a part per chunk, latest wins) ...
        self.txmap = _RecentTxids(sys.maxsize)
        # ... and, on the per-block path, the committed txs the current chunk spends (looked up at once).
        self.committed: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self.h["hash"])

    def add(self, block: Block | Packed, n_tx: int) -> None:
        """Queue ``block``'s header row and its transaction and output columns (not its txids, heights and
        spends: the caller's, from its own look-ups)."""
        hd = block.header
        h = self.h
        h["hash"].append(block.hash)
        h["time"].append(hd.time)
        h["bits"].append(hd.bits)
        h["diff"].append(difficulty(hd.bits))
        h["version"].append(hd.version)
        h["size"].append(block.size)
        h["weight"].append(block.weight)
        h["ntx"].append(n_tx)
        for mine, theirs in ((self.tx_version, block.tx_version), (self.tx_locktime, block.tx_locktime),
                             (self.tx_size, block.tx_size), (self.tx_weight, block.tx_weight),
                             (self.tx_inputs, block.tx_inputs), (self.tx_outputs, block.tx_outputs),
                             (self.out_value, block.out_value), (self.out_type, block.out_type)):
            mine.extend(theirs)

    def truncate(self, blocks: int, txs: int, inputs: int, outputs: int) -> None:
        """Keep only the first ``blocks`` blocks (and their txs, inputs and outputs)."""
        for col in self.h.values():
            del col[blocks:]
        del self.pos[blocks:]
        del self.txids[32 * txs:]
        for arr in (self.tx_height, self.tx_version, self.tx_locktime, self.tx_size, self.tx_weight, self.tx_inputs,
                    self.tx_outputs):
            del arr[txs:]
        del self.spent[inputs:]
        del self.out_value[outputs:]
        del self.out_type[outputs:]


class Indexer:
    """Index one blocks directory into one output directory (see the module docstring)."""

    def __init__(self, blocks_dir: Path, out: Path, *, durable: bool = True, commit_blocks: int = 10_000,
                 commit_bytes: int = 32 << 20, commit_seconds: float = 3.0,
                 log: Callable[[str], None] | None = None, progress: Callable[..., None] | None = None,
                 cache_mb: int = DEFAULT_CACHE_MB, chunk_bytes: int = 4 << 20, prefix_bytes: int = 8,
                 recent_txs: int = 400_000, worker_min_bytes: int = 16 << 20) -> None:
        self.blocks_dir = blocks_dir
        self.out = out
        self.commit_blocks = max(1, commit_blocks)
        # The batch's rows live in memory until the commit: bounded by bytes of block data. 32 MB, not 64:
        # the main process's peak fell from 232 to 174 MB at 5 M transactions, at the same speed.
        self.commit_bytes = commit_bytes
        self.chunk_bytes = chunk_bytes  # blocks parsed before their prevouts are looked up at once
        # With this much block data to index (and two cores), blocks are read and parsed in a second
        # process (cairn_servers.brk.blocks.worker) while this one resolves and writes.
        self.worker_min_bytes = worker_min_bytes
        self.cache_mb = cache_mb
        self.prefix_bytes = prefix_bytes
        # The txids of the last committed batches, up to ``recent_txs`` transactions (see _RecentTxids):
        # bounded, so memory does not grow with the chain; dropped on rollback.
        self._recent = _RecentTxids(recent_txs)
        # Each commit fsyncs ~30 files (~80 ms here), so batches are bounded by time as well as size.
        self.commit_seconds = commit_seconds
        self.log = log or (lambda msg: print(f"brk: {msg}", file=sys.stderr))
        # progress(event, **figures): "scan" per blk file, "start" before indexing, "block" per block, "commit"
        # per committed batch (see cairn_servers.brk.progress).
        self.progress = progress
        # Set (e.g. by a signal handler) to stop at the next block: the batch so far is committed.
        self.stop_requested = False
        # Hooks for the processes that read the raw store while it grows (cairn_servers.brk.pipeline):
        # ``on_commit()`` after each batch of heights is committed, ``before_rollback()`` before a reorg
        # truncates committed vecs (readers must be paused: the rows they read are about to change).
        self.on_commit: Callable[[], None] | None = None
        self.before_rollback: Callable[[], None] | None = None
        self.store = open_store(out, durable=durable)
        self.meta: dict[str, Any] = dict(self.store.meta)
        self.key = read_xor_key(blocks_dir)
        network = detect_network(blocks_dir)
        if self.meta.get("network", network) != network:
            raise InvalidInput(
                f"{out} indexes {self.meta['network']} but {blocks_dir} holds {network} blocks. "
                f"Use a different --out directory."
            )
        self.meta["network"] = network
        self.meta.setdefault("scanned", {})
        self.meta.setdefault("invalid", [])
        self._files: dict[int, _BlockReader] = {}
        # The indexed chain (one hash a height). The block headers (the blockpos scan cache) are
        # loaded only when chain selection needs them: a run that finds no new block in the files and
        # an index already at the best tip it selected last time loads none (opening stays O(1) in
        # the number of blocks).
        self.chain: list[bytes] = _hashes(self.store.read("height_to_blockhash").tobytes())
        self._headers_loaded = False
        self._txi: TxIndex | None = None
        self._reconcile()
        self._close_txindex()

    # -- state rebuilt from committed vecs ------------------------------------------------------
    def _load_headers(self) -> None:
        if self._headers_loaded:
            return
        self._headers_loaded = True
        s = self.store
        hashes = _hashes(s.read("blockpos_to_hash").tobytes())
        prevs = _hashes(s.read("blockpos_to_prevhash").tobytes())
        bits = s.read("blockpos_to_bits").tolist()
        self.headers: dict[bytes, HeaderInfo] = {}
        for i, (h, p, b) in enumerate(zip(hashes, prevs, bits)):
            self.headers[h] = HeaderInfo(h, p, b, i)
        self.pos_of: dict[bytes, int] = {h: i for i, h in enumerate(hashes)}
        self.pos_hash: list[bytes] = hashes
        self.pos_file: list[int] = s.read("blockpos_to_file").tolist()
        self.pos_offset: list[int] = s.read("blockpos_to_offset").tolist()
        self.pos_length: list[int] = s.read("blockpos_to_length").tolist()

    # -- the transaction index ------------------------------------------------------------------
    @property
    def txindex(self) -> TxIndex:
        """The transaction index, opened on first use (closed after each run, so others may open it)."""
        if self._txi is None:
            self._txi = TxIndex(self.out / "txindex", cache_mb=self.cache_mb, prefix_bytes=self.prefix_bytes)
        return self._txi

    def _close_txindex(self) -> None:
        txi, self._txi = self._txi, None
        if txi is not None:
            txi.close()

    def _reconcile(self) -> None:
        """Bring the index to the vecs' committed transactions (normally nothing to do: O(1))."""
        n = self.store.lengths["txindex_to_txid"]
        txi = self.txindex
        if txi.count > n:  # only when the vecs were reset (a format change) or replaced by hand
            self.log(f"the transaction index is ahead of the vecs ({txi.count} > {n} transactions); rebuilding it")
            txi.destroy()
            self._txi = None
            txi = self.txindex
        if txi.count < n:
            if n - txi.count > 100_000:
                self.log(f"transaction index: re-inserting {n - txi.count} transactions from the vecs")
            while txi.count < n:
                lo, hi = txi.count, min(n, txi.count + _TXID_STEP)
                txi.insert(lo, _hashes(self.store.read("txindex_to_txid")[lo:hi].tobytes()))

    def _gather(self, name: str, rows: Any) -> Any:
        """``vec[rows]`` of a committed vec, through maps of at most ``_GATHER_ROWS`` rows' pages each."""
        import numpy as np

        rows = np.asarray(rows, dtype=np.int64)
        if rows.shape[0] <= _GATHER_ROWS:
            return self.store.read(name)[rows]
        parts = []
        for a in range(0, rows.shape[0], _GATHER_ROWS):
            view = self.store.read(name)
            parts.append(view[rows[a:a + _GATHER_ROWS]])
            del view  # unmapped here: its pages leave the resident set
        return np.concatenate(parts)

    def _read_txids(self, txindexes: Any) -> Any:
        return self._gather("txindex_to_txid", txindexes)

    def _resolve(self, txids: list[bytes]) -> dict[bytes, int]:
        """txid -> first_outputindex << 24 | output_count of the committed ones among ``txids``."""
        import numpy as np

        if not txids:
            return {}
        found = self.txindex.lookup(txids, self._read_txids)
        hit = [i for i, t in enumerate(found) if t >= 0]
        if not hit:
            return {}
        idx = np.array([found[i] for i in hit], dtype=np.int64)
        firsts = self._gather("txindex_to_first_outputindex", idx).tolist()
        counts = self._gather("txindex_to_output_count", idx).tolist()
        return {txids[i]: (f << _OUT_SHIFT) | c for i, f, c in zip(hit, firsts, counts)}

    def _prefetch(self, blocks: list[Block], batch: _Batch, txmap: dict[bytes, int]) -> None:
        """Look up, at once, the committed transactions a chunk of blocks spends (per-block path)."""
        own: set[bytes] = set()
        want: set[bytes] = set()
        for b in blocks:
            own.update(b.txids)
            want.update(b.in_prev_txid)
        want.discard(NULL_HASH)
        want -= own  # spent within the chunk (a rare earlier duplicate is looked up one by one)
        want.difference_update(txmap)
        found = self._recent.lookup(want)  # a repeated txid: its latest
        want.difference_update(found)
        found.update(self._resolve(sorted(want)))
        batch.committed = found

    # -- scanning -------------------------------------------------------------------------------
    def scan_files(self) -> int:
        """Record every new framed block in the blk files; returns how many were found."""
        magic = MAGICS[self.meta["network"]]
        scanned: dict[str, int] = self.meta["scanned"]
        found = 0
        files = blk_files(self.blocks_dir)
        for n_file, (file_no, path) in enumerate(files):
            if self.stop_requested:
                break
            if self.progress:
                self.progress("scan", file=n_file, files=len(files), found=found)
            start = scanned.get(str(file_no), 0)
            if path.stat().st_size <= start:
                continue
            scanner = Scan(path, self.key, magic, start)
            hashes: list[bytes] = []
            prevs: list[bytes] = []
            bits: list[int] = []
            offs: list[int] = []
            lens: list[int] = []
            ignored = 0

            def flush(file_no: int = file_no) -> None:
                # Rows are appended in batches as the file is read (committed with the run), so a file
                # of a million records never holds them all in memory at once.
                if not hashes:
                    return
                import numpy as np

                s = self.store
                s.append_bytes("blockpos_to_hash", b"".join(hashes), len(hashes))
                s.append_bytes("blockpos_to_prevhash", b"".join(prevs), len(prevs))
                s.append("blockpos_to_bits", np.array(bits, dtype=np.uint32))
                s.append("blockpos_to_file", np.full(len(hashes), file_no, dtype=np.uint32))
                s.append("blockpos_to_offset", np.array(offs, dtype=np.uint64))
                s.append("blockpos_to_length", np.array(lens, dtype=np.uint32))
                for column in (hashes, prevs, bits, offs, lens):
                    column.clear()

            for rec in scanner:
                self._load_headers()  # before anything new is queued: it reads the committed rows
                head = parse_header(rec.header)
                if head.hash in self.headers:
                    continue  # the same block stored twice
                if not pow_ok(head.hash, head.bits):
                    ignored += 1
                    if ignored <= MAX_NOTES:
                        self.log(f"ignoring block {hash_hex(head.hash)} in {path.name} at offset {rec.offset}: "
                                 f"its hash does not meet its own target")
                    continue
                seq = len(self.pos_file)
                self.headers[head.hash] = HeaderInfo(head.hash, head.prev, head.bits, seq)
                self.pos_of[head.hash] = seq
                self.pos_hash.append(head.hash)
                self.pos_file.append(file_no)
                self.pos_offset.append(rec.offset)
                self.pos_length.append(rec.length)
                hashes.append(head.hash)
                prevs.append(head.prev)
                bits.append(head.bits)
                offs.append(rec.offset)
                lens.append(rec.length)
                found += 1
                if len(hashes) >= SCAN_BATCH:
                    flush()
            flush()
            if ignored > MAX_NOTES:
                self.log(f"ignored {ignored} records in {path.name} whose hash does not meet their own target "
                         f"(the first {MAX_NOTES} shown above): junk, not blocks")
            resume = scanner.resume
            scanned[str(file_no)] = resume
        return found

    # -- the run --------------------------------------------------------------------------------
    def run(self, *, max_blocks: int | None = None) -> IndexResult:
        """Scan, select, roll back if needed, and index up to ``max_blocks`` new blocks."""
        from cairn_servers.core.heap import return_large_buffers

        # Batches are columns of tens of MB, freed at each commit: with glibc's sliding mmap threshold
        # they would come from the heap and, fragmented, keep the resident size creeping up.
        return_large_buffers()
        try:
            result = self._run(max_blocks)
        except BaseException:
            self._close_files()
            try:
                self._close_txindex()
            except StorageError:
                pass  # the error already on its way out is the one to report
            raise
        self._close_files()
        self._close_txindex()
        return result

    def _run(self, max_blocks: int | None) -> IndexResult:
        t0 = time.perf_counter()
        found = self.scan_files()
        result = IndexResult(self.meta["network"], -1, "")
        tip = hash_hex(self.chain[-1]) if self.chain else ""
        if not found and self.meta.get("best") == tip and not self.stop_requested:
            # Nothing new in the files, and the index is at the tip chosen last time: up to date.
            self.store.commit(self._meta())
            result.height, result.tip = len(self.chain) - 1, tip
            result.seconds = time.perf_counter() - t0
            return result
        self._load_headers()
        budget = max_blocks
        while True:
            invalid = {bytes.fromhex(e["hash"])[::-1] for e in self.meta["invalid"]}
            chain = best_chain(self.headers, exclude=invalid, prefer=set(self.chain))
            self.meta["best"] = hash_hex(chain[-1]) if chain else ""
            fork = 0
            limit = min(len(chain), len(self.chain))
            while fork < limit and chain[fork] == self.chain[fork]:
                fork += 1
            if fork < len(self.chain):
                if result.rolled_back_from is None:
                    result.rolled_back_from = len(self.chain) - 1
                result.fork_height = fork
                self.rollback(fork)
            todo = chain[fork:]
            if budget is not None:
                todo = todo[:budget]
            done, bad = self._index_blocks(todo, result)
            if budget is not None:
                budget -= done
            if bad is None or self.stop_requested:
                break
        result.height = len(self.chain) - 1
        result.tip = hash_hex(self.chain[-1]) if self.chain else ""
        result.seconds = time.perf_counter() - t0
        return result

    def rollback(self, height: int) -> None:
        """Truncate every chain vec to ``height`` blocks (a reorg), the transaction index first."""
        s = self.store
        s.commit(self._meta())  # make the scan durable first; nothing else is pending here
        if height >= s.lengths["height_to_blockhash"]:
            return
        if self.before_rollback is not None:
            self.before_rollback()
        lengths = {
            "height": height,
            "txindex": int(s.read("height_to_first_txindex")[height]),
            "inputindex": int(s.read("height_to_first_inputindex")[height]),
            "outputindex": int(s.read("height_to_first_outputindex")[height]),
        }
        self.log(f"reorg: rolling back from height {len(self.chain) - 1} to {height - 1}")
        # The index forgets the rolled-back transactions before the vecs shrink (they name them), so
        # a kill in between leaves the index behind the vecs, which opening repairs.
        txi = self.txindex
        cut = lengths["txindex"]
        while txi.count > cut:
            lo = max(cut, txi.count - _TXID_STEP)
            txi.remove_from(lo, _hashes(s.read("txindex_to_txid")[lo:txi.count].tobytes()))
        _fault("rollback-vecs")
        self.chain = self.chain[:height]
        self._recent.clear()
        s.truncate({spec.name: lengths[spec.index] for spec in SPECS if spec.index in lengths}, self._meta())

    def _meta(self) -> dict[str, Any]:
        meta = dict(self.meta)
        meta["height"] = len(self.chain) - 1
        meta["tip"] = hash_hex(self.chain[-1]) if self.chain else ""
        return meta

    def _file(self, file_no: int) -> _BlockReader:
        bf = self._files.get(file_no)
        if bf is None:
            for no, path in blk_files(self.blocks_dir):
                if no == file_no:
                    bf = _BlockReader(path, self.key)
                    break
            else:
                raise InvalidInput(f"blk{file_no:05d}.dat disappeared from {self.blocks_dir}")
            # Blocks are read in chain order, nearly file after file: two open files are plenty.
            while len(self._files) >= 2:
                self._files.pop(next(iter(self._files))).close()
            self._files[file_no] = bf
        return bf

    def _close_files(self) -> None:
        for bf in self._files.values():
            bf.close()
        self._files.clear()

    def _index_blocks(self, todo: list[bytes], result: IndexResult) -> tuple[int, bytes | None]:
        batch = _Batch()
        done = 0
        started = time.monotonic()
        progress = self.progress
        if progress:
            total = result.indexed_bytes + sum(self.pos_length[self.pos_of[h]] for h in todo)
            progress("start", height=len(self.chain) - 1, target_height=len(self.chain) - 1 + len(todo),
                     blocks=result.indexed_blocks, bytes=result.indexed_bytes, total_bytes=total)
        worker = self._start_worker(todo)
        chunks = self._chunks(todo, worker)
        try:
            return self._index_chunks(chunks, batch, result, started)
        finally:
            if worker is not None:
                worker.close()

    def _plan(self, todo: list[bytes]) -> Iterator[list[tuple[bytes, int]]]:
        """Chunks of ``todo`` as (hash, blockpos): up to ``chunk_bytes`` of blocks, ending where a batch
        of ``commit_blocks`` blocks or ``commit_bytes`` would end (commits by time may come earlier)."""
        chunk: list[tuple[bytes, int]] = []
        size = n_batch = batch_bytes = 0
        for h in todo:
            pos = self.pos_of[h]
            chunk.append((h, pos))
            size += self.pos_length[pos]
            n_batch += 1
            batch_bytes += self.pos_length[pos]
            full = n_batch >= self.commit_blocks or batch_bytes >= self.commit_bytes
            if full:
                n_batch = batch_bytes = 0
            if full or size >= self.chunk_bytes:
                yield chunk
                chunk, size = [], 0
        if chunk:
            yield chunk

    def _start_worker(self, todo: list[bytes]) -> ParseWorker | None:
        """A parsing process when there is enough to do (or ``CAIRN_BRK_PARSE_PROCESS`` says so)."""
        force = os.environ.get("CAIRN_BRK_PARSE_PROCESS", "")
        if force in ("0", "1"):
            use = force == "1"
        else:
            use = (os.cpu_count() or 1) >= 2 and \
                sum(self.pos_length[self.pos_of[h]] for h in todo) >= self.worker_min_bytes
        return ParseWorker(self.key) if use and todo else None

    def _chunks(self, todo: list[bytes], worker: ParseWorker | None
                ) -> Iterator[list[tuple[bytes, int, Packed | Exception]]]:
        """Each chunk's blocks, read and parsed (by ``worker`` when there is one), in chain order."""
        plan = self._plan(todo)
        if worker is None:
            for part in plan:
                chunk: list[tuple[bytes, int, Packed | Exception]] = []
                for h, pos in part:
                    try:
                        raw = self._file(self.pos_file[pos]).read(self.pos_offset[pos], self.pos_length[pos])
                        chunk.append((h, pos, pack(parse_block(raw))))
                    except (MalformedBlock, InvalidInput) as exc:
                        chunk.append((h, pos, exc))
                        break
                yield chunk
            return
        paths = {no: str(path) for no, path in blk_files(self.blocks_dir)}
        parts: deque[list[tuple[bytes, int]]] = deque()

        def reads() -> Iterator[list[tuple[str, int, int]]]:
            for part in plan:
                parts.append(part)
                yield [(paths.get(self.pos_file[pos], str(self.blocks_dir / f"blk{self.pos_file[pos]:05d}.dat")),
                        self.pos_offset[pos], self.pos_length[pos]) for _, pos in part]

        for answer in worker.chunks(reads()):
            part = parts.popleft()
            yield [(h, pos, block) for (h, pos), block in zip(part, answer)]

    def _index_chunks(self, chunks: Iterator[list[tuple[bytes, int, Packed | Exception]]], batch: _Batch,
                      result: IndexResult, started: float) -> tuple[int, bytes | None]:
        done = 0
        progress = self.progress
        for chunk in chunks:
            if self.stop_requested:
                break
            height0 = len(self.chain)
            # The chunk's leading parsed blocks at once; what that path leaves (an error, a block that does not
            # resolve, a repeated txid) goes block by block, which finds and reports it.
            n_fast = 0
            while n_fast < len(chunk) and isinstance(chunk[n_fast][2], Packed):
                n_fast += 1
            if n_fast and not self._add_chunk(batch, [b for _, _, b in chunk[:n_fast] if isinstance(b, Packed)]):
                n_fast = 0
            added, bad_at, error = n_fast, None, ""
            if n_fast < len(chunk):
                more, bad_at, error = self._add_one_by_one(batch, [b for _, _, b in chunk[n_fast:]])
                added += more
            for i, (h, pos, _) in enumerate(chunk[:added]):
                batch.pos.append(pos)
                done += 1
                result.indexed_blocks += 1
                result.indexed_bytes += self.pos_length[pos]
                batch.bytes += self.pos_length[pos]
                if progress:
                    progress("block", height=height0 + i, blocks=result.indexed_blocks, bytes=result.indexed_bytes)
            if bad_at is not None:
                h, pos, _ = chunk[n_fast + bad_at]
                self._mark_invalid(pos, error, result)
                bad = self._flush(batch, result)
                return done, h if bad is None else bad
            if len(batch) >= self.commit_blocks or batch.bytes >= self.commit_bytes \
                    or time.monotonic() - started >= self.commit_seconds:
                bad = self._flush(batch, result)
                if bad is not None:
                    return done, bad
                if progress:
                    progress("commit", height=len(self.chain) - 1, blocks=result.indexed_blocks,
                             bytes=result.indexed_bytes)
                batch = _Batch()
                started = time.monotonic()
        bad = self._flush(batch, result)
        if progress and bad is None:
            progress("commit", height=len(self.chain) - 1, blocks=result.indexed_blocks, bytes=result.indexed_bytes)
        return done, bad

    def _add_chunk(self, batch: _Batch, blocks: list[Packed]) -> bool:
        """Resolve the prevouts of a chunk's blocks at once (numpy, no object per input) and queue their rows.

        False, with nothing queued, when a block needs the per-block path: a coinbase out of place, an input
        that no earlier output answers, or a txid prefix repeated within the chunk (the per-block path keeps
        "latest wins" for them, and reports a bad block where it is)."""
        import numpy as np

        n_tx = np.array([b.n_tx for b in blocks], dtype=np.int64)
        txids = np.frombuffer(b"".join(b.txids for b in blocks), dtype="S32")
        n_in = np.frombuffer(b"".join(b.tx_inputs.tobytes() for b in blocks), dtype=np.uint32).astype(np.int64)
        n_out = np.frombuffer(b"".join(b.tx_outputs.tobytes() for b in blocks), dtype=np.uint32).astype(np.uint64)
        prev = np.frombuffer(b"".join(b.in_prev_txid for b in blocks), dtype="S32")
        vout = np.frombuffer(b"".join(b.in_prev_vout.tobytes() for b in blocks), dtype=np.uint32).astype(np.uint64)
        n = txids.shape[0]
        if prev.shape[0] != int(n_in.sum()) or n_out.shape[0] != n or (n_out >= 1 << _OUT_SHIFT).any():
            return False
        tx_first = np.concatenate(([0], np.cumsum(n_tx)[:-1]))
        first_in = np.concatenate(([0], np.cumsum(n_in)[:-1]))
        cb = first_in[tx_first]  # each block's coinbase input
        if (n_in[tx_first] != 1).any() or (vout[cb] != COINBASE_VOUT).any() or (prev[cb] != NULL_HASH).any():
            return False
        spender = np.repeat(np.arange(n, dtype=np.int64), n_in)
        ask = np.ones(prev.shape[0], dtype=bool)
        ask[cb] = False
        rows = np.flatnonzero(ask)
        want, want_vout = prev[rows], vout[rows]
        out0 = self.store.pending_length("outputindex_to_value") + len(batch.out_value)
        first_out = np.uint64(out0) + np.concatenate(([0], np.cumsum(n_out)[:-1])).astype(np.uint64)
        values = (first_out << np.uint64(_OUT_SHIFT)) | n_out
        # 1. An earlier transaction of the chunk (a later one, or the spender itself, does not count).
        pre = _prefixes(txids)
        order = np.argsort(pre, kind="stable")
        sp = pre[order]
        if n > 1 and (sp[1:] == sp[:-1]).any():
            return False
        got = np.zeros(rows.shape[0], dtype=np.uint64)
        if rows.size:
            pos = np.minimum(np.searchsorted(sp, _prefixes(want)), n - 1)
            cand = order[pos]
            hit = (txids[cand] == want) & (cand < spender[rows])
            got[hit] = values[cand[hit]]
            # 2. The batch's earlier chunks, 3. the last committed batches, 4. the transaction index.
            rest = np.flatnonzero(~hit)
            if rest.size:
                keys, inverse = np.unique(want[rest], return_inverse=True)
                found, vals = batch.txmap.find(keys)
                if not found.all():
                    miss = np.flatnonzero(~found)
                    f2, v2 = self._recent.find(keys[miss])
                    found[miss[f2]] = True
                    vals[miss[f2]] = v2[f2]
                if not found.all():
                    miss = np.flatnonzero(~found)
                    asked = keys[miss].view("V32").tolist()
                    committed = self._resolve(asked)
                    if len(committed) != len(asked):
                        return False
                    vals[miss] = np.fromiter((committed[k] for k in asked), dtype=np.uint64, count=len(asked))
                got[rest] = vals[inverse.ravel()]
        if ((got & np.uint64((1 << _OUT_SHIFT) - 1)) <= want_vout).any():
            return False
        spent = np.full(prev.shape[0], NO_OUTPUT, dtype=np.uint64)
        spent[rows] = (got >> np.uint64(_OUT_SHIFT)) + want_vout
        # Queue the rows.
        height = len(self.chain)
        for b in blocks:
            batch.add(b, len(b.tx_inputs))
            self.chain.append(b.hash)
        batch.txids += txids.tobytes()
        batch.tx_height.frombytes(np.repeat(np.arange(height, height + len(blocks), dtype=np.uint32), n_tx).tobytes())
        batch.spent.frombytes(spent.tobytes())
        batch.txmap.add_columns(txids, values)
        return True

    def _add_one_by_one(self, batch: _Batch, blocks: list[Packed | Exception]) -> tuple[int, int | None, str]:
        """The per-block path: (blocks added, the index of a bad block or None, its error)."""
        unpacked = [b.unpack() if isinstance(b, Packed) else b for b in blocks]
        txmap = batch.txmap.as_dict()
        try:
            self._prefetch([b for b in unpacked if isinstance(b, Block)], batch, txmap)
            for i, block in enumerate(unpacked):
                if self.stop_requested:  # Ctrl-C: the blocks added so far are committed
                    return i, None, ""
                try:
                    if isinstance(block, Exception):
                        raise block
                    self._add_block(batch, block, len(self.chain), txmap)
                except (MalformedBlock, InvalidInput) as exc:
                    return i, i, str(exc)
            return len(unpacked), None, ""
        finally:
            batch.txmap = _RecentTxids(sys.maxsize)
            batch.txmap.add(txmap)

    def _mark_invalid(self, pos: int, error: str, result: IndexResult) -> None:
        """Remember a bad block (reported with its file and offset); it is never chosen again."""
        name = f"blk{self.pos_file[pos]:05d}.dat"
        entry = {"hash": hash_hex(self._pos_hash(pos)), "file": name, "offset": self.pos_offset[pos], "error": error}
        self.log(f"invalid block {entry['hash']} in {name} at offset {entry['offset']}: {error}")
        self.meta["invalid"].append(entry)
        result.invalid.append(entry)

    def _pos_hash(self, pos: int) -> bytes:
        return self.pos_hash[pos]

    def _add_block(self, batch: _Batch, block: Block, height: int, txmap: dict[bytes, int]) -> None:
        """Resolve the block's prevouts and queue its rows; on error nothing of it is kept."""
        committed = batch.committed
        out_base = self.store.pending_length("outputindex_to_value") + len(batch.out_value)
        spent: list[int] = []
        inserted: list[tuple[bytes, int | None]] = []
        in_txids = block.in_prev_txid
        in_vouts = block.in_prev_vout
        i = 0
        try:
            for t, (txid, n_in, n_out) in enumerate(zip(block.txids, block.tx_inputs, block.tx_outputs)):
                if t == 0:
                    if n_in != 1 or in_vouts[0] != COINBASE_VOUT or in_txids[0] != NULL_HASH:
                        raise InvalidInput("the first transaction is not a coinbase")
                    spent.append(NO_OUTPUT)
                    i = 1
                else:
                    for j in range(i, i + n_in):
                        v = txmap.get(in_txids[j])
                        if v is None:
                            v = committed.get(in_txids[j])
                            if v is None:  # spent within its own chunk before a later duplicate
                                v = self._resolve([in_txids[j]]).get(in_txids[j])
                        vout = in_vouts[j]
                        if v is None or vout >= (v & 0xFFFFFF):
                            raise InvalidInput(
                                f"transaction {hash_hex(txid)} spends {hash_hex(in_txids[j])}:{vout}, "
                                f"which is not an earlier output of this chain"
                            )
                        spent.append((v >> _OUT_SHIFT) + vout)
                    i += n_in
                inserted.append((txid, txmap.get(txid)))
                txmap[txid] = (out_base << _OUT_SHIFT) | n_out
                out_base += n_out
        except InvalidInput:
            for txid, old in reversed(inserted):
                if old is None:
                    del txmap[txid]
                else:
                    txmap[txid] = old
            raise
        n = len(block.txids)
        batch.add(block, n)
        batch.txids += b"".join(block.txids)
        batch.tx_height.extend([height] * n)
        batch.spent.extend(spent)
        self.chain.append(block.hash)

    def _flush(self, batch: _Batch, result: IndexResult | None = None) -> bytes | None:
        """Turn the batch into columns (fees computed vectorised), append, and commit.

        A transaction spending more than its inputs hold makes its block invalid: the batch is cut
        before that block, the rest committed, and the bad block's hash returned.
        """
        import numpy as np

        s = self.store
        if len(batch) == 0:
            s.commit(self._meta())
            return None
        tx0 = s.lengths["txindex_to_txid"]
        in0 = s.lengths["inputindex_to_outputindex"]
        out0 = s.lengths["outputindex_to_value"]
        n_in = np.array(batch.tx_inputs, dtype=np.uint64)
        n_out = np.array(batch.tx_outputs, dtype=np.uint64)
        first_in = np.concatenate(([0], np.cumsum(n_in)[:-1])).astype(np.uint64)
        first_out = np.concatenate(([0], np.cumsum(n_out)[:-1])).astype(np.uint64)
        spent = np.array(batch.spent, dtype=np.uint64)
        values = np.array(batch.out_value, dtype=np.uint64)
        # Input values: committed outputs come from the memory-mapped vec, this batch's from memory.
        in_val = np.zeros(spent.shape[0], dtype=np.uint64)
        real = spent != NO_OUTPUT
        old = real & (spent < out0)
        new = real & ~old
        if old.any():
            in_val[old] = self._gather("outputindex_to_value", spent[old].astype(np.int64))
        in_val[new] = values[(spent[new] - out0).astype(np.int64)]
        in_sum = np.add.reduceat(in_val, first_in.astype(np.int64))
        out_sum = np.add.reduceat(values, first_out.astype(np.int64))
        ntx = np.array(batch.h["ntx"], dtype=np.uint64)
        tx_first = np.concatenate(([0], np.cumsum(ntx)[:-1])).astype(np.int64)
        coinbase = np.zeros(len(batch.txids) // 32, dtype=bool)
        coinbase[tx_first] = True
        fee = np.where(coinbase, 0, in_sum.astype(np.int64) - out_sum.astype(np.int64))
        if (fee < 0).any():
            bad_tx = int(np.argmax(fee < 0))
            k = int(np.searchsorted(tx_first, bad_tx, "right")) - 1
            bad_hash: bytes = batch.h["hash"][k]
            bad_txid = bytes(batch.txids[32 * bad_tx:32 * bad_tx + 32])
            self._mark_invalid(batch.pos[k], f"transaction {hash_hex(bad_txid)} spends more than its inputs hold",
                               result or IndexResult("", -1, ""))
            cut_tx = int(tx_first[k])
            if result is not None:
                result.indexed_blocks -= len(ntx) - k
                result.indexed_bytes -= sum(self.pos_length[p] for p in batch.pos[k:])
            batch.truncate(k, cut_tx, int(first_in[cut_tx]), int(first_out[cut_tx]))
            del self.chain[len(self.chain) - (len(ntx) - k):]
            batch.txmap = _RecentTxids(sys.maxsize)  # it names txs of the dropped blocks: not remembered
            self._flush(batch)
            return bad_hash
        fee_u = fee.astype(np.uint64)
        block_fee = np.add.reduceat(fee_u, tx_first)
        weight = np.array(batch.tx_weight, dtype=np.uint64)

        s.append_bytes("height_to_blockhash", b"".join(batch.h["hash"]), len(batch))
        s.append("height_to_timestamp", np.array(batch.h["time"], dtype=np.uint32))
        s.append("height_to_bits", np.array(batch.h["bits"], dtype=np.uint32))
        s.append("height_to_difficulty", np.array(batch.h["diff"], dtype=np.float64))
        s.append("height_to_version", np.array(batch.h["version"], dtype=np.int32))
        s.append("height_to_size", np.array(batch.h["size"], dtype=np.uint32))
        s.append("height_to_weight", np.array(batch.h["weight"], dtype=np.uint32))
        s.append("height_to_tx_count", ntx)
        s.append("height_to_fee", block_fee)
        s.append("height_to_first_txindex", tx_first.astype(np.uint64) + tx0)
        s.append("height_to_first_inputindex", first_in[tx_first] + in0)
        s.append("height_to_first_outputindex", first_out[tx_first] + out0)
        s.append_bytes("txindex_to_txid", bytes(batch.txids), len(batch.txids) // 32)
        s.append("txindex_to_height", np.array(batch.tx_height, dtype=np.uint32))
        s.append("txindex_to_version", np.array(batch.tx_version, dtype=np.int32))
        s.append("txindex_to_locktime", np.array(batch.tx_locktime, dtype=np.uint32))
        s.append("txindex_to_size", np.array(batch.tx_size, dtype=np.uint32))
        s.append("txindex_to_weight", weight)
        s.append("txindex_to_vsize", (weight + 3) // 4)
        s.append("txindex_to_input_count", n_in)
        s.append("txindex_to_output_count", n_out)
        s.append("txindex_to_first_inputindex", first_in + in0)
        s.append("txindex_to_first_outputindex", first_out + out0)
        s.append("txindex_to_fee", fee_u)
        s.append("inputindex_to_outputindex", spent)
        s.append("outputindex_to_value", values)
        s.append("outputindex_to_type", np.array(batch.out_type, dtype=np.uint8))
        s.commit(self._meta())
        _fault("commit-index")
        # Second, the index (one atomic batch). A kill before it leaves the index behind the vecs;
        # opening re-inserts these transactions from txindex_to_txid.
        self.txindex.insert(tx0, bytes(batch.txids))
        self._recent.add_columns(*batch.txmap.columns())
        trim_heap(min_interval=1.0)  # the batch's freed objects go back to the OS, not to a growing heap
        if self.on_commit is not None:
            self.on_commit()
        return None


def index(blocks_dir: Path, out: Path, **options: Any) -> IndexResult:
    """Index new blocks of ``blocks_dir`` into ``out`` (resuming, and rolling back on reorgs)."""
    max_blocks = options.pop("max_blocks", None)
    return Indexer(blocks_dir, out, **options).run(max_blocks=max_blocks)
