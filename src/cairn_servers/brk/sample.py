"""A deterministic sample chain: a regtest-magic ``blocks/`` directory of N valid-looking blocks.

Every block has real proof of work at regtest difficulty (nBits 0x207fffff), a BIP34 coinbase paying
the regtest subsidy (halving every 150 blocks) plus fees, and transactions that spend earlier
outputs (coinbases only after 100 blocks) with fees, in every output script type, segwit ones with
witnesses and a witness commitment. Timestamps spread over at least six months. Signatures are
random bytes: nothing here validates scripts, and the indexer does not either.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from pathlib import Path

from cairn_servers.brk.blocks.files import MAGICS
from cairn_servers.brk.blockwrite import merkle_root as _merkle
from cairn_servers.brk.blockwrite import mine_header, varint
from cairn_servers.brk.blockwrite import sha256d as _sha256d
from cairn_servers.brk.blocks.parser import bits_to_target
from cairn_servers.brk.dense import DenseChain

REGTEST_BITS = 0x207FFFFF
START_TIME = 1_704_067_200  # 2024-01-01T00:00:00Z
HALVING = 150  # regtest's halving interval
COIN = 100_000_000
SEGWIT_TYPES = {"p2wpkh", "p2wsh", "p2tr", "p2a"}
# Output types to create, with weights roughly like a recent mainnet mix.
_TYPE_WEIGHTS = [
    ("p2wpkh", 30), ("p2tr", 15), ("p2pkh", 15), ("p2sh", 10), ("p2wsh", 6), ("op_return", 5),
    ("p2pk33", 2), ("p2pk65", 2), ("p2ms", 3), ("p2a", 2), ("empty", 1), ("unknown", 1),
]
_TYPES = [t for t, _ in _TYPE_WEIGHTS]
_WEIGHTS = [w for _, w in _TYPE_WEIGHTS]


def script_for(kind: str, rng: random.Random) -> bytes:
    """A locking script of the given type with random key material."""
    rb = rng.randbytes
    if kind == "p2pkh":
        return b"\x76\xa9\x14" + rb(20) + b"\x88\xac"
    if kind == "p2sh":
        return b"\xa9\x14" + rb(20) + b"\x87"
    if kind == "p2wpkh":
        return b"\x00\x14" + rb(20)
    if kind == "p2wsh":
        return b"\x00\x20" + rb(32)
    if kind == "p2tr":
        return b"\x51\x20" + rb(32)
    if kind == "p2a":
        return b"\x51\x02\x4e\x73"
    if kind == "p2pk33":
        return b"\x21\x02" + rb(32) + b"\xac"
    if kind == "p2pk65":
        return b"\x41\x04" + rb(64) + b"\xac"
    if kind == "p2ms":
        n = rng.randint(1, 3)
        m = rng.randint(1, n)
        return bytes([0x50 + m]) + b"".join(b"\x21\x03" + rb(32) for _ in range(n)) + bytes([0x50 + n, 0xAE])
    if kind == "op_return":
        data = rb(rng.choice((20, 32, 40, 80)))
        return b"\x6a" + bytes([len(data)]) + data
    if kind == "empty":
        return b""
    return b"\x52\x93\x54\x87"  # OP_2 OP_ADD OP_4 OP_EQUAL: a puzzle, type "unknown"


@dataclass(slots=True)
class _Coin:
    txid: bytes
    vout: int
    value: int
    kind: str


def _coinbase(height: int, value: int, rng: random.Random, commitment: bytes | None) -> tuple[bytes, bytes, bytes]:
    """(serialized tx, txid, wtxid) of a coinbase paying ``value``."""
    hb = height.to_bytes((height.bit_length() + 8) // 8 or 1, "little")
    script_sig = bytes([len(hb)]) + hb + b"\x08" + rng.randbytes(8) + b"/cairn sample/"
    kind = rng.choice(("p2wpkh", "p2pkh", "p2tr", "p2pk65"))
    outs = [(value, script_for(kind, rng))]
    if commitment is not None:
        outs.append((0, b"\x6a\x24\xaa\x21\xa9\xed" + commitment))
    body = (varint(1) + bytes(32) + b"\xff\xff\xff\xff" + varint(len(script_sig)) + script_sig + b"\xff\xff\xff\xff"
            + varint(len(outs)) + b"".join(struct.pack("<q", v) + varint(len(s)) + s for v, s in outs))
    base = struct.pack("<i", 2) + body + b"\x00\x00\x00\x00"
    txid = _sha256d(base)
    if commitment is None:
        return base, txid, txid
    full = struct.pack("<i", 2) + b"\x00\x01" + body + b"\x01\x20" + bytes(32) + b"\x00\x00\x00\x00"
    return full, txid, bytes(32)  # the coinbase's wtxid counts as zeros in the witness tree


class SampleChain:
    """Builds blocks one at a time; ``next_block()`` returns the serialized block."""

    def __init__(self, n_blocks: int, seed: int = 7, *, fork_at: int | None = None, fork_seed: int = 0,
                 spread_blocks: int | None = None) -> None:
        self.rng = random.Random(seed)
        self.n_blocks = n_blocks
        # From height ``fork_at`` on, a different random stream: a competing chain that shares
        # blocks 0..fork_at-1 with the chain of the same seed (give both the same spread_blocks).
        self.fork_at = fork_at
        self.fork_seed = fork_seed
        self.height = 0
        self.prev = bytes(32)
        self.time = START_TIME
        self.interval = max(600, (183 * 86400) // max(1, spread_blocks or n_blocks))
        self.pool: list[_Coin] = []
        self.maturing: list[tuple[int, _Coin]] = []
        self.target = bits_to_target(REGTEST_BITS)
        self.txs = 0  # transactions written so far, coinbases included

    def _spend(self) -> tuple[bytes, bytes, bytes, int] | None:
        """One transaction spending 1-3 pool coins: (tx, txid, wtxid, fee), or None when the pool is dry."""
        rng = self.rng
        pool = self.pool
        if not pool:
            return None
        coins = []
        for _ in range(min(len(pool), rng.choice((1, 1, 1, 2, 2, 3)))):
            i = rng.randrange(len(pool))
            pool[i], pool[-1] = pool[-1], pool[i]
            coins.append(pool.pop())
        total = sum(c.value for c in coins)
        segwit = any(c.kind in SEGWIT_TYPES for c in coins)
        ins = []
        wits = []
        for c in coins:
            if c.kind in SEGWIT_TYPES:
                script_sig = b""
                if c.kind == "p2tr":
                    wits.append(b"\x01\x40" + rng.randbytes(64))
                elif c.kind == "p2a":
                    wits.append(b"\x00")
                else:
                    wits.append(b"\x02\x47" + rng.randbytes(71) + b"\x21\x02" + rng.randbytes(32))
            else:
                script_sig = b"\x47" + rng.randbytes(71) + b"\x21\x02" + rng.randbytes(32)
                wits.append(b"\x00")
            ins.append(c.txid + struct.pack("<I", c.vout) + varint(len(script_sig)) + script_sig + b"\xfd\xff\xff\xff")
        n_out = rng.choice((1, 2, 2, 2, 3, 4))
        kinds = rng.choices(_TYPES, _WEIGHTS, k=n_out)
        vsize_guess = 11 + 100 * len(coins) + 35 * n_out
        fee = vsize_guess * rng.randint(1, 60)
        spendable = total - fee
        if spendable < 1000 * n_out:
            pool.extend(coins)  # too small to split: put the coins back
            return None
        values = []
        left = spendable
        for k, kind in enumerate(kinds):
            if kind == "op_return":
                values.append(0)
            elif k == n_out - 1:
                values.append(left)
            else:
                v = rng.randint(1, max(1, left // 2))
                values.append(v)
            left -= values[-1]
        fee += left if kinds[-1] == "op_return" else 0  # an op_return last: the remainder goes to fees
        outs = b"".join(struct.pack("<q", v) + varint(len(s)) + s
                        for v, s in ((v, script_for(kind, rng)) for v, kind in zip(values, kinds)))
        body = varint(len(ins)) + b"".join(ins) + varint(n_out) + outs
        locktime = struct.pack("<I", self.height - 1 if rng.random() < 0.3 else 0)
        base = struct.pack("<i", rng.choice((1, 2, 2, 2))) + body + locktime
        txid = _sha256d(base)
        if segwit:
            full = base[:4] + b"\x00\x01" + body + b"".join(wits) + locktime
            wtxid = _sha256d(full)
        else:
            full, wtxid = base, txid
        for vout, (v, kind) in enumerate(zip(values, kinds)):
            if kind not in ("op_return", "empty", "unknown") and v > 0:
                self.pool.append(_Coin(txid, vout, v, kind))
        return full, txid, wtxid, fee

    def next_block(self) -> bytes:
        h = self.height
        if h == self.fork_at:
            self.rng = random.Random(self.fork_seed)
        rng = self.rng
        while self.maturing and self.maturing[0][0] <= h:
            self.pool.append(self.maturing.pop(0)[1])
        txs: list[tuple[bytes, bytes, bytes, int]] = []
        if h > 0:
            for _ in range(rng.randint(0, 8)):
                tx = self._spend()
                if tx is not None:
                    txs.append(tx)
        fees = sum(t[3] for t in txs)
        subsidy = (50 * COIN) >> (h // HALVING) if h // HALVING < 64 else 0
        segwit = any(t[1] != t[2] for t in txs)
        commitment = None
        if segwit:
            witness_root = _merkle([bytes(32)] + [t[2] for t in txs])
            commitment = _sha256d(witness_root + bytes(32))
        cb, cb_txid, _ = _coinbase(h, subsidy + fees, rng, commitment)
        self.maturing.append((h + 100, _Coin(cb_txid, 0, subsidy + fees, "p2wpkh")))
        txids = [cb_txid] + [t[1] for t in txs]
        # Evenly spread with jitter, strictly increasing: slot h plus up to half a slot.
        self.time = START_TIME + h * self.interval + rng.randrange(self.interval // 2)
        header, self.prev = mine_header(self.prev, _merkle(txids), self.time, REGTEST_BITS, self.target)
        self.height += 1
        self.txs += len(txids)
        return header + varint(len(txids)) + cb + b"".join(t[0] for t in txs)


MAX_TXS_PER_BLOCK = 3000  # dense blocks then weigh about 3.4 M of the 4 M weight units allowed


def write_sample(out: Path, n_blocks: int, *, seed: int = 7, max_file_bytes: int = 128 << 20, first_file: int = 0,
                 fork_at: int | None = None, fork_seed: int = 0, spread_blocks: int | None = None,
                 txs_per_block: int | None = None, pool_cap: int = 1 << 18) -> dict[str, int]:
    """Write a regtest ``blocks/`` directory with ``n_blocks`` blocks into ``out`` (blk00000.dat, ...).

    Without ``txs_per_block`` the chain is sparse (0-8 transactions a block, ``SampleChain``); with it,
    every block after the first 100 holds exactly that many transactions (``cairn_servers.brk.dense``), and
    ``pool_cap`` bounds the generator's set of spendable coins. Blocks are streamed to disk: each file
    is written under a temp name and renamed once complete, so a reader never sees half a file.
    ``fork_at``/``fork_seed``/``spread_blocks`` make a competing chain (see ``SampleChain``), and
    ``first_file`` numbers the files so it can be added beside an existing chain.
    """
    from contextlib import ExitStack

    from cairn_servers.core.errors import InvalidInput
    from cairn_servers.core.files import atomic_file

    if n_blocks < 0:
        raise InvalidInput("--blocks must be 0 or more.")
    if txs_per_block is not None and not 1 <= txs_per_block <= MAX_TXS_PER_BLOCK:
        raise InvalidInput(f"--txs-per-block must be between 1 and {MAX_TXS_PER_BLOCK} (more would not fit a "
                           f"block's 4 million weight units); got {txs_per_block}.")
    out.mkdir(parents=True, exist_ok=True)
    magic = MAGICS["regtest"]
    chain: SampleChain | DenseChain
    if txs_per_block is None:
        chain = SampleChain(n_blocks, seed, fork_at=fork_at, fork_seed=fork_seed, spread_blocks=spread_blocks)
    else:
        chain = DenseChain(n_blocks, txs_per_block, seed, fork_at=fork_at, fork_seed=fork_seed,
                           spread_blocks=spread_blocks, pool_cap=pool_cap)
    file_no = first_file
    files = 0
    size = 0
    total = 0
    fh = None
    with ExitStack() as current:  # the file being written; closing the stack renames it into place
        for _ in range(n_blocks):
            block = chain.next_block()
            record = magic + struct.pack("<I", len(block)) + block
            if fh is not None and size + len(record) > max_file_bytes:
                current.close()
                file_no += 1
                fh = None
            if fh is None:
                # not durable: a generated chain is cheap to generate again (an fsync per file is not)
                fh = current.enter_context(atomic_file(out / f"blk{file_no:05d}.dat", durable=False))
                files += 1
                size = 0
            fh.write(record)
            size += len(record)
            total += len(block)
    return {"blocks": n_blocks, "transactions": chain.txs, "files": files, "bytes": total}


MAINNET_SAMPLE = Path(__file__).resolve().parent / "samples" / "mainnet-0-589.blk"


def write_mainnet_sample(out: Path) -> dict[str, int]:
    """Copy the bundled mainnet heights 0..589 into ``out`` as ``blk00000.dat`` (atomically)."""
    from cairn_servers.core.errors import NotFound
    from cairn_servers.core.files import write_atomic

    if not MAINNET_SAMPLE.exists():
        raise NotFound(f"The bundled mainnet sample {MAINNET_SAMPLE} is missing. Reinstall cairn.")
    out.mkdir(parents=True, exist_ok=True)
    data = MAINNET_SAMPLE.read_bytes()
    write_atomic(out / "blk00000.dat", data)
    return {"blocks": 590, "files": 1, "bytes": len(data) - 8 * 590}
