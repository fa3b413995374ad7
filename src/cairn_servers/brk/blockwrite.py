"""Primitives for writing test chains (``brk sample``, sparse and dense): double SHA-256, CompactSize,
merkle roots and mining a regtest header."""

from __future__ import annotations

import hashlib
import struct

_sha = hashlib.sha256
_pack_nonce = struct.Struct("<I").pack


def sha256d(data: bytes | memoryview) -> bytes:
    return _sha(_sha(data).digest()).digest()


def varint(n: int) -> bytes:
    """CompactSize encoding."""
    if n < 0xFD:
        return bytes((n,))
    if n <= 0xFFFF:
        return b"\xfd" + struct.pack("<H", n)
    if n <= 0xFFFFFFFF:
        return b"\xfe" + struct.pack("<I", n)
    return b"\xff" + struct.pack("<Q", n)


def merkle_root(hashes: list[bytes]) -> bytes:
    """The merkle root of ``hashes`` (internal byte order); the list given is not changed."""
    level = hashes
    while len(level) > 1:
        if len(level) & 1:
            level = level + [level[-1]]
        level = [sha256d(level[i] + level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def mine_header(prev: bytes, merkle: bytes, time: int, bits: int, target: int) -> tuple[bytes, bytes]:
    """A version-0x20000000 header whose hash meets ``target`` (regtest: a few tries): (header, hash)."""
    prefix = struct.pack("<i32s32sII", 0x20000000, prev, merkle, time, bits)
    nonce = 0
    while True:
        header = prefix + _pack_nonce(nonce)
        block_hash = sha256d(header)
        if int.from_bytes(block_hash, "little") <= target:
            return header, block_hash
        nonce += 1
