"""Bitcoin Core ``blocks/`` directories: blk*.dat framing, XOR obfuscation, network magics.

A blk file is a sequence of ``[4-byte magic][4-byte LE length][block]`` records. Bitcoin Core
preallocates files with zeros and may be writing the last record while we read, so a scan stops at
the first incomplete record and remembers where: the next scan resumes there. Bytes that are not a
magic (junk, zero padding) are skipped by searching for the next magic.
"""

from __future__ import annotations

import mmap
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cairn.brk.blocks.parser import MalformedBlock, parse_block
from cairn.core.errors import InvalidInput, NotFound

MAGICS: dict[str, bytes] = {
    "mainnet": bytes.fromhex("f9beb4d9"),
    "testnet": bytes.fromhex("0b110907"),
    "testnet4": bytes.fromhex("1c163f28"),
    "signet": bytes.fromhex("0a03cf40"),
    "regtest": bytes.fromhex("fabfb5da"),
}
MAX_BLOCK_BYTES = 4_000_000 + 1000  # a serialized block is at most 4 MB (weight limit) plus slack
_BLK_NAME = re.compile(r"^blk(\d{5,})\.dat$")


@dataclass(frozen=True, slots=True)
class Record:
    """Where one framed block lives: file number, offset of the block's first byte, and its length."""

    file_no: int
    offset: int
    length: int
    header: bytes = b""  # the block's first 80 bytes, when the scan read them


def blk_files(blocks_dir: Path) -> list[tuple[int, Path]]:
    """The ``blkNNNNN.dat`` files of a blocks directory, by number."""
    if not blocks_dir.is_dir():
        raise NotFound(f"Blocks directory {blocks_dir} does not exist. Point --blocks-dir at a node's blocks/ folder.")
    found = []
    for entry in os.scandir(blocks_dir):
        m = _BLK_NAME.match(entry.name)
        if m:
            found.append((int(m.group(1)), Path(entry.path)))
    return sorted(found)


def read_xor_key(blocks_dir: Path) -> bytes:
    """The 8-byte obfuscation key from ``xor.dat`` (all zeros, i.e. none, when the file is absent)."""
    path = blocks_dir / "xor.dat"
    if not path.exists():
        return bytes(8)
    key = path.read_bytes()
    if len(key) != 8:
        raise InvalidInput(f"{path} holds {len(key)} bytes; Bitcoin Core writes an 8-byte key there.")
    return key


def unxor(data: bytes, key: bytes, offset: int) -> bytes:
    """Undo Bitcoin Core's XOR obfuscation of ``data`` read at file position ``offset``."""
    if not any(key):
        return data
    import numpy as np

    phase = offset % len(key)
    rolled = key[phase:] + key[:phase]
    arr = np.frombuffer(data, dtype=np.uint8)
    pad = np.resize(np.frombuffer(rolled, dtype=np.uint8), arr.shape[0])
    return (arr ^ pad).tobytes()


def detect_network(blocks_dir: Path) -> str:
    """The network whose magic appears first in the lowest-numbered blk file."""
    key = read_xor_key(blocks_dir)
    for _, path in blk_files(blocks_dir):
        with open(path, "rb") as fh:
            head = unxor(fh.read(1 << 20), key, 0)
        best: tuple[int, str] | None = None
        for name, magic in MAGICS.items():
            pos = head.find(magic)
            if pos >= 0 and (best is None or pos < best[0]):
                best = (pos, name)
        if best is not None:
            return best[1]
    raise NotFound(f"No block records found in {blocks_dir}: no blk*.dat file starts with a known network magic.")


class BlockFile:
    """One blk file opened for reading (memory-mapped, de-obfuscated on access)."""

    def __init__(self, path: Path, key: bytes) -> None:
        self.path = path
        self.key = key
        self._fh = open(path, "rb")
        size = os.fstat(self._fh.fileno()).st_size
        self._map: mmap.mmap | None = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        self.size = size

    def read(self, offset: int, length: int) -> bytes:
        if self._map is None or offset + length > self.size:
            raise InvalidInput(f"{self.path}: record at offset {offset} (+{length} bytes) runs past the end of the file")
        return unxor(self._map[offset:offset + length], self.key, offset)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
        self._fh.close()


def scan(path: Path, key: bytes, magic: bytes, start: int = 0) -> tuple[list[Record], int]:
    """Find the complete block records in ``path`` from byte ``start``.

    Returns the records and the offset to resume from next time: the end of the last complete
    record, or the start of an incomplete one (the node may still be writing it).
    """
    file_no = int(_BLK_NAME.match(path.name).group(1)) if _BLK_NAME.match(path.name) else 0  # type: ignore[union-attr]
    with open(path, "rb") as fh:
        fh.seek(start)
        data = unxor(fh.read(), key, start)
    records: list[Record] = []
    pos = 0
    resume = 0
    n = len(data)
    while True:
        found = data.find(magic, pos)
        if found < 0 or found + 8 > n:
            break
        if found > resume:
            junk = data[resume:found]
            if any(junk):  # zero padding between records is normal; anything else is worth a note
                print(f"brk: skipped {len(junk)} junk bytes in {path.name} at offset {start + resume}", file=sys.stderr)
        length = int.from_bytes(data[found + 4:found + 8], "little")
        if length < 81 or length > MAX_BLOCK_BYTES:
            # Not a real record header (a magic-looking byte run); keep searching after it.
            pos = found + 1
            continue
        if found + 8 + length > n:
            resume = found  # incomplete: the node is still writing it
            return records, start + resume
        records.append(Record(file_no, start + found + 8, length, data[found + 8:found + 88]))
        pos = found + 8 + length
        resume = pos
    # The last record may be one the node is still writing into zero-preallocated space: its frame
    # looks complete but the block is not. Accept it only if it parses; otherwise retry it next scan
    # (once a later record follows it, it is accepted and a real corruption is reported then).
    if records:
        last = records[-1]
        try:
            parse_block(data[last.offset - start:last.offset - start + last.length])
        except MalformedBlock:
            records.pop()
            resume = last.offset - 8 - start
    return records, start + resume


def iter_blocks(blocks_dir: Path) -> Iterator[tuple[Record, bytes]]:
    """Every complete framed block in the directory, in file order (raw bytes, de-obfuscated)."""
    key = read_xor_key(blocks_dir)
    magic = MAGICS[detect_network(blocks_dir)]
    for _, path in blk_files(blocks_dir):
        records, _ = scan(path, key, magic)
        bf = BlockFile(path, key)
        try:
            for rec in records:
                yield rec, bf.read(rec.offset, rec.length)
        finally:
            bf.close()
