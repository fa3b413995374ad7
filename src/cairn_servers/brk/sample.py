"""A deterministic sample chain: a regtest-magic ``blocks/`` directory of N valid-looking blocks.

Every block has real proof of work at regtest difficulty (nBits 0x207fffff), a BIP34 coinbase paying
the regtest subsidy (halving every 150 blocks) plus fees, and transactions that spend earlier
outputs (coinbases only after 100 blocks) with fees, in every output script type, segwit ones with
witnesses and a witness commitment. Timestamps spread over at least six months. Signatures are
random bytes: nothing here validates scripts, and the indexer does not either.
"""

from __future__ import annotations

import heapq
import random
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cairn_servers.brk.blocks.files import MAGICS
from cairn_servers.brk.blockwrite import merkle_root as _merkle
from cairn_servers.brk.blockwrite import mine_header, varint
from cairn_servers.brk.blockwrite import sha256d as _sha256d
from cairn_servers.brk.blocks.parser import bits_to_target
from cairn_servers.brk.dense import DenseChain
from cairn_servers.brk.script import address_script
from cairn_servers.core.errors import InvalidInput

REGTEST_BITS = 0x207FFFFF
START_TIME = 1_704_067_200  # 2024-01-01T00:00:00Z
HALVING = 150  # regtest's halving interval
FIRST_PAY = 101  # the first height with a spendable coin (a coinbase matures after 100 blocks): --pay starts there
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


def _inputs(coins: list[_Coin], rng: random.Random) -> tuple[list[bytes], list[bytes]]:
    """The serialized inputs spending ``coins`` and their witnesses (random signatures of the right shape)."""
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
    return ins, wits


def _serialize(version: bytes, body: bytes, wits: list[bytes] | None, locktime: bytes) -> tuple[bytes, bytes, bytes]:
    """(serialized tx, txid, wtxid) from the version, the inputs and outputs, the witnesses if segwit, the locktime."""
    base = version + body + locktime
    txid = _sha256d(base)
    if wits is None:
        return base, txid, txid
    full = version + b"\x00\x01" + body + b"".join(wits) + locktime
    return full, txid, _sha256d(full)


def _kind_of(script: bytes) -> str:
    """The type of a standard script an address pays to (what its spending input looks like)."""
    if script[0] == 0:
        return "p2wpkh" if len(script) == 22 else "p2wsh"
    if 0x51 <= script[0] <= 0x60:
        return "p2tr"
    return "p2pkh" if script[0] == 0x76 else "p2sh"


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
                 spread_blocks: int | None = None, pays: Sequence[tuple[bytes, int]] = (), spend: int = 0,
                 change: Sequence[bytes] = ()) -> None:
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
        # Payments to given scripts (``pays``: script, sats), spread over heights FIRST_PAY..n_blocks-2; the
        # first ``spend`` of them are spent a few blocks later, with change to ``change`` in turn. Their own
        # random stream, so a chain without payments is the same as it always was.
        self.pays = pays
        self.spend = spend
        self.change = change
        self.pay_rng = random.Random(f"pay {seed}")
        self.payments = 0  # payments written so far
        self.spends = 0
        self.due: list[tuple[int, int, _Coin]] = []  # heap of (height, payment number, paid coin) to spend

    def pay_height(self, i: int) -> int:
        """The height of payment ``i``."""
        return FIRST_PAY + i * (self.n_blocks - 1 - FIRST_PAY) // len(self.pays)

    def _pay(self, script: bytes, sats: int) -> tuple[bytes, bytes, bytes, int]:
        """A transaction paying ``sats`` to ``script`` from random pool coins, change back to the pool."""
        rng = self.pay_rng
        pool = self.pool
        rate = rng.randint(1, 60)
        coins: list[_Coin] = []
        total = fee = 0
        while total < sats + fee:
            if not pool or len(coins) == 200:
                pool.extend(coins)
                raise InvalidInput(f"--pay: too few coins at height {self.height} to pay {sats} sats; pay less, "
                                   f"or write more blocks.")
            i = rng.randrange(len(pool))
            pool[i], pool[-1] = pool[-1], pool[i]
            coins.append(pool.pop())
            total += coins[-1].value
            fee = (11 + 100 * len(coins) + 2 * 35) * rate
        ins, wits = _inputs(coins, rng)
        outs = [(sats, script)]
        rest = total - sats - fee
        kind = rng.choice(("p2wpkh", "p2tr", "p2pkh"))
        if rest >= 1000:
            outs.insert(rng.randrange(2), (rest, script_for(kind, rng)))
        else:
            fee += rest  # too little for change: the miner takes it
        full, txid, wtxid = self._tx(ins, wits if any(c.kind in SEGWIT_TYPES for c in coins) else None, outs)
        for vout, (v, s) in enumerate(outs):
            if s is script:
                if self.payments < self.spend:
                    later = self.height + 1 + rng.randrange(min(12, self.n_blocks - 1 - self.height))
                    heapq.heappush(self.due, (later, self.payments, _Coin(txid, vout, v, _kind_of(script))))
            else:
                pool.append(_Coin(txid, vout, v, kind))
        self.payments += 1
        return full, txid, wtxid, fee

    def _spend_paid(self, coin: _Coin) -> tuple[bytes, bytes, bytes, int]:
        """A transaction spending a paid coin: most of it to a random script, the rest as change if any."""
        rng = self.pay_rng
        ins, wits = _inputs([coin], rng)
        change = self.change[self.spends % len(self.change)] if self.change else None
        fee = min((111 + 35 * (2 if change else 1)) * rng.randint(1, 60), coin.value // 4)
        left = coin.value - fee
        kind = rng.choice(("p2wpkh", "p2tr", "p2pkh"))
        paid = left if change is None else rng.randint(left // 4, left - left // 4)
        outs = [(paid, script_for(kind, rng))]
        if change is not None:
            outs.insert(rng.randrange(2), (left - paid, change))
        full, txid, wtxid = self._tx(ins, wits if coin.kind in SEGWIT_TYPES else None, outs)
        vout = next(i for i, (_, s) in enumerate(outs) if s is not change)
        if paid > 0:
            self.pool.append(_Coin(txid, vout, paid, kind))
        self.spends += 1
        return full, txid, wtxid, fee

    def _tx(self, ins: list[bytes], wits: list[bytes] | None,
            outs: list[tuple[int, bytes]]) -> tuple[bytes, bytes, bytes]:
        body = (varint(len(ins)) + b"".join(ins) + varint(len(outs))
                + b"".join(struct.pack("<q", v) + varint(len(s)) + s for v, s in outs))
        return _serialize(struct.pack("<i", 2), body, wits, bytes(4))

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
        ins, wits = _inputs(coins, rng)
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
        full, txid, wtxid = _serialize(struct.pack("<i", rng.choice((1, 2, 2, 2))), body, wits if segwit else None,
                                       locktime)
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
        while self.due and self.due[0][0] == h:
            txs.append(self._spend_paid(heapq.heappop(self.due)[2]))
        while self.payments < len(self.pays) and self.pay_height(self.payments) == h:
            txs.append(self._pay(*self.pays[self.payments]))
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
                 txs_per_block: int | None = None, pool_cap: int = 1 << 18, pay: Sequence[tuple[str, int]] = (),
                 spend: int = 0, change: Sequence[str] = ()) -> dict[str, int]:
    """Write a regtest ``blocks/`` directory with ``n_blocks`` blocks into ``out`` (blk00000.dat, ...).

    Without ``txs_per_block`` the chain is sparse (0-8 transactions a block, ``SampleChain``); with it,
    every block after the first 100 holds exactly that many transactions (``cairn_servers.brk.dense``), and
    ``pool_cap`` bounds the generator's set of spendable coins. Blocks are streamed to disk: each file
    is written under a temp name and renamed once complete, so a reader never sees half a file.
    ``fork_at``/``fork_seed``/``spread_blocks`` make a competing chain (see ``SampleChain``), and
    ``first_file`` numbers the files so it can be added beside an existing chain.

    ``pay`` lists (regtest address, sats): one transaction each, in that order, spread evenly over heights
    101 to ``n_blocks`` - 2 (sparse chain only). The first ``spend`` paid outputs are spent 1-12 blocks
    after they were paid, most of the value to an outside script and the rest as change to the
    ``change`` addresses in turn (no change without them).
    """
    from contextlib import ExitStack

    from cairn_servers.core.files import atomic_file

    if n_blocks < 0:
        raise InvalidInput("--blocks must be 0 or more.")
    if txs_per_block is not None and not 1 <= txs_per_block <= MAX_TXS_PER_BLOCK:
        raise InvalidInput(f"--txs-per-block must be between 1 and {MAX_TXS_PER_BLOCK} (more would not fit a "
                           f"block's 4 million weight units); got {txs_per_block}.")
    pays, change_scripts = _check_payments(n_blocks, txs_per_block, pay, spend, change)
    out.mkdir(parents=True, exist_ok=True)
    magic = MAGICS["regtest"]
    chain: SampleChain | DenseChain
    if txs_per_block is None:
        chain = SampleChain(n_blocks, seed, fork_at=fork_at, fork_seed=fork_seed, spread_blocks=spread_blocks,
                            pays=pays, spend=spend, change=change_scripts)
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
    summary = {"blocks": n_blocks, "transactions": chain.txs, "files": files, "bytes": total}
    if isinstance(chain, SampleChain) and pays:
        summary |= {"payments": chain.payments, "spends": chain.spends}
    return summary


def parse_pay(text: str) -> list[tuple[str, int]]:
    """``ADDR:SATS[:COUNT]`` (the ``--pay`` option) as COUNT (address, sats) payments."""
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        sats = int(parts[1])
        count = int(parts[2]) if len(parts) == 3 else 1
    except ValueError:
        raise InvalidInput(f"--pay {text!r}: expected ADDRESS:SATS or ADDRESS:SATS:COUNT, "
                           f"e.g. bcrt1q...:50000 or bcrt1q...:50000:3.") from None
    if count < 1:
        raise InvalidInput(f"--pay {text!r}: COUNT must be 1 or more.")
    return [(parts[0], sats)] * count


def _check_payments(n_blocks: int, txs_per_block: int | None, pay: Sequence[tuple[str, int]], spend: int,
                    change: Sequence[str]) -> tuple[list[tuple[bytes, int]], list[bytes]]:
    """The payments as (script, sats) and the change scripts, once every rule holds; InvalidInput with the
    fix otherwise."""
    if not pay:
        if spend or change:
            raise InvalidInput("--spend and --change need --pay: they spend the paid outputs.")
        return [], []
    if txs_per_block is not None:
        raise InvalidInput("--pay works on the sparse chain only: drop --txs-per-block.")
    if n_blocks < FIRST_PAY + 2:
        raise InvalidInput(f"--pay needs --blocks {FIRST_PAY + 2} or more: coinbases mature after 100 blocks, and "
                           f"a paid output is spent in a later block.")
    if not 0 <= spend <= len(pay):
        raise InvalidInput(f"--spend must be between 0 and the number of payments ({len(pay)}); got {spend}.")
    if change and not spend:
        raise InvalidInput("--change needs --spend: change comes from spending paid outputs.")
    scripts: dict[str, bytes] = {}
    pays = []
    for address, sats in pay:
        if not 1 <= sats <= 21_000_000 * COIN:
            raise InvalidInput(f"--pay {address}:{sats}: SATS must be between 1 and 2,100,000,000,000,000.")
        if address not in scripts:
            scripts[address] = address_script(address, "regtest")
        pays.append((scripts[address], sats))
    # What the chain has mined by each payment's height, halved (random spends burn some): a plan that
    # cannot be funded fails here, before any file is written.
    mined = paid = 0
    mature = 0  # coinbases of heights below this one are spendable
    plan = SampleChain(n_blocks, pays=pays)
    for i, (_, sats) in enumerate(pays):
        h = plan.pay_height(i)
        while mature <= h - 100:
            mined += (50 * COIN) >> (mature // HALVING) if mature // HALVING < 64 else 0
            mature += 1
        paid += sats
        if 2 * paid > mined:
            raise InvalidInput(f"--pay: the payments up to height {h} add up to {paid} sats, more than half of the "
                               f"{mined} sats mined and spendable by then; pay less, or write more blocks.")
    return pays, [address_script(a, "regtest") for a in change]


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
