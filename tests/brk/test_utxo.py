"""On-chain analytics (cairn_servers.brk.utxo): invariants on generated chains, an independent recomputation of
mainnet 0..589 with python-bitcoinlib, realized value with prices, and identical figures after a
reorg, incremental runs and SIGKILLs."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cairn_servers.brk import addresses, prices, utxo
from cairn_servers.brk.compute import OUTPUT_TYPES, compute, computed_dir, specs
from cairn_servers.brk.indexer import index, open_store
from cairn_servers.brk.interface import Interface
from cairn_servers.brk.ops import OPS, render_vecs
from cairn_servers.brk.sample import write_sample
from cairn_servers.brk.vecs import VecStore
from cairn_servers.core.errors import NotFound


def _vecs(iface: Interface, **args: Any) -> Any:
    """get_vecs as the surfaces run it (the declaration checks the arguments; JSON value or rendered text)."""
    result = OPS["get_vecs"].call(iface, args)
    return result.value() if result.format == "json" else render_vecs(result)

BTC = 100_000_000
DAY = 86_400
SPENDABLE = [t for t in OUTPUT_TYPES if t != "opreturn"]


def _utxo(out: Path) -> VecStore:
    return VecStore(utxo.utxo_dir(out), utxo._specs(utxo._UTXO))


def _comp(out: Path) -> VecStore:
    return VecStore(computed_dir(out), specs(), independent=True)


def _h(store: VecStore, name: str) -> np.ndarray:
    return np.asarray(store.read(f"height_to_{name}"))


def _analytics_bytes(out: Path) -> dict[str, bytes]:
    """Every analytics vec's committed bytes (and the unspent-by-height state at the tip)."""
    got: dict[str, bytes] = {}
    for root in (utxo.utxo_dir(out), utxo.realized_dir(out)):
        if (root / "manifest.json").exists():
            specs_ = utxo._specs(utxo._UTXO if root.name == "utxo" else utxo._REALIZED)
            s = VecStore(root, specs_)
            got.update({f"{root.name}/{n}": s.read(n).tobytes() for n in s.specs})
    a = VecStore(addresses.addresses_dir(out), addresses.specs())
    got.update({f"addresses/{n}": a.read(n).tobytes() for n in a.specs})
    s = _utxo(out)
    got["state"] = (utxo.utxo_dir(out) / "state" / f"unspent-{s.lengths['height_to_blockhash']}.bin").read_bytes()
    return got


def _recount(out: Path, heights: list[int]) -> None:
    """Brute force from the raw vecs: the UTXO set after each of ``heights``, against the pass's figures."""
    raw = open_store(out)
    u = _utxo(out)
    c = _comp(out)
    f_out = raw.read("height_to_first_outputindex").astype(np.int64)
    f_in = raw.read("height_to_first_inputindex").astype(np.int64)
    n_out = raw.lengths["outputindex_to_value"]
    n_in = raw.lengths["inputindex_to_outputindex"]
    value = raw.read("outputindex_to_value").astype(np.int64)
    typ = raw.read("outputindex_to_type").astype(np.int64)
    spent_by = raw.read("inputindex_to_outputindex")
    mts = c.read("height_to_mtimestamp").astype(np.int64)
    created_at = np.repeat(np.arange(f_out.shape[0]), np.diff(np.append(f_out, n_out)))
    for h in heights:
        o_end = int(f_out[h + 1]) if h + 1 < f_out.shape[0] else n_out
        i_end = int(f_in[h + 1]) if h + 1 < f_in.shape[0] else n_in
        alive = np.ones(o_end, dtype=bool)
        s = spent_by[:i_end]
        alive[s[s != np.uint64((1 << 64) - 1)].astype(np.int64)] = False
        for code, t in enumerate(OUTPUT_TYPES):
            mask = alive & (typ[:o_end] == code)
            assert _h(u, f"supply_{t}")[h] == value[:o_end][mask].sum(), (h, t)
            assert _h(u, f"utxo_count_{t}")[h] == mask.sum(), (h, t)
        spendable = alive & (typ[:o_end] != OUTPUT_TYPES.index("opreturn"))
        ages = mts[h] - mts[created_at[:o_end]]
        edges = [days * DAY for _, days in utxo.AGE_BANDS] + [1 << 62]
        for k, name in enumerate(utxo.AGE_IDS):
            band = spendable & (ages >= edges[k]) & (ages < edges[k + 1])
            assert _h(u, name)[h] == value[:o_end][band].sum(), (h, name)
        # Coin-days created = destroyed + what the unspent coins hold now.
        held = (value[:o_end][spendable] / BTC * ages[spendable] / DAY).sum()
        created = _h(u, "coindays_created_cumulative")[h]
        assert created == pytest.approx(_h(u, "coindays_destroyed_cumulative")[h] + held, rel=1e-9, abs=1e-6)


def _address_of(script: bytes) -> str | None:
    """The address type of a locking script by its template (written here, not brk's classifier)."""
    n = len(script)
    if n == 25 and script[:3] == b"\x76\xa9\x14" and script[23:] == b"\x88\xac":
        return "p2pkh"
    if n == 23 and script[:2] == b"\xa9\x14" and script[22] == 0x87:
        return "p2sh"
    if n == 22 and script[:2] == b"\x00\x14":
        return "p2wpkh"
    if n == 34 and script[:2] == b"\x00\x20":
        return "p2wsh"
    if n == 34 and script[:2] == b"\x51\x20":
        return "p2tr"
    if n == 67 and script[0] == 0x41 and script[66] == 0xAC:
        return "p2pk65"
    if n == 35 and script[0] == 0x21 and script[34] == 0xAC:
        return "p2pk33"
    if script == b"\x51\x02\x4e\x73":
        return "p2a"
    return None


def _recount_addresses(out: Path, blocks_dir: Path) -> None:
    """Every address figure at every height, against balances kept per script from the raw blocks."""
    chain = _blocks_of_dir(blocks_dir, open_store(out))
    q = Interface(out)
    names = ["address_count", "new_address_count", "empty_address_count",
             *(f"address_count_{t}" for t in addresses.TYPE_NAMES), *addresses.BALANCE_IDS]
    got = dict(zip(names, _vecs(q, index="height", ids=",".join(names))))
    coins: dict[tuple[bytes, int], tuple[bytes, int]] = {}
    balance: dict[bytes, int] = {}
    kind: dict[bytes, str] = {}
    edges = [lo for _, lo in addresses.BALANCE_BANDS[1:]]
    for h, block in enumerate(chain):
        new = 0
        for tx in block.vtx:
            if not tx.is_coinbase():
                for txin in tx.vin:
                    script, value = coins.pop((txin.prevout.hash, txin.prevout.n))
                    if script in balance:
                        balance[script] -= value
            for n, txout in enumerate(tx.vout):
                script = bytes(txout.scriptPubKey)
                coins[(tx.GetTxid(), n)] = (script, txout.nValue)
                t = _address_of(script)
                if t is not None:
                    if script not in balance:
                        balance[script], kind[script] = 0, t
                        new += 1
                    balance[script] += txout.nValue
        held = [s for s, v in balance.items() if v > 0]
        assert got["address_count"][h] == len(held), h
        assert got["new_address_count"][h] == new, h
        assert got["empty_address_count"][h] == len(balance) - len(held), h
        for t in addresses.TYPE_NAMES:
            assert got[f"address_count_{t}"][h] == sum(1 for s in held if kind[s] == t), (h, t)
        bands = [0] * len(edges + [0])
        for s in held:
            bands[sum(1 for e in edges if balance[s] >= e)] += 1
        assert [got[name][h] for name in addresses.BALANCE_IDS] == bands, h


def _blocks_of_dir(blocks_dir: Path, store: VecStore) -> list[Any]:  # python-bitcoinlib's CBlock: untyped
    """The indexed chain's blocks, read from the blk files and parsed by python-bitcoinlib."""
    from bitcoin.core import CBlock

    by_hash: dict[bytes, Any] = {}
    for path in sorted(blocks_dir.glob("blk*.dat")):
        data = path.read_bytes()
        p = 0
        while p + 8 <= len(data):
            length = int.from_bytes(data[p + 4:p + 8], "little")
            if length == 0:
                break
            block = CBlock.deserialize(data[p + 8:p + 8 + length])
            by_hash[block.GetHash()] = block
            p += 8 + length
    return [by_hash[bytes(h)] for h in store.read("height_to_blockhash")]


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("brk_utxo")
    write_sample(base / "blocks", 900, seed=11)
    index(base / "blocks", base / "out")
    compute(base / "out", blocks_dir=base / "blocks")
    return base / "out"


def test_invariants_on_a_generated_chain(sample: Path) -> None:
    u = _utxo(sample)
    c = _comp(sample)
    raw = open_store(sample)
    supply = _h(c, "supply").astype(np.int64)
    assert supply[-1] > 0 and _h(u, "spent_value").sum() > 0
    # The age bands and the spendable types each sum to the supply at every height.
    assert np.all(sum(_h(u, n).astype(np.int64) for n in utxo.AGE_IDS) == supply)
    assert np.all(sum(_h(u, f"supply_{t}").astype(np.int64) for t in SPENDABLE) == supply)
    assert np.all(sum(_h(u, f"utxo_count_{t}").astype(np.int64) for t in SPENDABLE) == _h(c, "utxo_count"))
    assert (_h(u, "supply_p2pk") == _h(u, "supply_p2pk65") + _h(u, "supply_p2pk33")).all()
    # supply = coinbase outputs - what blocks left unclaimed (fees are not new coins) - unspendable outputs.
    coinbase = _h(c, "coinbase").astype(np.int64)
    fee = raw.read("height_to_fee").astype(np.int64)
    typ = raw.read("outputindex_to_type")
    opret = raw.read("outputindex_to_value")[typ == OUTPUT_TYPES.index("opreturn")].astype(np.int64).sum()
    assert _h(u, "unspendable_supply")[-1] == opret
    assert supply[-1] == coinbase.sum() - fee.sum() - opret
    # The same with the schedule: what the subsidy allowed (regtest halves every 150 blocks) minus what
    # miners left unclaimed (allowed + fees - claimed) minus the unspendable outputs.
    heights = np.arange(supply.shape[0])
    allowed = (50 * BTC) >> (heights // 150)
    unclaimed = allowed + fee - coinbase
    assert (unclaimed >= 0).all()
    assert supply[-1] == allowed.sum() - unclaimed.sum() - opret
    # Coin age: nothing destroyed without spends, liveliness in [0, 1], vaultedness its complement.
    live = _h(u, "liveliness")
    ok = ~np.isnan(live)
    assert ok[1:].all() and ((live[ok] >= 0) & (live[ok] <= 1)).all()
    assert np.allclose(_h(u, "vaultedness")[ok], 1 - live[ok])
    assert (_h(u, "coindays_destroyed")[_h(u, "spent_value") == 0] == 0).all()
    assert _h(u, "supply_age_1w_1m")[-1] > 0  # the chain spans six months
    _recount(sample, [0, 1, 150, 333, 640, 899])
    _recount_addresses(sample, sample.parent / "blocks")


def test_queries_on_every_index(sample: Path) -> None:
    q = Interface(sample)
    assert q.get_vecid_to_indexes("supply_age_gt_10y")[:2] == ["height", "dateindex"]
    assert "coindays_destroyed_cumulative" in q.get_index_to_vecids("date")
    day = _vecs(q, index="date", ids="coindays_destroyed,coindays_destroyed_cumulative,supply,supply_p2wpkh_btc",
                     **{"from": -3})
    assert len(day) == 4 and all(len(col) == 3 for col in day)
    u = _utxo(sample)
    # A day's coin-days destroyed is the sum of its blocks'; a state (supply by type) is its last block's.
    first = _vecs(q, index="date", ids="first_height", **{"from": -1})
    assert day[0][-1] == pytest.approx(float(_h(u, "coindays_destroyed")[first:].sum()))
    assert day[3][-1] == _h(u, "supply_p2wpkh")[-1] / BTC
    assert _vecs(q, index="height", ids="utxo_count_p2tr", **{"from": -1}) == int(_h(u, "utxo_count_p2tr")[-1])
    assert "realized_cap" not in q.get_index_to_vecids("height")  # no prices yet: the error says how
    with pytest.raises(NotFound, match=r"computed from dollar prices.*brk price import"):
        _vecs(q, index="date", ids="mvrv")
    assert q.get_vecid_to_indexes("address_count_balance_gt_10k")[-1] == "halvingepoch"


def test_realized_value_with_prices(sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(sample, out)
    price = 40_000.0
    prices.save(out, [(d, price, price, price, price) for d in range(0, 6000)])
    compute(out)
    q = Interface(out)
    cap = np.array(_vecs(q, index="height", ids="realized_cap"), dtype=float)
    supply = np.array(_vecs(q, index="height", ids="supply_btc"), dtype=float)
    assert np.allclose(cap, supply * price, rtol=1e-9)  # a price that never changes: realized = market
    assert _vecs(q, index="date", ids="mvrv", **{"from": -1}) == pytest.approx(1.0)
    assert _vecs(q, index="date", ids="nupl", **{"from": -1}) == pytest.approx(0.0, abs=1e-9)
    assert _vecs(q, index="height", ids="realized_price", **{"from": -1}) == pytest.approx(price)
    sopr = np.array(_vecs(q, index="height", ids="sopr"), dtype=float)
    spent = np.array(_vecs(q, index="height", ids="spent_value"))
    assert np.allclose(sopr[spent > 0], 1.0) and np.isnan(sopr[spent == 0]).all()
    assert _vecs(q, index="week", ids="sopr", **{"from": -1}) == pytest.approx(1.0)
    # A price doubling from one day on: the coins created before keep their basis; recomputed alone.
    days = _vecs(q, index="height", ids="date")
    di = np.asarray(_comp(out).read("height_to_dateindex"))
    mid = int(di[len(days) // 2])
    gen = int(q.source.realized.meta.get("generation", 0))
    prices.save(out, [(d, 2 * price, 2 * price, 2 * price, 2 * price) for d in range(mid, 6000)])
    compute(out)
    q2 = Interface(out)
    assert int(q2.source.realized.meta["generation"]) == gen + 1
    assert _vecs(q2, index="date", ids="mvrv", **{"from": -1}) > 1.0
    fresh = tmp_path / "fresh"
    shutil.copytree(sample, fresh)
    prices.save(fresh, [(d, price if d < mid else 2 * price, 0, 0, price if d < mid else 2 * price)
                        for d in range(0, 6000)])
    compute(fresh)
    assert _analytics_bytes(out) == _analytics_bytes(fresh)
    # Days without a close: realized value is absent there, never zero.
    gap = tmp_path / "gap"
    shutil.copytree(sample, gap)
    prices.save(gap, [(d, price, price, price, price) for d in range(mid, 6000)])
    compute(gap)
    qg = Interface(gap)
    cap = _vecs(qg, index="height", ids="realized_cap")
    early = int(np.searchsorted(di, mid))
    assert all(v is None for v in cap[:early]) and all(v is not None for v in cap[early:])
    assert _vecs(qg, index="date", ids="mvrv", **{"from": int(di[0]), "count": 1}) is None


def test_reorg_and_incremental_runs_equal_a_fresh_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(utxo, "CHUNK_ROWS", 300)  # many commits, many checkpoints
    monkeypatch.setattr(addresses, "CHUNK_ROWS", 300)
    blocks = tmp_path / "blocks"
    write_sample(blocks, 300, seed=4, spread_blocks=400)
    out = tmp_path / "out"
    for stop in (1, 120, 300):
        index(blocks, out, max_blocks=stop - (open_store(out).lengths["height_to_blockhash"]
                                              if (out / "manifest.json").exists() else 0))
        compute(out, blocks_dir=blocks)
    prices.save(out, [(d, 100.0 + d, 0, 0, 100.0 + d) for d in range(0, 6000)])
    compute(out)  # the blocks directory is remembered
    before = _utxo(out).meta["generation"]
    write_sample(blocks, 400, seed=4, fork_at=200, fork_seed=44, spread_blocks=400, first_file=1)
    index(blocks, out)
    compute(out)
    assert _utxo(out).meta["generation"] == before + 1
    assert VecStore(addresses.addresses_dir(out), addresses.specs()).meta["generation"] == 1  # undone, not rebuilt
    kept = sorted(int(p.stem.split("-")[1]) for p in (utxo.utxo_dir(out) / "state").glob("unspent-*.bin"))
    assert kept[-1] == 400 and len(kept) <= 12
    fresh_blocks = tmp_path / "fresh_blocks"
    write_sample(fresh_blocks, 400, seed=4, fork_at=200, fork_seed=44, spread_blocks=400)
    fresh = tmp_path / "fresh"
    index(fresh_blocks, fresh)
    prices.save(fresh, [(d, 100.0 + d, 0, 0, 100.0 + d) for d in range(0, 6000)])
    monkeypatch.setattr(utxo, "CHUNK_ROWS", 4_000_000)
    monkeypatch.setattr(addresses, "CHUNK_ROWS", 400_000)
    compute(fresh, blocks_dir=fresh_blocks)
    assert _analytics_bytes(out) == _analytics_bytes(fresh)
    _recount(out, [199, 200, 399])
    _recount_addresses(out, blocks)


def _blocks_of(path: Path) -> list[Any]:  # python-bitcoinlib's CBlock: untyped
    """Mainnet blocks from a blk file, in chain order, parsed by python-bitcoinlib (not by brk)."""
    from bitcoin.core import CBlock

    data = path.read_bytes()
    by_prev: dict[bytes, CBlock] = {}
    p = 0
    while p + 8 <= len(data):
        length = int.from_bytes(data[p + 4:p + 8], "little")
        block = CBlock.deserialize(data[p + 8:p + 8 + length])
        by_prev[block.hashPrevBlock] = block
        p += 8 + length
    chain = []
    prev = b"\0" * 32
    while prev in by_prev:
        chain.append(by_prev[prev])
        prev = chain[-1].GetHash()
    return chain


def test_mainnet_sample_against_an_independent_recomputation(mainnet_blocks: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    index(mainnet_blocks, out)
    compute(out, blocks_dir=mainnet_blocks)
    blocks = _blocks_of(mainnet_blocks / "blk00000.dat")
    assert len(blocks) == 590
    coins: dict[tuple[bytes, int], tuple[int, int, int, bytes]] = {}  # outpoint -> value, height, time, script
    mtime = 0
    cdd, cbd, count, holders = [], [], [], []
    balance: dict[bytes, int] = {}  # public key (every output is P2PK here) -> sats
    for h, block in enumerate(blocks):
        mtime = max(mtime, block.nTime)
        days = blocks_ = 0.0
        for tx in block.vtx:
            if not tx.is_coinbase():
                for txin in tx.vin:
                    value, created, ctime, script = coins.pop((txin.prevout.hash, txin.prevout.n))
                    balance[script] -= value
                    days += value / BTC * (mtime - ctime) / DAY
                    blocks_ += value / BTC * (h - created)
            for n, txout in enumerate(tx.vout):
                coins[(tx.GetTxid(), n)] = (txout.nValue, h, mtime, bytes(txout.scriptPubKey))
                balance[bytes(txout.scriptPubKey)] = balance.get(bytes(txout.scriptPubKey), 0) + txout.nValue
        cdd.append(days)
        cbd.append(blocks_)
        count.append(len(coins))
        holders.append(sum(1 for v in balance.values() if v > 0))
    u = _utxo(out)
    assert count[-1] == 591  # the genesis output counts (docs/brk.md)
    assert (_h(u, "utxo_count_p2pk65").astype(np.int64) == np.array(count)).all()
    assert np.allclose(_h(u, "coindays_destroyed"), cdd, rtol=1e-12, atol=0)
    assert np.allclose(_h(u, "coinblocks_destroyed"), cbd, rtol=1e-12, atol=0)
    assert _h(u, "coindays_destroyed")[170] == pytest.approx(cdd[170]) and cdd[170] > 0  # the first payment
    q = Interface(out)
    assert _vecs(q, index="decade", ids="coindays_destroyed_cumulative") == pytest.approx(sum(cdd))
    assert _vecs(q, index="height", ids="utxo_count") == count
    got = _vecs(q, index="height", ids="address_count")
    assert got == holders and holders[-1] > 0
    # The invariants on mainnet too: bands and types sum to supply; supply = coinbase outputs - what miners
    # left unclaimed (the subsidy schedule: 50 BTC a block here, plus fees) - unspendable outputs (none yet).
    supply = np.array(_vecs(q, index="height", ids="supply"), dtype=np.int64)
    claimed = np.array([sum(o.nValue for o in b.vtx[0].vout) for b in blocks], dtype=np.int64)
    fees = np.array(_vecs(q, index="height", ids="fee"), dtype=np.int64)
    unclaimed = 50 * BTC + fees - claimed
    assert np.all(unclaimed >= 0) and _vecs(q, index="height", ids="unspendable_supply", **{"from": -1}) == 0
    assert np.all(supply == np.cumsum(claimed) - np.cumsum(unclaimed) - 0) and supply[-1] == 29_500 * BTC
    assert np.all(sum(_h(u, n).astype(np.int64) for n in utxo.AGE_IDS) == supply)
    assert np.all(sum(_h(u, f"supply_{t}").astype(np.int64) for t in SPENDABLE) == supply)
    # A constant price: realized cap = supply x price, everything at breakeven.
    prices.save(out, [(d, 0.1, 0.1, 0.1, 0.1) for d in range(0, 20)])
    compute(out)
    q = Interface(out)
    cap = np.array(_vecs(q, index="height", ids="realized_cap"), dtype=float)
    assert np.allclose(cap, supply / BTC * 0.1, rtol=1e-12)
    assert _vecs(q, index="height", ids="supply_breakeven") == supply.tolist()
    assert _vecs(q, index="height", ids="address_count_p2pk65") == holders
    assert _vecs(q, index="height", ids="empty_address_count", **{"from": -1}) == len(balance) - holders[-1]


SCRIPT = ("import sys; from pathlib import Path; from cairn_servers.brk.compute import compute; "
          "compute(Path(sys.argv[1]), blocks_dir=Path(sys.argv[2]))")


@pytest.mark.timeout(180)
def test_sigkills_leave_the_same_figures(tmp_path: Path) -> None:
    blocks = tmp_path / "blocks"
    write_sample(blocks, 1500, seed=9)
    ref = tmp_path / "ref"
    index(blocks, ref)
    compute(ref, blocks_dir=blocks)
    out = tmp_path / "out"
    index(blocks, out, max_blocks=1)
    compute(out, blocks_dir=blocks)
    for store in (ref, out):  # the realized pass runs (and is killed) too
        prices.save(store, [(d, 1000.0 + d % 7, 0, 0, 1000.0 + d % 7) for d in range(0, 6000)])
    compute(ref)
    index(blocks, out)  # raw vecs complete, analytics behind: the runs below catch up (and get killed)
    env = dict(os.environ, CAIRN_BRK_UTXO_CHUNK="600")
    cmd = [sys.executable, "-c", SCRIPT, str(out), str(blocks)]
    rng = random.Random(5)
    for point in ("utxo-state:2", "utxo-commit:3", "utxo-state:1", "realized-state:2", "address-commit:2",
                  "address-undo:3"):
        proc = subprocess.run(cmd, env=dict(env, CAIRN_BRK_FAULT=point), capture_output=True)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
    kills = 0
    for attempt in range(8):
        # How long the rest of the catch-up takes on this machine (timed on a copy), so that the kill lands
        # inside it whatever the machine's speed.
        probe = tmp_path / f"probe{attempt}"
        shutil.copytree(out, probe)
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", SCRIPT, str(probe), str(blocks)], env=env, check=True)
        rest = time.monotonic() - started
        shutil.rmtree(probe)
        proc2 = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 0.9) * rest)
        if proc2.poll() is None:
            proc2.send_signal(signal.SIGKILL)
            kills += 1
        proc2.wait()
    assert kills >= 3, kills  # most runs were cut short
    assert subprocess.run(cmd, env=env).returncode == 0
    assert _analytics_bytes(out) == _analytics_bytes(ref)
