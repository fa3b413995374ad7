"""A real wallet library drives brk's Esplora API: BDK (bdkpython) full-scans a descriptor against
`brk serve` on a regtest chain that `brk sample --pay` generated to pay the wallet, spend from it and
send it change. The balance, transactions and UTXOs BDK reports must equal those this test computes
from the raw blocks itself (python-bitcoinlib), not from anything brk answers."""

from __future__ import annotations

import random
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..mcp.test_conformance import free_port, wait_listening
from ._run import clean_env, run_brk

# BIP 39 "abandon abandon ... about" (entropy of 16 zero bytes) as a testnet/regtest master key.
TPRV = ("tprv8ZgxMBicQKsPe5YMU9gHen4Ez3ApihUfykaqUorj9t6FDqy3nP6eoXiAo2ssvpAjoLroQxHqr3R5nE3a5dU3DHTjTgJDd7zrbniJr"
        "6nrCzd")
EXTERNAL = f"wpkh({TPRV}/84h/1h/0h/0/*)"
INTERNAL = f"wpkh({TPRV}/84h/1h/0h/1/*)"
STOP_GAP = 5
BLOCKS = 260
RECEIVE = (0, 1, 2, 3, 4, 7)  # external indexes paid: 5 and 6 stay unused, within the stop gap
CHANGE = (0, 1, 2, 3)  # internal indexes that receive change
BUSY = 28  # payments to external 0: more than one page (25) of its history


def _wallet(genesis: str) -> Any:
    import bdkpython as bdk

    # The sample's block 0 is its own, not Bitcoin Core's regtest genesis: the wallet is told its hash.
    params = bdk.CreateParams(genesis_hash=bdk.BlockHash.from_string(genesis), lookahead=25, use_spk_cache=False)
    return bdk.Wallet.create_with_params(bdk.Descriptor(EXTERNAL, bdk.NetworkKind.TEST),
                                         bdk.Descriptor(INTERNAL, bdk.NetworkKind.TEST), bdk.Network.REGTEST,
                                         bdk.Persister.new_in_memory(), params)


def _address(wallet: Any, keychain: str, index: int) -> Any:
    import bdkpython as bdk

    kind = bdk.KeychainKind.EXTERNAL if keychain == "external" else bdk.KeychainKind.INTERNAL
    return wallet.peek_address(kind, index).address


@dataclass
class ChainView:
    """What the raw blocks say about a set of scripts."""

    tip: tuple[int, str] = (-1, "")
    genesis: str = ""
    heights: dict[str, int] = field(default_factory=dict)  # txid -> height, for the wallet's transactions
    sent: dict[str, int] = field(default_factory=dict)  # txid -> sats spent from the wallet's outputs
    received: dict[str, int] = field(default_factory=dict)  # txid -> sats paid to the wallet's scripts
    utxos: dict[tuple[str, int], tuple[int, bytes]] = field(default_factory=dict)  # unspent: value, script
    history: dict[bytes, set[str]] = field(default_factory=dict)  # script -> txids funding or spending it
    blocks: list[Any] = field(default_factory=list)  # python-bitcoinlib CBlock by height
    raw: dict[str, bytes] = field(default_factory=dict)  # txid -> serialized transaction (wallet's only)
    fees: dict[str, int] = field(default_factory=dict)  # txid -> fee (wallet's only)
    spenders: dict[tuple[str, int], tuple[str, int, int]] = field(default_factory=dict)  # outpoint -> txid, vin, height


def _blocks(blocks_dir: Path) -> Iterator[bytes]:
    for path in sorted(blocks_dir.glob("blk*.dat")):
        data = path.read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            (size,) = struct.unpack_from("<I", data, pos + 4)
            yield data[pos + 8:pos + 8 + size]
            pos += 8 + size


def chain_view(blocks_dir: Path, scripts: set[bytes]) -> ChainView:
    """The wallet's transactions, UTXOs and per-transaction amounts, read from the blk files with
    python-bitcoinlib (an independent parser): outputs to ``scripts`` and the inputs spending them."""
    from bitcoin.core import CBlock, b2lx

    view = ChainView()
    mine: dict[tuple[str, int], tuple[int, bytes]] = {}  # every wallet output ever created
    values: dict[tuple[str, int], int] = {}  # every output's value (a small chain)
    prev = "00" * 32
    for height, raw in enumerate(_blocks(blocks_dir)):
        block = CBlock.deserialize(raw)
        assert b2lx(block.hashPrevBlock) == prev  # one chain in order: heights are positions
        prev = b2lx(block.GetHash())
        view.genesis = view.genesis or prev
        view.tip = (height, prev)
        view.blocks.append(block)
        for tx in block.vtx:
            txid = b2lx(tx.GetTxid())
            touched: set[bytes] = set()
            fee = 0
            if not tx.is_coinbase():
                for vin, txin in enumerate(tx.vin):
                    key = (b2lx(txin.prevout.hash), txin.prevout.n)
                    fee += values[key]
                    view.spenders[key] = (txid, vin, height)
                    if key in mine:
                        value, script = mine[key]
                        view.sent[txid] = view.sent.get(txid, 0) + value
                        view.utxos.pop(key)
                        touched.add(script)
                fee -= sum(out.nValue for out in tx.vout)
            for vout, out in enumerate(tx.vout):
                values[(txid, vout)] = out.nValue
                script = bytes(out.scriptPubKey)
                if script in scripts:
                    mine[(txid, vout)] = view.utxos[(txid, vout)] = (out.nValue, script)
                    view.received[txid] = view.received.get(txid, 0) + out.nValue
                    touched.add(script)
            if touched:
                view.heights[txid] = height
                view.raw[txid] = tx.serialize()
                view.fees[txid] = fee
                for script in touched:
                    view.history.setdefault(script, set()).add(txid)
    return view


def _payments(wallet: Any) -> list[str]:
    """``brk sample`` options: the receive addresses paid (one of them BUSY times) in a shuffled order, the
    first twelve payments spent again, change to the change addresses."""
    pays = [str(_address(wallet, "external", 0))] * BUSY
    pays += [str(_address(wallet, "external", i)) for i in RECEIVE[1:] for _ in range(2)]
    random.Random(3).shuffle(pays)
    args = []
    for n, address in enumerate(pays):
        args += ["--pay", f"{address}:{20_000 + 1_000 * n}"]
    args += ["--spend", "12"]
    for i in CHANGE:
        args += ["--change", str(_address(wallet, "internal", i))]
    return args


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ChainView]:
    """A 260-block regtest chain paying the wallet, indexed by `brk index`; and the test's own view of it."""
    base = tmp_path_factory.mktemp("bdk")
    blocks, out = base / "blocks", base / "out"
    wallet = _wallet("00" * 32)  # only to derive addresses; the genesis is not known yet
    r = run_brk("sample", "--blocks", str(BLOCKS), "--seed", "11", "--out", str(blocks), "--json",
                *_payments(wallet), env=clean_env())
    assert r.code == 0, r.err
    scripts = {bytes(_address(wallet, k, i).script_pubkey().to_bytes())
               for k in ("external", "internal") for i in range(20)}
    view = chain_view(blocks, scripts)
    r = run_brk("index", "--blocks-dir", str(blocks), "--out", str(out), "--progress", "none", "--json",
                env=clean_env())
    assert r.code == 0, r.err
    return out, view


@pytest.fixture(scope="module")
def esplora(chain: tuple[Path, ChainView], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`brk serve` on a free 127.0.0.1 port; yields the Esplora base URL (…/api)."""
    out, _ = chain
    port = free_port()
    log = tmp_path_factory.mktemp("bdk_serve") / "serve.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.brk.cli", "serve", "--out", str(out), "--bind",
                                 f"127.0.0.1:{port}"], stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                env=clean_env())
    try:
        wait_listening(port, proc, log)
        yield f"http://127.0.0.1:{port}/api"
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_chain_exercises_the_wallet(chain: tuple[Path, ChainView]) -> None:
    """The generated chain has what the scan must get right: receives, spends with change, gaps, paging."""
    _, view = chain
    spends = [t for t in view.heights if t in view.sent]
    assert len(spends) == 12 and all(view.received.get(t, 0) > 0 for t in spends)  # spent, with change back
    assert len(view.heights) == BUSY + 2 * (len(RECEIVE) - 1) + 12
    assert max(len(h) for h in view.history.values()) > 25  # a history of more than one page (/txs/chain/:last)
    assert view.tip[0] == BLOCKS - 1


def test_bdk_full_scan_matches_the_blocks(chain: tuple[Path, ChainView], esplora: str) -> None:
    import bdkpython as bdk

    _, view = chain
    wallet = _wallet(view.genesis)
    client = bdk.EsploraClient(esplora)
    wallet.apply_update(client.full_scan(wallet.start_full_scan().build(), STOP_GAP, 4))

    tip = wallet.latest_checkpoint()
    assert (tip.height, str(tip.hash)) == view.tip
    assert wallet.derivation_index(bdk.KeychainKind.EXTERNAL) == max(RECEIVE)
    assert wallet.derivation_index(bdk.KeychainKind.INTERNAL) == max(CHANGE)

    balance = wallet.balance()
    expected = sum(v for v, _ in view.utxos.values())
    assert (balance.total.to_sat(), balance.confirmed.to_sat()) == (expected, expected)
    pending = (balance.immature, balance.trusted_pending, balance.untrusted_pending)
    assert [a.to_sat() for a in pending] == [0, 0, 0]

    seen: dict[str, int] = {}
    for canonical in wallet.transactions():
        txid = str(canonical.transaction.compute_txid())
        position = canonical.chain_position
        assert isinstance(position, bdk.ChainPosition.CONFIRMED), (txid, position)
        block = position.confirmation_block_time.block_id
        seen[txid] = block.height
        amounts = wallet.sent_and_received(canonical.transaction)
        assert (amounts.sent.to_sat(), amounts.received.to_sat()) == (view.sent.get(txid, 0),
                                                                      view.received.get(txid, 0)), txid
    assert seen == view.heights

    utxos = {(str(u.outpoint.txid), u.outpoint.vout): (u.txout.value.to_sat(), bytes(u.txout.script_pubkey.to_bytes()))
             for u in wallet.list_unspent()}
    assert utxos == view.utxos
    assert all(not u.is_spent for u in wallet.list_unspent())


def _merkle_root(txid: str, branch: list[str], pos: int) -> str:
    """The root a merkle proof leads to (hashes in display order, as Esplora gives them)."""
    from hashlib import sha256

    node = bytes.fromhex(txid)[::-1]
    for sibling in branch:
        pair = (bytes.fromhex(sibling)[::-1] + node) if pos & 1 else (node + bytes.fromhex(sibling)[::-1])
        node = sha256(sha256(pair).digest()).digest()
        pos >>= 1
    return node[::-1].hex()


def test_bdk_client_reads_blocks_transactions_and_spends(chain: tuple[Path, ChainView], esplora: str) -> None:
    """BDK's other Esplora calls (a wallet's look-ups one by one) parse brk's answers into what the blocks hold:
    transactions and their status, fee, size and merkle proof; outputs' spenders; block hashes, headers,
    blocks and txids by position; an address's pages."""
    import bdkpython as bdk
    from bitcoin.core import b2lx

    _, view = chain
    client = bdk.EsploraClient(esplora)
    assert (client.get_height(), str(client.get_tip_hash())) == view.tip
    for txid in sorted(view.heights)[::5]:
        height = view.heights[txid]
        block = view.blocks[height]
        bhash = b2lx(block.GetHash())
        assert client.get_tx(bdk.Txid.from_string(txid)).serialize() == view.raw[txid]
        info = client.get_tx_info(bdk.Txid.from_string(txid))
        tx = next(t for t in block.vtx if b2lx(t.GetTxid()) == txid)
        stripped = len(tx.serialize(params={"include_witness": False}))
        assert (str(info.txid), info.version, info.locktime, info.size, info.weight, info.fee) == (
            txid, tx.nVersion, tx.nLockTime, len(view.raw[txid]), 3 * stripped + len(view.raw[txid]), view.fees[txid])
        status = client.get_tx_status(bdk.Txid.from_string(txid))
        assert (status.confirmed, status.block_height, str(status.block_hash), status.block_time) == (
            True, height, bhash, block.nTime)
        proof = client.get_merkle_proof(bdk.Txid.from_string(txid))
        assert proof.block_height == height
        assert _merkle_root(txid, [str(h) for h in proof.merkle], proof.pos) == b2lx(block.hashMerkleRoot)
        assert str(client.get_txid_at_block_index(bdk.BlockHash.from_string(bhash), proof.pos)) == txid
        for vout in range(len(tx.vout)):
            out = client.get_output_status(bdk.Txid.from_string(txid), vout)
            spender = view.spenders.get((txid, vout))
            if spender is None:
                assert not out.spent and out.txid is None, (txid, vout)
            else:
                assert (out.spent, str(out.txid), out.vin, out.status.block_height) == (True, *spender), (txid, vout)
    for height in range(0, len(view.blocks), 37):
        block = view.blocks[height]
        bhash = client.get_block_hash(height)
        assert str(bhash) == b2lx(block.GetHash())
        header = client.get_header_by_hash(bhash)
        assert (header.version, str(header.prev_blockhash), str(header.merkle_root), header.time, header.bits,
                header.nonce) == (block.nVersion, b2lx(block.hashPrevBlock), b2lx(block.hashMerkleRoot), block.nTime,
                                  block.nBits, block.nNonce)
        full = client.get_block_by_hash(bhash)
        assert [str(t.compute_txid()) for t in full.txdata] == [b2lx(t.GetTxid()) for t in block.vtx]
    # An address's history page by page (what `get_address_txs` pages with last_seen), newest first.
    wallet = _wallet(view.genesis)
    address = _address(wallet, "external", 0)
    script = bytes(address.script_pubkey().to_bytes())
    pages: list[Any] = []
    last = None
    while True:
        page = client.get_address_txs(address, last)
        pages += page
        if len(page) < 25:
            break
        last = page[-1].txid
    heights = [t.status.block_height for t in pages]
    assert heights == sorted(heights, reverse=True) and len(pages) > 25
    assert sorted(str(t.txid) for t in pages) == sorted(view.history[script])

