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


def open_rocksdb(path: Path, *, memtable_mb: int, cache_mb: int, partitioned: bool = False, l0_files: int = 4) -> Any:
    """An ``Rdict`` on ``path`` (created with its parents when missing). rocksdict raises plain
    exceptions (a lock held, a corrupt file): callers turn them into their own ``StorageError``.

    ``l0_files``: the level-0 files (flushed memtables, ingested tables) that start a compaction. The
    block explorer's indexes (script hashes, history) take 16: their keys are random across the whole
    key space, so every compaction rewrites all the level below; waiting for 16 files rather than 4 cuts
    that rewriting (and the job's CPU) while a look-up still reads one pinned filter a file."""
    from rocksdict import Rdict

    opt = rocksdb_options(memtable_mb=memtable_mb, cache_mb=cache_mb, partitioned=partitioned)
    opt.set_level_zero_file_num_compaction_trigger(l0_files)
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
