"""The one way brk opens a RocksDB store (``rocksdict``, raw bytes keys and values): the transaction
index (``txindex``) and the address index (``addresses``) both map random keys (hashes) to small
values, and want the same settings.

* no compression but at the bottom level (lz4): random keys leave nothing to gain but CPU;
* bloom filters: a look-up of a key not yet stored (a new txid, a new address: the common case) rarely
  touches the disk;
* bounded memory: two memtables of ``memtable_mb`` plus a block cache of ``cache_mb`` that also holds the
  index and filter blocks, so the engine's memory stays bounded whatever the number of keys;
* ``partitioned``: index and filter blocks cut into 4 KiB partitions under a small top level kept in
  the cache, so a look-up in a store whose filters outgrow the cache reads one partition a file (a few
  KiB) rather than the file's whole filter (MBs): the address index, whose look-ups are rare on a
  chain of fresh addresses (its own filter, ``seen.bin``, answers first) but are real reads on a chain
  that pays old addresses again.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path
    from typing import Any


def open_rocksdb(path: Path, *, memtable_mb: int, cache_mb: int, partitioned: bool = False, l0_files: int = 4,
                 tiered: bool = False) -> Any:
    """An ``Rdict`` on ``path`` (created with its parents when missing). rocksdict raises plain
    exceptions (a lock held, a corrupt file): callers turn them into their own ``StorageError``.

    ``l0_files``: the level-0 files (flushed memtables, ingested tables) that start a compaction.

    ``tiered``: RocksDB's universal (size-tiered) compaction rather than its levels, for the stores
    that take large batches of keys spread over the whole key space at every chunk (the address
    index, the script hashes, the explorer's history). With levels, each batch's keys overlap every
    file of the level below, so each compaction rewrites that whole level: a key is rewritten about ten
    times a level, and the work per batch grows with the store (measured: 40 % of the explorer pass's
    CPU in the engine's background threads). Tiered, sorted runs of about the same size are merged
    together, so a key is rewritten about once per doubling of the store. A look-up asks each sorted run
    (a handful; a pinned filter each); a store written before with levels opens as is (each level is
    a sorted run to the tiered compaction)."""
    from rocksdict import Rdict

    opt = rocksdb_options(memtable_mb=memtable_mb, cache_mb=cache_mb, partitioned=partitioned)
    opt.set_level_zero_file_num_compaction_trigger(l0_files)
    if tiered:
        from rocksdict import DBCompactionStyle, UniversalCompactOptions

        opt.set_compaction_style(DBCompactionStyle.universal())
        universal = UniversalCompactOptions()
        universal.size_ratio = 1  # runs within 1 % of each other's size are merged
        universal.max_size_amplification_percent = 200  # all runs merged once they hold 3x the newest
        opt.set_universal_compaction_options(universal)
        # Runs before a merge: flushed memtables and ingested tables wait in level 0; writes slow down only
        # well past the trigger (a merge of large runs takes a while).
        opt.set_level_zero_slowdown_writes_trigger(max(64, 4 * l0_files))
        opt.set_level_zero_stop_writes_trigger(max(128, 8 * l0_files))
    path.mkdir(parents=True, exist_ok=True)
    return Rdict(str(path), opt)


def ingest_sorted(db: Any, path: Path, keys: list[bytes], values: Iterable[bytes], *, partitioned: bool = False
                  ) -> None:
    """Add ``keys`` (strictly increasing) with their ``values`` to ``db`` (opened on ``path``) as one table
    file, written beside it and then moved in (RocksDB's external file ingestion): no write-ahead log, no
    memtable, no flush, and atomic (a kill leaves either all of them or none; a half-written file is
    removed on the next call). Cheaper than a write batch for the large sorted batches of a chunk."""
    from collections import deque

    from rocksdict import IngestExternalFileOptions, SstFileWriter

    tmp = path.parent / f"{path.name}.ingest.sst"
    tmp.unlink(missing_ok=True)
    if not keys:
        return
    writer = SstFileWriter(rocksdb_options(memtable_mb=1, cache_mb=1, partitioned=partitioned))
    writer.open(str(tmp))
    deque(map(writer.__setitem__, keys, values), maxlen=0)
    writer.finish()
    options = IngestExternalFileOptions()
    options.set_move_files(True)
    db.ingest_external_file([str(tmp)], options)
    tmp.unlink(missing_ok=True)


def rocksdb_options(*, memtable_mb: int, cache_mb: int, partitioned: bool = False) -> Any:
    """The options of ``open_rocksdb`` (and of the table files ``ingest_sorted`` writes)."""
    from rocksdict import BlockBasedIndexType, BlockBasedOptions, Cache, DBCompressionType, Options

    opt = Options(raw_mode=True)
    opt.create_if_missing(True)
    opt.set_write_buffer_size(memtable_mb << 20)
    opt.set_max_write_buffer_number(2)
    opt.set_compression_type(DBCompressionType.none())
    opt.set_bottommost_compression_type(DBCompressionType.lz4())
    opt.set_level_compaction_dynamic_level_bytes(True)
    opt.increase_parallelism(2)
    bbo = BlockBasedOptions()
    bbo.set_block_cache(Cache(cache_mb << 20))
    bbo.set_bloom_filter(10, False)
    bbo.set_cache_index_and_filter_blocks(True)
    bbo.set_pin_l0_filter_and_index_blocks_in_cache(True)
    bbo.set_block_size(4 << 10)
    if partitioned:
        bbo.set_index_type(BlockBasedIndexType.two_level_index_search())
        bbo.set_partition_filters(True)
        bbo.set_metadata_block_size(4 << 10)
        bbo.set_pin_top_level_index_and_filter(True)
    opt.set_block_based_table_factory(bbo)
    return opt
