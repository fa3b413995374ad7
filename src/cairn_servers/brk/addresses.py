"""Addresses: an address index on RocksDB and per-height address counts, in ``OUT/addresses/``.

The raw vecs keep each output's value and type but not its script, so this pass re-reads the blocks
from the blk files (``blockpos`` vecs give file and offset; ``brk index`` and ``brk run`` pass the
blocks directory, which is remembered for ``brk serve``). A light walker finds each output's script;
the address is the script type plus its payload (the 20/32-byte hash, or the public key of a P2PK
output, which counts as an address as in BRK). Types with no address (bare multisig, OP_RETURN,
empty, unknown) are left out.

* ``OUT/addresses/scripthash/``: RocksDB, the first 16 bytes of the SHA-256 of each address's output
  script -> its address bytes (the block explorer's ``/scripthash/`` routes; Esplora's script hash).
* ``OUT/addresses/index/``: RocksDB, address bytes -> address id (8 bytes), ids given in order of
  first appearance. An entry is trusted only if its id is below the committed address count and the
  id's stored 8-byte key hash matches, so entries left by an interrupted run or an orphaned block
  never resolve to another address (they are overwritten when the address reappears).
* vecs: ``outputindex_to_addressindex`` (u4, 2**32-1 = none), ``addressindex_to_keyhash``,
  ``addressindex_to_type``, and per height ``address_count`` (addresses holding more than zero sats
  after the block), ``address_count_<type>``, ``new_address_count``, ``empty_address_count``
  (addresses seen before that now hold nothing), ``address_count_balance_<band>``.
* ``balance.bin``: every address's balance (8 bytes each), updated in place. Before a chunk changes
  it, the old balance of every (height, address) it touches is written to ``undo/<a>-<b>.npy``
  (fsynced); a kill before the manifest commit is undone on the next open, and a reorg applies the
  undo rows of the rolled-back heights (kept for ``UNDO_HEIGHTS`` heights; a deeper reorg rebuilds the
  pass from scratch).

Per chunk everything is vectorised: the (address, block) pairs are aggregated, sorted by address,
and a segmented running sum gives each address's balance before and after every block it touches.
A key is looked up in the index only when the filter ``seen.bin`` (``cairn_servers.brk.seen``, a bloom
filter on disk that grows with the address count) says it may have been given an id.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from struct import Struct
from typing import TYPE_CHECKING, Any

from cairn_servers.brk.gather import gather, read_rows, scatter
from cairn_servers.brk.reader import StoreReader
from cairn_servers.brk.seen import Seen
from cairn_servers.brk.vecs import VecSpec, VecStore
from cairn_servers.core.errors import CairnError, StorageError
from cairn_servers.core.files import atomic_file, fsync_file, grow_file

if TYPE_CHECKING:
    import numpy as np

# Raw output type code -> (address type name, payload offset in the script, payload length).
ADDRESS_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("p2pk65", 1, 65), 1: ("p2pk33", 1, 33), 2: ("p2pkh", 3, 20), 4: ("p2sh", 2, 20),
    6: ("p2wpkh", 2, 20), 7: ("p2wsh", 2, 32), 8: ("p2tr", 2, 32), 9: ("p2a", 0, 4),
}
TYPE_NAMES = tuple(name for name, _, _ in ADDRESS_TYPES.values())
BALANCE_BANDS = (("lt_0_01", 0), ("0_01_0_1", 1_000_000), ("0_1_1", 10_000_000), ("1_10", 100_000_000),
                 ("10_100", 1_000_000_000), ("100_1k", 10_000_000_000), ("1k_10k", 100_000_000_000),
                 ("gt_10k", 1_000_000_000_000))
BALANCE_IDS = tuple(f"address_count_balance_{name}" for name, _ in BALANCE_BANDS)
COUNT_IDS = ("address_count", *(f"address_count_{t}" for t in TYPE_NAMES), "new_address_count",
             "empty_address_count", *BALANCE_IDS)
NONE = (1 << 32) - 1
NO_OUTPUT = (1 << 64) - 1
UNDO_HEIGHTS = 10_000  # reorgs up to this depth are undone; deeper ones rebuild the pass
CHUNK_ROWS = int(os.environ.get("CAIRN_BRK_UTXO_CHUNK", "250000"))  # inputs + outputs a chunk (memory)
_U16 = Struct("<H").unpack_from
_U32 = Struct("<I").unpack_from
_U64 = Struct("<Q").unpack_from
_MISS = b"\xff" * 8  # the look-up of a key not in the index: id -1
GROUP_BYTES = 8 << 20  # block bytes walked at once (memory)
_FEW, _MANY = 4, 32  # output_offsets: this few transactions with this many steps to go: a plain loop
SCRIPTHASHES = os.environ.get("CAIRN_BRK_BENCH_NO_EXPLORER") != "1"  # benchmarks only: see explorer.BENCH_OFF
FILTER = True  # False: every key is looked up in the index, seen.bin unused (tests compare the two)


def specs() -> list[VecSpec]:
    return [VecSpec("height_to_blockhash", "height", "u1", 32),
            VecSpec("height_to_first_outputindex", "height", "<u8"),
            VecSpec("height_to_first_addressindex", "height", "<u8"),
            *(VecSpec(f"height_to_{name}", "height", "<u8") for name in COUNT_IDS),
            VecSpec("outputindex_to_addressindex", "outputindex", "<u4"),
            VecSpec("addressindex_to_keyhash", "addressindex", "<u8"),
            VecSpec("addressindex_to_type", "addressindex", "u1")]


# Type code -> the output script around the payload (P2A's payload is its whole script).
SCRIPTS: dict[int, tuple[bytes, bytes]] = {
    0: (b"\x41", b"\xac"), 1: (b"\x21", b"\xac"), 2: (b"\x76\xa9\x14", b"\x88\xac"), 4: (b"\xa9\x14", b"\x87"),
    6: (b"\x00\x14", b""), 7: (b"\x00\x20", b""), 8: (b"\x51\x20", b""), 9: (b"", b""),
}
# Keys of ``OUT/addresses/scripthash/``: the first 16 bytes of the SHA-256 of the output script -> the
# address key. A reader checks the whole hash against the script the value names (a shared prefix never
# answers for another script), and that address's id as usual (stale entries, left by an interrupted chunk
# or an orphaned block, never answer either).
SCRIPTHASH_BYTES = 16


def address_script(key: bytes) -> bytes:
    """The output script of an address key (type code + payload)."""
    pre, post = SCRIPTS[key[0]]
    return pre + key[1:] + post


def script_hash_keys(kmat: np.ndarray) -> np.ndarray:
    """The script-hash index keys of address keys of one type, given as an (n, 1 + payload) byte matrix:
    the first ``SCRIPTHASH_BYTES`` bytes of the SHA-256 of each one's script, as an (n, SCRIPTHASH_BYTES)
    byte array. The scripts are built as one byte matrix and hashed without a Python frame per key."""
    from hashlib import sha256
    from operator import methodcaller

    import numpy as np

    n = kmat.shape[0]
    if not n:
        return np.zeros((0, SCRIPTHASH_BYTES), dtype=np.uint8)
    pre, post = SCRIPTS[int(kmat[0, 0])]
    width = kmat.shape[1] - 1
    scripts = np.empty((n, len(pre) + width + len(post)), dtype=np.uint8)
    scripts[:, :len(pre)] = np.frombuffer(pre, dtype=np.uint8)
    scripts[:, len(pre):len(pre) + width] = kmat[:, 1:]
    scripts[:, len(pre) + width:] = np.frombuffer(post, dtype=np.uint8)
    # Each row as bytes (``tolist`` of a void view keeps trailing zeros), hashed by C-level map calls: the
    # floor is SHA-256 itself.
    rows = scripts.view(f"V{scripts.shape[1]}").ravel().tolist()
    digests = b"".join(map(methodcaller("digest"), map(sha256, rows)))
    return np.frombuffer(digests, dtype=np.uint8).reshape(-1, 32)[:, :SCRIPTHASH_BYTES]


def undo_files(folder: Path) -> list[tuple[int, int, Path]]:
    """The undo files ``<a>-<b>.npy`` in ``folder`` as (a, b, path), in order of height."""
    found = []
    for p in folder.glob("*.npy"):
        try:
            a, b = (int(x) for x in p.stem.split("-"))
        except ValueError:
            continue
        found.append((a, b, p))
    return sorted(found)


def addresses_dir(out: Path) -> Path:
    return out / "addresses"


def keyhash(key: bytes) -> int:
    """8 bytes telling addresses apart (their last payload bytes: a hash or a public key's end)."""
    return int.from_bytes(key[-8:], "little")


def _varints(d: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray | int]:
    """CompactSize values at byte offsets ``at`` of ``d`` and their encoded lengths."""
    import numpy as np

    value = d[at].astype(np.int64)
    big = np.flatnonzero(value >= 0xFD)
    if not big.size:
        return value, 1
    size = np.ones(at.shape[0], dtype=np.int64)
    for i in big.tolist():  # rare: scripts of 253 bytes or more
        p = int(at[i])
        n = {0xFD: 2, 0xFE: 4, 0xFF: 8}[int(value[i])]
        value[i] = int.from_bytes(d[p + 1:p + 1 + n].tobytes(), "little")
        size[i] = 1 + n
    return value, size


def _varint_at(d: np.ndarray, at: int) -> tuple[int, int]:
    """The CompactSize value at byte offset ``at`` of ``d`` and its encoded length."""
    first = int(d[at])
    if first < 0xFD:
        return first, 1
    n = {0xFD: 2, 0xFE: 4, 0xFF: 8}[first]
    return int.from_bytes(d[at + 1:at + 1 + n].tobytes(), "little"), 1 + n


def output_offsets(d: np.ndarray, starts: np.ndarray, n_in: np.ndarray, n_out: np.ndarray) -> np.ndarray:
    """The offset in ``d`` of every output script of the transactions starting at byte offsets ``starts``
    (those of several blocks at once), in transaction order.

    Input and output counts come from the vecs, so each step moves every transaction past one input
    (or output) with a few array operations; witnesses are never walked. When only a few transactions
    are left with many inputs (or outputs) to go (a consolidation, a payout to thousands), a plain loop
    finishes them rather than thousands of steps over arrays of one or two."""
    import numpy as np

    p = starts + 4 + 2 * (d[starts + 4] == 0)  # version, then the segwit marker and flag if present
    _, ln = _varints(d, p)
    p += ln
    active = np.flatnonzero(n_in > 0)
    step = 0
    while active.size:
        if active.size <= _FEW and int(n_in[active].max()) - step > _MANY:
            for t in active.tolist():
                at = int(p[t])
                for _ in range(step, int(n_in[t])):
                    sl1, ln1 = _varint_at(d, at + 36)
                    at += 36 + ln1 + sl1 + 4
                p[t] = at
            break
        q = p[active] + 36
        sl, ln = _varints(d, q)
        p[active] = q + ln + sl + 4
        step += 1
        active = active[n_in[active] > step]
    _, ln = _varints(d, p)
    p += ln
    first = np.concatenate(([0], np.cumsum(n_out)[:-1]))
    result = np.zeros(int(n_out.sum()), dtype=np.int64)
    active = np.flatnonzero(n_out > 0)
    step = 0
    while active.size:
        if active.size <= _FEW and int(n_out[active].max()) - step > _MANY:
            for t in active.tolist():
                at, row = int(p[t]), int(first[t])
                for k in range(step, int(n_out[t])):
                    sl1, ln1 = _varint_at(d, at + 8)
                    result[row + k] = at + 8 + ln1
                    at += 8 + ln1 + sl1
            break
        q = p[active] + 8
        sl, ln = _varints(d, q)
        result[first[active] + step] = q + ln
        p[active] = q + ln + sl
        step += 1
        active = active[n_out[active] > step]
    return result


def _unique_rows(mat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``numpy.unique`` over the rows of a byte matrix (rows in byte order, each one's first row index,
    the inverse), sorting 8-byte integers rather than byte strings: the rows are hashes or public keys,
    so their first 8 bytes nearly always tell them apart; when two different rows share them, the
    byte-string sort is used."""
    import numpy as np

    n, width = mat.shape
    if n == 0:
        return mat, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    head = np.zeros((n, 8), dtype=np.uint8)
    head[:, :min(8, width)] = mat[:, :8]
    prefix = head.view(">u8").ravel()  # big-endian: integer order is byte order
    order = np.argsort(prefix)
    ps = prefix[order]
    tie = np.flatnonzero(ps[1:] == ps[:-1])
    if tie.size and (mat[order[tie]] != mat[order[tie + 1]]).any():
        uniq, first, inverse = np.unique(mat.view(f"V{width}").ravel(), return_index=True, return_inverse=True)
        return np.frombuffer(uniq.tobytes(), dtype=np.uint8).reshape(-1, width), first, inverse.ravel()
    new = np.ones(n, dtype=bool)
    new[tie + 1] = False
    starts = np.flatnonzero(new)
    first = np.minimum.reduceat(order, starts)  # each run's first occurrence
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return mat[first], first, inverse


def update(out: Path, *, durable: bool = True, blocks_dir: Path | None = None,
           progress: Callable[..., None] | None = None, stop: Callable[[], bool] | None = None
           ) -> dict[str, Any] | None:
    """Bring ``OUT/addresses`` up to the raw tip (None when no blocks directory is known)."""
    root = addresses_dir(out)
    remembered = root / "blocks_dir"
    if blocks_dir is not None:
        root.mkdir(parents=True, exist_ok=True)
        if not remembered.exists() or remembered.read_text() != str(blocks_dir):
            remembered.write_text(str(blocks_dir))
    elif remembered.exists():
        blocks_dir = Path(remembered.read_text())
    if blocks_dir is None or not blocks_dir.is_dir():
        return None
    p = _AddressPass(out, blocks_dir, durable)
    try:
        return p.run(progress, stop)
    except CairnError as exc:
        print(f"brk: address counts not updated: {exc.message}", file=sys.stderr)
        return None
    finally:
        p.close()


class _AddressPass:
    def __init__(self, out: Path, blocks_dir: Path, durable: bool) -> None:
        import numpy as np

        from cairn_servers.brk.blocks.files import blk_files, read_xor_key

        self.out = out
        self.root = addresses_dir(out)
        self.durable = durable
        self.raw = StoreReader(out)
        self.raw.refresh()
        self.n = self.raw.length("height_to_blockhash")
        self.store = VecStore(self.root, specs(), durable=durable)
        self.undo_dir = self.root / "undo"
        self.undo_dir.mkdir(exist_ok=True)
        self.key = read_xor_key(blocks_dir)
        self.paths = dict(blk_files(blocks_dir))
        self._fds: dict[int, int] = {}
        self._buf = np.zeros(0, dtype=np.uint8)  # the blocks being walked (one buffer, reused)
        self._db: Any = None
        self._sh: Any = None
        self._seen: Seen | None = None
        n = self.n
        f_out = self.raw.read("height_to_first_outputindex", 0, n + 1).astype(np.int64)
        if f_out.shape[0] == n:
            f_out = np.concatenate((f_out, [self.raw.length("outputindex_to_value")]))
        self.first_out = f_out
        f_in = self.raw.read("height_to_first_inputindex", 0, n + 1).astype(np.int64)
        if f_in.shape[0] == n:
            f_in = np.concatenate((f_in, [self.raw.length("inputindex_to_outputindex")]))
        self.first_in = f_in
        self.n_out = int(f_out[-1])

    @property
    def db(self) -> Any:
        if self._db is None:
            from cairn_servers.brk.rocks import open_rocksdb

            # The transaction index's settings, with a bounded 16 MB block cache and partitioned index and
            # filter blocks: seen.bin answers most look-ups, so the cache serves few reads.
            try:
                self._db = open_rocksdb(self.root / "index", memtable_mb=32, cache_mb=16, partitioned=True,
                                        l0_files=8, tiered=True)
            except Exception as exc:  # rocksdict raises plain exceptions (a lock held, a corrupt file)
                raise StorageError(f"Cannot open the address index {self.root / 'index'}: {exc}.") from exc
        return self._db

    @property
    def scripthashes(self) -> Any:
        """``OUT/addresses/scripthash/``: script hash -> address key, apart from the index (in it, the random
        keys made every look-up and compaction of the address keys dearer)."""
        if self._sh is None:
            from cairn_servers.brk.rocks import open_rocksdb

            try:
                self._sh = open_rocksdb(self.root / "scripthash", memtable_mb=16, cache_mb=8, l0_files=8, tiered=True)
            except Exception as exc:  # rocksdict raises plain exceptions (a lock held, a corrupt file)
                raise StorageError(f"Cannot open the script hash index {self.root / 'scripthash'}: {exc}.") from exc
        return self._sh

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._sh is not None:
            self._sh.close()
            self._sh = None
        for fd in self._fds.values():
            os.close(fd)
        self.raw.close()

    # -- balances and undo ------------------------------------------------------------------------
    @property
    def _balance_path(self) -> Path:
        return self.root / "balance.bin"

    def _grow_balances(self, n: int) -> int:
        """Make ``balance.bin`` hold at least ``n`` balances (new ones 0); returns the rows it holds."""
        with open(self._balance_path, "ab") as fh:
            grow_file(fh, 8 * n)
            return max(fh.seek(0, os.SEEK_END), 8 * n) // 8

    def _sync_balances(self) -> None:
        """Balances written through short-lived maps are in the page cache: make them durable."""
        if self.durable:
            fsync_file(self.root / "balance.bin")

    def _undo_files(self) -> list[tuple[int, int, Path]]:
        return undo_files(self.undo_dir)

    def _undo_to(self, height: int) -> bool:
        """Restore every balance to what it was before ``height`` (the heights from ``height`` on are
        rolled back, or were never committed); False if the kept undo rows do not reach that far."""
        import numpy as np

        files = [f for f in self._undo_files() if f[1] > height]
        if height < self.store.lengths["height_to_blockhash"] and (not files or files[0][0] > height):
            return False
        for a, _, path in reversed(files):  # newest first: older rows overwrite newer ones
            rows = np.load(path)
            late = rows[rows[:, 0] >= height]
            if late.size:
                # Rows are sorted by address, then height: the first of each address is its oldest.
                ids, first = np.unique(late[:, 1], return_index=True)
                n = self._grow_balances(int(ids.max()) + 1)
                scatter(self._balance_path, "<u8", n, ids.astype(np.int64), late[first, 2])
                self._sync_balances()
            if a < height:  # keep the rows of the heights that stay
                self._save_undo(a, height, rows[rows[:, 0] < height])
            path.unlink()
        return True

    def _reset(self, meta: dict[str, Any]) -> None:
        import shutil  # here: it imports bz2 and lzma (0.5 MiB a `brk mcp` process would keep)

        if self._db is not None:
            self._db.close()
            self._db = None
        if self._sh is not None:
            self._sh.close()
            self._sh = None
        shutil.rmtree(self.root / "index", ignore_errors=True)
        shutil.rmtree(self.root / "scripthash", ignore_errors=True)
        for _, _, path in self._undo_files():
            path.unlink()
        (self.root / "balance.bin").unlink(missing_ok=True)
        (self.root / "seen.bin").unlink(missing_ok=True)
        self._seen = None
        meta["generation"] = int(meta.get("generation", 0)) + 1
        self.store.truncate({name: 0 for name in self.store.lengths}, meta)

    # -- the run --------------------------------------------------------------------------------
    def run(self, progress: Callable[..., None] | None = None,
            should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
        import numpy as np

        from cairn_servers.brk.progress import Stage

        s = self.store
        meta = dict(s.meta)
        meta.setdefault("generation", 0)
        have = s.lengths["height_to_blockhash"]
        # An interrupted chunk: its undo file reaches past the committed height. A store indexed before the
        # index kept script hashes (the block explorer's /scripthash/) is rebuilt once.
        if not self._undo_to(have) or (SCRIPTHASHES and have and not meta.get("scripthashes")):
            self._reset(meta)
            have = 0
        if SCRIPTHASHES:
            meta["scripthashes"] = 1
        fork = have
        if have:
            top = min(have, self.n)
            ours = np.asarray(s.read("height_to_blockhash")[:top])
            theirs = self.raw.read("height_to_blockhash", 0, top)
            differ = np.flatnonzero((ours != theirs).any(axis=1))
            fork = int(differ[0]) if differ.size else top
        rolled = None
        if fork < have:
            rolled = fork
            if self._undo_to(fork):
                meta["generation"] = int(meta["generation"]) + 1
                first_addr = int(s.read("height_to_first_addressindex")[fork])
                first_out = int(s.read("height_to_first_outputindex")[fork])
                lengths = {}
                for spec in s.specs.values():
                    lengths[spec.name] = {"height": fork, "outputindex": first_out,
                                          "addressindex": first_addr}[spec.index]
                s.truncate(lengths, meta)
            else:
                self._reset(meta)
        start = s.lengths["height_to_blockhash"]
        done = 0
        count = s.lengths["addressindex_to_keyhash"]
        if start < self.n and FILTER:
            self._seen = Seen(self.root / "seen.bin", s.path("addressindex_to_keyhash"), count,
                              durable=self.durable)
        stage = Stage(progress, "addresses", self.raw, start, self.n, should_stop)
        rows = self.first_out[:-1] + self.first_in[:-1]  # once: a chunk's end is a search in it
        while start < self.n:
            limit = int(np.searchsorted(rows, int(rows[start]) + CHUNK_ROWS, "right"))
            stop = max(start + 1, min(self.n, limit))
            self._chunk(start, stop, meta)
            done += stop - start
            start = stop
            if stage.done(stop):
                break
        if self._seen is not None:
            self._seen.save()
        return {"height": s.lengths["height_to_blockhash"] - 1, "computed_heights": done, "rolled_back_to": rolled}

    def _block_positions(self, heights: range) -> list[tuple[int, int, int]]:
        """(blk file number, offset, length) of the chain's blocks at ``heights`` (from the blockpos
        scan cache)."""
        import numpy as np

        raw = self.raw
        hashes = raw.read("height_to_blockhash", heights.start, heights.stop)
        if not hasattr(self, "_pos_order"):
            pos_hash = raw.read("blockpos_to_hash")
            self._pos_prefix = np.ascontiguousarray(pos_hash[:, :8]).view("<u8").ravel()
            self._pos_order = np.argsort(self._pos_prefix, kind="stable")
            self._pos_sorted = self._pos_prefix[self._pos_order]
            self._pos_hash = pos_hash
        want = np.ascontiguousarray(hashes[:, :8]).view("<u8").ravel()
        lo = np.searchsorted(self._pos_sorted, want, "left")
        found = []
        for i, h in enumerate(hashes):
            j = int(lo[i])
            while j < self._pos_sorted.shape[0] and self._pos_sorted[j] == want[i]:
                pos = int(self._pos_order[j])
                if bytes(self._pos_hash[pos]) == bytes(h):
                    break
                j += 1
            else:
                raise StorageError(f"block {bytes(h)[::-1].hex()} is not in the scan cache")
            found.append((int(raw.read("blockpos_to_file", pos, pos + 1)[0]),
                          int(raw.read("blockpos_to_offset", pos, pos + 1)[0]),
                          int(raw.read("blockpos_to_length", pos, pos + 1)[0])))
        return found

    def _block_groups(self, heights: range) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        """The blocks at ``heights`` in runs of about ``GROUP_BYTES``: (first and end position in
        ``heights``, their bytes end to end, each block's offset in those bytes). The bytes are a view
        of one buffer reused from run to run: valid until the next run."""
        import numpy as np

        positions = self._block_positions(heights)
        j0 = 0
        while j0 < len(positions):
            j1, size = j0, 0
            while j1 < len(positions) and (j1 == j0 or size + positions[j1][2] <= GROUP_BYTES):
                size += positions[j1][2]
                j1 += 1
            if self._buf.shape[0] < size:
                self._buf = np.empty(max(size, GROUP_BYTES), dtype=np.uint8)
            buf = self._buf[:size]
            bases = np.zeros(j1 - j0, dtype=np.int64)
            at = 0
            for i, (file_no, offset, length) in enumerate(positions[j0:j1]):
                bases[i] = at
                fd = self._fds.get(file_no)
                if fd is None:
                    path = self.paths.get(file_no)
                    if path is None:
                        raise StorageError(f"blk{file_no:05d}.dat is missing from the blocks directory")
                    fd = self._fds[file_no] = os.open(path, os.O_RDONLY)
                if os.preadv(fd, [buf[at:at + length].data], offset) != length:
                    raise StorageError(f"blk{file_no:05d}.dat is shorter than indexed")
                if any(self.key):  # Bitcoin Core's XOR obfuscation, undone in place
                    phase = offset % len(self.key)
                    rolled = np.frombuffer(self.key[phase:] + self.key[:phase], dtype=np.uint8)
                    buf[at:at + length] ^= np.resize(rolled, length)
                at += length
            yield j0, j1, buf, bases
            j0 = j1

    def _chunk(self, a: int, b: int, meta: dict[str, Any]) -> None:  # noqa: C901 - one vectorised pass
        import numpy as np

        s = self.store
        nb = b - a
        o0, o1 = int(self.first_out[a]), int(self.first_out[b])
        types = self.raw.read("outputindex_to_type", o0, o1).astype(np.int64)
        values = self.raw.read("outputindex_to_value", o0, o1).astype(np.int64)
        count0 = s.lengths["addressindex_to_keyhash"]
        out_addr, new, new_hashes, new_codes = self._resolve(a, b, types, count0)
        nxt = count0 + new_hashes.shape[0]
        out_blk = np.repeat(np.arange(nb), np.diff(self.first_out[a:b + 1]))
        # Spends: the address of each spent output (this chunk's from memory, older ones from the vec).
        i0, i1 = int(self.first_in[a]), int(self.first_in[b])
        spent = self.raw.read("inputindex_to_outputindex", i0, i1)
        in_blk = np.repeat(np.arange(nb), np.diff(self.first_in[a:b + 1]))
        real = spent != np.uint64(NO_OUTPUT)
        so = spent[real].astype(np.int64)
        in_blk = in_blk[real]
        s_addr = np.full(so.shape[0], -1, dtype=np.int64)
        old = so < o0
        if old.any():  # random rows of the whole chain: short-lived maps (bounded resident size)
            got = gather(s.path("outputindex_to_addressindex"), "<u4", s.lengths["outputindex_to_addressindex"],
                         so[old]).astype(np.int64)
            s_addr[old] = np.where(got == NONE, -1, got)
        s_addr[~old] = out_addr[so[~old] - o0]
        s_val = gather(self.out / "vecs" / "outputindex_to_value.bin", "<u8", self.n_out, so).astype(np.int64)
        # (address, block) pairs with their net change, sorted by address then block.
        has_o = out_addr >= 0
        has_s = s_addr >= 0
        pair_addr = np.concatenate((out_addr[has_o], s_addr[has_s]))
        pair_blk = np.concatenate((out_blk[has_o], in_blk[has_s]))
        pair_val = np.concatenate((values[has_o], -s_val[has_s]))
        key2 = pair_addr * nb + pair_blk
        ukey, inv = np.unique(key2, return_inverse=True)
        delta = np.bincount(inv, weights=pair_val.astype(np.float64), minlength=ukey.shape[0]).astype(np.int64)
        u_addr, u_blk = ukey // nb, ukey % nb
        first_of = np.ones(ukey.shape[0], dtype=bool)
        first_of[1:] = u_addr[1:] != u_addr[:-1]
        starts = np.flatnonzero(first_of)
        existing = u_addr[starts] < count0
        bal_n = self._grow_balances(max(nxt, 1))
        sb = np.zeros(starts.shape[0], dtype=np.int64)
        if existing.any():
            sb[existing] = gather(self._balance_path, "<u8", bal_n, u_addr[starts][existing]).astype(np.int64)
        # Segmented running sum: balance after each (address, block).
        cs = np.cumsum(delta)
        seg = np.cumsum(first_of) - 1  # each row's address run
        after = (sb - (cs[starts] - delta[starts]))[seg] + cs
        before = after - delta
        if (after < 0).any():
            raise StorageError(f"heights {a}..{b - 1}: an address balance went negative (vecs inconsistent)")
        # Undo rows first (durable), then the balances, the index, the vecs.
        undo = np.empty((3, ukey.shape[0]), dtype=np.uint64)  # saved as before: (height, address, balance) rows
        undo[0], undo[1], undo[2] = u_blk + a, u_addr, before
        undo = undo.T
        self._save_undo(a, b, undo)
        last = np.append(starts[1:] - 1, ukey.shape[0] - 1)
        scatter(self._balance_path, "<u8", bal_n, u_addr[last], after[last].astype(np.uint64))
        self._sync_balances()
        if new:
            from collections import deque

            from rocksdict import WriteBatch, WriteOptions

            wb = WriteBatch(raw_mode=True)
            # In key order, and the engine told so: cheaper inserts. (Moved in as a sorted table file per
            # chunk, like the explorer's history, these keys and the script hashes cost the pass more CPU in
            # all: 44.2 against 41.2 s at 5 M transactions, the many small tables merged again and again.)
            for keys, ids in new:
                deque(map(wb.put, keys, ids.astype("<u8").view("V8").tolist()), maxlen=0)
            options = WriteOptions()
            options.memtable_insert_hint_per_batch = True
            self.db.write(wb, options)
        if new and SCRIPTHASHES:
            # The block explorer's /scripthash/ look-up: sha256(script)[:16] -> key. Random keys: a batch
            # of its own, every type's entries in one key order, without the insert hint (each type sorted
            # apart, the write took 2.7x as long; unsorted, or with the hint, 4x). A table file moved in
            # (``ingest_sorted``) cost more CPU here than this batch.
            hashed: list[np.ndarray] = []
            sh_keys: list[bytes] = []
            for keys, _ in new:
                mat = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), -1)
                hashed.append(script_hash_keys(mat))
                sh_keys.extend(keys)
            allhash = np.ascontiguousarray(np.concatenate(hashed))
            order = np.argsort(allhash[:, :8].copy().view(">u8").ravel())  # one batch in key order
            wb = WriteBatch(raw_mode=True)
            deque(map(wb.put, allhash[order].view(f"V{SCRIPTHASH_BYTES}").ravel().tolist(),
                      map(sh_keys.__getitem__, order.tolist())), maxlen=0)
            self.scripthashes.write(wb)
        from cairn_servers.brk.faults import fault as _fault

        _fault("address-undo")  # the crash tests kill here: balances and index ahead of the manifest
        # Per-block counts.
        code_to_idx = np.full(16, -1, dtype=np.int64)
        for i, code in enumerate(ADDRESS_TYPES):
            code_to_idx[code] = i
        codes = np.zeros(ukey.shape[0], dtype=np.int64)
        is_old = u_addr < count0
        if is_old.any():
            codes[is_old] = gather(s.path("addressindex_to_type"), "u1", count0, u_addr[is_old]).astype(np.int64)
        codes[~is_old] = new_codes[u_addr[~is_old] - count0]  # new ids are count0, count0 + 1, ...
        t_of = code_to_idx[codes]
        nt = len(ADDRESS_TYPES)
        gain = (after > 0).astype(np.int64) - (before > 0).astype(np.int64)
        d_total = np.bincount(u_blk, weights=gain, minlength=nb).astype(np.int64)
        d_type = np.bincount(u_blk * nt + t_of, weights=gain, minlength=nb * nt).reshape(nb, nt).astype(np.int64)
        edges = np.asarray([lo for _, lo in BALANCE_BANDS[1:]], dtype=np.int64)
        nband = len(BALANCE_BANDS)
        band_after = np.searchsorted(edges, after, "right")
        band_before = np.searchsorted(edges, before, "right")
        d_band = (np.bincount(u_blk * nband + band_after, weights=(after > 0).astype(np.float64), minlength=nb * nband)
                  - np.bincount(u_blk * nband + band_before, weights=(before > 0).astype(np.float64),
                                minlength=nb * nband)).reshape(nb, nband).astype(np.int64)
        # New addresses per block: the block of each new id's first pair.
        new_blk = u_blk[starts][u_addr[starts] >= count0]
        new_count = np.bincount(new_blk, minlength=nb).astype(np.int64)

        def prev(name: str) -> int:
            return int(s.read(f"height_to_{name}")[a - 1]) if a else 0

        total = prev("address_count") + np.cumsum(d_total)
        seen = count0 + np.cumsum(new_count)
        s.append("height_to_blockhash", self.raw.read("height_to_blockhash", a, b))
        s.append("height_to_first_outputindex", self.first_out[a:b].astype(np.uint64))
        s.append("height_to_first_addressindex", (seen - new_count).astype(np.uint64))
        s.append("height_to_address_count", total.astype(np.uint64))
        for i, name in enumerate(TYPE_NAMES):
            s.append(f"height_to_address_count_{name}",
                     (prev(f"address_count_{name}") + np.cumsum(d_type[:, i])).astype(np.uint64))
        s.append("height_to_new_address_count", new_count.astype(np.uint64))
        s.append("height_to_empty_address_count", (seen - total).astype(np.uint64))
        for i, name in enumerate(BALANCE_IDS):
            s.append(f"height_to_{name}", (prev(name) + np.cumsum(d_band[:, i])).astype(np.uint64))
        out_ids = np.where(out_addr >= 0, out_addr, NONE).astype(np.uint32)
        s.append("outputindex_to_addressindex", out_ids)
        s.append("addressindex_to_keyhash", new_hashes)
        s.append("addressindex_to_type", new_codes.astype(np.uint8))
        meta["height"] = b - 1
        s.commit(meta)
        if self._seen is not None:  # the new keys' bits were set by _resolve
            self._seen.grow(nxt)  # twice as large once past its capacity
        _fault("address-commit")
        for lo, hi, path in self._undo_files():
            if hi < b - UNDO_HEIGHTS:
                path.unlink()

    def _resolve(self, a: int, b: int, types: np.ndarray, count0: int
                 ) -> tuple[np.ndarray, list[tuple[list[bytes], np.ndarray]], np.ndarray, np.ndarray]:
        """The address id of every output of heights [a, b) (-1: none); per address type, the new
        addresses' keys in key order with their ids; and the new addresses' key hashes and type codes in
        id order (ids follow first appearance)."""
        import numpy as np

        t0 = int(self.raw.read("height_to_first_txindex", a, a + 1)[0])
        t1 = int(self.raw.read("height_to_first_txindex", b, b + 1)[0]) if b < self.n \
            else self.raw.length("txindex_to_txid")
        sizes = self.raw.read("txindex_to_size", t0, t1).astype(np.int64)
        n_in = self.raw.read("txindex_to_input_count", t0, t1).astype(np.int64)
        n_out = self.raw.read("txindex_to_output_count", t0, t1).astype(np.int64)
        ntx = self.raw.read("height_to_tx_count", a, b).astype(np.int64)
        tx_at = np.concatenate(([0], np.cumsum(ntx)))
        out_at = np.concatenate(([0], np.cumsum(n_out)))
        rows: dict[int, list[np.ndarray]] = {code: [] for code in ADDRESS_TYPES}
        where: dict[int, list[np.ndarray]] = {code: [] for code in ADDRESS_TYPES}
        k = 0
        for j0, j1, d, bases in self._block_groups(range(a, b)):
            # Every transaction of the group's blocks walked at once: each block's transactions start
            # after its 80-byte header and transaction count.
            _, head = _varints(d, bases + 80)
            lo, hi = int(tx_at[j0]), int(tx_at[j1])
            nt = ntx[j0:j1]
            within = np.cumsum(sizes[lo:hi]) - sizes[lo:hi]  # exclusive, across the group's blocks
            within -= np.repeat(within[tx_at[j0:j1] - lo], nt)
            starts = np.repeat(bases + 80 + head, nt) + within
            offs = output_offsets(d, starts, n_in[lo:hi], n_out[lo:hi])
            windows = {length: np.lib.stride_tricks.sliding_window_view(d, length)
                       for _, _, length in ADDRESS_TYPES.values()}
            if offs.shape[0] != int(out_at[hi] - out_at[lo]) or k + offs.shape[0] > types.shape[0]:
                raise StorageError(f"heights {a}..{b - 1}: the blocks hold other outputs than the vecs")
            codes = types[k:k + offs.shape[0]]
            for code, (_, shift, length) in ADDRESS_TYPES.items():
                sel = np.flatnonzero(codes == code)
                if sel.size:  # each payload's bytes: one row of a sliding window over the blocks' bytes
                    rows[code].append(windows[length][offs[sel] + shift])
                    where[code].append(sel + k)
            k += offs.shape[0]
        if k != types.shape[0]:
            raise StorageError(f"heights {a}..{b - 1}: the blocks hold other outputs than the vecs")
        out_addr = np.full(types.shape[0], -1, dtype=np.int64)
        stored_hash = self.store.path("addressindex_to_keyhash")
        groups = []  # per type: unique keys (key order), their rows, first output, inverse, look-ups
        for code in ADDRESS_TYPES:  # type codes ascending, rows sorted: the engine's key order
            if not rows[code]:
                continue
            mat = np.concatenate(rows[code])
            pos = np.concatenate(where[code])
            umat, first, inverse = _unique_rows(mat)
            width = umat.shape[1]
            kmat = np.empty((umat.shape[0], width + 1), dtype=np.uint8)
            kmat[:, 0] = code
            kmat[:, 1:] = umat
            keys = kmat.view(f"V{width + 1}").ravel().tolist()  # bytes, trailing zeros kept
            tail = np.zeros((umat.shape[0], 8), dtype=np.uint8)
            tail[:, 8 - min(8, width):] = umat[:, -min(8, width):]
            hashes = tail.view("<u8").ravel()
            # Only keys that may have a trusted entry are looked up (none while no address is committed).
            # The filter's bits of every key are set in the same pass, before the commit: harmless for
            # keys that do not end up committed (a look-up too many later).
            maybe = None if self._seen is None else self._seen.add(hashes)
            found = np.full(len(keys), -1, dtype=np.int64)
            if count0:
                ask = np.arange(len(keys)) if maybe is None else np.flatnonzero(maybe)
                if ask.shape[0] == len(keys):
                    found = self._lookup(keys)
                elif ask.shape[0]:
                    found[ask] = self._lookup([keys[i] for i in ask.tolist()])
            ok = (found >= 0) & (found < count0)
            ok[ok] = gather(stored_hash, "<u8", count0, found[ok]) == hashes[ok]
            groups.append((code, keys, kmat, hashes, pos[first], inverse, pos, found, ok))
        # New addresses: ids in order of first appearance in the chunk (first outputs are distinct).
        new_first = np.concatenate([g[4][~g[8]] for g in groups]) if groups else np.zeros(0, np.int64)
        mark = np.zeros(types.shape[0] + 1, dtype=np.int64)
        mark[new_first] = 1
        rank = (np.cumsum(mark) - 1)[new_first]
        new: list[tuple[list[bytes], np.ndarray]] = []
        new_hashes = np.zeros(new_first.shape[0], dtype=np.uint64)
        new_codes = np.zeros(new_first.shape[0], dtype=np.uint8)
        at = 0
        for code, keys, kmat, hashes, _, inverse, pos, found, ok in groups:
            fresh = np.flatnonzero(~ok)
            r = rank[at:at + fresh.shape[0]]
            at += fresh.shape[0]
            ids = found
            ids[fresh] = count0 + r
            if fresh.shape[0]:
                fresh_keys = keys if fresh.shape[0] == len(keys) else \
                    kmat[fresh].view(f"V{kmat.shape[1]}").ravel().tolist()
                new.append((fresh_keys, count0 + r))
            new_hashes[r] = hashes[fresh]
            new_codes[r] = code
            out_addr[pos] = ids[inverse]
        return out_addr, new, new_hashes, new_codes

    def _lookup(self, keys: list[bytes]) -> np.ndarray:
        """The stored id of every key (-1: none): one batched engine call (``MultiGet``; the keys come
        in key order, which it reads best)."""
        import numpy as np

        got = b"".join([_MISS if v is None else v for v in self.db.get(keys)])
        if len(got) != 8 * len(keys):
            raise StorageError(f"the address index {self.root / 'index'} holds a value that is not an id")
        return np.frombuffer(got, dtype="<i8").copy()

    def _save_undo(self, a: int, b: int, rows: np.ndarray) -> None:
        import numpy as np

        with atomic_file(self.undo_dir / f"{a}-{b}.npy", durable=self.durable) as fh:
            np.save(fh, rows)
