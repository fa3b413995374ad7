"""The address pass's filter of keys already given an id (``OUT/addresses/seen.bin``): a bloom filter
on disk that grows with the address count, read and written through short-lived maps.

On a chain of fresh addresses nearly every key of a chunk is new; the filter answers "never given an
id" for almost all of them, so only the few it lets through (false positives, and the addresses really
paid again) are looked up in the RocksDB index. A filter of a fixed size lets more and more through as
addresses accumulate (each a call into the engine, and past the engine's block cache a read of its
filter blocks): the cost per new address would grow with the chain. This one keeps
``BITS_PER_KEY`` to ``2 * BITS_PER_KEY`` bits a key:

* one 64-bit word a key, ``PROBES`` bits in it (a "register-blocked" bloom filter): a look-up or an
  insert touches one word, so one page of the file;
* the words are a power of two; when the committed addresses pass the capacity, a filter twice as large
  is built from ``addressindex_to_keyhash`` (bucketed by window, each window built in memory and
  written once: see ``_build``) and replaces the old one atomically. Each key is re-inserted once per
  doubling: over a chain, fewer than two inserts a key, and a rebuild's work is proportional to the
  address count;
* the bits live in the file, never in the process: every look-up sorts its words and goes through maps
  of at most ``gather.ROWS`` words (``gather.Rows``), unmapped right after, so the resident set is
  bounded (16 MiB of touched pages at most) whatever the filter's size. New keys are kept in memory
  (up to ``PENDING`` of them, with a small filter of their own that look-ups also ask) and written
  to the file together, so a written page takes many keys; the pages stay in the kernel's page cache,
  which the kernel may drop and re-read.

The file: a 64-byte header (``TAG``, the number of committed ids the bits cover, the number of words),
then the words. Bits are only ever set: ids rolled back leave theirs (a look-up too many, never a wrong
id). ``covered`` in the header is advanced only after the bits it vouches for are written (and fsynced
when durable), so after a kill the filter is extended from the ids committed since, never missing a bit.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from cairn_servers.brk.gather import Rows, read_rows
from cairn_servers.core.errors import StorageError
from cairn_servers.core.files import TEMP_PREFIX, replace_file

if TYPE_CHECKING:
    import numpy as np

TAG = b"bloomW64"  # the format: one 64-bit word a key (earlier formats are rebuilt from the key hashes)
HEADER = 64  # bytes before the words (8 rows of 8 bytes)
BITS_PER_KEY = 16  # at least this many bits a key (up to twice as many right after a doubling)
PROBES = 4  # bits set in a key's word: about 0.3-1 % false positives at 16-32 bits a key
WINDOW = 1 << 18  # words a rebuild sets in memory at once (2 MiB)
MIN_WORDS = 1 << 17  # the smallest filter (1 MiB: 512 k keys; a small chain keeps a small file; a test makes it smaller)
SLICE = 1 << 19  # key hashes read at once when building or extending (4 MiB; ~40 MB of working arrays)
PENDING = 1 << 20  # hashes added in memory before their bits are written to the file together (8 MiB)
PENDING_WORDS = 1 << 20  # the pending hashes' own filter (8 MiB: 64 bits a hash, next to no false positives)
_MUL1 = 0x9E3779B97F4A7C15  # multiplicative hashing: the word from the high bits of the product
_MUL2 = 0xC2B2AE3D27D4EB4F  # and the bits within it from another product's high bits


def words_for(count: int) -> int:
    """The words of a filter for ``count`` keys: a power of two, at least ``MIN_WORDS``."""
    words = max(2, MIN_WORDS)
    while words * 64 < count * BITS_PER_KEY:
        words *= 2
    return words


def _merged(rows: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row once (sorted), the masks of the hashes falling in it OR-ed."""
    import numpy as np

    order = np.argsort(rows)
    srows = rows[order]
    first = np.flatnonzero(np.concatenate(([True], srows[1:] != srows[:-1])))
    return srows[first], np.bitwise_or.reduceat(mask[order], first)


class Seen:
    """The filter of ``path``, made to cover the ``count`` committed ids of ``keyhash`` (a ``<u8`` vec)."""

    def __init__(self, path: Path, keyhash: Path, count: int, *, durable: bool = True) -> None:
        import numpy as np

        self._pending_bits = np.zeros(PENDING_WORDS, dtype=np.uint64)  # the pending hashes' own filter
        self._clear()
        self.path = path
        self.durable = durable
        self.words = 0
        covered = 0
        try:
            with open(path, "rb") as fh:
                head = fh.read(HEADER)
                size = os.fstat(fh.fileno()).st_size
            if len(head) == HEADER and head[:8] == TAG:
                words = int.from_bytes(head[16:24], "little")
                if words >= 2 and words & (words - 1) == 0 and size == HEADER + 8 * words:
                    self.words = words
                    covered = min(int.from_bytes(head[8:16], "little"), count)
        except FileNotFoundError:
            pass
        if self.words < words_for(count) or count - covered > PENDING:
            # Missing, of an earlier format, too small, or far behind (a kill late in a long run): built
            # anew, in time proportional to the count.
            self._build(keyhash, count)
        else:
            for lo in range(covered, count, SLICE):  # ids committed since the bits were last vouched for
                self._write(read_rows(keyhash, "<u8", lo, min(count, lo + SLICE)), self.path)
        self.covered = count
        self.keyhash = keyhash

    @property
    def capacity(self) -> int:
        """Keys the filter takes before it is rebuilt twice as large."""
        return self.words * 64 // BITS_PER_KEY

    def _slots(self, hashes: np.ndarray, words: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Each hash's row in the file (8-byte rows, the header's 8 first; with ``words``: its word in a
        filter of that many words) and its ``PROBES``-bit mask."""
        import numpy as np

        h = np.asarray(hashes, dtype=np.uint64)
        shift = np.uint64(64 - ((words or self.words).bit_length() - 1))
        rows = (h * np.uint64(_MUL1) >> shift).astype(np.int64) + (0 if words else HEADER // 8)
        x = (h ^ (h >> np.uint64(29))) * np.uint64(_MUL2)
        mask = np.zeros(h.shape[0], dtype=np.uint64)
        for i in range(PROBES):
            mask |= np.uint64(1) << ((x >> np.uint64(64 - 6 * (i + 1))) & np.uint64(63))
        return rows, mask

    def _length(self) -> int:
        return HEADER // 8 + self.words

    def maybe(self, hashes: np.ndarray) -> np.ndarray:
        """True for each hash that may have been added (False: certainly never added)."""
        rows, mask = self._slots(hashes)
        got = Rows(rows).take(self.path, "<u8", self._length())
        found: np.ndarray = (got & mask) == mask
        rows, mask = self._slots(hashes, PENDING_WORDS)
        found |= (self._pending_bits[rows] & mask) == mask
        return found

    def add(self, hashes: np.ndarray) -> np.ndarray:
        """Add ``hashes`` (kept in memory up to ``PENDING`` of them, then written to the file together:
        each written page then takes many keys at once); returns ``maybe`` of each hash as it was before.
        Hashes of keys whose ids end up not committed are harmless (a look-up too many)."""
        import numpy as np

        if not hashes.shape[0]:
            return np.zeros(0, dtype=bool)
        found = self.maybe(hashes)
        rows, mask = _merged(*self._slots(hashes, PENDING_WORDS))
        self._pending_bits[rows] |= mask
        self._pending.append(np.asarray(hashes, dtype=np.uint64).copy())
        self._pending_n += hashes.shape[0]
        if self._pending_n >= PENDING:
            self.flush()
        return found

    def flush(self) -> None:
        """Write the pending hashes' bits to the file."""
        if self._pending:
            import numpy as np

            self._write(np.concatenate(self._pending), self.path)
        self._clear()

    def _clear(self) -> None:
        self._pending: list[np.ndarray] = []
        self._pending_n = 0
        self._pending_bits[:] = 0

    def _write(self, hashes: np.ndarray, path: Path) -> None:
        """Set the bits of ``hashes`` in the file ``path`` (in the page cache: ``save`` makes them durable)."""
        rows, mask = _merged(*self._slots(hashes))
        Rows(rows).or_into(path, self._length(), mask)

    def grow(self, count: int) -> None:
        """After ``count`` ids are committed (their bits added): a filter twice as large when past capacity."""
        self.covered = count
        if count > self.capacity:
            self._build(self.keyhash, count)
            self._clear()  # every pending hash is a committed id's: in the new file

    def _build(self, keyhash: Path, count: int) -> None:
        """A filter of ``words_for(count)`` words holding the first ``count`` key hashes, written beside
        ``seen.bin`` and renamed over it (a kill leaves the old one, or none).

        Work and I/O in proportion to ``count``, memory bounded: the key hashes are read in slices and
        each appended to the bucket of its window of ``WINDOW`` words (in a scratch file, buckets laid
        out by a first counting pass); then each window is built in memory from its bucket and written
        once, in file order. (Setting the bits slice by slice through maps would write every page of the
        filter once a slice: work that grows with the square of the count.)"""
        import numpy as np

        self.words = words_for(count)
        window = min(WINDOW, self.words)
        shift = (self.words // window).bit_length() - 1  # word >> (log2 words - shift): its window
        tmp = self.path.with_name(f"{TEMP_PREFIX}{self.path.name}.build")
        scratch = self.path.with_name(f"{TEMP_PREFIX}{self.path.name}.buckets")
        log_window = window.bit_length() - 1

        def windows_of(lo: int) -> tuple[np.ndarray, np.ndarray]:
            hashes = read_rows(keyhash, "<u8", lo, min(count, lo + SLICE))
            rows, _ = self._slots(hashes, self.words)
            return hashes, rows >> log_window

        try:
            counts = np.zeros(1 << shift, dtype=np.int64)
            for lo in range(0, count, SLICE):
                counts += np.bincount(windows_of(lo)[1], minlength=counts.shape[0])
            at = np.concatenate(([0], np.cumsum(counts)))
            cursor = at[:-1].copy()
            with open(scratch, "wb") as bucket:
                for lo in range(0, count, SLICE):
                    hashes, win = windows_of(lo)
                    order = np.argsort(win, kind="stable")
                    hashes, win = hashes[order], win[order]
                    cut = np.flatnonzero(np.concatenate(([True], win[1:] != win[:-1], [True])))
                    for a, b in zip(cut[:-1].tolist(), cut[1:].tolist()):
                        w = int(win[a])
                        os.pwrite(bucket.fileno(), hashes[a:b].tobytes(), 8 * int(cursor[w]))
                        cursor[w] += b - a
            with open(tmp, "wb") as fh:
                fh.write((TAG + (0).to_bytes(8, "little") + self.words.to_bytes(8, "little")).ljust(HEADER, b"\0"))
                bits = np.zeros(window, dtype=np.uint64)
                for w in range(counts.shape[0]):
                    bits[:] = 0
                    if counts[w]:
                        rows, mask = _merged(*self._slots(read_rows(scratch, "<u8", int(at[w]), int(at[w + 1])),
                                                          self.words))
                        bits[rows - w * window] = mask
                    fh.write(bits.tobytes())
            scratch.unlink()
            self._vouch(tmp, count)
            replace_file(tmp, self.path, durable=self.durable)  # the bits were synced by _vouch
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            scratch.unlink(missing_ok=True)
            raise self._error(exc) from exc

    def _vouch(self, path: Path, count: int) -> None:
        """Write ``count`` into the header once the bits are on disk (fsync first when durable)."""
        fd = os.open(path, os.O_RDWR)
        try:
            if self.durable:
                os.fsync(fd)
            os.pwrite(fd, count.to_bytes(8, "little"), 8)
            if self.durable:
                os.fsync(fd)
        finally:
            os.close(fd)

    def save(self) -> None:
        """Write the pending hashes and vouch for the ids covered so far (at the end of a run; a kill
        before leaves the older count, and the ids since are added again on the next open)."""
        try:
            self.flush()
            self._vouch(self.path, self.covered)
        except OSError as exc:
            raise self._error(exc) from exc

    def _error(self, exc: OSError) -> StorageError:
        return StorageError(f"Cannot write {self.path}: {exc.strerror or exc}. Free some space (or fix the "
                            "permissions) and run the same command again: the address index is committed "
                            "and this look-up filter is rebuilt from it.")
