"""The block explorer's Esplora-compatible API on a real server (127.0.0.1) over the bundled mainnet 0..589,
against what this test reads from the raw blocks itself (its own parser below, not brk's): the genesis
coinbase, block 170's transaction (the first payment between people), the outspends of block 9's coinbase,
block 1's coinbase output by its script hash (history and UTXOs), the merkle proof recomputed to the
header's root, the paging of blocks and histories, content types, and the status codes and messages of bad
input. Then the explorer index across a reorg equals a clean index of the new chain, and the address
codecs against the BIP 173 / BIP 350 vectors."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from cairn_servers.brk import esplora
from cairn_servers.brk.http import create_app
from cairn_servers.brk.interface import Interface

from ..mcp._http import serving
from .conftest import mainnet_store

MAGIC = bytes.fromhex("f9beb4d9")
TEXT = "text/plain; charset=utf-8"


# -- the test's own reading of the blocks ----------------------------------------------------------------

def sha256d(b: bytes) -> bytes:
    return hashlib.sha256(hashlib.sha256(b).digest()).digest()


def varint(d: bytes, p: int) -> tuple[int, int]:
    n = d[p]
    if n < 0xFD:
        return n, p + 1
    width = {0xFD: 2, 0xFE: 4, 0xFF: 8}[n]
    return int.from_bytes(d[p + 1:p + 1 + width], "little"), p + 1 + width


class RawTx(NamedTuple):
    txid: str
    raw: bytes
    inputs: list[tuple[str, int, bytes, int]]  # prev txid (display), vout, scriptSig, sequence
    outputs: list[tuple[int, bytes]]  # value, script


class RawBlock(NamedTuple):
    hash: str
    header: bytes
    raw: bytes
    txs: list[RawTx]


def parse_tx(d: bytes, p: int) -> tuple[RawTx, int]:
    start = p
    p += 4  # version; no witness in 2009
    n_in, p = varint(d, p)
    inputs = []
    for _ in range(n_in):
        prev, vout = d[p:p + 32][::-1].hex(), int.from_bytes(d[p + 32:p + 36], "little")
        n, p = varint(d, p + 36)
        inputs.append((prev, vout, d[p:p + n], int.from_bytes(d[p + n:p + n + 4], "little")))
        p += n + 4
    n_out, p = varint(d, p)
    outputs = []
    for _ in range(n_out):
        value = int.from_bytes(d[p:p + 8], "little")
        n, p = varint(d, p + 8)
        outputs.append((value, d[p:p + n]))
        p += n
    p += 4
    return RawTx(sha256d(d[start:p])[::-1].hex(), d[start:p], inputs, outputs), p


def read_chain(blk: Path) -> list[RawBlock]:
    data = blk.read_bytes()
    by_prev: dict[bytes, RawBlock] = {}
    p = 0
    while p + 8 <= len(data) and data[p:p + 4] == MAGIC:
        size = int.from_bytes(data[p + 4:p + 8], "little")
        raw = data[p + 8:p + 8 + size]
        p += 8 + size
        n, q = varint(raw, 80)
        txs = []
        for _ in range(n):
            tx, q = parse_tx(raw, q)
            txs.append(tx)
        by_prev[raw[4:36]] = RawBlock(sha256d(raw[:80])[::-1].hex(), raw[:80], raw, txs)
    chain, prev = [], bytes(32)
    while prev in by_prev:  # the chain from genesis, by each header's previous hash
        chain.append(by_prev[prev])
        prev = bytes.fromhex(chain[-1].hash)[::-1]
    return chain


class Chain:
    """What the test knows from the blocks: every output, who spends it, the history of every script."""

    def __init__(self, blocks: list[RawBlock]) -> None:
        self.blocks = blocks
        self.txs: dict[str, tuple[int, int, RawTx]] = {}  # txid -> height, position in block, tx
        self.outputs: dict[tuple[str, int], tuple[int, bytes]] = {}
        self.spent_by: dict[tuple[str, int], tuple[str, int, int]] = {}  # outpoint -> txid, vin, height
        for height, block in enumerate(blocks):
            for pos, tx in enumerate(block.txs):
                self.txs[tx.txid] = (height, pos, tx)
                for vin, (prev, vout, _, _) in enumerate(tx.inputs):
                    if pos:
                        self.spent_by[(prev, vout)] = (tx.txid, vin, height)
                for vout, out in enumerate(tx.outputs):
                    self.outputs[(tx.txid, vout)] = out

    def history(self, script: bytes) -> list[str]:
        """Txids paying ``script`` or spending an output of it, newest first."""
        found = set()
        for (txid, vout), (_, out_script) in self.outputs.items():
            if out_script == script:
                found.add(txid)
                if (txid, vout) in self.spent_by:
                    found.add(self.spent_by[(txid, vout)][0])
        return sorted(found, key=lambda t: self.txs[t][:2], reverse=True)

    def fee(self, tx: RawTx) -> int:
        if not self.txs[tx.txid][1]:
            return 0
        return sum(self.outputs[(p, v)][0] for p, v, _, _ in tx.inputs) - sum(v for v, _ in tx.outputs)


@pytest.fixture(scope="module")
def chain(store: Path) -> Chain:
    return Chain(read_chain(store.parent / "blocks" / "blk00000.dat"))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return mainnet_store(tmp_path_factory.mktemp("brk_esplora"), addresses=True)


@pytest.fixture(scope="module")
def api(store: Path) -> Iterator[httpx.Client]:
    with serving(create_app(Interface(store)), path="") as url, httpx.Client(base_url=url + "/api") as client:
        yield client


def status_of(chain: Chain, height: int) -> dict[str, Any]:
    block = chain.blocks[height]
    return {"confirmed": True, "block_height": height, "block_hash": block.hash,
            "block_time": struct.unpack_from("<I", block.header, 68)[0]}


def p2pk_asm(script: bytes) -> str:
    return f"OP_PUSHBYTES_{script[0]} {script[1:-1].hex()} OP_CHECKSIG"


# -- blocks ------------------------------------------------------------------------------------------

def test_genesis_block_and_its_coinbase(api: httpx.Client, chain: Chain) -> None:
    genesis = chain.blocks[0]
    tip = len(chain.blocks) - 1
    r = api.get("/blocks/tip/height")
    assert (r.status_code, r.headers["content-type"], r.text) == (200, TEXT, str(tip))
    assert api.get("/blocks/tip/hash").text == chain.blocks[tip].hash
    assert api.get("/block-height/0").text == genesis.hash
    version, prev, merkle, time, bits, nonce = struct.unpack("<i32s32sIII", genesis.header)
    block = api.get(f"/block/{genesis.hash}").json()
    assert block == {"id": genesis.hash, "height": 0, "version": version, "timestamp": time, "tx_count": 1,
                     "size": len(genesis.raw), "weight": 4 * len(genesis.raw), "merkle_root": merkle[::-1].hex(),
                     "mediantime": time, "nonce": nonce, "bits": bits, "difficulty": 1.0}
    r = api.get(f"/block/{genesis.hash}/header")
    assert (r.headers["content-type"], r.text) == (TEXT, genesis.header.hex())
    r = api.get(f"/block/{genesis.hash}/raw")
    assert (r.headers["content-type"], r.content) == ("application/octet-stream", genesis.raw)
    assert api.get(f"/block/{genesis.hash}/status").json() == {"in_best_chain": True, "height": 0,
                                                                "next_best": chain.blocks[1].hash}
    coinbase = genesis.txs[0]
    assert api.get(f"/block/{genesis.hash}/txids").json() == [coinbase.txid]
    assert api.get(f"/block/{genesis.hash}/txid/0").text == coinbase.txid
    tx = api.get(f"/tx/{coinbase.txid}").json()
    _, _, script_sig, sequence = coinbase.inputs[0]
    value, script = coinbase.outputs[0]
    assert tx["vin"] == [{"txid": "0" * 64, "vout": 0xFFFFFFFF, "prevout": None, "scriptsig": script_sig.hex(),
                          "scriptsig_asm": tx["vin"][0]["scriptsig_asm"], "is_coinbase": True, "sequence": sequence}]
    assert "The Times 03/Jan/2009" in bytes.fromhex(tx["vin"][0]["scriptsig_asm"].split()[-1]).decode()
    assert tx["vout"] == [{"scriptpubkey": script.hex(), "scriptpubkey_asm": p2pk_asm(script),
                           "scriptpubkey_type": "p2pk", "value": value}]  # P2PK: no address
    assert (tx["txid"], tx["size"], tx["weight"], tx["fee"]) == (coinbase.txid, len(coinbase.raw),
                                                               4 * len(coinbase.raw), 0)
    assert tx["status"] == status_of(chain, 0) == api.get(f"/tx/{coinbase.txid}/status").json()
    r = api.get(f"/tx/{coinbase.txid}/hex")
    assert (r.headers["content-type"], r.text) == (TEXT, coinbase.raw.hex())
    assert api.get(f"/tx/{coinbase.txid}/raw").content == coinbase.raw
    assert api.get(f"/block/{genesis.hash}/txs").json() == [tx]


def test_blocks_newest_first_ten_a_page(api: httpx.Client, chain: Chain) -> None:
    tip = len(chain.blocks) - 1
    page = api.get("/blocks").json()
    assert [b["height"] for b in page] == list(range(tip, tip - 10, -1))
    assert [b["id"] for b in page] == [chain.blocks[h].hash for h in range(tip, tip - 10, -1)]
    assert page[0]["previousblockhash"] == chain.blocks[tip - 1].hash
    times = sorted(struct.unpack_from("<I", chain.blocks[h].header, 68)[0] for h in range(tip - 10, tip + 1))
    assert page[0]["mediantime"] == times[5]
    assert [b["height"] for b in api.get("/blocks/12").json()] == list(range(12, 2, -1))
    assert [b["height"] for b in api.get("/blocks/4").json()] == [4, 3, 2, 1, 0]
    assert api.get("/blocks/12").json()[0] == api.get(f"/block/{chain.blocks[12].hash}").json()


def test_block_170_the_first_payment_and_its_merkle_proof(api: httpx.Client, chain: Chain) -> None:
    block = chain.blocks[170]
    payment = block.txs[1]
    assert api.get(f"/block/{block.hash}/txids").json() == [t.txid for t in block.txs]
    tx = api.get(f"/tx/{payment.txid}").json()
    (prev, vout, script_sig, sequence), = payment.inputs
    spent_value, spent_script = chain.outputs[(prev, vout)]
    assert chain.txs[prev][0] == 9  # it spends block 9's coinbase
    assert tx["vin"] == [{"txid": prev, "vout": vout, "prevout": {
        "scriptpubkey": spent_script.hex(), "scriptpubkey_asm": p2pk_asm(spent_script), "scriptpubkey_type": "p2pk",
        "value": spent_value}, "scriptsig": script_sig.hex(),
        "scriptsig_asm": f"OP_PUSHBYTES_{script_sig[0]} {script_sig[1:].hex()}", "is_coinbase": False,
        "sequence": sequence}]
    assert [(o["value"], o["scriptpubkey"]) for o in tx["vout"]] == [(v, s.hex()) for v, s in payment.outputs]
    assert [o["value"] for o in tx["vout"]] == [10 * 10**8, 40 * 10**8]
    assert tx["fee"] == chain.fee(payment) == 0 and tx["status"] == status_of(chain, 170)
    proof = api.get(f"/tx/{payment.txid}/merkle-proof").json()
    assert (proof["block_height"], proof["pos"]) == (170, 1)
    node, pos = bytes.fromhex(payment.txid)[::-1], proof["pos"]
    for sibling in proof["merkle"]:
        other = bytes.fromhex(sibling)[::-1]
        node = sha256d(other + node) if pos & 1 else sha256d(node + other)
        pos >>= 1
    assert node == block.header[36:68]  # the header's merkle root


def test_outspends_of_block_9s_coinbase(api: httpx.Client, chain: Chain) -> None:
    coinbase = chain.blocks[9].txs[0]
    spender, vin, height = chain.spent_by[(coinbase.txid, 0)]
    want = {"spent": True, "txid": spender, "vin": vin, "status": status_of(chain, height)}
    assert height == 170
    assert api.get(f"/tx/{coinbase.txid}/outspends").json() == [want]
    assert api.get(f"/tx/{coinbase.txid}/outspend/0").json() == want
    payment = chain.blocks[170].txs[1]
    assert api.get(f"/tx/{payment.txid}/outspends").json() == [
        {"spent": True, "txid": s[0], "vin": s[1], "status": status_of(chain, s[2])} if s else {"spent": False}
        for s in (chain.spent_by.get((payment.txid, k)) for k in range(2))]
    r = api.get(f"/tx/{coinbase.txid}/outspend/1")
    assert (r.status_code, r.text) == (404, f"Output not found: {coinbase.txid} has 1 outputs (0..0).")


def test_block_1s_coinbase_output_by_script_hash(api: httpx.Client, chain: Chain) -> None:
    coinbase = chain.blocks[1].txs[0]
    value, script = coinbase.outputs[0]
    sh = hashlib.sha256(script).hexdigest()
    assert chain.history(script) == [coinbase.txid] and (coinbase.txid, 0) not in chain.spent_by
    zero = {"funded_txo_count": 0, "funded_txo_sum": 0, "spent_txo_count": 0, "spent_txo_sum": 0, "tx_count": 0}
    assert api.get(f"/scripthash/{sh}").json() == {"scripthash": sh, "chain_stats": {
        "funded_txo_count": 1, "funded_txo_sum": value, "spent_txo_count": 0, "spent_txo_sum": 0, "tx_count": 1},
        "mempool_stats": zero}
    txs = api.get(f"/scripthash/{sh}/txs").json()
    assert [t["txid"] for t in txs] == [coinbase.txid] and txs[0] == api.get(f"/tx/{coinbase.txid}").json()
    assert api.get(f"/scripthash/{sh}/txs/chain").json() == txs
    assert api.get(f"/scripthash/{sh}/txs/chain/{coinbase.txid}").json() == []
    assert api.get(f"/scripthash/{sh}/txs/mempool").json() == []
    assert api.get(f"/scripthash/{sh}/utxo").json() == [{"txid": coinbase.txid, "vout": 0,
                                                          "status": status_of(chain, 1), "value": value}]
    # The same output by its public key (a P2PK "address", as BRK counts them).
    assert api.get(f"/address/{script[1:-1].hex()}/utxo").json() == api.get(f"/scripthash/{sh}/utxo").json()
    unseen = hashlib.sha256(b"\x00\x14" + bytes(20)).hexdigest()
    assert api.get(f"/scripthash/{unseen}").json()["chain_stats"] == zero


def test_a_script_hash_sharing_the_indexed_prefix_answers_nothing(api: httpx.Client, chain: Chain) -> None:
    """The script-hash index keys the first 16 bytes of a hash: a hash sharing them with block 1's output
    (another script's) is checked in full and has no history."""
    script = chain.blocks[1].txs[0].outputs[0][1]
    real = hashlib.sha256(script).digest()
    other = (real[:16] + bytes(x ^ 0xFF for x in real[16:])).hex()
    assert api.get(f"/scripthash/{other}").json()["chain_stats"]["tx_count"] == 0
    assert api.get(f"/scripthash/{other}/utxo").json() == [] and api.get(f"/scripthash/{other}/txs").json() == []
    assert api.get(f"/scripthash/{real.hex()}").json()["chain_stats"]["tx_count"] == 1


def test_a_busy_key_history_paged_newest_first(api: httpx.Client, chain: Chain,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Block 9's key paid block 170 and got change back: its history and totals from the blocks, paged two
    at a time (the page is 25; made 2 here so that a page ends inside the history)."""
    script = chain.blocks[9].txs[0].outputs[0][1]
    want = chain.history(script)
    assert len(want) >= 5
    funded = [(k, out) for k, out in chain.outputs.items() if out[1] == script]
    spent = [out for k, out in funded if k in chain.spent_by]
    key = script[1:-1].hex()
    assert api.get(f"/address/{key}").json()["chain_stats"] == {
        "funded_txo_count": len(funded), "funded_txo_sum": sum(v for _, (v, _) in funded),
        "spent_txo_count": len(spent), "spent_txo_sum": sum(v for v, _ in spent), "tx_count": len(want)}
    assert [t["txid"] for t in api.get(f"/address/{key}/txs").json()] == want  # fewer than 25
    monkeypatch.setattr(esplora, "PAGE", 2)
    pages, last = [], None
    while True:
        page = api.get(f"/address/{key}/txs/chain" + (f"/{last}" if last else "")).json()
        if not page:
            break
        assert len(page) <= 2
        pages.append([t["txid"] for t in page])
        last = page[-1]["txid"]
    assert [t for p in pages for t in p] == want and len(pages[0]) == 2
    utxos = api.get(f"/address/{key}/utxo").json()
    assert sorted((u["txid"], u["vout"], u["value"]) for u in utxos) == sorted(
        (k[0], k[1], v) for k, (v, _) in funded if k not in chain.spent_by)


def test_block_transactions_25_a_page(api: httpx.Client, chain: Chain) -> None:
    block = chain.blocks[170]
    txs = api.get(f"/block/{block.hash}/txs").json()
    assert [t["txid"] for t in txs] == [t.txid for t in block.txs]
    assert api.get(f"/block/{block.hash}/txs/0").json() == txs
    r = api.get(f"/block/{block.hash}/txs/1")
    assert (r.status_code, r.text) == (400, "Invalid start index 1: it must be a multiple of 25.")
    r = api.get(f"/block/{block.hash}/txs/25")
    assert (r.status_code, r.text) == (404, f"Start index 25 is out of range: block {block.hash} has 2 transactions.")


def test_fee_estimates_from_recent_blocks(api: httpx.Client, chain: Chain) -> None:
    estimates = api.get("/fee-estimates").json()
    assert list(estimates) == [str(n) for n in (*range(1, 26), 144, 504, 1008)]
    # No transaction of 2009's first 590 blocks paid a fee: every block's fee rate, and so every median, is 0.
    assert all(chain.fee(tx) == 0 for block in chain.blocks for tx in block.txs)
    assert set(estimates.values()) == {0.0}


def test_no_mempool_and_no_broadcast(api: httpx.Client) -> None:
    assert api.get("/mempool").json() == {"count": 0, "vsize": 0, "total_fee": 0, "fee_histogram": []}
    assert api.get("/mempool/txids").json() == [] and api.get("/mempool/recent").json() == []
    r = api.post("/tx", content=b"0100")
    assert r.status_code == 501 and r.text.startswith("brk reads a node's block files and has no node to broadcast")


@pytest.mark.parametrize("path,status,message", [
    ("/tx/xyz", 400, "Invalid txid 'xyz': give 64 hexadecimal digits."),
    ("/tx/" + "g" * 64 + "/status", 400, f"Invalid txid '{'g' * 64}': give 64 hexadecimal digits."),
    ("/tx/" + "0" * 64, 404, f"Transaction not found: {'0' * 64} is not in the chain up to height 589."),
    ("/tx/" + "0" * 64 + "/outspends", 404, f"Transaction not found: {'0' * 64} is not in the chain up to height 589."),
    ("/tx/4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b/outspend/x", 400,
     "Invalid output index 'x': give a whole number."),
    ("/block-height/590", 404, "Block not found: height 590 is past the tip (589)."),
    ("/block-height/-1", 400, "Invalid block height '-1': give a whole number."),
    ("/blocks/99999", 404, "Block not found: height 99999 is past the tip (589)."),
    ("/block/xyz", 400, "Invalid block hash 'xyz': give 64 hexadecimal digits."),
    ("/block/" + "1" * 64, 404, f"Block not found: {'1' * 64} is not in the best chain up to height 589."),
    ("/address/notanaddress", 400, "Invalid Bitcoin address 'notanaddress' for mainnet: give a Base58 (P2PKH, P2SH) "
     "or bech32 (bc1...) address, or a public key in hex."),
    ("/address/bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t5/txs", 400,  # the checksum's last character changed
     "Invalid Bitcoin address 'bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t5' for mainnet: give a Base58 (P2PKH, "
     "P2SH) or bech32 (bc1...) address, or a public key in hex."),
    ("/scripthash/abc/utxo", 400, "Invalid script hash 'abc': give the SHA-256 of the output script, 64 hexadecimal "
     "digits."),
    ("/address/1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa/txs/chain/nope", 400, "Invalid txid 'nope': give 64 hexadecimal "
     "digits."),
    ("/nope", 404, "No such endpoint: GET /api/nope. The API is listed at /openapi.json."),
    ("/tx", 404, "No such endpoint: GET /api/tx. The API is listed at /openapi.json."),
    ("/block/" + "1" * 64 + "/nope", 404, f"No such endpoint: GET /api/block/{'1' * 64}/nope. The API is listed at "
     "/openapi.json."),
])
def test_bad_input_gets_esplora_status_and_a_clear_message(api: httpx.Client, path: str, status: int,
                                                            message: str) -> None:
    r = api.get(path)
    assert (r.status_code, r.headers["content-type"], r.text) == (status, TEXT, message)


def test_unknown_block_status_is_not_in_best_chain(api: httpx.Client) -> None:
    assert api.get(f"/block/{'1' * 64}/status").json() == {"in_best_chain": False}


def test_openapi_lists_the_explorer(api: httpx.Client) -> None:
    paths = httpx.get(str(api.base_url).rstrip("/").removesuffix("/api") + "/openapi.json").json()["paths"]
    for path in ("/api/tx/{txid}", "/api/scripthash/{hash}/txs/chain/{last_seen_txid}", "/api/blocks/{start_height}",
                 "/api/explorer/address"):
        assert path in paths
    assert "501" in paths["/api/tx"]["post"]["responses"]


# -- the index across a reorg, and the address codecs ------------------------------------------------------

def test_explorer_index_after_a_reorg_equals_a_clean_index(tmp_path: Path) -> None:
    """A store indexed on one chain, then on a longer fork of it (the explorer's history, spenders and
    block hashes are rolled back and redone), answers every address and outspend as a store indexed on
    the fork alone."""
    from cairn_servers.brk.compute import compute
    from cairn_servers.brk.indexer import index
    from cairn_servers.brk.sample import write_sample

    blocks, fresh_blocks = tmp_path / "blocks", tmp_path / "fresh_blocks"
    reorged, clean = tmp_path / "reorged", tmp_path / "clean"
    write_sample(blocks, 90, seed=4, spread_blocks=120)
    index(blocks, reorged)
    compute(reorged, blocks_dir=blocks)
    orphan = esplora.Explorer(reorged)
    orphan.refresh()
    orphaned = [orphan.block_hash(h) for h in (80, 89)]
    # Addresses paid in the blocks the fork orphans: their history entries there go stale.
    stale = {out["scriptpubkey_address"] for h in range(70, 90) for txid in orphan.block_txids(orphan.block_hash(h))
             for out in orphan.get_tx(txid)["vout"] if "scriptpubkey_address" in out}
    orphan.close()
    write_sample(blocks, 120, seed=4, fork_at=70, fork_seed=44, spread_blocks=120, first_file=1)
    index(blocks, reorged)
    compute(reorged, blocks_dir=blocks)
    write_sample(fresh_blocks, 120, seed=4, fork_at=70, fork_seed=44, spread_blocks=120)
    index(fresh_blocks, clean)
    compute(clean, blocks_dir=fresh_blocks)
    a, b = esplora.Explorer(reorged), esplora.Explorer(clean)
    try:
        a._ready()
        b._ready()
        assert a.tip() == b.tip() == 119 and a.block_hash(119) == b.block_hash(119)
        assert a.expl.meta["generation"] == 1 and b.expl.meta["generation"] == 0  # rolled back once
        for h in orphaned:
            assert a.block_status(h) == {"in_best_chain": False}
        seen = 0
        for height in (0, 40, 69, 70, 89, 119):
            block_hash = b.block_hash(height)
            assert a.block_height(block_hash) == height
            for txid in b.block_txids(block_hash):
                assert a.outspends(txid) == b.outspends(txid)
                for out in b.get_tx(txid)["vout"]:
                    target = out.get("scriptpubkey_address")
                    if target is None:
                        continue
                    seen += 1
                    assert a.address(target) == b.address(target)
                    assert a.address_txs(target) == b.address_txs(target)
                    assert a.utxos(target) == b.utxos(target)
        assert seen >= 20
        assert len(stale) >= 10
        for target in stale:  # paid by orphaned transactions: only what the new chain holds answers
            assert a.address(target) == b.address(target)
            assert a.address_txs(target) == b.address_txs(target)
            assert a.utxos(target) == b.utxos(target)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("address,script", [  # BIP 173 / BIP 350 vectors, and the genesis key's P2PKH
    ("bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4", "0014751e76e8199196d454941c45d1b3a323f1433bd6"),
    ("bc1qrp33g0q5c5txsp9arysrx4k6zdkfs4nce4xj0gdcccefvpysxf3qccfmv3",
     "00201863143c14c5166804bd19203356da136c985678cd4d27a1b8c6329604903262"),
    ("bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqzk5jj0",
     "512079be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798"),
    ("1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa", "76a91462e907b15cbf27d5425399ebf6f0fb50ebb88f1888ac"),
    ("3J98t1WpEZ73CNmQviecrnyiWrnqRhWNLy", "a914b472a266d0bd89c13706a4132ccfb16f7c3b9fcb87"),
])
def test_address_codecs(address: str, script: str) -> None:
    from cairn_servers.brk.script import address_script, script_address

    assert address_script(address, "mainnet").hex() == script
    assert script_address(bytes.fromhex(script), "mainnet") == address
