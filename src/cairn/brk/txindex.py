"""The transaction index: txid -> txindex on disk, in RocksDB, in bounded memory.

The indexer resolves every input's prevout (txid, vout) to an output index. Mainnet has about 1.2
billion transactions, far too many for a Python dict, so the map lives in an embedded RocksDB
(``rocksdict``) under ``<out>/txindex/``:

* key: the first ``prefix_bytes`` (8) bytes of the txid (internal byte order);
* value: the txindexes of every transaction whose txid starts with that prefix, each 8 bytes
  little-endian, ascending. Nearly always one; two or more when prefixes collide, or for the two
  mainnet txids that occur twice (BIP30), where the later one wins, as in a node.
* one more key, ``COUNT_KEY`` (longer than any prefix, so it never clashes): how many
  transactions (txindex 0 .. count-1) the engine holds, written in the same atomic batch as them.

Every hit is checked against the full txid in ``txindex_to_txid`` (a memory-mapped vec), so a
shared prefix, or a prefix of a txid that is not in the chain, never resolves to the wrong
transaction. The output side needs nothing here: ``txindex_to_first_outputindex`` maps a txindex to
its outputs.

Consistency with the vecs (see ``Indexer``): the vecs commit first, the engine second, and a
rollback removes keys from the engine before the vecs shrink. So the engine never holds more than
the vecs, and opening re-inserts whatever it lacks (``count`` < the vecs' transactions) from
``txindex_to_txid``. RocksDB's own write-ahead log makes each batch atomic; it is not fsynced,
because a batch lost with the machine is simply re-inserted from the (fsynced) vecs.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.core.errors import StorageError

if TYPE_CHECKING:
    import numpy as np

COUNT_KEY = b"\x00cairn:txcount"
PREFIX_KEY = b"\x00cairn:prefix"
DEFAULT_CACHE_MB = 256
_ROW = 8  # bytes per txindex in a value

# Reads the full 32-byte txids of some txindexes: array of txindexes -> (n, 32) uint8 array.
TxidReader = Callable[["np.ndarray"], "np.ndarray"]


def _encode(txindexes: Iterable[int]) -> bytes:
    return b"".join(t.to_bytes(_ROW, "little") for t in txindexes)


def _decode(value: bytes) -> list[int]:
    if len(value) == _ROW:
        return [int.from_bytes(value, "little")]
    return [int.from_bytes(value[i:i + _ROW], "little") for i in range(0, len(value), _ROW)]


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
        if stored is not None and int.from_bytes(stored, "little") != prefix_bytes:
            # A different key length: the keys mean something else. Start over; opening re-inserts.
            self.destroy()
            db = self._open()
            stored = None
        if stored is None:
            db.put(PREFIX_KEY, prefix_bytes.to_bytes(1, "little"))
        raw = db.get(COUNT_KEY)
        self.count = 0 if raw is None else int.from_bytes(raw, "little")

    def _open(self) -> Any:
        from rocksdict import BlockBasedOptions, Cache, DBCompressionType, Options, Rdict

        opt = Options(raw_mode=True)
        opt.create_if_missing(True)
        # Memory: two 32 MB memtables plus the block cache (which also holds the index and bloom
        # filter blocks, so the engine's memory stays bounded whatever the number of keys).
        opt.set_write_buffer_size(32 << 20)
        opt.set_max_write_buffer_number(2)
        opt.set_compression_type(DBCompressionType.none())  # random keys: nothing to gain but CPU
        opt.set_bottommost_compression_type(DBCompressionType.lz4())
        opt.set_level_compaction_dynamic_level_bytes(True)
        opt.increase_parallelism(2)
        bbo = BlockBasedOptions()
        bbo.set_block_cache(Cache(self.cache_mb << 20))
        bbo.set_bloom_filter(10, False)  # look-ups of txids not yet indexed rarely touch the disk
        bbo.set_cache_index_and_filter_blocks(True)
        bbo.set_pin_l0_filter_and_index_blocks_in_cache(True)
        bbo.set_block_size(4 << 10)
        opt.set_block_based_table_factory(bbo)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._db = Rdict(str(self.path), opt)
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
        which: list[int] = []  # (query position, candidate txindex) pairs to verify
        cands: list[int] = []
        for i, v in enumerate(values):
            if v is None:
                continue
            if len(v) == _ROW:
                which.append(i)
                cands.append(int.from_bytes(v, "little"))
            else:
                for c in _decode(v):
                    which.append(i)
                    cands.append(c)
        if not cands:
            return result
        rows = read_txids(np.array(cands, dtype=np.int64))
        flat = rows.tobytes()
        for k, (i, c) in enumerate(zip(which, cands)):
            if flat[32 * k:32 * k + 32] == txids[i] and c > result[i]:
                result[i] = c
        return result

    # -- writing ---------------------------------------------------------------------------------
    def insert(self, first: int, txids: Sequence[bytes]) -> None:
        """Add txindexes ``first .. first+len(txids)-1`` (their txids in order) in one atomic batch."""
        from rocksdict import WriteBatch

        if first != self.count:
            raise StorageError(f"transaction index holds {self.count} transactions, cannot append at {first}")
        p = self.prefix_bytes
        may_exist = self._db.key_may_exist
        get = self._db.get
        wb = WriteBatch(raw_mode=True)
        put = wb.put
        shared: dict[bytes, list[int]] = {}  # prefixes already in the engine or repeated in this batch
        seen: dict[bytes, int] = {}  # prefix -> its first txindex in this batch
        for n, t in enumerate(txids):
            key = t[:p]
            tx = first + n
            if key in seen:
                shared.setdefault(key, [seen[key]]).append(tx)
                continue
            seen[key] = tx
            if may_exist(key) and (old := get(key)) is not None:
                shared[key] = _decode(old) + [tx]
            else:
                put(key, tx.to_bytes(_ROW, "little"))
        for key, txindexes in shared.items():
            put(key, _encode(txindexes))  # ascending already; a later put wins within one batch
        count = first + len(txids)
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
            if old is None:
                continue
            keep = [c for c in _decode(old) if c < cut]
            if keep:
                wb.put(key, _encode(keep))
            else:
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
    def entries(self) -> dict[bytes, list[int]]:
        """Every prefix and its txindexes (reads the whole index: for tests and `brk` checks)."""
        out: dict[bytes, list[int]] = {}
        for key, value in self._db.items():
            if len(key) == self.prefix_bytes:
                out[key] = _decode(value)
        return out


def expected_entries(txids: bytes, prefix_bytes: int = 8) -> dict[bytes, list[int]]:
    """What ``entries`` must return for a ``txindex_to_txid`` vec's bytes (32 bytes per txindex)."""
    out: dict[bytes, list[int]] = {}
    for n in range(len(txids) // 32):
        out.setdefault(txids[32 * n:32 * n + prefix_bytes], []).append(n)
    return out
