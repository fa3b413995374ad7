"""The transaction index: txid -> txindex on disk, in RocksDB, in bounded memory.

The indexer resolves every input's prevout (txid, vout) to an output index. Mainnet has about 1.2
billion transactions, far too many for a Python dict, so the map lives in an embedded RocksDB
(``rocksdict``) under ``<out>/txindex/``:

* key: the first ``prefix_bytes`` (8) bytes of the txid (internal byte order);
* value: the txindex (8 bytes little-endian) of the latest transaction whose txid starts with it.
* one more key, ``COUNT_KEY`` (longer than any prefix, so it never clashes): how many
  transactions (txindex 0 .. count-1) the engine holds, written in the same atomic batch as them.

Writes are blind (a batch of puts, no read first): an engine read costs several microseconds from
Python, and one per new transaction was a third of the indexer's time. A later transaction whose
txid shares a prefix with an earlier one therefore takes the key over; that happens for the two
mainnet txids that occur twice (BIP30), where the later one must win anyway, as in a node, and for a
chance or crafted collision of 8-byte prefixes (expected about 0.04 times in all of mainnet by
chance; crafting one costs about 2^32 hashes).

Every hit is checked against the full txid in ``txindex_to_txid`` (a memory-mapped vec), so a
shared prefix, or a prefix of a txid that is not in the chain, never resolves to the wrong
transaction. A txid the engine does not resolve (no key, or a key taken over by another
transaction) is then looked for in ``txindex_to_txid`` itself, newest first, by a vectorised scan:
slow (seconds per GB of txids) but exact, and needed only for a transaction whose key was taken
over, or after a rollback uncovered an earlier one, or for a block that spends a transaction that
does not exist (an invalid block). The output side needs nothing here:
``txindex_to_first_outputindex`` maps a txindex to its outputs.

Consistency with the vecs (see ``Indexer``): the vecs commit first, the engine second, and a
rollback removes keys from the engine before the vecs shrink. So the engine never holds more than
the vecs, and opening re-inserts whatever it lacks (``count`` < the vecs' transactions) from
``txindex_to_txid``. RocksDB's own write-ahead log makes each batch atomic; it is not fsynced,
because a batch lost with the machine is simply re-inserted from the (fsynced) vecs.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.core.errors import StorageError

if TYPE_CHECKING:
    import numpy as np

COUNT_KEY = b"\x00cairn:txcount"
PREFIX_KEY = b"\x00cairn:prefix"
FORMAT_KEY = b"\x00cairn:format"
FORMAT = b"2"  # 1: a value listed every txindex of its prefix (read before each write); 2: the latest one
DEFAULT_CACHE_MB = 64
_ROW = 8  # bytes per txindex in a value

# Reads the full 32-byte txids of some txindexes: array of txindexes -> (n, 32) uint8 array.
TxidReader = Callable[["np.ndarray"], "np.ndarray"]


class TxIndex:
    """txid -> txindex for the committed transactions of one output directory."""

    def __init__(self, path: Path, *, cache_mb: int = DEFAULT_CACHE_MB, prefix_bytes: int = 8) -> None:
        if not 1 <= prefix_bytes <= 8:
            raise StorageError(f"prefix_bytes must be 1..8, not {prefix_bytes}")
        if cache_mb < 1:
            raise StorageError(f"the engine cache must be at least 1 MB, not {cache_mb}")
        self.path = path
        self.cache_mb = cache_mb
        self.prefix_bytes = prefix_bytes
        self._db: Any = None
        db = self._open()
        stored = db.get(PREFIX_KEY)
        if stored is not None and (int.from_bytes(stored, "little") != prefix_bytes or db.get(FORMAT_KEY) != FORMAT):
            # A different key length or format: the keys mean something else. Start over; opening re-inserts.
            self.destroy()
            db = self._open()
            stored = None
        if stored is None:
            db.put(PREFIX_KEY, prefix_bytes.to_bytes(1, "little"))
            db.put(FORMAT_KEY, FORMAT)
        raw = db.get(COUNT_KEY)
        self.count = 0 if raw is None else int.from_bytes(raw, "little")

    def _open(self) -> Any:
        from cairn_servers.brk.rocks import open_rocksdb

        # Memory: two 16 MB memtables plus the block cache; both are full after about a million
        # transactions, so the resident size stops growing there.
        try:
            self._db = open_rocksdb(self.path, memtable_mb=16, cache_mb=self.cache_mb)
            return self._db
        except Exception as exc:  # rocksdict raises plain exceptions (a lock held, a corrupt file)
            raise StorageError(f"Cannot open the transaction index {self.path}: {exc}. If another `brk index` "
                               "is running on this --out directory, wait for it; otherwise delete "
                               f"{self.path} and run the same command again (it is rebuilt from the vecs).") from exc

    def close(self) -> None:
        """Flush and close; a failing flush (a full disk) is a :class:`StorageError`. Nothing committed is
        lost either way: every batch was written through the engine's log, and opening replays it."""
        if self._db is None:
            return
        db, self._db = self._db, None
        try:
            db.flush()
        except Exception as exc:  # rocksdict raises plain exceptions
            raise StorageError(f"Cannot write the transaction index {self.path}: {exc}. The last committed "
                               "height stays usable; free space (or fix the disk) and run `brk index` "
                               "again to resume.") from None
        finally:
            try:
                db.close()
            except Exception:  # noqa: BLE001 (the flush error above, if any, is the one to report)
                pass

    def destroy(self) -> None:
        """Delete the engine's files (the index is rebuilt from the vecs on the next open)."""
        if self._db is not None:
            self._db.close()
            self._db = None
        shutil.rmtree(self.path, ignore_errors=True)
        self.count = 0

    # -- reading ---------------------------------------------------------------------------------
    def lookup(self, txids: Sequence[bytes], read_txids: TxidReader) -> list[int]:
        """The txindex of each txid, -1 when it is not indexed (the latest one for a repeated txid)."""
        import numpy as np

        p = self.prefix_bytes
        get = self._db.get
        values = [get(t[:p]) for t in txids]
        result = [-1] * len(txids)
        which = [i for i, v in enumerate(values) if v is not None]
        if which:
            cands = [int.from_bytes(values[i], "little") for i in which]
            flat = read_txids(np.array(cands, dtype=np.int64)).tobytes()
            for k, (i, c) in enumerate(zip(which, cands)):
                if flat[32 * k:32 * k + 32] == txids[i]:
                    result[i] = c
        missing = [i for i, r in enumerate(result) if r < 0]
        if missing:
            found = self.scan([txids[i] for i in missing], read_txids)
            for i, c in zip(missing, found):
                result[i] = c
        return result

    def scan(self, txids: Sequence[bytes], read_txids: TxidReader, step: int = 1 << 16) -> list[int]:
        """The latest txindex (< ``count``) of each txid, -1 when absent, by reading every txid (newest first)."""
        import numpy as np

        want = np.frombuffer(b"".join(txids), dtype=np.uint8).reshape(-1, 32)
        keys = np.ascontiguousarray(want[:, :8]).view("<u8").ravel()
        result = np.full(len(txids), -1, dtype=np.int64)
        open_ = np.ones(len(txids), dtype=bool)
        hi = self.count
        while hi > 0 and open_.any():
            lo = max(0, hi - step)
            rows = np.ascontiguousarray(read_txids(np.arange(lo, hi, dtype=np.int64)))
            heads = rows[:, :8].copy().view("<u8").ravel()
            for r in np.flatnonzero(np.isin(heads, keys[open_]))[::-1]:  # newest first
                for q in np.flatnonzero(open_ & (keys == heads[r])):
                    if rows[r].tobytes() == txids[int(q)]:
                        result[q] = lo + r
                        open_[q] = False
            hi = lo
        return [int(x) for x in result]

    # -- writing ---------------------------------------------------------------------------------
    def insert(self, first: int, txids: Sequence[bytes] | bytes) -> None:
        """Add txindexes ``first ..`` (their txids in order: a sequence, or one bytes string of 32 bytes a
        txid) in one atomic batch.

        Blind writes: a prefix already in the engine (or repeated in the batch) now names the later
        transaction; the earlier one is still found, by :meth:`scan`."""
        from collections import deque

        import numpy as np
        from rocksdict import WriteBatch

        if first != self.count:
            raise StorageError(f"transaction index holds {self.count} transactions, cannot append at {first}")
        p = self.prefix_bytes
        blob = txids if isinstance(txids, bytes) else b"".join(txids)
        n = len(blob) // 32
        keys = np.frombuffer(blob, dtype=np.uint8).reshape(n, 32)[:, :p].copy().view(f"V{p}").ravel().tolist()
        rows = np.arange(first, first + n, dtype="<u8").view("V8").tolist()
        wb = WriteBatch(raw_mode=True)
        put = wb.put
        deque(map(put, keys, rows), maxlen=0)  # the puts without a Python frame each
        count = first + n
        put(COUNT_KEY, count.to_bytes(8, "little"))
        self._write(wb)
        self.count = count

    def remove_from(self, cut: int, txids: Sequence[bytes]) -> None:
        """Forget txindexes ``cut ..`` (``txids``: theirs, in order, up to ``count``): a rollback."""
        from rocksdict import WriteBatch

        if cut + len(txids) != self.count:
            raise StorageError(f"transaction index holds {self.count} transactions, not {cut + len(txids)}")
        p = self.prefix_bytes
        wb = WriteBatch(raw_mode=True)
        for key in {t[:p] for t in txids}:
            old = self._db.get(key)
            if old is not None and int.from_bytes(old, "little") >= cut:
                # An earlier transaction with this prefix (a repeated txid, a collision) is not put
                # back here: that would mean a scan per rollback; a look-up finds it by scan instead.
                wb.delete(key)
        wb.put(COUNT_KEY, cut.to_bytes(8, "little"))
        self._write(wb)
        self.count = cut

    def _write(self, wb: Any) -> None:
        """One atomic batch; an engine failure (a full disk, an I/O error) is a :class:`StorageError`."""
        try:
            self._db.write(wb)
        except Exception as exc:  # rocksdict raises plain exceptions
            raise StorageError(f"Cannot write the transaction index {self.path}: {exc}. The last committed "
                               "height stays usable; free space (or fix the disk) and run `brk index` "
                               "again to resume.") from None

    # -- checking --------------------------------------------------------------------------------
    def entries(self) -> dict[bytes, int]:
        """Every prefix and its txindex (reads the whole index: for tests and `brk` checks)."""
        return {key: int.from_bytes(value, "little") for key, value in self._db.items()
                if len(key) == self.prefix_bytes}


def expected_entries(txids: bytes, prefix_bytes: int = 8) -> dict[bytes, int]:
    """What ``entries`` holds after indexing a ``txindex_to_txid`` vec's bytes (32 bytes per txindex)
    in one go: each prefix names its latest transaction."""
    return {txids[32 * n:32 * n + prefix_bytes]: n for n in range(len(txids) // 32)}
