"""Bitcoin Core ``blocks/`` directories: blk*.dat framing, XOR obfuscation, network magics, discovery.

A blk file is a sequence of ``[4-byte magic][4-byte LE length][block]`` records. Bitcoin Core
preallocates files with zeros and may be writing the last record while we read, so a scan stops at
the first incomplete record and remembers where: the next scan resumes there. Bytes that are not a
magic (junk, zero padding) are skipped by searching for the next magic.

Everything here reads a node's directory in place and never writes to it, and every read is bounded:
``xor.dat`` must be a regular file of exactly 8 bytes; only regular files are opened (a symlink to
``/dev/zero`` or a FIFO is refused before any read); a scan hops from frame to frame reading 88 bytes
each (magic, length, header), searches junk in 8 MiB chunks, jumps over sparse holes
(``SEEK_DATA``) and all-zero chunks, and refuses frames longer than a block can be. Records are
handed over as they are found (:class:`Scan`), and bad frames are counted, with a few examples shown.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cairn_servers.brk.blocks.parser import MalformedBlock, parse_block
from cairn_servers.core.errors import InvalidInput, NotFound, StorageError

MAGICS: dict[str, bytes] = {
    "mainnet": bytes.fromhex("f9beb4d9"),
    "testnet": bytes.fromhex("0b110907"),
    "testnet4": bytes.fromhex("1c163f28"),
    "signet": bytes.fromhex("0a03cf40"),
    "regtest": bytes.fromhex("fabfb5da"),
}
MAX_BLOCK_BYTES = 4_000_000 + 1000  # a serialized block is at most 4 MB (weight limit) plus slack
_BLK_NAME = re.compile(r"^blk(\d{5,})\.dat$")
CHUNK = 8 << 20  # bytes read at a time when searching for a magic
_ZEROS = bytes(CHUNK)
_FRAME = 88  # magic, length and the 80-byte header
# Where Bitcoin Core keeps each network's blocks under its data directory.
NETWORK_DIRS: dict[str, str] = {"mainnet": "", "testnet": "testnet3", "testnet4": "testnet4", "signet": "signet",
                                "regtest": "regtest"}
NETWORK_ALIASES = {"main": "mainnet", "bitcoin": "mainnet", "testnet3": "testnet", "test": "testnet"}
_warned: set[str] = set()


def _note(msg: str) -> None:
    print(f"brk: {msg}", file=sys.stderr)


@dataclass(frozen=True, slots=True)
class Record:
    """Where one framed block lives: file number, offset of the block's first byte, and its length."""

    file_no: int
    offset: int
    length: int
    header: bytes = b""  # the block's first 80 bytes, when the scan read them


def open_regular(path: Path) -> int | None:
    """A read-only descriptor of ``path`` if it is a regular file (symlinks followed), else None.

    Opened non-blocking and checked with ``fstat`` on the descriptor itself, so a FIFO, a device such
    as ``/dev/zero`` or a directory never gets read, even if it replaced the file after a listing.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        return None
    except OSError as exc:
        raise StorageError(f"Cannot read {path}: {exc.strerror}.") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def blk_files(blocks_dir: Path) -> list[tuple[int, Path]]:
    """The ``blkNNNNN.dat`` regular files of a blocks directory, by number (others are skipped with a note)."""
    if not blocks_dir.is_dir():
        raise NotFound(f"Blocks directory {blocks_dir} does not exist. Point --blocks-dir at a node's blocks/ folder.")
    found = []
    for entry in os.scandir(blocks_dir):
        m = _BLK_NAME.match(entry.name)
        if not m:
            continue
        try:
            regular = stat.S_ISREG(os.stat(entry.path).st_mode)
        except OSError:
            regular = False  # a dangling symlink
        if not regular:
            if entry.path not in _warned:
                _warned.add(entry.path)
                _note(f"ignoring {entry.name} in {blocks_dir}: not a regular file")
            continue
        found.append((int(m.group(1)), Path(entry.path)))
    return sorted(found)


def read_xor_key(blocks_dir: Path) -> bytes:
    """The 8-byte obfuscation key from ``xor.dat`` (all zeros, i.e. none, when the file is absent)."""
    path = blocks_dir / "xor.dat"
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return bytes(8)
    if fd is None:
        raise InvalidInput(f"{path} is not a regular file; Bitcoin Core writes an 8-byte key there.")
    try:
        size = os.fstat(fd).st_size
        if size != 8:  # checked before reading: /proc/self/mem is "regular", of size 0, and fails reads
            raise InvalidInput(f"{path} holds {size} bytes; Bitcoin Core writes an 8-byte key there.")
        try:
            key = os.read(fd, 9)  # never more: the key is 8 bytes
        except OSError as exc:
            raise InvalidInput(f"Cannot read {path}: {exc.strerror or exc}. Bitcoin Core writes an 8-byte key "
                               "there.") from None
    finally:
        os.close(fd)
    if len(key) != 8:
        raise InvalidInput(f"{path} holds {len(key)} bytes; Bitcoin Core writes an 8-byte key there.")
    return key


def unxor(data: bytes, key: bytes, offset: int) -> bytes:
    """Undo Bitcoin Core's XOR obfuscation of ``data`` read at file position ``offset``."""
    if not any(key):
        return data
    phase = offset % len(key)
    rolled = key[phase:] + key[:phase]
    if len(data) <= 128:  # frames and headers: cheaper without numpy
        return bytes(b ^ rolled[i & 7] for i, b in enumerate(data))
    import numpy as np

    arr = np.frombuffer(data, dtype=np.uint8)
    pad = np.resize(np.frombuffer(rolled, dtype=np.uint8), arr.shape[0])
    return (arr ^ pad).tobytes()


def _next_data(fd: int, pos: int, size: int) -> int:
    """The first offset at or after ``pos`` that is not in a sparse hole (``size`` when none)."""
    import errno

    seek_data = getattr(os, "SEEK_DATA", None)
    if seek_data is None:
        return pos
    try:
        return min(os.lseek(fd, pos, seek_data), size)
    except OSError as exc:  # ENXIO: only a hole is left; anything else: not supported here
        return size if exc.errno == errno.ENXIO else pos


def _find_magic(fd: int, key: bytes, magic: bytes, pos: int, size: int) -> tuple[int | None, int]:
    """(offset of the next ``magic`` at or after ``pos`` or None, non-zero junk bytes passed over).

    Reads at most ``CHUNK`` bytes at a time; sparse holes and all-zero chunks (preallocated space:
    zero bytes are never a magic) are skipped without a search.
    """
    junk = 0
    while pos < size:
        pos = _next_data(fd, pos, size)
        if pos >= size:
            break
        raw = os.pread(fd, min(CHUNK, size - pos), pos)
        if not raw:
            break
        if raw == _ZEROS or (len(raw) < CHUNK and raw.count(0) == len(raw)):
            pos += len(raw)
            continue
        data = unxor(raw, key, pos)
        i = data.find(magic)
        if i >= 0:
            return pos + i, junk + i - raw.count(0, 0, i)
        step = len(raw) - 3 if pos + len(raw) < size else len(raw)  # a magic may straddle chunks
        junk += step - raw.count(0, 0, step)
        pos += max(1, step)
    return None, junk


def detect_network(blocks_dir: Path) -> str:
    """The network whose magic appears first in the lowest-numbered blk file that holds any."""
    key = read_xor_key(blocks_dir)
    for _, path in blk_files(blocks_dir):
        fd = open_regular(path)
        if fd is None:
            continue
        try:
            size = os.fstat(fd).st_size
            start = _next_data(fd, 0, size)
            head = unxor(os.pread(fd, min(1 << 20, max(0, size - start)), start), key, start)
        finally:
            os.close(fd)
        best: tuple[int, str] | None = None
        for name, magic in MAGICS.items():
            pos = head.find(magic)
            if pos >= 0 and (best is None or pos < best[0]):
                best = (pos, name)
        if best is not None:
            return best[1]
    raise NotFound(f"No block records found in {blocks_dir}: no blk*.dat file starts with a known network magic.")


class BlockFile:
    """One blk file opened for reading (``pread`` per block, de-obfuscated on access)."""

    def __init__(self, path: Path, key: bytes) -> None:
        self.path = path
        self.key = key
        fd = open_regular(path)
        if fd is None:
            raise InvalidInput(f"{path} is not a regular file.")
        self._fd = fd
        self.size = os.fstat(fd).st_size

    def read(self, offset: int, length: int) -> bytes:
        if length > MAX_BLOCK_BYTES:
            raise InvalidInput(f"{self.path}: record at offset {offset} claims {length} bytes, more than a block "
                               f"can hold ({MAX_BLOCK_BYTES})")
        data = os.pread(self._fd, length, offset) if length > 0 else b""
        if len(data) != length:
            raise InvalidInput(f"{self.path}: record at offset {offset} (+{length} bytes) runs past the end of the file")
        return unxor(data, self.key, offset)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


MAX_NOTES = 3  # messages of one kind shown per file and scan; the rest are counted in one summary


class Scan:
    """The complete block records of ``path`` from byte ``start``, found as they are iterated.

    Iterating yields each :class:`Record`; afterwards :attr:`resume` is the offset to resume from next
    time: the end of the last complete record, or the start of an incomplete one (the node may still be
    writing it). Memory is bounded whatever the file, and however many records it holds: frames are
    read 88 bytes at a time, junk is searched in chunks, records are handed over one at a time (one
    is held back: the last of a file is checked before it is given out), and a file of a million
    bad frames gives a few messages and a count, not a line each.
    """

    def __init__(self, path: Path, key: bytes, magic: bytes, start: int = 0, *,
                 log: Callable[[str], None] | None = None) -> None:
        self.path = path
        self.key = key
        self.magic = magic
        self.start = start
        self.resume = start
        self.say = log or _note
        self.oversized = 0  # frames claiming more than a block can hold

    def __iter__(self) -> Iterator[Record]:
        path, key, magic, start = self.path, self.key, self.magic, self.start
        m = _BLK_NAME.match(path.name)
        file_no = int(m.group(1)) if m else 0
        fd = open_regular(path)
        if fd is None:
            return
        held: Record | None = None  # the last record found, given out once another follows it
        junk = 0
        try:
            size = os.fstat(fd).st_size  # bytes appended after this are left for the next scan
            pos = start
            while pos < size:
                raw = os.pread(fd, _FRAME, pos)
                head = unxor(raw, key, pos)
                search_from = pos
                if head[:4] == magic and len(head) >= 8:
                    if raw[4:8] == bytes(4):  # zero on disk: the length is not written yet, or this is junk
                        found, skipped = _find_magic(fd, key, magic, pos + 1, size)
                        if found is None:
                            self.resume = pos  # nothing after it: the node is writing this frame
                            break
                        junk += skipped
                        pos = found
                        continue
                    length = int.from_bytes(head[4:8], "little")
                    if 81 <= length <= MAX_BLOCK_BYTES:
                        if pos + 8 + length > size:
                            self.resume = pos  # incomplete: the node is still writing it
                            break
                        if held is not None:
                            yield held
                        held = Record(file_no, pos + 8, length, head[8:_FRAME])
                        pos += 8 + length
                        self.resume = pos
                        continue
                    if length > MAX_BLOCK_BYTES:
                        self.oversized += 1
                        if self.oversized <= MAX_NOTES:
                            self.say(f"skipped a record in {path.name} at offset {pos} that claims {length} bytes, "
                                     f"more than a block can hold ({MAX_BLOCK_BYTES})")
                    search_from = pos + 1
                elif len(head) < 8 and (magic.startswith(head) or head[:4] == magic):
                    self.resume = pos  # a frame cut short at the end of the file
                    break
                found, skipped = _find_magic(fd, key, magic, search_from, size)
                junk += skipped
                if found is None:
                    break
                pos = found
            # The last record may be one the node is still writing into zero-preallocated space: its
            # frame looks complete but the block is not. Accept it only if it parses; otherwise retry
            # it next scan (once a later record follows it, it is accepted and a real corruption is
            # reported then).
            if held is not None:
                try:
                    parse_block(unxor(os.pread(fd, held.length, held.offset), key, held.offset))
                except MalformedBlock:
                    self.resume = held.offset - 8
                else:
                    yield held
        finally:
            os.close(fd)
        if self.oversized > MAX_NOTES:
            self.say(f"skipped {self.oversized} records in {path.name} after offset {start} that claim more "
                     f"than a block can hold (the first {MAX_NOTES} shown above)")
        if junk:
            self.say(f"skipped {junk} junk bytes in {path.name} after offset {start}")


def scan(path: Path, key: bytes, magic: bytes, start: int = 0, *,
         log: Callable[[str], None] | None = None) -> tuple[list[Record], int]:
    """Every record :class:`Scan` finds in ``path`` from ``start``, as a list, and the offset to
    resume from (for small files and tests: the indexer iterates a :class:`Scan` instead)."""
    scanner = Scan(path, key, magic, start, log=log)
    records = list(scanner)
    return records, scanner.resume


def iter_blocks(blocks_dir: Path) -> Iterator[tuple[Record, bytes]]:
    """Every complete framed block in the directory, in file order (raw bytes, de-obfuscated)."""
    key = read_xor_key(blocks_dir)
    magic = MAGICS[detect_network(blocks_dir)]
    for _, path in blk_files(blocks_dir):
        bf = BlockFile(path, key)
        try:
            for rec in Scan(path, key, magic):
                yield rec, bf.read(rec.offset, rec.length)
        finally:
            bf.close()


def normalize_network(name: str) -> str:
    """A network name as ``MAGICS`` spells it (``main`` and ``testnet3`` are accepted too)."""
    net = NETWORK_ALIASES.get(name.lower(), name.lower())
    if net not in MAGICS:
        raise InvalidInput(f"Unknown network {name!r}. Use one of: {', '.join(MAGICS)}.")
    return net


def data_dirs(env: dict[str, str] | None = None) -> list[Path]:
    """Bitcoin Core's default data directories: Linux, macOS, then Windows (new and old location)."""
    env = dict(os.environ) if env is None else env
    home = Path(env.get("HOME") or Path.home())
    dirs = [home / ".bitcoin", home / "Library" / "Application Support" / "Bitcoin"]
    for var in ("LOCALAPPDATA", "APPDATA"):  # Bitcoin Core 28+ uses %LOCALAPPDATA%, older ones %APPDATA%
        if env.get(var):
            dirs.append(Path(env[var]) / "Bitcoin")
    return dirs


def find_blocks_dir(network: str | None = None, env: dict[str, str] | None = None) -> tuple[Path, str]:
    """The node's blocks directory and its network, found where Bitcoin Core keeps it by default.

    Looks in every default data directory for ``blocks/`` (mainnet) and the ``testnet3``,
    ``testnet4``, ``signet`` and ``regtest`` sub-directories (only ``network``'s, when given). Without
    a network, mainnet wins, else the only one found; several others are an error naming them.
    """
    nets = [normalize_network(network)] if network else list(NETWORK_DIRS)
    looked: list[Path] = []
    found: dict[str, Path] = {}
    for base in data_dirs(env):
        for net in nets:
            path = base / NETWORK_DIRS[net] / "blocks" if NETWORK_DIRS[net] else base / "blocks"
            looked.append(path)
            if net not in found and path.is_dir():
                found[net] = path
    if not found:
        where = ", ".join(str(p) for p in looked)
        raise NotFound(f"No Bitcoin Core blocks directory found. Looked in: {where}. "
                       f"Pass --blocks-dir DIR (or set BRK_BLOCKS_DIR).")
    if "mainnet" in found:
        return found["mainnet"], "mainnet"
    if len(found) > 1:
        which = ", ".join(f"{net} ({path})" for net, path in found.items())
        raise InvalidInput(f"Found blocks of several networks: {which}. Choose one with --network.")
    net, path = next(iter(found.items()))
    return path, net


def resolve_blocks_dir(flag: str | None, network: str | None = None, env: dict[str, str] | None = None) -> Path:
    """``--blocks-dir`` if given, else ``$BRK_BLOCKS_DIR``, else the default location of ``network``.

    When both a directory and a network are named, the directory's blocks must be of that network.
    """
    env = dict(os.environ) if env is None else env
    given = flag or env.get("BRK_BLOCKS_DIR")
    if not given:
        from cairn_servers.core.sanitize import scrub

        path, net = find_blocks_dir(network, env)
        _note(scrub(f"reading {net} blocks from {path}"))
        return path
    path = Path(given).expanduser()
    if network:
        want = normalize_network(network)
        have = detect_network(path)
        if have != want:
            raise InvalidInput(f"{path} holds {have} blocks, not {want}. Drop --network or point --blocks-dir "
                               f"at the {want} blocks.")
    return path
