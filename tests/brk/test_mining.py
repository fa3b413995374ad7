"""Mining (cairn_servers.brk.mining): subsidy, fees and coinbase recomputed from the raw blocks with
python-bitcoinlib (mainnet 0..589 and a generated chain with fees and regtest's 150-block halvings); pool
attribution on a generated chain whose coinbases carry known tags and payout addresses, against the rule restated
here from the bundled list; the derived series recomputed from the same chain; a reorg, a SIGKILL mid-pass and a
new pools list ending byte-identical to a clean run."""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cairn_servers.brk import catalog, mining, prices
from cairn_servers.brk.blocks.files import MAGICS
from cairn_servers.brk.blockwrite import merkle_root, mine_header, sha256d, varint
from cairn_servers.brk.blocks.parser import bits_to_target
from cairn_servers.brk.compute import compute, computed_dir, run_passes
from cairn_servers.brk.dates import DATE_INDEXES, HEIGHT_INDEXES, dateindex_of_day
from cairn_servers.brk.indexer import index
from cairn_servers.brk.interface import Interface
from cairn_servers.brk.sample import START_TIME, write_sample
from cairn_servers.brk.vecs import VecStore

from .conftest import mainnet_store

COIN = 100_000_000
DAY = 86_400


def _col(q: Interface, index: str, vec_id: str) -> list[Any]:
    got: list[Any] = q.get_vecs(index, vec_id, from_=0, count=1_000_000).columns[0]
    return got


def _chain_of(blocks_dir: Path) -> list[Any]:  # python-bitcoinlib's CBlock: untyped
    """Every block of the blk files, in chain order, parsed by python-bitcoinlib (not by brk)."""
    from bitcoin.core import CBlock

    by_prev: dict[bytes, Any] = {}
    for path in sorted(blocks_dir.glob("blk*.dat")):
        data = path.read_bytes()
        p = 0
        while p + 8 <= len(data):
            length = int.from_bytes(data[p + 4:p + 8], "little")
            block = CBlock.deserialize(data[p + 8:p + 8 + length])
            by_prev.setdefault(block.hashPrevBlock, block)
            p += 8 + length
    chain, prev = [], b"\0" * 32
    while prev in by_prev:
        chain.append(by_prev[prev])
        prev = chain[-1].GetHash()
    return chain


def _rewards(chain: list[Any]) -> tuple[list[int], list[int], list[int]]:
    """(coinbase, fees, subsidy) of every block: fees are inputs minus outputs of its other transactions."""
    outs: dict[tuple[bytes, int], int] = {}
    coinbase, fees = [], []
    for block in chain:
        fee = 0
        for tx in block.vtx:
            txid = tx.GetTxid()
            if not tx.is_coinbase():
                fee += sum(outs.pop((i.prevout.hash, i.prevout.n)) for i in tx.vin) - sum(o.nValue for o in tx.vout)
            for n, o in enumerate(tx.vout):
                outs[(txid, n)] = o.nValue
        coinbase.append(sum(o.nValue for o in block.vtx[0].vout))
        fees.append(fee)
    return coinbase, fees, [c - f for c, f in zip(coinbase, fees)]


def _check_rewards(out: Path, chain: list[Any]) -> tuple[list[int], list[int], list[int]]:
    coinbase, fees, subsidy = _rewards(chain)
    q = Interface(out)
    assert _col(q, "height", "coinbase") == coinbase
    assert _col(q, "height", "fees") == fees == _col(q, "height", "fee")
    assert _col(q, "height", "subsidy") == subsidy
    assert _col(q, "height", "subsidy_btc") == [s / COIN for s in subsidy]
    assert _col(q, "height", "fees_btc") == [f / COIN for f in fees]
    assert _col(q, "height", "fees_cumulative") == np.cumsum(fees).tolist()
    assert _col(q, "height", "subsidy_btc_cumulative") == (np.cumsum(subsidy) / COIN).tolist()
    # Per day: the sums of the blocks of each day (by the monotonic block time), and the running sums.
    mts = np.maximum.accumulate([b.nTime for b in chain])
    day = dateindex_of_day(mts // DAY)
    first = int(day[0])
    n_days = int(day[-1]) + 1 - first
    for vec_id, values in (("fees_btc", fees), ("subsidy_btc", subsidy), ("coinbase_btc", coinbase)):
        per_day = np.bincount(day - first, weights=values, minlength=n_days) / COIN
        got = _col(q, "dateindex", vec_id)
        assert got[first:] == pytest.approx(per_day.tolist(), rel=1e-12), vec_id
        assert _col(q, "dateindex", f"{vec_id}_sum")[first:] == got[first:]
        assert _col(q, "dateindex", f"{vec_id.removesuffix('_btc')}_cumulative")[first:] == \
            np.cumsum(np.bincount(day - first, weights=values, minlength=n_days)).astype(np.int64).tolist()
    return coinbase, fees, subsidy


def test_mainnet_rewards_recomputed_from_the_blocks(tmp_path: Path) -> None:
    out = mainnet_store(tmp_path)
    chain = _chain_of(tmp_path / "blocks")
    assert len(chain) == 590
    coinbase, fees, subsidy = _check_rewards(out, chain)
    assert set(subsidy) == {50 * COIN} and sum(fees) == 0 == sum(coinbase) - 590 * 50 * COIN


def test_generated_rewards_with_fees_and_halvings(tmp_path: Path) -> None:
    """`brk sample` pays regtest's subsidy, halving every 150 blocks, plus the fees of its transactions."""
    blocks = tmp_path / "blocks"
    write_sample(blocks, 400, seed=12)
    out = tmp_path / "out"
    index(blocks, out)
    compute(out)
    coinbase, fees, subsidy = _check_rewards(out, _chain_of(blocks))
    assert subsidy == [(50 * COIN) >> (h // 150) for h in range(400)]
    assert sum(fees) > 0 and sum(f > 0 for f in fees) > 100


# -- pools ----------------------------------------------------------------------------------------------

def _listed() -> list[dict[str, Any]]:
    """The bundled list as BRK reads it: mempool's ids of test-network pools left out."""
    entries: list[dict[str, Any]] = json.loads(mining.POOLS_FILE.read_text())
    return [e for e in entries if e["id"] not in {145, 146, 149, 150, 156, 163}]


def _expected_pool(tag: bytes, payout: str | None) -> int:
    """The rule, restated: a listed payout address first (the first pool listing it), then the first pool one
    of whose tags occurs in the scriptSig (case ignored), else unknown (0)."""
    for e in _listed():
        if payout is not None and payout in e["addresses"]:
            return int(e["id"])
    text = tag[:100].decode("latin-1").lower()
    for e in _listed():
        if any(t.lower() in text for t in e["tags"]):
            return int(e["id"])
    return 0


def _script(address: str | None, rng: random.Random) -> bytes:
    if address is None:
        return b"\x00\x14" + rng.randbytes(20)
    from bitcoin.core import CScript
    from bitcoin.wallet import CBitcoinAddress

    script: CScript = CBitcoinAddress(address).to_scriptPubKey()
    return bytes(script)


# (coinbase text, payout address): tags in another case and among other bytes, addresses of three script types,
# an address winning over another pool's tag, a tag that is also inside another pool's text, and no match.
BLOCKS = [
    (b"/AntPool/ x", None), (b"xx mined by antpool yy", None), (b"FOUNDRY USA POOL #", None),
    (b"/ViaBTC/Mined by someone/", None), (b"OCEAN.XYZ", None), (b"/cairn sample/", None),
    (b"/AntPool/", "1MkCDCzHpBsYQivp8MxjY5AkTGG1f2baoe"),  # Luxor's P2PKH address: the address wins
    (b"", "bc1q39dled8an7enuxtmjql3pk7ny8kzvsxhd924sl"),  # Terra Pool's P2WPKH
    (b"nothing", "39bitUyBcUu3y3hRTtYprKbTp712t4ZWqK"),  # Luxor's P2SH
    (b"\xffF2Pool\xfe", None),
]


def _pool_chain(blocks: Path, kinds: list[int], *, per_day: int = 2, first_file: int = 0) -> None:
    """A regtest chain of coinbase-only blocks, block h carrying ``BLOCKS[kinds[h]]``: the BIP34 height, then the
    text, paying regtest's subsidy to the payout script; ``per_day`` blocks a day from 2024-01-01."""
    target = bits_to_target(0x207FFFFF)
    prev = bytes(32)
    rng = random.Random(3)
    data = bytearray()
    for h, k in enumerate(kinds):
        tag, payout = BLOCKS[k]
        hb = h.to_bytes((h.bit_length() + 8) // 8 or 1, "little")
        script_sig = bytes([len(hb)]) + hb + tag
        script = _script(payout, rng)
        value = (50 * COIN) >> (h // 150)
        tx = (struct.pack("<i", 1) + varint(1) + bytes(32) + b"\xff\xff\xff\xff" + varint(len(script_sig))
              + script_sig + b"\xff\xff\xff\xff" + varint(1) + struct.pack("<q", value) + varint(len(script))
              + script + bytes(4))
        header, prev = mine_header(prev, merkle_root([sha256d(tx)]), START_TIME + h * (DAY // per_day) + 60,
                                   0x207FFFFF, target)
        block = header + varint(1) + tx
        data += MAGICS["regtest"] + struct.pack("<I", len(block)) + block
    blocks.mkdir(parents=True, exist_ok=True)
    (blocks / f"blk{first_file:05d}.dat").write_bytes(bytes(data))


def _kinds(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(len(BLOCKS)) for _ in range(n)]


def _mining_bytes(out: Path) -> dict[str, bytes]:
    s = VecStore(mining.mining_dir(out), mining.specs())
    return {name: s.read(name).tobytes() for name in s.specs}


def test_addresses_read_as_python_bitcoinlib_reads_them() -> None:
    from bitcoin.wallet import CBitcoinAddress

    listed = [a for e in _listed() for a in e["addresses"]]
    assert len(listed) > 150
    for address in listed:
        if address.startswith("bc1p"):  # bech32m, which python-bitcoinlib does not read: checked below
            script = mining.address_script(address)
            assert script is not None and script[:2] == b"\x51\x20" and len(script) == 34
            continue
        if address[0] in "tmn2":  # test-network addresses: no mainnet script
            assert mining.address_script(address) is None, address
            continue
        assert mining.address_script(address) == bytes(CBitcoinAddress(address).to_scriptPubKey()), address
    # BIP 350's test vector of a taproot (bech32m) address.
    assert mining.address_script("bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqzk5jj0") == bytes.fromhex(
        "512079be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798")
    assert mining.address_script("bc1qxhmdufsvnuaaaer4ynz88fspdsxq2h9e9cetdX") is None  # a bad checksum


def test_every_pool_has_its_ids_on_every_index(tmp_path: Path) -> None:
    slugs = mining.slugs()
    assert len(slugs) == len(set(slugs)) == len(_listed()) + 1 and slugs[0] == "unknown"
    # BRK's slugs (mempool's rule; the second "Bitcoin India" as BRK names it).
    assert {"foundryusa", "antpool", "f2pool", "viabtc", "ocean", "1thash", "btccom", "braiinspool",
            "bitcoinindia", "bitcoinindiapool", "marapool"} <= set(slugs)
    for idx in ("height", *HEIGHT_INDEXES):
        ids = set(catalog.ids(idx, False))
        for slug in slugs:
            assert {f"pool_block_count_{slug}", f"{slug}_blocks_mined", f"{slug}_dominance",
                    f"{slug}_dominance_1y"} <= ids, (idx, slug)
        assert {"subsidy_btc", "fees_btc", "coinbase_btc", "hash_value_ths", "inflation_rate"} <= ids
    for idx in ("height", *DATE_INDEXES):
        assert {"puell_multiple", "hash_price_ths", "fees_usd", "subsidy_usd"} <= set(catalog.ids(idx, True))


@pytest.fixture(scope="module")
def pooled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[int]]:
    """800 blocks over 400 days with the coinbases of ``BLOCKS``, indexed and computed, with a close every day."""
    base = tmp_path_factory.mktemp("pools")
    kinds = _kinds(800, 1)
    _pool_chain(base / "blocks", kinds)
    out = base / "out"
    index(base / "blocks", out)
    compute(out, blocks_dir=base / "blocks")
    first = int(dateindex_of_day(np.array([START_TIME // DAY]))[0])
    prices.save(out, [(d, 100.0 + (d * 37) % 101, 0, 0, 100.0 + (d * 37) % 101) for d in range(first, first + 401)])
    return base / "blocks", out, kinds


def test_pools_attributed_by_tag_and_payout_address(pooled: tuple[Path, Path, list[int]]) -> None:
    _, out, kinds = pooled
    q = Interface(out)
    expected = [_expected_pool(BLOCKS[k][0], BLOCKS[k][1]) for k in kinds]
    by_slug = {p.id: p.slug for p in mining.pools()}
    named = {by_slug[i] for i in expected}
    assert {"antpool", "foundryusa", "viabtc", "ocean", "luxor", "terrapool", "f2pool", "unknown"} <= named
    mts = np.asarray(_col(q, "height", "timestamp"))
    days = np.asarray(_col(q, "height", "date"))
    for slug in sorted(named) + ["btccom"]:
        mine = np.array([by_slug[e] == slug for e in expected], dtype=np.int64)
        assert _col(q, "height", f"pool_block_count_{slug}") == mine.tolist()
        assert _col(q, "height", f"{slug}_blocks_mined") == mine.tolist()
        cum = np.cumsum(mine)
        assert _col(q, "height", f"pool_block_count_{slug}_cumulative") == cum.tolist()
        assert _col(q, "height", f"{slug}_dominance") == pytest.approx((100 * cum / np.arange(1, 801)).tolist())
        for w, n in (("1w", 7), ("1m", 30), ("1y", 365)):
            want = [100 * mine[(mts > mts[h] - n * DAY) & (np.arange(800) <= h)].mean() for h in range(800)]
            assert _col(q, "height", f"{slug}_dominance_{w}") == pytest.approx(want), (slug, w)
        # Per day: the day's blocks; the cumulative count and the dominance at its last block.
        per_day = _col(q, "dateindex", f"pool_block_count_{slug}")
        dates = _col(q, "dateindex", "date")
        for d, date in enumerate(dates):
            on = days == date
            assert per_day[d] == int(mine[on].sum())
        last = [int(np.flatnonzero(days == date)[-1]) for date in dates if (days == date).any()]
        first_day = dates.index(days[0])
        assert _col(q, "dateindex", f"{slug}_dominance_1m")[first_day:] == \
            pytest.approx([_col(q, "height", f"{slug}_dominance_1m")[h] for h in last])
        assert _col(q, "monthindex", f"pool_block_count_{slug}_cumulative")[-1] == int(cum[-1])
    total = np.sum([_col(q, "dateindex", f"pool_block_count_{s}") for s in mining.slugs()], axis=0)
    assert total.tolist() == _col(q, "dateindex", "block_count")


def test_mining_series_recomputed(pooled: tuple[Path, Path, list[int]]) -> None:
    """Hash value and price, inflation rate, annualized issuance and the Puell multiple, from the stored
    coinbases, supply, hash rate and closes."""
    _, out, _ = pooled
    q = Interface(out)
    mts = np.asarray(_col(q, "height", "timestamp"), dtype=np.int64)
    coinbase = np.asarray(_col(q, "height", "coinbase"), dtype=np.float64)
    subsidy = np.asarray(_col(q, "height", "subsidy"), dtype=np.float64)
    supply = np.asarray(_col(q, "height", "supply"), dtype=np.float64)
    rate = np.asarray(_col(q, "height", "hash_rate"))
    close = np.asarray(_col(q, "height", "close"), dtype=np.float64)
    hs = range(len(mts))
    last24 = [(mts > mts[h] - DAY) & (np.arange(len(mts)) <= h) for h in hs]
    assert _col(q, "height", "hash_value_ths") == pytest.approx([coinbase[w].sum() / (rate[h] / 1e12)
                                                                  for h, w in zip(hs, last24)], rel=1e-9)
    assert _col(q, "height", "hash_price_phs") == pytest.approx(
        [1000 * (coinbase[w] / COIN * close[w]).sum() / (rate[h] / 1e12) for h, w in zip(hs, last24)], rel=1e-9)
    assert _col(q, "height", "annualized_issuance") == pytest.approx([365 * subsidy[w].sum() for w in last24])
    inflation = _col(q, "height", "inflation_rate")
    for h in hs:
        older = np.flatnonzero(mts <= mts[h] - 365 * DAY)
        if not older.size or supply[older[-1]] <= 50 * COIN:  # as BRK: nothing against the first block alone
            assert inflation[h] is None
        else:
            assert inflation[h] == pytest.approx((supply[h] / supply[older[-1]] - 1) * 100)
    assert sum(v is not None for v in inflation) > 50
    # Puell: the day's coinbase in dollars over its mean of the last 365 days (the day included).
    usd = np.asarray(_col(q, "dateindex", "coinbase_usd"), dtype=np.float64)
    puell = _col(q, "dateindex", "puell_multiple")
    for d in range(len(usd)):
        window = usd[max(0, d - 364):d + 1]
        if d < 364 or np.isnan(window).any():
            assert puell[d] is None
        else:
            assert puell[d] == pytest.approx(usd[d] / window.mean())
    assert sum(v is not None for v in puell) >= 30
    assert _col(q, "height", "puell_multiple")[-1] == puell[-1]


def test_id_search_finds_the_mining_ids(pooled: tuple[Path, Path, list[int]]) -> None:
    from cairn_servers.brk.ops import OPS

    q = Interface(pooled[1])
    for text, want in (("blocks mined by Foundry USA", "pool_block_count_foundryusa"),
                       ("share of blocks mined by AntPool over the last month", "antpool_dominance_1m"),
                       ("miner revenue per terahash", "hash_price_ths"), ("Puell multiple", "puell_multiple"),
                       ("yearly supply inflation", "inflation_rate"), ("new coins issued in a year", "annualized_issuance"),
                       ("total transaction fees in bitcoin", "fees_btc_sum"), ("block subsidy", "subsidy")):
        found = OPS["search_vecids"].call(q, {"q": text, "limit": 3})
        assert want in [r["id"] for r in found], (text, found)


def test_pools_over_http_and_in_llms_txt(pooled: tuple[Path, Path, list[int]]) -> None:
    """A real server: a pool's counts by week through /api/vecs/query, and /llms.txt folding the pools' ids into
    patterns and the list of pools."""
    import httpx

    from cairn_servers.brk.http import create_app

    from ..mcp._http import serving

    q = Interface(pooled[1])
    with serving(create_app(q), "") as url, httpx.Client(base_url=url) as client:
        r = client.get("/api/vecs/query", params={"index": "week", "ids": "pool_block_count_antpool,block_count"})
        assert r.status_code == 200, r.text
        antpool, blocks = r.json()
        assert antpool == _col(q, "weekindex", "pool_block_count_antpool") and sum(antpool) > 0
        assert len(antpool) == len(blocks) and all(a <= b for a, b in zip(antpool, blocks))
        text = client.get("/llms.txt").text
    lines = text.splitlines()
    assert "- pattern `pool_block_count_<pool>`: " in text and "`bitcoinindiapool`" in text
    assert not any(line.startswith(("- `pool_block_count_", "- `antpool_")) for line in lines)
    assert any(line.startswith("- `puell_multiple` (height, every date index): ") for line in lines)
    assert len(text) < 80_000


# -- reorgs, kills, a new list ----------------------------------------------------------------------------

def _attribute(out: Path, blocks: Path | None = None) -> None:
    """The attribution pass alone (it reads the raw store and the blocks, nothing computed)."""
    run_passes(out, ("mining",), blocks_dir=blocks)


def test_reorg_sigkill_and_a_new_list_end_as_a_clean_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kinds = _kinds(120, 2)
    fork = kinds[:70] + _kinds(60, 3)  # a longer branch from height 70
    monkeypatch.setattr(mining, "CHUNK_BLOCKS", 16)
    blocks = tmp_path / "blocks"
    _pool_chain(blocks, kinds)
    out = tmp_path / "out"
    index(blocks, out)
    _attribute(out, blocks)
    before = VecStore(mining.mining_dir(out), mining.specs()).meta
    assert before["generation"] == 0
    _pool_chain(blocks, fork, first_file=1)  # the new branch in the next blk file
    index(blocks, out)
    _attribute(out)  # the blocks directory is remembered
    meta = VecStore(mining.mining_dir(out), mining.specs()).meta
    assert meta["generation"] == 1 and meta["height"] == 129
    clean_blocks = tmp_path / "clean_blocks"
    _pool_chain(clean_blocks, fork)
    clean = tmp_path / "clean"
    index(clean_blocks, clean)
    _attribute(clean, clean_blocks)
    expected = _mining_bytes(clean)
    assert _mining_bytes(out) == expected
    assert np.frombuffer(expected["height_to_pool"], "<u2").tolist() == \
        [_expected_pool(BLOCKS[k][0], BLOCKS[k][1]) for k in fork]

    # A SIGKILL with a chunk appended but not committed, then a SIGKILL between commits: the run after resumes.
    killed = tmp_path / "killed"
    index(clean_blocks, killed)
    script = ("import sys; from pathlib import Path; from cairn_servers.brk.compute import run_passes; "
              "run_passes(Path(sys.argv[1]), ('mining',), blocks_dir=Path(sys.argv[2]))")
    env = dict(os.environ, CAIRN_BRK_MINING_CHUNK="16")
    for point in ("mining-commit:3", "mining-commit:2"):
        proc = subprocess.run([sys.executable, "-c", script, str(killed), str(clean_blocks)],
                              env=dict(env, CAIRN_BRK_FAULT=point), capture_output=True, timeout=120)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert 0 < VecStore(mining.mining_dir(killed), mining.specs()).lengths["height_to_pool"] < 130
    subprocess.run([sys.executable, "-c", script, str(killed), str(clean_blocks)], env=env, check=True, timeout=120)
    assert _mining_bytes(killed) == expected

    # Another pools list (its digest differs): every block is attributed again, to the same figures here.
    s = VecStore(mining.mining_dir(killed), mining.specs())
    s.commit({**s.meta, "pools": "another list"})
    _attribute(killed)
    again = VecStore(mining.mining_dir(killed), mining.specs())
    assert again.meta["pools"] == mining.pools_digest() and again.meta["generation"] == 1
    assert _mining_bytes(killed) == expected
    assert (computed_dir(killed) / ".mining.lock").exists()


def test_obfuscated_block_files_give_the_same_pools(tmp_path: Path) -> None:
    """Bitcoin Core's xor.dat: the coinbases are read through the key."""
    kinds = _kinds(60, 4)
    plain, hidden = tmp_path / "plain", tmp_path / "hidden"
    _pool_chain(plain, kinds)
    key = bytes.fromhex("a1b2c3d4e5f60718")
    data = (plain / "blk00000.dat").read_bytes()
    hidden.mkdir()
    (hidden / "xor.dat").write_bytes(key)
    (hidden / "blk00000.dat").write_bytes(bytes(b ^ key[i % 8] for i, b in enumerate(data)))
    for blocks in (plain, hidden):
        index(blocks, tmp_path / f"out-{blocks.name}")
        _attribute(tmp_path / f"out-{blocks.name}", blocks)
    got = _mining_bytes(tmp_path / "out-hidden")
    assert got == _mining_bytes(tmp_path / "out-plain")
    assert np.frombuffer(got["height_to_pool"], "<u2").tolist() == \
        [_expected_pool(BLOCKS[k][0], BLOCKS[k][1]) for k in kinds]


def test_missing_block_files_leave_the_attribution_waiting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A pruned (or moved) blocks directory: a note on stderr, nothing attributed, the rest of the command goes
    on; once the files are back the pass catches up."""
    blocks = tmp_path / "blocks"
    kinds = _kinds(40, 5)
    _pool_chain(blocks, kinds)
    out = tmp_path / "out"
    index(blocks, out)
    (blocks / "blk00000.dat").rename(tmp_path / "away.dat")
    compute(out, blocks_dir=blocks)
    err = capsys.readouterr().err
    assert "brk: pool attribution not updated: blk00000.dat is missing from the blocks directory" in err
    assert VecStore(mining.mining_dir(out), mining.specs()).lengths["height_to_pool"] == 0
    q = Interface(out)
    assert q.get_vecs("height", "subsidy_btc", from_=-1).columns == [[50.0]]  # the rest is there
    assert q.get_vecs("height", "pool_block_count_unknown", from_=-1).columns == [[None]]  # not yet known
    assert q.etag().endswith('-m40"')  # HTTP caches see the attribution arrive
    (tmp_path / "away.dat").rename(blocks / "blk00000.dat")
    _attribute(out)
    assert q.etag() == '"0-39-0"'
    assert np.frombuffer(_mining_bytes(out)["height_to_pool"], "<u2").tolist() == \
        [_expected_pool(BLOCKS[k][0], BLOCKS[k][1]) for k in kinds]
