"""Mainnet-density sample chains: thousands of realistic transactions per block, fast and in bounded memory.

``brk sample --txs-per-block K`` uses this generator. Each block after the first 100 holds exactly K
transactions (the coinbase included) that spend earlier outputs: mostly one or two inputs, sometimes
consolidations of dozens; mostly a payment and a change output, sometimes batch payouts of dozens;
every output type, and legacy, p2sh-p2wpkh, p2wpkh, p2wsh (2-of-3) and taproot (key and script path)
spends with realistic scriptSigs and witnesses. The first 100 blocks only mine (the coinbases of
heights 1 and 2 with K outputs each), since a coinbase can be spent only 100 blocks later. Blocks have real proof of work at
regtest difficulty, a correct merkle root and witness commitment, fees of 1-60 sat/vB of each
transaction's real virtual size, and coinbases paying exactly subsidy plus fees. Signatures and keys
are random bytes: nothing validates scripts.

Speed: a block is laid out with numpy, not built transaction by transaction. Every size and offset is
computed from the drawn shapes (input and output counts and types), the whole block starts as random
bytes (the keys and signatures), and the fixed bytes (versions, counts, outpoints, length prefixes,
script templates, values, sequence numbers, lock times) are scattered into place. Python then only
hashes each transaction (txid, wtxid) and the merkle trees.

Memory: spendable coins live in a bounded pool of numpy arrays (``pool_cap``). When the pool is more
than half full, transactions consolidate more inputs; at the cap, random coins are set aside instead.
A small vault of coins (every 211th new output, and evicted ones) is spent evenly until the last
block, so some inputs spend outputs that are very old. Nothing else grows with the chain.

Determinism: block ``h`` draws from a generator seeded with ``(seed, h)`` (``(seed, h, 1, fork_seed)``
from ``fork_at`` on), so a fork shares every block before ``fork_at`` with its parent chain.
"""

from __future__ import annotations

import hashlib
import struct
from collections import deque
from typing import TYPE_CHECKING

from cairn_servers.brk.blockwrite import merkle_root as _merkle
from cairn_servers.brk.blockwrite import mine_header
from cairn_servers.brk.blockwrite import sha256d as _sha256d
from cairn_servers.brk.blockwrite import varint as _varint
from cairn_servers.brk.blocks.parser import (
    EMPTY,
    OP_RETURN,
    P2A,
    P2MS,
    P2PK33,
    P2PK65,
    P2PKH,
    P2SH,
    P2TR,
    P2WPKH,
    P2WSH,
    UNKNOWN,
    bits_to_target,
)

if TYPE_CHECKING:
    import numpy as np

    Coins = tuple[np.ndarray, np.ndarray, np.ndarray]  # outpoints (n, 36) u1, values i8, types u1

REGTEST_BITS = 0x207FFFFF
START_TIME = 1_704_067_200  # 2024-01-01T00:00:00Z
HALVING = 150
COIN = 100_000_000
MATURITY = 100
VAULT_CAP = 4096
VAULT_EVERY = 211

_sha = hashlib.sha256
_pack_q = struct.Struct("<q").pack

# A template is a list of (literal bytes, random byte count): the literal parts carry the length
# prefixes and opcodes, the random parts are keys, hashes and signatures.
_Parts = tuple[tuple[bytes, int], ...]

# Output scripts by type code (the parser's codes, so tests compare kinds one to one), length-prefixed.
_OUT: dict[int, _Parts] = {
    P2PKH: ((b"\x19\x76\xa9\x14", 20), (b"\x88\xac", 0)),
    P2SH: ((b"\x17\xa9\x14", 20), (b"\x87", 0)),
    P2WPKH: ((b"\x16\x00\x14", 20),),
    P2WSH: ((b"\x22\x00\x20", 32),),
    P2TR: ((b"\x22\x51\x20", 32),),
    P2PK33: ((b"\x23\x21\x02", 32), (b"\xac", 0)),
    P2PK65: ((b"\x43\x41\x04", 64), (b"\xac", 0)),
    P2MS: ((b"\x47\x51\x21\x02", 32), (b"\x21\x03", 32), (b"\x52\xae", 0)),  # 1-of-2 bare multisig
    P2A: ((b"\x04\x51\x02\x4e\x73", 0),),
    OP_RETURN: ((b"\x22\x6a\x20", 32),),
    EMPTY: ((b"\x00", 0),),
    UNKNOWN: ((b"\x04\x52\x93\x54\x87", 0),),  # OP_2 OP_ADD OP_4 OP_EQUAL: a puzzle
}
# Output type mix, roughly a recent mainnet's.
_KIND_WEIGHTS: list[tuple[int, float]] = [
    (P2WPKH, 40), (P2TR, 20), (P2PKH, 12), (P2SH, 10), (P2WSH, 6), (OP_RETURN, 4),
    (P2PK33, 1.5), (P2PK65, 1.5), (P2MS, 1.5), (P2A, 1.5), (EMPTY, 0.5), (UNKNOWN, 0.5),
]
_UNSPENDABLE = (OP_RETURN, EMPTY, UNKNOWN)  # paid zero value, never spent

# How each coin type is spent: (scriptSig, witness). An empty witness is one zero byte in a segwit
# transaction and nothing at all in a legacy one.
_P2TR_SCRIPT = 12  # spend code of a taproot script-path spend (the others use the output type code)
_SPEND: dict[int, tuple[_Parts, _Parts]] = {
    P2PKH: (((b"\x6b\x48", 71), (b"\x01\x21\x02", 32)), ()),
    P2PK33: (((b"\x49\x48", 71), (b"\x01", 0)), ()),
    P2PK65: (((b"\x49\x48", 71), (b"\x01", 0)), ()),
    P2MS: (((b"\x4a\x00\x48", 71), (b"\x01", 0)), ()),
    P2SH: (((b"\x17\x16\x00\x14", 20),), ((b"\x02\x48", 71), (b"\x01\x21\x03", 32))),  # p2sh-p2wpkh
    P2WPKH: (((b"\x00", 0),), ((b"\x02\x48", 71), (b"\x01\x21\x02", 32))),
    P2WSH: (((b"\x00", 0),), ((b"\x04\x00\x48", 71), (b"\x01\x48", 71), (b"\x01\x69\x52\x21\x02", 32),
                              (b"\x21\x03", 32), (b"\x21\x02", 32), (b"\x53\xae", 0))),  # 2-of-3 multisig
    P2TR: (((b"\x00", 0),), ((b"\x01\x40", 64),)),  # key path: one Schnorr signature
    P2A: (((b"\x00", 0),), ()),  # an anchor: empty scriptSig, no witness
    _P2TR_SCRIPT: (((b"\x00", 0),), ((b"\x03\x40", 64), (b"\x22\x20", 32), (b"\xac\x21\xc0", 32))),
}
_N_CODES = 13


class _Template:
    """Lengths and literal bytes of one template per code, as numpy arrays for scattering."""

    def __init__(self, templates: dict[int, _Parts]) -> None:
        import numpy as np

        self.length = np.zeros(_N_CODES, dtype=np.int64)
        self.lits: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for code, parts in templates.items():
            pos: list[int] = []
            val: list[int] = []
            p = 0
            for lit, n in parts:
                pos.extend(range(p, p + len(lit)))
                val.extend(lit)
                p += len(lit) + n
            self.length[code] = p
            if pos:
                self.lits[code] = (np.array(pos, dtype=np.int64), np.array(val, dtype=np.uint8))

    def scatter(self, buf: np.ndarray, codes: np.ndarray, starts: np.ndarray) -> None:
        """Write each code's literal bytes at its start offsets."""
        for code, (pos, val) in self.lits.items():
            at = starts[codes == code]
            if at.size:
                buf[at[:, None] + pos] = val


def _excl_cumsum(a: np.ndarray) -> np.ndarray:
    import numpy as np

    out = np.zeros(a.shape[0], dtype=np.int64)
    if a.shape[0] > 1:
        np.cumsum(a[:-1], out=out[1:])
    return out


class _CoinArrays:
    """A bounded set of coins in numpy arrays (outpoint, value, type), with O(k) removal of k coins."""

    def __init__(self, cap: int) -> None:
        import numpy as np

        self.cap = cap
        self.op = np.zeros((cap, 36), dtype=np.uint8)
        self.value = np.zeros(cap, dtype=np.int64)
        self.kind = np.zeros(cap, dtype=np.uint8)
        self.n = 0

    def append(self, coins: Coins) -> None:
        op, value, kind = coins
        k = min(value.shape[0], self.cap - self.n)
        self.op[self.n:self.n + k] = op[:k]
        self.value[self.n:self.n + k] = value[:k]
        self.kind[self.n:self.n + k] = kind[:k]
        self.n += k

    def take(self, idx: np.ndarray) -> Coins:
        """Remove the coins at distinct indices ``idx`` (returned in that order); the tail fills the holes."""
        import numpy as np

        out = (self.op[idx].copy(), self.value[idx].copy(), self.kind[idx].copy())
        m = self.n - idx.shape[0]
        holes = np.sort(idx[idx < m])
        taken_tail = np.zeros(self.n - m, dtype=bool)
        taken_tail[idx[idx >= m] - m] = True
        tail = np.arange(m, self.n)[~taken_tail]
        self.op[holes] = self.op[tail]
        self.value[holes] = self.value[tail]
        self.kind[holes] = self.kind[tail]
        self.n = m
        return out

    def take_last(self, k: int) -> Coins:
        k = min(k, self.n)
        m = self.n - k
        self.n = m
        return self.op[m:m + k].copy(), self.value[m:m + k].copy(), self.kind[m:m + k].copy()


class DenseChain:
    """Builds dense blocks one at a time; ``next_block()`` returns the serialized block."""

    def __init__(self, n_blocks: int, txs_per_block: int, seed: int = 7, *, fork_at: int | None = None,
                 fork_seed: int = 0, spread_blocks: int | None = None, pool_cap: int = 1 << 18) -> None:
        import numpy as np

        self.n_blocks = n_blocks
        self.k = max(1, txs_per_block)
        self.seed = seed
        self.fork_at = fork_at
        self.fork_seed = fork_seed
        self.height = 0
        self.prev = bytes(32)
        self.interval = max(600, (183 * 86400) // max(1, spread_blocks or n_blocks))
        self.target = bits_to_target(REGTEST_BITS)
        self.pool = _CoinArrays(max(pool_cap, 8 * self.k))
        self.vault = _CoinArrays(VAULT_CAP)
        self.maturing: deque[tuple[int, Coins]] = deque()
        self.vault_credit = 0.0
        self.outputs_seen = 0
        self.txs = 0  # transactions written so far, coinbases included
        self.stats = {"inputs": 0, "outputs": 0, "vault_spends": 0, "evicted": 0}
        self._kinds = np.array([k for k, _ in _KIND_WEIGHTS], dtype=np.uint8)
        weights = np.array([w for _, w in _KIND_WEIGHTS])
        self._kind_p = weights / weights.sum()
        self._out = _Template(_OUT)
        self._ss = _Template({code: parts[0] for code, parts in _SPEND.items()})
        self._wit = _Template({code: parts[1] or ((b"\x00", 0),) for code, parts in _SPEND.items()})
        self._has_wit = np.zeros(_N_CODES, dtype=bool)
        for code, (_, wit) in _SPEND.items():
            self._has_wit[code] = bool(wit)
        self._unspendable = np.zeros(_N_CODES, dtype=bool)
        self._unspendable[list(_UNSPENDABLE)] = True

    def _rng(self, h: int) -> np.random.Generator:
        import numpy as np

        if self.fork_at is not None and h >= self.fork_at:
            return np.random.default_rng([self.seed, h, 1, self.fork_seed])
        return np.random.default_rng([self.seed, h])

    def _add(self, coins: Coins, rng: np.random.Generator) -> None:
        """New spendable coins join the pool; every 211th goes to the vault; a full pool evicts at random."""
        import numpy as np

        op, value, kind = coins
        n = value.shape[0]
        if not n:
            return
        seen = self.outputs_seen + np.arange(1, n + 1)
        self.outputs_seen += n
        space = self.vault.cap - self.vault.n
        if space > 0 and (seen % VAULT_EVERY == 0).any():
            to_vault = np.zeros(n, dtype=bool)
            to_vault[np.flatnonzero(seen % VAULT_EVERY == 0)[:space]] = True
            self.vault.append((op[to_vault], value[to_vault], kind[to_vault]))
            keep = ~to_vault
            op, value, kind = op[keep], value[keep], kind[keep]
            n = value.shape[0]
        pool = self.pool
        over = pool.n + n - pool.cap
        if over > 0:
            over = min(over, pool.n)
            evicted = pool.take(rng.choice(pool.n, over, replace=False))
            self.vault.append(evicted)  # as many as fit; the rest stay unspent for good
            self.stats["evicted"] += over
        pool.append((op, value, kind))

    def _shapes(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Input and output counts of ``n`` transactions, steered by how full the pool is."""
        import numpy as np

        fill = self.pool.n / self.pool.cap
        if self.pool.n < 8 * n:
            n_in = np.ones(n, dtype=np.int64)  # too few coins yet: fan out, one input each
        else:
            n_in = rng.choice(np.array([1, 2, 3, 4, 6, 9, 25]), size=n,
                              p=[0.6, 0.25, 0.07, 0.035, 0.025, 0.01, 0.01])
            if fill > 0.5:  # a fuller pool consolidates more
                n_in = n_in + rng.poisson(4.0 * (fill - 0.5), size=n)
            n_in = np.minimum(n_in, 200)
        n_out = rng.choice(np.array([1, 2, 3, 4, 5, 12, 40]), size=n, p=[0.25, 0.6, 0.07, 0.035, 0.025, 0.015, 0.005])
        return n_in.astype(np.int64), n_out.astype(np.int64)

    def next_block(self) -> bytes:
        import numpy as np

        h = self.height
        rng = self._rng(h)
        while self.maturing and self.maturing[0][0] <= h:
            self._add(self.maturing.popleft()[1], rng)
        n_tx = min(self.k - 1, self.pool.n) if h > MATURITY else 0
        txs = b""
        txids: list[bytes] = []
        wtxids: list[bytes] = []
        fees = 0
        if n_tx:
            n_in, n_out = self._shapes(rng, n_tx)
            # Vault coins due in this block (spent evenly until the last block) replace first inputs.
            self.vault_credit += self.vault.n / max(1, self.n_blocks - h)
            n_vault = min(int(self.vault_credit), n_tx, self.vault.n)
            self.vault_credit -= n_vault
            want = int(n_in.sum()) - n_vault
            if want > self.pool.n:  # never more inputs than coins: trim the largest consolidations
                n_in = np.minimum(n_in, max(1, (self.pool.n + n_vault) // n_tx))
                want = int(n_in.sum()) - n_vault
            txs, txids, wtxids, fees = self._build(rng, n_tx, n_in, n_out, n_vault, want)
        subsidy = (50 * COIN) >> (h // HALVING) if h // HALVING < 64 else 0
        commitment = None
        if any(a != b for a, b in zip(txids, wtxids)):
            commitment = _sha256d(_merkle([bytes(32)] + wtxids) + bytes(32))
        # Coins for the first dense blocks (heights 101 and 102), with room for the vault's share.
        n_cb_out = self.k + self.k // 64 + 8 if h in (1, 2) else 1
        cb, cb_txid, cb_coins = self._coinbase(h, subsidy + fees, n_cb_out, commitment, rng)
        self.maturing.append((h + MATURITY, cb_coins))
        self.txs += len(txids) + 1
        time_ = START_TIME + h * self.interval + int(rng.integers(0, self.interval // 2))
        header, self.prev = mine_header(self.prev, _merkle([cb_txid] + txids), time_, REGTEST_BITS, self.target)
        self.height += 1
        return header + _varint(len(txids) + 1) + cb + txs

    def _build(self, rng: np.random.Generator, n_tx: int, n_in: np.ndarray, n_out: np.ndarray, n_vault: int,
               want: int) -> tuple[bytes, list[bytes], list[bytes], int]:
        """Lay out ``n_tx`` transactions in one buffer; returns (bytes, txids, wtxids, total fee)."""
        import numpy as np

        i64 = np.int64
        tx_of_in = np.repeat(np.arange(n_tx), n_in)
        first_in = _excl_cumsum(n_in)
        n_inputs = int(n_in.sum())
        # -- the coins spent: vault coins as the first input of the first transactions, the rest from the pool
        in_op = np.empty((n_inputs, 36), dtype=np.uint8)
        in_val = np.empty(n_inputs, dtype=i64)
        in_kind = np.empty(n_inputs, dtype=np.uint8)
        from_vault = np.zeros(n_inputs, dtype=bool)
        from_vault[first_in[:n_vault]] = True
        op, val, kind = self.vault.take_last(n_vault)
        in_op[from_vault], in_val[from_vault], in_kind[from_vault] = op, val, kind
        op, val, kind = self.pool.take(rng.choice(self.pool.n, want, replace=False))
        in_op[~from_vault], in_val[~from_vault], in_kind[~from_vault] = op, val, kind
        self.stats["vault_spends"] += n_vault
        self.stats["inputs"] += n_inputs
        code = in_kind.astype(i64)
        code[(code == P2TR) & (rng.random(n_inputs) < 0.1)] = _P2TR_SCRIPT
        # -- output types: the last output of each transaction is the change and carries value
        n_outputs = int(n_out.sum())
        first_out = _excl_cumsum(n_out)
        last_out = first_out + n_out - 1
        tx_of_out = np.repeat(np.arange(n_tx), n_out)
        out_kind = rng.choice(self._kinds, size=n_outputs, p=self._kind_p).astype(i64)
        fix = last_out[self._unspendable[out_kind[last_out]]]
        out_kind[fix] = P2WPKH
        self.stats["outputs"] += n_outputs
        # -- sizes
        has_wit = self._has_wit[code]
        seg = np.add.reduceat(has_wit.astype(i64), first_in) > 0
        ss_len = self._ss.length[code]
        in_size = 40 + ss_len
        wit_len = np.where(seg[tx_of_in], self._wit.length[code], 0)
        out_size = 8 + self._out.length[out_kind]
        in_total = np.add.reduceat(in_size, first_in)
        out_total = np.add.reduceat(out_size, first_out)
        wit_total = np.add.reduceat(wit_len, first_in)
        base = 4 + 1 + in_total + 1 + out_total + 4
        size = base + np.where(seg, 2 + wit_total, 0)
        vsize = base + (size - base + 3) // 4
        tx_start = _excl_cumsum(size)
        ins_at = tx_start + 4 + 2 * seg + 1
        outs_at = ins_at + in_total + 1
        wit_at = outs_at + out_total
        lock_at = tx_start + size - 4
        cs = _excl_cumsum(in_size)
        in_start = ins_at[tx_of_in] + cs - cs[first_in][tx_of_in]
        cs = _excl_cumsum(out_size)
        out_start = outs_at[tx_of_out] + cs - cs[first_out][tx_of_out]
        cs = _excl_cumsum(wit_len)
        wit_start = wit_at[tx_of_in] + cs - cs[first_in][tx_of_in]
        # -- values: fee = vsize x rate (at most what the inputs hold); the rest split over the outputs
        in_sum = np.add.reduceat(in_val, first_in)
        fee = np.minimum(vsize * rng.integers(1, 61, size=n_tx), in_sum)
        left = in_sum - fee
        weight = rng.uniform(0.05, 1.0, size=n_outputs)
        weight[self._unspendable[out_kind]] = 0.0
        share = weight / np.add.reduceat(weight, first_out)[tx_of_out]
        out_val = np.floor(left[tx_of_out] * share * 0.999).astype(i64)
        out_val[last_out] += left - np.add.reduceat(out_val, first_out)
        np.maximum(out_val, 0, out=out_val)
        fee = in_sum - np.add.reduceat(out_val, first_out)
        # -- the bytes: random everywhere (keys, signatures), then the fixed parts scattered in
        total = int(size.sum())
        raw = rng.bit_generator.random_raw((total + 7) // 8)
        buf = raw.view(np.uint8)[:total]
        ar4 = np.arange(4)
        versions = np.where(rng.random(n_tx) < 0.25, 1, 2).astype("<i4").view(np.uint8).reshape(n_tx, 4)
        buf[tx_start[:, None] + ar4] = versions
        buf[tx_start[seg] + 4] = 0
        buf[tx_start[seg] + 5] = 1
        buf[ins_at - 1] = n_in
        buf[outs_at - 1] = n_out
        buf[in_start[:, None] + np.arange(36)] = in_op
        self._ss.scatter(buf, code, in_start + 36)
        buf[(in_start + in_size - 4)[:, None] + ar4] = np.frombuffer(b"\xfd\xff\xff\xff", dtype=np.uint8)
        buf[out_start[:, None] + np.arange(8)] = out_val.astype("<i8").view(np.uint8).reshape(n_outputs, 8)
        self._out.scatter(buf, out_kind, out_start + 8)
        segin = seg[tx_of_in]
        self._wit.scatter(buf, np.where(segin, code, -1), wit_start)
        locks = np.where(rng.random(n_tx) < 0.3, self.height - 1, 0).astype("<u4").view(np.uint8).reshape(n_tx, 4)
        buf[lock_at[:, None] + ar4] = locks
        data = buf.tobytes()
        # -- hashes, one transaction at a time (the only per-transaction Python work)
        mv = memoryview(data)
        sha = _sha
        txids: list[bytes] = []
        wtxids: list[bytes] = []
        for s, e, body_end, is_seg in zip(tx_start.tolist(), (tx_start + size).tolist(), wit_at.tolist(),
                                          seg.tolist()):
            if is_seg:
                hh = sha(mv[s:s + 4])
                hh.update(mv[s + 6:body_end])
                hh.update(mv[e - 4:e])
                txids.append(sha(hh.digest()).digest())
                wtxids.append(sha(sha(mv[s:e]).digest()).digest())
            else:
                txid = sha(sha(mv[s:e]).digest()).digest()
                txids.append(txid)
                wtxids.append(txid)
        # -- the new coins: every output that can be spent
        spendable = ~self._unspendable[out_kind]
        txid_arr = np.frombuffer(b"".join(txids), dtype=np.uint8).reshape(n_tx, 32)
        vout = (np.arange(n_outputs) - first_out[tx_of_out]).astype("<u4").view(np.uint8).reshape(n_outputs, 4)
        new_op = np.concatenate([txid_arr[tx_of_out], vout], axis=1)[spendable]
        self._add((new_op, out_val[spendable], out_kind[spendable].astype(np.uint8)), rng)
        return data, txids, wtxids, int(fee.sum())

    def _coinbase(self, h: int, value: int, n_out: int, commitment: bytes | None,
                  rng: np.random.Generator) -> tuple[bytes, bytes, Coins]:
        import numpy as np

        hb = h.to_bytes((h.bit_length() + 8) // 8 or 1, "little")
        script_sig = bytes([len(hb)]) + hb + b"\x08" + rng.bytes(8) + b"/cairn dense/"
        keys = rng.bytes(20 * n_out)
        each = value // n_out
        values = [each] * (n_out - 1) + [value - each * (n_out - 1)]
        outs = [_pack_q(v) + b"\x16\x00\x14" + keys[20 * i:20 * i + 20] for i, v in enumerate(values)]
        if commitment is not None:
            outs.append(_pack_q(0) + b"\x26\x6a\x24\xaa\x21\xa9\xed" + commitment)
        body = (b"\x01" + bytes(32) + b"\xff\xff\xff\xff" + _varint(len(script_sig)) + script_sig + b"\xff\xff\xff\xff"
                + _varint(len(outs)) + b"".join(outs))
        version = struct.pack("<i", 2)
        base = version + body + b"\x00\x00\x00\x00"
        txid = _sha256d(base)
        op = np.empty((n_out, 36), dtype=np.uint8)
        op[:, :32] = np.frombuffer(txid, dtype=np.uint8)
        op[:, 32:] = np.arange(n_out, dtype="<u4").view(np.uint8).reshape(n_out, 4)
        coins = (op, np.array(values, dtype=np.int64), np.full(n_out, P2WPKH, dtype=np.uint8))
        if commitment is None:
            return base, txid, coins
        full = version + b"\x00\x01" + body + b"\x01\x20" + bytes(32) + b"\x00\x00\x00\x00"
        return full, txid, coins
