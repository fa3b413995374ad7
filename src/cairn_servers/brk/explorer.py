"""The explorer's indexes, in ``OUT/explorer/``: what the block explorer API (``cairn_servers.brk.esplora``)
looks up that the raw vecs and the address index do not answer in one step.

* ``index/`` (RocksDB, ``cairn_servers.brk.rocks``):
  - ``H`` + address id (4 bytes, big-endian) + txindex (5 bytes, big-endian) -> nothing: the history of
    every address (the transactions that pay it or spend from it), in chain order under each address, so
    a page of it is one range read, newest first or oldest first;
  - ``B`` + block hash (32 bytes, internal order) -> height (4 bytes): a block by its hash.
* ``spender.bin``: for every output, 1 + the input that spends it (0: unspent), 8 bytes an output, written
  in place. An entry is trusted only when that input is committed here and spends that very output
  (``inputindex_to_outputindex``), so what a rolled-back chain left behind never answers.
* vecs: ``height_to_blockhash`` (finds the fork after a reorg), ``height_to_blockpos`` (the block's row in
  the indexer's scan cache: its blk file, offset and length).

Address ids come from the address pass (``OUT/addresses``): this pass runs after it and never goes past
the height it committed (nor past a height it has not yet redone after a reorg). Scripts that are not
an address (bare multisig, OP_RETURN, non-standard) have no history here.

Crash and reorg safety without undo rows: readers trust a history entry only when its transaction is
committed here and really pays the address or spends one of its outputs (checked against the vecs), a
block hash only when the height holds it, a spender only when that input spends that output. So what an
interrupted chunk or a rolled-back chain left behind never answers, and a reorg only cuts the vecs back to
the fork (and deletes the rolled-back block hashes); the new chain's entries are written over.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.brk.reader import StoreReader
from cairn_servers.brk.vecs import VecSpec, VecStore
from cairn_servers.core.errors import StorageError
from cairn_servers.core.files import fsync_file, grow_file

if TYPE_CHECKING:
    import numpy as np

NONE = (1 << 32) - 1  # outputindex_to_addressindex of an output without an address
NO_OUTPUT = (1 << 64) - 1  # inputindex_to_outputindex of a coinbase input
CHUNK_ROWS = int(os.environ.get("CAIRN_BRK_UTXO_CHUNK", "250000"))  # inputs + outputs a chunk (memory)
HISTORY = b"H"
BLOCK = b"B"
KEY_BYTES = 10  # H + 4 + 5
# Benchmarks only (benchmarks/brk_scale.py --compare-no-explorer): "1" leaves the block explorer's indexes
# out (this pass, and the address pass's script hashes), to measure what they cost. Never set otherwise.
BENCH_OFF = os.environ.get("CAIRN_BRK_BENCH_NO_EXPLORER") == "1"


def specs() -> list[VecSpec]:
    return [VecSpec("height_to_blockhash", "height", "u1", 32), VecSpec("height_to_blockpos", "height", "<u8")]


def explorer_dir(out: Path) -> Path:
    return out / "explorer"


def history_keys(addr: np.ndarray, tx: np.ndarray) -> np.ndarray:
    """(n, 10) byte rows ``H`` + address id (big-endian u4) + txindex (big-endian, 5 bytes)."""
    import numpy as np

    keys = np.empty((addr.shape[0], KEY_BYTES), dtype=np.uint8)
    keys[:, 0] = HISTORY[0]
    keys[:, 1:5] = addr.astype(">u4").view(np.uint8).reshape(-1, 4)
    keys[:, 5:] = tx.astype(">u8").view(np.uint8).reshape(-1, 8)[:, 3:]
    return keys


def sorted_history_keys(addr: np.ndarray, tx: np.ndarray) -> np.ndarray:
    """The history keys of (address id, txindex) pairs, in key order (address, then txindex), each once.

    Address ids reach 2**32 and txindexes 2**40: packed into one 64-bit integer (one sort of integers)
    while the txindexes fit in 32 bits, else sorted on the two columns."""
    import numpy as np

    a = addr.astype(np.uint64)
    t = tx.astype(np.uint64)
    if not a.size:
        return history_keys(a, t)
    if int(t.max()) < 1 << 32:
        packed = np.sort((a << np.uint64(32)) | t)
        packed = packed[np.concatenate(([True], packed[1:] != packed[:-1]))]
        return history_keys(packed >> np.uint64(32), packed & np.uint64((1 << 32) - 1))
    order = np.lexsort((t, a))
    a, t = a[order], t[order]
    first = np.concatenate(([True], (a[1:] != a[:-1]) | (t[1:] != t[:-1])))
    return history_keys(a[first], t[first])


def update(out: Path, *, durable: bool = True, progress: Callable[..., None] | None = None,
           stop: Callable[[], bool] | None = None) -> dict[str, Any] | None:
    """Bring ``OUT/explorer`` up to the address pass's committed tip (None when there is no address pass)."""
    if BENCH_OFF or not (out / "addresses" / "manifest.json").exists():
        return None
    p = _ExplorerPass(out, durable)
    try:
        return p.run(progress, stop)
    finally:
        p.close()


class _ExplorerPass:
    def __init__(self, out: Path, durable: bool) -> None:
        import numpy as np

        self.out = out
        self.root = explorer_dir(out)
        self.durable = durable
        self.raw = StoreReader(out)
        self.raw.refresh()
        self.addr = StoreReader(out / "addresses")
        self.addr.refresh()
        self.store = VecStore(self.root, specs(), durable=durable)
        self._db: Any = None
        # The address pass's committed heights that agree with the raw chain: this pass's reach.
        n_raw = self.raw.length("height_to_blockhash")
        n_addr = min(n_raw, self.addr.length("height_to_blockhash"))
        have = self.store.lengths["height_to_blockhash"]
        lo = min(have, n_addr)
        if lo < n_addr:
            ours = self.addr.read("height_to_blockhash", lo, n_addr)
            theirs = self.raw.read("height_to_blockhash", lo, n_addr)
            differ = np.flatnonzero((ours != theirs).any(axis=1))
            n_addr = lo + int(differ[0]) if differ.size else n_addr
        self.n = n_addr
        self.n_raw = n_raw

    @property
    def db(self) -> Any:
        if self._db is None:
            from cairn_servers.brk.rocks import open_rocksdb

            try:
                self._db = open_rocksdb(self.root / "index", memtable_mb=16, cache_mb=8, partitioned=True, l0_files=8,
                                         tiered=True)
            except Exception as exc:  # rocksdict raises plain exceptions (a lock held, a corrupt file)
                raise StorageError(f"Cannot open the explorer index {self.root / 'index'}: {exc}.") from exc
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        self.raw.close()
        self.addr.close()

    @property
    def _spender_path(self) -> Path:
        return self.root / "spender.bin"

    def _first(self, height: int, vec: str = "height_to_first_txindex", total: str = "txindex_to_txid") -> int:
        """The raw chain's first txindex (or other row) of ``height`` (its end past the tip)."""
        if height >= self.n_raw:
            return self.raw.length(total)
        return int(self.raw.read(vec, height, height + 1)[0])

    def _reset(self, meta: dict[str, Any]) -> None:
        import shutil

        if self._db is not None:
            self._db.close()
            self._db = None
        shutil.rmtree(self.root / "index", ignore_errors=True)
        self._spender_path.unlink(missing_ok=True)
        meta["generation"] = int(meta.get("generation", 0)) + 1
        for key in ("txs", "inputs", "outputs"):
            meta.pop(key, None)
        self.store.truncate({name: 0 for name in self.store.lengths}, meta)

    # -- the run ------------------------------------------------------------------------------------
    def run(self, progress: Callable[..., None] | None = None,
            should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
        import numpy as np

        from cairn_servers.brk.progress import Stage

        s = self.store
        meta = dict(s.meta)
        meta.setdefault("generation", 0)
        have = s.lengths["height_to_blockhash"]
        fork = have
        if have:
            top = min(have, self.n_raw)
            ours = np.asarray(s.read("height_to_blockhash")[:top])
            theirs = self.raw.read("height_to_blockhash", 0, top)
            differ = np.flatnonzero((ours != theirs).any(axis=1))
            fork = int(differ[0]) if differ.size else top
        rolled = None
        if fork < have:
            from rocksdict import WriteBatch

            rolled = fork
            wb = WriteBatch(raw_mode=True)
            for h in np.asarray(s.read("height_to_blockhash")[fork:have]):
                wb.delete(BLOCK + bytes(h))
            self.db.write(wb)
            meta["generation"] = int(meta["generation"]) + 1
            meta["txs"] = self._first(fork)
            meta["inputs"] = self._first(fork, "height_to_first_inputindex", "inputindex_to_outputindex")
            meta["outputs"] = self._first(fork, "height_to_first_outputindex", "outputindex_to_value")
            s.truncate({name: fork for name in s.lengths}, meta)
        start = s.lengths["height_to_blockhash"]
        done = 0
        if start < self.n:
            f_in = self.raw.read("height_to_first_inputindex", 0, self.n + 1).astype(np.int64)
            f_out = self.raw.read("height_to_first_outputindex", 0, self.n + 1).astype(np.int64)
            rows = f_in[:self.n] + f_out[:self.n]
            stage = Stage(progress, "explorer", self.raw, start, self.n, should_stop)
            while start < self.n:
                limit = int(np.searchsorted(rows, int(rows[start]) + CHUNK_ROWS, "right"))
                stop = max(start + 1, min(self.n, limit))
                self._chunk(start, stop, meta)
                done += stop - start
                start = stop
                if stage.done(stop):
                    break
        elif s.meta != meta:
            s.commit(meta)
        return {"height": s.lengths["height_to_blockhash"] - 1, "computed_heights": done, "rolled_back_to": rolled}

    def _ends(self, a: int, b: int) -> tuple[int, int, int, int, int, int]:
        """First and end txindex, inputindex, outputindex of heights [a, b)."""
        ins = ("height_to_first_inputindex", "inputindex_to_outputindex")
        outs = ("height_to_first_outputindex", "outputindex_to_value")
        return (self._first(a), self._first(b), self._first(a, *ins), self._first(b, *ins), self._first(a, *outs),
                self._first(b, *outs))

    def _chunk(self, a: int, b: int, meta: dict[str, Any]) -> None:
        import numpy as np
        from rocksdict import WriteBatch

        from cairn_servers.brk.faults import fault
        from cairn_servers.brk.rocks import ingest_sorted
        from cairn_servers.brk.gather import Rows, gather

        t0, t1, i0, i1, o0, o1 = self._ends(a, b)
        n_in = self.raw.read("txindex_to_input_count", t0, t1).astype(np.int64)
        n_out = self.raw.read("txindex_to_output_count", t0, t1).astype(np.int64)
        txs = np.arange(t0, t1, dtype=np.int64)
        out_tx = np.repeat(txs, n_out)
        in_tx = np.repeat(txs, n_in)
        out_addr = self.addr.read("outputindex_to_addressindex", o0, o1).astype(np.int64)
        if out_addr.shape[0] != o1 - o0 or out_tx.shape[0] != o1 - o0 or in_tx.shape[0] != i1 - i0:
            raise StorageError(f"heights {a}..{b - 1}: the address pass and the raw vecs disagree; run `brk index` "
                               "again")
        spent = self.raw.read("inputindex_to_outputindex", i0, i1)
        real = spent != np.uint64(NO_OUTPUT)
        so = spent[real].astype(np.int64)
        s_addr = np.full(so.shape[0], NONE, dtype=np.int64)
        inner = so >= o0
        s_addr[inner] = out_addr[so[inner] - o0]
        if (~inner).any():
            s_addr[~inner] = gather(self.addr.root / "vecs" / "outputindex_to_addressindex.bin", "<u4",
                                    self.addr.length("outputindex_to_addressindex"), so[~inner])
        pair_addr = np.concatenate((out_addr, s_addr))
        pair_tx = np.concatenate((out_tx, in_tx[real]))
        keep = pair_addr != NONE
        keys = sorted_history_keys(pair_addr[keep], pair_tx[keep])
        hashes = self.raw.read("height_to_blockhash", a, b)
        wb = WriteBatch(raw_mode=True)
        for h, height in zip(hashes, range(a, b)):
            wb.put(BLOCK + bytes(h), height.to_bytes(4, "little"))
        self.db.write(wb)
        # The history keys (strictly increasing): one table file moved into the engine, no log nor memtable.
        ingest_sorted(self.db, self.root / "index", keys.view(f"V{KEY_BYTES}").ravel().tolist(), repeat(b""),
                      partitioned=True)
        # Spenders: 1 + the input, at each spent output (in place; trusted once committed).
        with open(self._spender_path, "ab") as fh:
            grow_file(fh, 8 * o1)
        inputs = np.arange(i0, i1, dtype=np.int64)[real]
        Rows(so).put(self._spender_path, "<u8", o1, (inputs + 1).astype(np.uint64))
        if self.durable:
            fsync_file(self._spender_path)
        fault("explorer-chunk")
        s = self.store
        s.append("height_to_blockhash", hashes)
        s.append("height_to_blockpos", self._blockpos(hashes))
        meta["height"] = b - 1
        meta["txs"] = t1
        meta["inputs"] = i1
        meta["outputs"] = o1
        s.commit(meta)

    def _blockpos(self, hashes: np.ndarray) -> np.ndarray:
        """The scan-cache row of each block hash (the latest one holding it)."""
        import numpy as np

        if not hasattr(self, "_pos_sorted"):
            pos_hash = self.raw.read("blockpos_to_hash")
            prefix = np.ascontiguousarray(pos_hash[:, :8]).view("<u8").ravel()
            self._pos_order = np.argsort(prefix, kind="stable")
            self._pos_sorted = prefix[self._pos_order]
            self._pos_hash = pos_hash
        want = np.ascontiguousarray(hashes[:, :8]).view("<u8").ravel()
        lo = np.searchsorted(self._pos_sorted, want, "left")
        found = np.zeros(hashes.shape[0], dtype=np.uint64)
        for i, h in enumerate(hashes):
            j = int(lo[i])
            while j < self._pos_sorted.shape[0] and self._pos_sorted[j] == want[i]:
                pos = int(self._pos_order[j])
                if bytes(self._pos_hash[pos]) == bytes(h):
                    found[i] = pos
                    break
                j += 1
            else:
                raise StorageError(f"block {bytes(h)[::-1].hex()} is not in the scan cache")
        return found
