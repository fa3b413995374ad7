"""Bitcoin block and transaction parser: bytes in, flat columns out (BIP141 segwit aware).

Speed matters more than elegance here (the target is >= 40 MB/s of block data in pure Python), so
the hot loop avoids objects per input/output: it walks one ``bytes`` buffer with ``unpack_from`` and
inlined varint reads and appends straight into per-block column lists that the indexer extends in
bulk. Script types are classified by length and a few byte checks, never by decoding opcodes
(except the rare bare multisig candidates).
"""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass, field
from struct import Struct
from struct import error as StructError

from cairn_servers.core.errors import InvalidInput

# Output types, stored as one byte per output. The order is part of the on-disk format (vec version).
OUTPUT_TYPES: tuple[str, ...] = (
    "p2pk65", "p2pk33", "p2pkh", "p2ms", "p2sh", "op_return",
    "p2wpkh", "p2wsh", "p2tr", "p2a", "empty", "unknown",
)
P2PK65, P2PK33, P2PKH, P2MS, P2SH, OP_RETURN, P2WPKH, P2WSH, P2TR, P2A, EMPTY, UNKNOWN = range(12)

COINBASE_VOUT = 0xFFFFFFFF
NULL_HASH = bytes(32)

_U32 = Struct("<I")
_I32 = Struct("<i")
_U64 = Struct("<Q")
_U16 = Struct("<H")
_HEADER = Struct("<i32s32sIII")
_sha256 = hashlib.sha256


class MalformedBlock(InvalidInput):
    """A block's bytes do not parse or do not match their header (merkle root)."""

    code = "malformed_block"


def sha256d(data: bytes | memoryview) -> bytes:
    """Bitcoin's double SHA-256, in internal byte order."""
    return _sha256(_sha256(data).digest()).digest()


def hash_hex(h: bytes) -> str:
    """A hash in the usual display order (reversed bytes, hex)."""
    return h[::-1].hex()


@dataclass(slots=True)
class Header:
    """The 80-byte block header and its hash (internal byte order)."""

    hash: bytes
    version: int
    prev: bytes
    merkle_root: bytes
    time: int
    bits: int
    nonce: int


def parse_header(data: bytes, off: int = 0) -> Header:
    """Parse the 80-byte header starting at ``off``."""
    if len(data) - off < 80:
        raise MalformedBlock(f"a block header needs 80 bytes; only {len(data) - off} are present")
    version, prev, merkle, time, bits, nonce = _HEADER.unpack_from(data, off)
    return Header(sha256d(data[off:off + 80]), version, prev, merkle, time, bits, nonce)


def bits_to_target(bits: int) -> int:
    """The compact ``nBits`` field as a 256-bit target (negative or overflowing encodings give 0)."""
    exponent = bits >> 24
    mantissa = bits & 0x007FFFFF
    if bits & 0x00800000:  # sign bit: a negative target is invalid
        return 0
    if exponent <= 3:
        target = mantissa >> (8 * (3 - exponent))
    else:
        target = mantissa << (8 * (exponent - 3))
    return target if target < (1 << 256) else 0


def block_work(bits: int) -> int:
    """Expected number of hashes to find a block at this target: 2**256 // (target + 1)."""
    target = bits_to_target(bits)
    return (1 << 256) // (target + 1) if target else 0


def difficulty(bits: int) -> float:
    """Difficulty relative to the difficulty-1 target 0x1d00ffff (as reported by bitcoind)."""
    target = bits_to_target(bits)
    return (0xFFFF << 208) / target if target else 0.0


@dataclass(slots=True)
class Block:
    """One parsed block as flat columns; index ``i`` of every tx list describes transaction ``i``."""

    header: Header
    size: int
    weight: int
    txids: list[bytes] = field(default_factory=list)
    tx_version: list[int] = field(default_factory=list)
    tx_locktime: list[int] = field(default_factory=list)
    tx_size: list[int] = field(default_factory=list)  # total size, witness included
    tx_weight: list[int] = field(default_factory=list)  # 3 * base size + total size
    tx_inputs: list[int] = field(default_factory=list)
    tx_outputs: list[int] = field(default_factory=list)
    tx_span: list[int] = field(default_factory=list)  # start, end offset pairs in the block buffer
    tx_segwit: list[bool] = field(default_factory=list)
    in_prev_txid: list[bytes] = field(default_factory=list)
    in_prev_vout: list[int] = field(default_factory=list)
    out_value: list[int] = field(default_factory=list)
    out_type: list[int] = field(default_factory=list)
    coinbase_script: bytes = b""
    raw: bytes = b""

    @property
    def hash(self) -> bytes:
        return self.header.hash

    @property
    def bip34_height(self) -> int | None:
        """The height pushed at the start of the coinbase script (BIP34), when it looks like one."""
        return bip34_height(self.coinbase_script)

    def wtxid(self, i: int) -> bytes:
        """The witness txid of transaction ``i`` (equal to the txid when it has no witness)."""
        if not self.tx_segwit[i]:
            return self.txids[i]
        return sha256d(memoryview(self.raw)[self.tx_span[2 * i]:self.tx_span[2 * i + 1]])

    def output_script(self, txi: int, vout: int) -> bytes:
        """Re-walk transaction ``txi`` to return the script of output ``vout`` (not on the hot path)."""
        return _tx_output_scripts(self.raw, self.tx_span[2 * txi])[vout]


@dataclass(slots=True)
class Packed:
    """A parsed block's columns as the indexer consumes them: typed arrays (their type codes are the indexer's
    batch columns', so appending one is a copy of its buffer) and the txids and prevout txids as one bytes string
    each (32 bytes a row)."""

    header: Header
    size: int
    weight: int
    txids: bytes
    tx_version: array[int]
    tx_locktime: array[int]
    tx_size: array[int]
    tx_weight: array[int]
    tx_inputs: array[int]
    tx_outputs: array[int]
    in_prev_txid: bytes
    in_prev_vout: array[int]
    out_value: array[int]
    out_type: array[int]

    @property
    def hash(self) -> bytes:
        return self.header.hash

    @property
    def n_tx(self) -> int:
        return len(self.tx_inputs)

    def unpack(self) -> Block:
        """The block as :func:`parse_block` gives it (lists), less its bytes and transaction spans."""
        t, p = self.txids, self.in_prev_txid
        return Block(self.header, self.size, self.weight, [t[i:i + 32] for i in range(0, len(t), 32)],
                     self.tx_version.tolist(), self.tx_locktime.tolist(), self.tx_size.tolist(),
                     self.tx_weight.tolist(), self.tx_inputs.tolist(), self.tx_outputs.tolist(), [], [],
                     [p[i:i + 32] for i in range(0, len(p), 32)], self.in_prev_vout.tolist(),
                     self.out_value.tolist(), self.out_type.tolist())


def pack(block: Block) -> Packed:
    """``block``'s columns, packed (see :class:`Packed`)."""
    return Packed(block.header, block.size, block.weight, b"".join(block.txids), array("i", block.tx_version),
                  array("I", block.tx_locktime), array("I", block.tx_size), array("I", block.tx_weight),
                  array("I", block.tx_inputs), array("I", block.tx_outputs), b"".join(block.in_prev_txid),
                  array("I", block.in_prev_vout), array("Q", block.out_value), array("B", block.out_type))


def bip34_height(script: bytes) -> int | None:
    """Decode the BIP34 height push (OP_1..OP_16 or a 1..8 byte little-endian number) if present."""
    if not script:
        return None
    op = script[0]
    if 0x51 <= op <= 0x60:
        return op - 0x50
    if 1 <= op <= 8 and len(script) > op:
        return int.from_bytes(script[1:1 + op], "little")
    return None


def classify(script: bytes) -> int:
    """The output type code of a locking script (see ``OUTPUT_TYPES``)."""
    return _classify(script, 0, len(script))


def _classify(d: bytes, p: int, n: int) -> int:
    # Ordered by frequency on mainnet; every test is a length check plus fixed bytes.
    if n == 25:
        if d[p] == 0x76 and d[p + 1] == 0xA9 and d[p + 2] == 0x14 and d[p + 23] == 0x88 and d[p + 24] == 0xAC:
            return P2PKH
    elif n == 22:
        if d[p] == 0 and d[p + 1] == 0x14:
            return P2WPKH
    elif n == 23:
        if d[p] == 0xA9 and d[p + 1] == 0x14 and d[p + 22] == 0x87:
            return P2SH
    elif n == 34:
        if d[p + 1] == 0x20:
            if d[p] == 0:
                return P2WSH
            if d[p] == 0x51:
                return P2TR
    elif n == 67:
        if d[p] == 0x41 and d[p + 66] == 0xAC:
            return P2PK65
    elif n == 35:
        if d[p] == 0x21 and d[p + 34] == 0xAC:
            return P2PK33
    elif n == 0:
        return EMPTY
    elif n == 4:
        if d[p] == 0x51 and d[p + 1] == 0x02 and d[p + 2] == 0x4E and d[p + 3] == 0x73:
            return P2A
    if d[p] == 0x6A:
        return OP_RETURN
    if d[p + n - 1] == 0xAE and n >= 37:
        return _classify_multisig(d, p, n)
    return UNKNOWN


def _classify_multisig(d: bytes, p: int, n: int) -> int:
    """Bare multisig: OP_m <33|65-byte key>... OP_n OP_CHECKMULTISIG with 1 <= m <= n <= 16."""
    m = d[p] - 0x50
    end = p + n - 2
    q = p + 1
    keys = 0
    while q < end:
        klen = d[q]
        if klen not in (33, 65):
            return UNKNOWN
        q += 1 + klen
        keys += 1
    if q != end:
        return UNKNOWN
    total = d[end] - 0x50
    if 1 <= m <= total <= 16 and total == keys:
        return P2MS
    return UNKNOWN


def _tx_output_scripts(d: bytes, p: int) -> list[bytes]:
    p += 4
    segwit = d[p] == 0 and d[p + 1] == 1
    if segwit:
        p += 2
    n_in, p = read_varint(d, p)
    for _ in range(n_in):
        p += 36
        slen, p = read_varint(d, p)
        p += slen + 4
    n_out, p = read_varint(d, p)
    scripts = []
    for _ in range(n_out):
        p += 8
        slen, p = read_varint(d, p)
        scripts.append(d[p:p + slen])
        p += slen
    return scripts


def read_varint(d: bytes, p: int) -> tuple[int, int]:
    """Read a CompactSize at ``p``; return (value, next offset)."""
    n = d[p]
    if n < 0xFD:
        return n, p + 1
    if n == 0xFD:
        return _U16.unpack_from(d, p + 1)[0], p + 3
    if n == 0xFE:
        return _U32.unpack_from(d, p + 1)[0], p + 5
    return _U64.unpack_from(d, p + 1)[0], p + 9


def merkle_root(hashes: list[bytes]) -> bytes:
    """The merkle root of txids (internal order), duplicating the last hash on odd levels."""
    if not hashes:
        return NULL_HASH
    level = hashes
    while len(level) > 1:
        if len(level) & 1:
            level = level + [level[-1]]
        level = [_sha256(_sha256(level[i] + level[i + 1]).digest()).digest() for i in range(0, len(level), 2)]
    return level[0]


def parse_block(data: bytes, *, check_merkle: bool = True) -> Block:
    """Parse one serialized block (header, tx count, transactions) into columns.

    Raises ``MalformedBlock`` when the bytes are truncated, have trailing garbage, or the merkle root
    of the txids differs from the header's.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    try:
        block = _parse(data)
    except (IndexError, ValueError, OverflowError, StructError) as exc:
        raise MalformedBlock(f"block bytes are truncated or corrupt ({exc})") from exc
    if check_merkle and merkle_root(block.txids) != block.header.merkle_root:
        raise MalformedBlock(
            f"merkle root mismatch in block {hash_hex(block.header.hash)}: the transactions do not match the header"
        )
    return block


def _parse(d: bytes) -> Block:  # noqa: C901 - one tight loop on purpose
    end = len(d)
    header = parse_header(d, 0)
    block = Block(header, end, 0, raw=d)
    txids = block.txids
    tx_version = block.tx_version
    tx_locktime = block.tx_locktime
    tx_size = block.tx_size
    tx_weight = block.tx_weight
    tx_inputs = block.tx_inputs
    tx_outputs = block.tx_outputs
    tx_span = block.tx_span
    tx_segwit = block.tx_segwit
    prev_txid = block.in_prev_txid
    prev_vout = block.in_prev_vout
    out_value = block.out_value
    out_type = block.out_type
    u32 = _U32.unpack_from
    u64 = _U64.unpack_from
    i32 = _I32.unpack_from
    sha = _sha256
    mv = memoryview(d)
    classify_at = _classify

    p = 80
    n_tx = d[p]
    p += 1
    if n_tx >= 0xFD:
        n_tx, p = read_varint(d, p - 1)
    if n_tx == 0:
        raise MalformedBlock("a block must contain at least one transaction (the coinbase)")
    if n_tx > end // 60:
        raise MalformedBlock(f"transaction count {n_tx} cannot fit in {end} bytes")
    weight = 4 * p  # header and tx count are base bytes
    for t in range(n_tx):
        start = p
        version = i32(d, p)[0]
        p += 4
        segwit = d[p] == 0 and d[p + 1] == 1
        body = p + 2 if segwit else p
        p = body
        # inputs
        n_in = d[p]
        p += 1
        if n_in >= 0xFD:
            n_in, p = read_varint(d, p - 1)
        if n_in == 0 or n_in > end:
            raise ValueError(f"transaction {t} has an impossible input count {n_in}")
        for _ in range(n_in):
            prev_txid.append(d[p:p + 32])
            prev_vout.append(u32(d, p + 32)[0])
            p += 36
            slen = d[p]
            p += 1
            if slen >= 0xFD:
                slen, p = read_varint(d, p - 1)
            if t == 0:
                block.coinbase_script = d[p:p + slen]
            p += slen + 4
        # outputs
        n_out = d[p]
        p += 1
        if n_out >= 0xFD:
            n_out, p = read_varint(d, p - 1)
        if n_out == 0 or n_out > end:
            raise ValueError(f"transaction {t} has an impossible output count {n_out}")
        for _ in range(n_out):
            out_value.append(u64(d, p)[0])
            p += 8
            slen = d[p]
            p += 1
            if slen >= 0xFD:
                slen, p = read_varint(d, p - 1)
            if p + slen > end:
                raise ValueError("output script runs past the end of the block")
            out_type.append(classify_at(d, p, slen))
            p += slen
        body_end = p
        if segwit:
            for _ in range(n_in):
                items = d[p]
                p += 1
                if items >= 0xFD:
                    items, p = read_varint(d, p - 1)
                for _ in range(items):
                    ilen = d[p]
                    p += 1
                    if ilen >= 0xFD:
                        ilen, p = read_varint(d, p - 1)
                    p += ilen
            if p + 4 > end:
                raise ValueError("witness runs past the end of the block")
            h = sha(mv[start:start + 4])
            h.update(mv[body:body_end])
            h.update(mv[p:p + 4])
            txid = sha(h.digest()).digest()
        else:
            if p + 4 > end:
                raise ValueError("transaction runs past the end of the block")
            txid = sha(sha(mv[start:p + 4]).digest()).digest()
        tx_locktime.append(u32(d, p)[0])
        p += 4
        size = p - start
        base = body_end - body + 8 if segwit else size
        txids.append(txid)
        tx_version.append(version)
        tx_size.append(size)
        tx_weight.append(3 * base + size)
        tx_inputs.append(n_in)
        tx_outputs.append(n_out)
        tx_span.append(start)
        tx_span.append(p)
        tx_segwit.append(segwit)
        weight += 3 * base + size
    if p != end:
        raise MalformedBlock(f"{end - p} unexpected bytes after the last transaction")
    block.weight = weight
    return block
