"""The block explorer: blocks, transactions, addresses and UTXOs in the shapes of Esplora's REST API
(Blockstream's ``esplora``, as mempool.space and wallet libraries speak it).

Everything is read from what ``brk index`` keeps, in bounded memory, per request:

* transactions: their bytes from the node's blk files (the block's position from the explorer index,
  the transaction's offset in it from ``txindex_to_size``), parsed here; a txid is found through the
  transaction index (``OUT/txindex``, opened read-only) and checked against ``txindex_to_txid``;
* input values and prevouts: ``inputindex_to_outputindex`` and ``outputindex_to_value``, the prevout's
  script from its own transaction;
* spends: ``OUT/explorer/spender.bin``; histories and block hashes: ``OUT/explorer/index``
  (``cairn_servers.brk.explorer``); addresses: ``OUT/addresses`` (address key -> id; script hash ->
  address key for ``/scripthash/``).

Served up to the explorer index's committed tip. brk has no mempool: mempool answers are empty.
"""

from __future__ import annotations

import os
import struct
import threading
from functools import lru_cache
from hashlib import sha256
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.brk.reader import StoreReader
from cairn_servers.core.errors import InvalidInput, NotFound, StorageError

if TYPE_CHECKING:
    import numpy as np

PAGE = 25  # confirmed transactions a page (address history, block transactions)
BLOCKS_PAGE = 10
NO_OUTPUT = (1 << 64) - 1
NONE = (1 << 32) - 1
FEE_TARGETS = (*range(1, 26), 144, 504, 1008)
HEIGHT_CACHE = 4096  # heights whose block position, transactions and hash are kept between requests
_HEX = frozenset("0123456789abcdefABCDEF")
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from


@lru_cache(maxsize=4096)
def _described(script: bytes, network: str) -> tuple[str, str, str | None]:
    """An output script's asm, type and address (None: not an address). Cached: a history page repeats its
    address in most transactions, and the bech32 and base58 encodings are half the cost of a page."""
    from cairn_servers.brk.script import asm, script_address, script_type

    return asm(script), script_type(script), script_address(script, network)


def sha256d(data: bytes) -> bytes:
    return sha256(sha256(data).digest()).digest()


def parse_hash(text: str, what: str) -> bytes:
    """A 64-hex-digit hash as written (display order) -> internal order. ``InvalidInput`` otherwise."""
    if len(text) != 64 or not set(text) <= _HEX:
        raise InvalidInput(f"Invalid {what} {text[:100]!r}: give 64 hexadecimal digits.")
    return bytes.fromhex(text)[::-1]


def parse_int(text: Any, what: str, *, minimum: int = 0) -> int:
    if isinstance(text, bool):
        raise InvalidInput(f"Invalid {what} {text!r}: give a whole number.")
    if isinstance(text, int):
        value = text
    else:
        s = str(text).strip()
        if not s.isdigit() or len(s) > 12:
            raise InvalidInput(f"Invalid {what} {str(text)[:100]!r}: give a whole number.")
        value = int(s)
    if value < minimum:
        raise InvalidInput(f"Invalid {what} {value}: it must be at least {minimum}.")
    return value


def _varint(d: bytes, p: int) -> tuple[int, int]:
    n = d[p]
    if n < 0xFD:
        return n, p + 1
    if n == 0xFD:
        return int.from_bytes(d[p + 1:p + 3], "little"), p + 3
    if n == 0xFE:
        return int.from_bytes(d[p + 1:p + 5], "little"), p + 5
    return int.from_bytes(d[p + 1:p + 9], "little"), p + 9


class Tx:
    """One transaction parsed from its bytes."""

    __slots__ = ("raw", "version", "locktime", "inputs", "outputs", "witness", "txid", "size", "weight")

    def __init__(self, d: bytes) -> None:
        self.raw = d
        self.version = struct.unpack_from("<i", d, 0)[0]
        p = 4
        segwit = d[4] == 0 and d[5] == 1
        if segwit:
            p = 6
        base = bytearray(d[:4])
        body = p
        n_in, p = _varint(d, p)
        self.inputs: list[tuple[bytes, int, bytes, int]] = []  # prev txid (internal), vout, scriptSig, sequence
        for _ in range(n_in):
            prev, vout = d[p:p + 32], _U32(d, p + 32)[0]
            slen, q = _varint(d, p + 36)
            self.inputs.append((prev, vout, d[q:q + slen], _U32(d, q + slen)[0]))
            p = q + slen + 4
        n_out, p = _varint(d, p)
        self.outputs: list[tuple[int, bytes]] = []
        for _ in range(n_out):
            value = _U64(d, p)[0]
            slen, q = _varint(d, p + 8)
            self.outputs.append((value, d[q:q + slen]))
            p = q + slen
        base += d[body:p]
        self.witness: list[list[bytes]] = []
        if segwit:
            for _ in range(n_in):
                items, p = _varint(d, p)
                stack = []
                for _ in range(items):
                    ln, p = _varint(d, p)
                    stack.append(d[p:p + ln])
                    p += ln
                self.witness.append(stack)
        self.locktime = _U32(d, p)[0]
        base += d[p:p + 4]
        self.size = p + 4
        self.raw = d[:self.size]
        self.txid = sha256d(bytes(base))
        self.weight = 3 * len(base) + self.size


def _last_push(script: bytes) -> bytes | None:
    """The data of the last push of a push-only script (a P2SH input's redeem script)."""
    p, last = 0, None
    while p < len(script):
        op = script[p]
        p += 1
        if op == 0:
            last = b""
        elif op <= 0x4E:
            if op <= 0x4B:
                size = op
            else:
                width = {0x4C: 1, 0x4D: 2, 0x4E: 4}[op]
                size = int.from_bytes(script[p:p + width], "little")
                p += width
            if p + size > len(script):
                return None
            last = script[p:p + size]
            p += size
        elif op <= 0x60:
            last = b""
        else:
            return None
    return last


class Explorer:
    """Esplora's look-ups over one output directory; safe to share between threads."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.raw = StoreReader(out)
        self.addr = StoreReader(out / "addresses")
        self.expl = StoreReader(out / "explorer")
        self._lock = threading.Lock()
        self._dbs: dict[str, Any] = {}
        self._files: dict[int, int] = {}
        self._blocks: tuple[Path, dict[int, Path], bytes] | None = None
        # height -> (blockpos, first txindex, tx count, hash, time): a few thousand blocks at most, emptied
        # whenever the explorer index commits (a reorg changes what a height holds).
        self._heights: dict[int, tuple[int, int, int, str, int]] = {}

    # -- state --------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Pick up new commits; the read-only engines are reopened when the explorer index moved."""
        with self._lock:
            self.raw.refresh()
            self.addr.refresh()
            if self.expl.refresh():
                # Dropped, not closed: a request in another thread may still be reading through them (they
                # close when the last reference goes).
                self._dbs = {}
                self._heights = {}

    @property
    def network(self) -> str:
        return str(self.raw.meta.get("network", "mainnet"))

    def tip(self) -> int:
        """The last height served (-1: none yet)."""
        return self.expl.length("height_to_blockhash") - 1

    def _ready(self) -> None:
        self.refresh()
        if not self.expl.exists:
            raise NotFound(f"{self.out} has no block explorer index yet. Run `brk index --blocks-dir DIR --out "
                               f"{self.out}` (it builds the address and explorer indexes after the raw index).")

    def _db(self, name: str) -> Any:
        db = self._dbs.get(name)
        if db is None:
            from rocksdict import AccessType, Options, Rdict

            path = {"tx": self.out / "txindex", "addr": self.out / "addresses" / "index",
                    "sh": self.out / "addresses" / "scripthash", "expl": self.out / "explorer" / "index"}[name]
            try:
                db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
            except Exception as exc:  # rocksdict raises plain exceptions
                raise StorageError(f"Cannot open {path}: {exc}. Run `brk index --out {self.out}`.") from exc
            self._dbs[name] = db
        return db

    def _one(self, reader: StoreReader, name: str, row: int) -> int:
        return int(reader.read(name, row, row + 1)[0])

    def _rows(self, reader: StoreReader, name: str, rows: np.ndarray) -> np.ndarray:
        from cairn_servers.brk.gather import gather

        entry = reader.vecs[name]
        return gather(reader.root / "vecs" / f"{name}.bin", entry["dtype"], reader.length(name), rows)

    # -- blocks -------------------------------------------------------------------------------------
    def height_of(self, block: str | int) -> int:
        """A height, or a block hash, to a height served; ``NotFound`` otherwise."""
        text = str(block).strip()
        if len(text) == 64:
            return self.block_height(text)
        height = parse_int(text, "block height or hash")
        if height > self.tip():
            raise NotFound(f"Block not found: height {height} is past the tip ({self.tip()}).")
        return height

    def block_height(self, block_hash: str) -> int:
        h = parse_hash(block_hash, "block hash")
        self._ready()
        got = self._db("expl").get(b"B" + h)
        if got is not None:
            height = int.from_bytes(got, "little")
            if height <= self.tip() and bytes(self.expl.read("height_to_blockhash", height, height + 1)[0]) == h:
                return height
        raise NotFound(f"Block not found: {block_hash} is not in the best chain up to height {self.tip()}.")

    def _height(self, height: int) -> tuple[int, int, int, str, int]:
        """(blockpos, first txindex, tx count, hash, time) of a height served."""
        found = self._heights.get(height)
        if found is None:
            if len(self._heights) >= HEIGHT_CACHE:
                self._heights.clear()
            found = self._heights[height] = (
                self._one(self.expl, "height_to_blockpos", height), self._one(self.raw, "height_to_first_txindex", height),
                self._one(self.raw, "height_to_tx_count", height),
                bytes(self.expl.read("height_to_blockhash", height, height + 1)[0])[::-1].hex(),
                self._one(self.raw, "height_to_timestamp", height))
        return found

    def block_hash(self, height: int) -> str:
        return self._height(height)[3]

    def _block_file(self, height: int) -> tuple[int, int, int]:
        """(fd, offset, length) of the block at ``height`` in its blk file."""
        from cairn_servers.brk.blocks.files import blk_files, read_xor_key

        pos = self._height(height)[0]
        file_no = self._one(self.raw, "blockpos_to_file", pos)
        if self._blocks is None:
            remembered = self.out / "addresses" / "blocks_dir"
            if not remembered.exists():
                raise StorageError(f"{self.out} does not say where its blocks are. Run `brk index --blocks-dir DIR "
                                   f"--out {self.out}`.")
            blocks_dir = Path(remembered.read_text())
            self._blocks = (blocks_dir, dict(blk_files(blocks_dir)), read_xor_key(blocks_dir))
        fd = self._files.get(file_no)
        if fd is None:
            path = self._blocks[1].get(file_no)
            if path is None:  # a file written since: list them again
                self._blocks = (self._blocks[0], dict(blk_files(self._blocks[0])), self._blocks[2])
                path = self._blocks[1].get(file_no)
            if path is None:
                raise StorageError(f"blk{file_no:05d}.dat is missing from {self._blocks[0]}.")
            fd = self._files[file_no] = os.open(path, os.O_RDONLY)
        return fd, self._one(self.raw, "blockpos_to_offset", pos), self._one(self.raw, "blockpos_to_length", pos)

    def _read_block(self, height: int, start: int = 0, length: int | None = None) -> bytes:
        from cairn_servers.brk.blocks.files import unxor

        fd, offset, size = self._block_file(height)
        length = size - start if length is None else length
        data = os.pread(fd, length, offset + start)
        if len(data) != length:
            raise StorageError(f"the blk file of height {height} is shorter than indexed; run `brk index` again.")
        assert self._blocks is not None
        return unxor(data, self._blocks[2], offset + start)

    def raw_block(self, block_hash: str) -> bytes:
        return self._read_block(self.block_height(block_hash))

    def header(self, height: int) -> bytes:
        return self._read_block(height, 0, 80)

    def block(self, height: int) -> dict[str, Any]:
        """Esplora's block object."""
        from cairn_servers.brk.blocks.parser import difficulty

        head = self.header(height)
        version, prev, merkle, time, bits, nonce = struct.unpack_from("<i32s32sIII", head)
        times = self.raw.read("height_to_timestamp", max(0, height - 10), height + 1)
        result: dict[str, Any] = {
            "id": self.block_hash(height), "height": height, "version": version, "timestamp": time,
            "tx_count": self._one(self.raw, "height_to_tx_count", height),
            "size": self._one(self.raw, "height_to_size", height),
            "weight": self._one(self.raw, "height_to_weight", height),
            "merkle_root": merkle[::-1].hex()}
        if height:
            result["previousblockhash"] = prev[::-1].hex()
        result.update({"mediantime": int(sorted(times.tolist())[len(times) // 2]), "nonce": nonce, "bits": bits,
                       "difficulty": difficulty(bits)})
        return result

    def blocks(self, start: Any = None) -> list[dict[str, Any]]:
        """Ten blocks from ``start`` (default the tip) down, newest first."""
        self._ready()
        top = self.tip() if start is None else self.height_of(start)
        return [self.block(h) for h in range(top, max(-1, top - BLOCKS_PAGE), -1)]

    def block_status(self, block_hash: str) -> dict[str, Any]:
        try:
            height = self.block_height(block_hash)
        except NotFound:
            return {"in_best_chain": False}
        nxt = self.block_hash(height + 1) if height < self.tip() else None
        return {"in_best_chain": True, "height": height, "next_best": nxt}

    def _block_txs(self, height: int) -> tuple[int, int]:
        _, first, count, _, _ = self._height(height)
        return first, count

    def block_txids(self, block_hash: str) -> list[str]:
        first, count = self._block_txs(self.block_height(block_hash))
        rows = self.raw.read("txindex_to_txid", first, first + count)
        return [bytes(r)[::-1].hex() for r in rows]

    def block_txs(self, block_hash: str, start: Any = 0) -> list[dict[str, Any]]:
        height = self.block_height(block_hash)
        begin = parse_int(start, "start index")
        if begin % PAGE:
            raise InvalidInput(f"Invalid start index {begin}: it must be a multiple of {PAGE}.")
        first, count = self._block_txs(height)
        if begin >= count:
            raise NotFound(f"Start index {begin} is out of range: block {block_hash} has {count} transactions.")
        return [self.tx_json(t) for t in range(first + begin, first + min(count, begin + PAGE))]

    # -- transactions -------------------------------------------------------------------------------
    def txindex(self, txid: str) -> int:
        """The txindex of a txid served; ``NotFound`` otherwise."""
        h = parse_hash(txid, "txid")
        self._ready()
        t = self._lookup_txid(h)
        if t < 0:
            raise NotFound(f"Transaction not found: {txid} is not in the chain up to height {self.tip()}.")
        return t

    def _lookup_txid(self, h: bytes) -> int:
        """The txindex of a txid (internal order) served, -1 when the index does not resolve it: unknown, or
        its key taken over by a later transaction sharing its first 8 bytes (see ``cairn_servers.brk.txindex``)."""
        got = self._db("tx").get(h[:8])
        if got is not None and len(got) == 8:
            t = int.from_bytes(got, "little")
            if t < int(self.expl.meta.get("txs", 0)) and bytes(self.raw.read("txindex_to_txid", t, t + 1)[0]) == h:
                return t
        return -1

    def tx(self, t: int) -> Tx:
        height = self._one(self.raw, "txindex_to_height", t)
        first, count = self._block_txs(height)
        sizes = self.raw.read("txindex_to_size", first, t + 1).astype("int64")
        head = 80 + (1 if count < 0xFD else 3 if count <= 0xFFFF else 5)
        start = head + int(sizes[:-1].sum())
        return Tx(self._read_block(height, start, int(sizes[-1])))

    def status(self, t: int) -> dict[str, Any]:
        height = self._one(self.raw, "txindex_to_height", t)
        _, _, _, block_hash, time = self._height(height)
        return {"confirmed": True, "block_height": height, "block_hash": block_hash, "block_time": time}

    def _output(self, script: bytes, value: int) -> dict[str, Any]:
        script_asm, kind, address = _described(script, self.network)
        result: dict[str, Any] = {"scriptpubkey": script.hex(), "scriptpubkey_asm": script_asm,
                                  "scriptpubkey_type": kind}
        if address is not None:
            result["scriptpubkey_address"] = address
        result["value"] = value
        return result

    def _tx_of_output(self, o: int) -> int:
        """The txindex holding output ``o`` (a binary search over ``txindex_to_first_outputindex``)."""
        lo, hi = 0, self.raw.length("txindex_to_first_outputindex")
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._one(self.raw, "txindex_to_first_outputindex", mid) <= o:
                lo = mid
            else:
                hi = mid
        return lo

    def tx_json(self, t: int, tx: Tx | None = None) -> dict[str, Any]:
        """Esplora's transaction object: inputs with their prevouts, outputs, fee and status."""
        from cairn_servers.brk.script import asm, script_type

        tx = self.tx(t) if tx is None else tx
        i0 = self._one(self.raw, "txindex_to_first_inputindex", t)
        spent = self.raw.read("inputindex_to_outputindex", i0, i0 + len(tx.inputs))
        vin = []
        for k, (prev, vout, script_sig, sequence) in enumerate(tx.inputs):
            o = int(spent[k])
            entry: dict[str, Any] = {"txid": prev[::-1].hex(), "vout": vout}
            prevout_script = b""
            if o == NO_OUTPUT:
                entry["prevout"] = None
            else:
                pt = self._lookup_txid(prev)  # one look-up; a binary search over the outputs when it misses
                if pt < 0 or self._one(self.raw, "txindex_to_first_outputindex", pt) + vout != o:
                    pt = self._tx_of_output(o)
                prevout_script = self.tx(pt).outputs[vout][1]
                entry["prevout"] = self._output(prevout_script, self._one(self.raw, "outputindex_to_value", o))
            entry["scriptsig"] = script_sig.hex()
            entry["scriptsig_asm"] = asm(script_sig)
            witness = tx.witness[k] if tx.witness else []
            if witness:
                entry["witness"] = [w.hex() for w in witness]
            entry["is_coinbase"] = o == NO_OUTPUT
            entry["sequence"] = sequence
            kind = script_type(prevout_script) if prevout_script else ""
            redeem = _last_push(script_sig) if kind == "p2sh" else None
            if redeem:
                entry["inner_redeemscript_asm"] = asm(redeem)
            wrapped_wsh = redeem is not None and script_type(redeem) == "v0_p2wsh"
            if witness and (kind == "v0_p2wsh" or wrapped_wsh):
                entry["inner_witnessscript_asm"] = asm(witness[-1])
            vin.append(entry)
        return {"txid": tx.txid[::-1].hex(), "version": tx.version, "locktime": tx.locktime, "vin": vin,
                "vout": [self._output(script, value) for value, script in tx.outputs],
                "size": tx.size, "weight": tx.weight, "fee": self._one(self.raw, "txindex_to_fee", t),
                "status": self.status(t)}

    def get_tx(self, txid: str) -> dict[str, Any]:
        return self.tx_json(self.txindex(txid))

    def tx_raw(self, txid: str) -> bytes:
        return self.tx(self.txindex(txid)).raw

    def tx_status(self, txid: str) -> dict[str, Any]:
        return self.status(self.txindex(txid))

    def _spender(self, outputs: np.ndarray) -> np.ndarray:
        """The input spending each output (-1: unspent up to the tip served)."""
        import numpy as np

        from cairn_servers.brk.gather import gather

        outputs = np.asarray(outputs, dtype=np.int64)
        path = self.out / "explorer" / "spender.bin"
        n = min(path.stat().st_size // 8, int(self.expl.meta.get("outputs", 0)))
        result = np.full(outputs.shape[0], -1, dtype=np.int64)
        inside = outputs < n
        if not inside.any():
            return result
        got = gather(path, "<u8", n, outputs[inside]).astype(np.int64) - 1
        ok = (got >= 0) & (got < int(self.expl.meta.get("inputs", 0)))
        if ok.any():
            back = self._rows(self.raw, "inputindex_to_outputindex", got[ok]).astype(np.int64)
            good = back == outputs[inside][ok]
            sel = np.flatnonzero(inside)[np.flatnonzero(ok)[good]]
            result[sel] = got[ok][good]
        return result

    def _tx_of_input(self, i: int) -> int:
        lo, hi = 0, self.raw.length("txindex_to_first_inputindex")
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._one(self.raw, "txindex_to_first_inputindex", mid) <= i:
                lo = mid
            else:
                hi = mid
        return lo

    def outspends(self, txid: str) -> list[dict[str, Any]]:
        import numpy as np

        t = self.txindex(txid)
        o0 = self._one(self.raw, "txindex_to_first_outputindex", t)
        n = self._one(self.raw, "txindex_to_output_count", t)
        spenders = self._spender(np.arange(o0, o0 + n))
        result: list[dict[str, Any]] = []
        for i in spenders.tolist():
            if i < 0:
                result.append({"spent": False})
                continue
            st = self._tx_of_input(i)
            result.append({"spent": True, "txid": bytes(self.raw.read("txindex_to_txid", st, st + 1)[0])[::-1].hex(),
                           "vin": i - self._one(self.raw, "txindex_to_first_inputindex", st), "status": self.status(st)})
        return result

    def outspend(self, txid: str, vout: Any) -> dict[str, Any]:
        k = parse_int(vout, "output index")
        spends = self.outspends(txid)
        if k >= len(spends):
            raise NotFound(f"Output not found: {txid} has {len(spends)} outputs (0..{len(spends) - 1}).")
        return spends[k]

    def merkle_proof(self, txid: str) -> dict[str, Any]:
        t = self.txindex(txid)
        height = self._one(self.raw, "txindex_to_height", t)
        first, count = self._block_txs(height)
        level = [bytes(r) for r in self.raw.read("txindex_to_txid", first, first + count)]
        pos = index = t - first
        merkle = []
        while len(level) > 1:
            if len(level) & 1:
                level.append(level[-1])
            merkle.append(level[index ^ 1][::-1].hex())
            level = [sha256d(level[i] + level[i + 1]) for i in range(0, len(level), 2)]
            index //= 2
        return {"block_height": height, "merkle": merkle, "pos": pos}

    # -- addresses ----------------------------------------------------------------------------------
    def _address_id(self, key: bytes | None) -> int:
        """The address id of an address key (-1: never seen up to the tip served)."""
        if key is None:
            return -1
        got = self._db("addr").get(key)
        if got is None or len(got) != 8:
            return -1
        a = int.from_bytes(got, "little")
        count = self.addr.length("addressindex_to_keyhash")
        if a >= count or self._one(self.addr, "addressindex_to_keyhash", a) != int.from_bytes(key[-8:], "little"):
            return -1
        return a

    def resolve(self, address: str, kind: str = "any") -> tuple[dict[str, str], int]:
        """An address (``kind`` "address"), a script hash (the SHA-256 of the output script in 64 hexadecimal
        digits, ``kind`` "scripthash") or either ("any") -> its label and address id (-1: no history)."""
        from cairn_servers.brk.script import address_key, address_script

        self._ready()
        text = str(address).strip()
        if kind == "scripthash" or (kind == "any" and len(text) == 64 and set(text) <= _HEX):
            if len(text) != 64 or not set(text) <= _HEX:
                raise InvalidInput(f"Invalid script hash {text[:100]!r}: give the SHA-256 of the output script, "
                                   "64 hexadecimal digits.")
            from cairn_servers.brk.addresses import SCRIPTHASH_BYTES, SCRIPTS

            want = bytes.fromhex(text)
            key = self._db("sh").get(want[:SCRIPTHASH_BYTES]) if (self.out / "addresses" / "scripthash").exists() \
                else None
            if key is not None and (key[0] not in SCRIPTS or sha256(SCRIPTS[key[0]][0] + key[1:] + SCRIPTS[key[0]][1])
                                    .digest() != want):
                key = None  # another script sharing the first 16 bytes of its hash
            return {"scripthash": text.lower()}, self._address_id(key)
        return {"address": text}, self._address_id(address_key(address_script(text, self.network)))

    def _history(self, a: int, *, before: int | None = None, limit: int | None = None) -> list[int]:
        """The txindexes of address ``a``, newest first (those below ``before`` only; at most ``limit``).

        Entries are checked (``_involves``): one left by an interrupted run or a rolled-back chain whose
        txindex now holds another transaction is skipped."""
        import numpy as np

        if a < 0:
            return []
        n = int(self.expl.meta.get("txs", 0))
        top = n if before is None else min(before, n)
        if top <= 0:
            return []
        prefix = b"H" + a.to_bytes(4, "big")
        it = self._db("expl").iter()
        it.seek_for_prev(prefix + (top - 1).to_bytes(5, "big"))
        result: list[int] = []
        batch = 1 << 30 if limit is None else max(8, limit + limit // 4)
        while it.valid() and (limit is None or len(result) < limit):
            found: list[int] = []
            while it.valid() and len(found) < batch:
                key = it.key()
                if not key.startswith(prefix):
                    break
                t = int.from_bytes(key[5:], "big")
                if t < top:
                    found.append(t)
                it.prev()
            if not found:
                break
            ok = self._involves(a, np.asarray(found, dtype=np.int64))
            result.extend(t for t, good in zip(found, ok.tolist()) if good)
            if it.valid() and not it.key().startswith(prefix):
                break
        return result if limit is None else result[:limit]

    def _involves(self, a: int, txs: np.ndarray) -> np.ndarray:
        """Whether each transaction pays address ``a`` or spends one of its outputs."""
        import numpy as np

        def expand(first_vec: str, count_vec: str) -> tuple[np.ndarray, np.ndarray]:
            first = self._rows(self.raw, first_vec, txs).astype(np.int64)
            count = self._rows(self.raw, count_vec, txs).astype(np.int64)
            rows = np.repeat(first - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
            return rows, np.repeat(np.arange(txs.shape[0]), count)

        result = np.zeros(txs.shape[0], dtype=bool)
        n_addr = self.addr.length("outputindex_to_addressindex")
        outs, owner = expand("txindex_to_first_outputindex", "txindex_to_output_count")
        inside = outs < n_addr
        result[owner[inside][self._rows(self.addr, "outputindex_to_addressindex", outs[inside]) == a]] = True
        ins, owner = expand("txindex_to_first_inputindex", "txindex_to_input_count")
        spent = self._rows(self.raw, "inputindex_to_outputindex", ins)
        real = (spent != np.uint64(NO_OUTPUT)) & (spent < np.uint64(n_addr))
        got = self._rows(self.addr, "outputindex_to_addressindex", spent[real].astype(np.int64))
        result[owner[real][got == a]] = True
        return result

    def _funded(self, a: int, txs: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """The outputs of ``txs`` paying address ``a`` (output indexes, their txindexes)."""
        import numpy as np

        if not txs:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        t = np.asarray(txs, dtype=np.int64)
        first = self._rows(self.raw, "txindex_to_first_outputindex", t).astype(np.int64)
        count = self._rows(self.raw, "txindex_to_output_count", t).astype(np.int64)
        owner = np.repeat(t, count)
        outs = np.repeat(first - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
        addrs = self._rows(self.addr, "outputindex_to_addressindex", outs).astype(np.int64)
        mine = addrs == a
        return outs[mine], owner[mine]

    def address(self, address: str, kind: str = "any") -> dict[str, Any]:
        """Esplora's address (or script hash) object: confirmed and mempool statistics."""
        label, a = self.resolve(address, kind)
        txs = self._history(a)
        outs, _ = self._funded(a, txs)
        values = self._rows(self.raw, "outputindex_to_value", outs).astype("int64") if outs.size else outs
        spent = self._spender(outs) >= 0 if outs.size else outs.astype(bool)
        zero = {"funded_txo_count": 0, "funded_txo_sum": 0, "spent_txo_count": 0, "spent_txo_sum": 0, "tx_count": 0}
        chain = {"funded_txo_count": int(outs.shape[0]), "funded_txo_sum": int(values.sum()),
                 "spent_txo_count": int(spent.sum()), "spent_txo_sum": int(values[spent].sum()), "tx_count": len(txs)}
        return {**label, "chain_stats": chain, "mempool_stats": zero}

    def address_txs(self, address: str, last_txid: str | None = None, kind: str = "any") -> list[dict[str, Any]]:
        """Confirmed transactions of an address, newest first, 25 a page: the first page, or those after
        ``last_txid`` (the last one of the previous page). An unknown ``last_txid`` gives an empty page."""
        _, a = self.resolve(address, kind)
        before = None
        if last_txid is not None:
            try:
                before = self.txindex(last_txid)
            except NotFound:
                return []
            if before not in self._history(a, before=before + 1, limit=1):
                return []
        return [self.tx_json(t) for t in self._history(a, before=before, limit=PAGE)]

    def address_txids(self, address: str, limit: int = PAGE) -> list[str]:
        """The newest ``limit`` txids of an address."""
        _, a = self.resolve(address)
        return [bytes(self.raw.read("txindex_to_txid", t, t + 1)[0])[::-1].hex()
                for t in self._history(a, limit=limit)]

    def utxos(self, address: str, kind: str = "any") -> list[dict[str, Any]]:
        """The unspent outputs of an address up to the tip served, oldest first."""
        _, a = self.resolve(address, kind)
        outs, owners = self._funded(a, self._history(a)[::-1])
        if not outs.size:
            return []
        live = self._spender(outs) < 0
        outs, owners = outs[live], owners[live]
        values = self._rows(self.raw, "outputindex_to_value", outs).astype("int64")
        result = []
        for o, t, value in zip(outs.tolist(), owners.tolist(), values.tolist()):
            result.append({"txid": bytes(self.raw.read("txindex_to_txid", t, t + 1)[0])[::-1].hex(),
                           "vout": o - self._one(self.raw, "txindex_to_first_outputindex", t),
                           "status": self.status(t), "value": value})
        return result

    # -- fees ---------------------------------------------------------------------------------------
    def fee_estimates(self) -> dict[str, float]:
        """sat/vB to be confirmed within N blocks: the median of the fee rates of the last N blocks (at least
        6, at most 1,008), never more for a longer target than for a shorter one."""
        import numpy as np

        self._ready()
        tip = self.tip()
        computed = StoreReader(self.out / "computed")
        computed.refresh()
        try:
            if tip < 0 or computed.length("height_to_fee_rate") <= 0:
                return {}
            top = min(tip + 1, computed.length("height_to_fee_rate"))
            rates = computed.read("height_to_fee_rate", max(0, top - 1008), top)[::-1]
        finally:
            computed.close()
        result: dict[str, float] = {}
        floor = float("inf")
        for n in FEE_TARGETS:
            floor = min(floor, float(np.median(rates[:max(6, n)])))
            result[str(n)] = round(floor, 3)
        return result

    def close(self) -> None:
        with self._lock:
            for db in self._dbs.values():
                db.close()
            self._dbs = {}
            for fd in self._files.values():
                os.close(fd)
            self._files = {}
        for reader in (self.raw, self.addr, self.expl):
            reader.close()
