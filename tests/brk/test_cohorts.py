"""UTXO cohorts (cairn_servers.brk.cohorts): every cohort recomputed in the test from the blk files (parsed by
python-bitcoinlib, classified and aged here, not by brk's passes), on a generated chain of six months and on
mainnet 0..589; the invariants; the same bytes after a price change, a reorg and a kill mid-pass."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cairn_servers.brk import cohorts, prices
from cairn_servers.brk.compute import compute
from cairn_servers.brk.indexer import index, open_store
from cairn_servers.brk.interface import Interface
from cairn_servers.brk.ops import OPS
from cairn_servers.brk.sample import write_sample
from cairn_servers.brk.vecs import VecStore

from .conftest import mainnet_store

STRESS = bool(os.environ.get("CAIRN_STRESS"))
HOUR_EDGES = [1, 24, 168, 720, 1440, 2160, 2880, 3600, 4320, 8760, 17520, 26280, 35040, 43800, 52560, 61320, 70080,
              87600, 105120, 131400]  # BRK's age boundaries in hours
TYPES = ["p2pk65", "p2pk33", "p2pkh", "p2ms", "p2sh", "p2wpkh", "p2wsh", "p2tr", "p2a", "empty_outputs",
         "unknown_outputs"]


def _vecs(q: Interface, **args: Any) -> Any:
    return OPS["get_vecs"].call(q, args).value()


def _kind(script: bytes) -> str:
    """The output's type, classified here from its script bytes."""
    n = len(script)
    if n == 0:
        return "empty_outputs"
    if script[0] == 0x6A:
        return "opreturn"
    if n == 25 and script[:3] == b"\x76\xa9\x14" and script[-2:] == b"\x88\xac":
        return "p2pkh"
    if n == 23 and script[:2] == b"\xa9\x14" and script[-1] == 0x87:
        return "p2sh"
    if n == 22 and script[:2] == b"\x00\x14":
        return "p2wpkh"
    if n == 34 and script[:2] == b"\x00\x20":
        return "p2wsh"
    if n == 34 and script[:2] == b"\x51\x20":
        return "p2tr"
    if script == b"\x51\x02\x4e\x73":
        return "p2a"
    if n == 67 and script[0] == 65 and script[-1] == 0xAC:
        return "p2pk65"
    if n == 35 and script[0] == 33 and script[-1] == 0xAC:
        return "p2pk33"
    if script[-1] == 0xAE and 0x51 <= script[0] <= 0x60:
        return "p2ms"
    return "unknown_outputs"


def _dateindex(ts: int) -> int:
    day = dt.datetime.fromtimestamp(ts, dt.timezone.utc).date()
    return 0 if day < dt.date(2009, 1, 9) else (day - dt.date(2009, 1, 9)).days + 1


class Coins:
    """Every spendable output of the chain: creation height, value, type, spending height (-1: unspent)."""

    def __init__(self, blocks_dir: Path, hashes: np.ndarray) -> None:
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
        where: dict[tuple[bytes, int], int] = {}
        created: list[int] = []
        value: list[int] = []
        kind: list[int] = []
        spent: list[int] = []
        times: list[int] = []
        self.script: list[bytes] = []  # each coin's output script (its address, for tests/brk/test_addrcohorts.py)
        for h, bh in enumerate(hashes):
            block = by_hash[bytes(bh)]
            times.append(block.nTime)
            for tx in block.vtx:
                if not tx.is_coinbase():
                    for txin in tx.vin:
                        i = where.pop((bytes(txin.prevout.hash), txin.prevout.n), None)
                        if i is not None:
                            spent[i] = h
                for n, txout in enumerate(tx.vout):
                    k = _kind(bytes(txout.scriptPubKey))
                    if k == "opreturn":
                        continue
                    where[(bytes(tx.GetTxid()), n)] = len(created)
                    created.append(h)
                    value.append(txout.nValue)
                    kind.append(TYPES.index(k))
                    spent.append(-1)
                    self.script.append(bytes(txout.scriptPubKey))
        self.created = np.array(created, dtype=np.int64)
        self.value = np.array(value, dtype=np.int64)
        self.kind = np.array(kind, dtype=np.int64)
        self.spent = np.array(spent, dtype=np.int64)
        self.mts = np.maximum.accumulate(np.array(times, dtype=np.int64))
        self.hour = self.mts // 3600
        self.day = np.array([_dateindex(int(t)) for t in self.mts])
        self.n = len(times)


def _basis(close: dict[int, float], day: int) -> float:
    known = [d for d in close if d <= day]
    return close[max(known)] if known else 0.0


def _bucket(price: np.ndarray) -> np.ndarray:
    """The cost-basis bucket of a price, as docs/brk.md defines it: 0 for no price, else 1 + floor(100 x
    log10(price / $0.01))."""
    p = np.asarray(price, dtype=float)
    k = np.floor(100 * np.log10(np.maximum(p, 0.01) / 0.01)) + 1
    return np.where(p > 0, k, 0).astype(np.int64)


def _floor(bucket: int) -> float:
    return 0.0 if bucket == 0 else float(0.01 * 10 ** ((bucket - 1) / 100))


def cost_basis(value: np.ndarray, cost: np.ndarray) -> tuple[float, float, float]:
    """Min, median and max cost basis (bucket floors) of coins of these values and creation prices: the
    lowest and highest bucket holding sats, and the first whose running sum of sats reaches half."""
    held = value > 0
    if not held.any():
        return (np.nan, np.nan, np.nan)
    b = _bucket(cost[held])
    order = np.argsort(b, kind="stable")
    run = np.cumsum(value[held][order])
    median = int(b[order][int(np.argmax(2 * run >= run[-1]))])
    return (_floor(int(b.min())), _floor(median), _floor(int(b.max())))


def _cohort_masks(c: Coins, h: int, coins: np.ndarray) -> dict[str, np.ndarray]:
    """Which of ``coins`` (indices) each checked cohort holds at height h."""
    age = c.hour[h] - c.hour[c.created[coins]]
    band = np.searchsorted(np.array(HOUR_EDGES), age, "right")
    val = c.value[coins]
    amount = np.searchsorted(10 ** np.arange(14), val, "right")
    year = np.array([dt.datetime.fromtimestamp(int(t), dt.timezone.utc).year for t in c.mts[c.created[coins]]])
    masks = {"sth": age < 3600, "lth": age >= 3600}
    for i, name in enumerate(cohorts.AGE_BANDS):
        masks[name] = band == i
    for i, name in enumerate(cohorts.AMOUNT_BANDS):
        masks[name] = amount == i
    for i, name in enumerate(TYPES):
        masks[name] = c.kind[coins] == i
    for e in range(5):
        masks[f"epoch_{e}"] = c.created[coins] // 210_000 == e
    for y in (2009, 2010):
        masks[f"class_{y}"] = year == y
    masks["utxos_over_1d_old"] = age >= 24
    masks["utxos_under_1w_old"] = age < 168
    masks["utxos_over_1btc"] = val >= 100_000_000
    masks["utxos_under_10sats"] = val < 10
    return masks


def _check(out: Path, blocks: Path, close: dict[int, float], heights: list[int]) -> dict[str, Any]:
    """Every checked cohort's stocks and flows at ``heights``, served over get_vecs, against the recount."""
    q = Interface(out)
    c = Coins(blocks, open_store(out).read("height_to_blockhash"))
    basis = np.array([_basis(close, int(d)) for d in c.day])
    names = list(_cohort_masks(c, 0, np.arange(0)))
    metrics: tuple[str, ...] = ("supply", "utxo_count", "realized_cap", "supply_in_profit", "supply_in_loss",
                                "unrealized_profit", "unrealized_loss", "sopr", "realized_profit", "realized_loss")
    metrics += ("cost_basis_min", "cost_basis_pct50", "cost_basis_max")
    got = {(n, m): np.array(_vecs(q, index="height", ids=f"{n}_{m}"), dtype=float) for n in names for m in metrics}
    seen = {"lth_spends": 0, "checked": 0, "cost_basis": 0}
    for h in heights:
        alive = np.flatnonzero((c.created <= h) & ((c.spent == -1) | (c.spent > h)))
        gone = np.flatnonzero(c.spent == h)
        today = close.get(int(c.day[h]))
        masks, spent_masks = _cohort_masks(c, h, alive), _cohort_masks(c, h, gone)
        v, cost = c.value[alive], basis[c.created[alive]]
        sv, scost = c.value[gone], basis[c.created[gone]]
        for n in names:
            m, sm = masks[n], spent_masks[n]
            assert got[(n, "supply")][h] == v[m].sum(), (n, h)
            assert got[(n, "utxo_count")][h] == m.sum(), (n, h)
            if today is None:
                assert np.isnan(got[(n, "realized_cap")][h]) and np.isnan(got[(n, "supply_in_profit")][h])
                assert np.isnan(got[(n, "cost_basis_pct50")][h])
                continue
            want = cost_basis(v[m], cost[m])
            have = tuple(got[(n, k)][h] for k in ("cost_basis_min", "cost_basis_pct50", "cost_basis_max"))
            assert have == pytest.approx(want, rel=1e-12, nan_ok=True), (n, h)
            seen["cost_basis"] += not np.isnan(want[1]) and want[0] < want[2]
            assert got[(n, "realized_cap")][h] == pytest.approx((v[m] / 1e8 * cost[m]).sum(), rel=1e-9, abs=1e-6)
            assert got[(n, "supply_in_profit")][h] == v[m][cost[m] < today].sum(), (n, h)
            assert got[(n, "supply_in_loss")][h] == v[m][cost[m] > today].sum(), (n, h)
            up = (v[m] / 1e8 * (today - cost[m]))
            assert got[(n, "unrealized_profit")][h] == pytest.approx(up[up > 0].sum(), rel=1e-9, abs=1e-6)
            assert got[(n, "unrealized_loss")][h] == pytest.approx(-up[up < 0].sum(), rel=1e-9, abs=1e-6)
            made, paid = (sv[sm] / 1e8 * today).sum(), (sv[sm] / 1e8 * scost[sm]).sum()
            pnl = sv[sm] / 1e8 * (today - scost[sm])
            assert got[(n, "realized_profit")][h] == pytest.approx(pnl[pnl > 0].sum(), rel=1e-9, abs=1e-6)
            assert got[(n, "realized_loss")][h] == pytest.approx(-pnl[pnl < 0].sum(), rel=1e-9, abs=1e-6)
            if paid > 0:  # SOPR = spent value x spend-day close / spent value x creation-day close
                assert got[(n, "sopr")][h] == pytest.approx(made / paid, rel=1e-9), (n, h)
                seen["lth_spends"] += n == "lth"
            seen["checked"] += 1
    return seen


def _invariants(out: Path) -> None:
    """sth + lth = supply; the age, amount and type bands each sum to it, at every height."""
    q = Interface(out)
    supply = np.array(_vecs(q, index="height", ids="supply"), dtype=float)
    count = np.array(_vecs(q, index="height", ids="utxo_count"), dtype=float)
    assert supply[-1] > 0

    def total(names: Any, metric: str) -> np.ndarray:
        result: np.ndarray = np.sum([np.array(_vecs(q, index="height", ids=f"{n}_{metric}"), dtype=float)
                                     for n in names], axis=0)
        return result

    assert np.array_equal(total(("sth", "lth"), "supply"), supply)
    for names in (cohorts.AGE_BANDS, cohorts.AMOUNT_BANDS, cohorts.TYPE_COHORTS):
        assert np.array_equal(total(names, "supply"), supply)
        assert np.array_equal(total(names, "utxo_count"), count)


def _closes(days: np.ndarray, seed: int) -> dict[int, float]:
    """A price that goes up and down, with a gap of days without a close."""
    rng = np.random.default_rng(seed)
    first, last = int(days[0]), int(days[-1])
    return {d: float(rng.choice([100.0, 150.0, 200.0, 250.0])) for d in range(first + 3, last + 1)
            if not (first + 40 <= d < first + 44)}


def _days(out: Path) -> np.ndarray:
    from cairn_servers.brk.reader import StoreReader

    comp = StoreReader(out / "computed")
    comp.refresh()
    return comp.read("height_to_dateindex").astype(np.int64)


def _bytes(out: Path) -> dict[str, bytes]:
    s = VecStore(cohorts.cohorts_dir(out), cohorts.specs())
    return {n: s.read(n).tobytes() for n in s.specs}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """600 blocks over fourteen months of block times (17.6 hours apart), spending coins of every age: a
    fifth of the spends move coins of more than 2 months, 160 of more than 5 (long-term holders)."""
    base = tmp_path_factory.mktemp("brk_cohorts")
    write_sample(base / "blocks", 600, seed=31, spread_blocks=250)
    index(base / "blocks", base / "out")
    compute(base / "out")
    return base / "out"


def test_generated_chain_recounted_from_the_blocks(generated: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cohorts, "CHUNK_BLOCKS", 37)  # many commits: the state crosses chunks mid-day
    monkeypatch.setattr(cohorts, "HIST_ITEMS", 3000)  # the cost-basis histograms a few blocks at a time
    out = tmp_path / "out"
    shutil.copytree(generated, out)
    days = _days(out)
    assert days[-1] - days[0] > 400  # more than 150 days of block times: sth and lth both hold coins
    close = _closes(days, 5)
    prices.save(out, [(d, p, p, p, p) for d, p in close.items()])
    compute(out)
    _invariants(out)
    step = 1 if STRESS else 13  # every height under make stress
    seen = _check(out, generated.parent / "blocks", close, list(range(0, 600, step)) + [599])
    assert seen["lth_spends"] > 0 and seen["checked"] > 500 and seen["cost_basis"] > 300
    q = Interface(out)
    want = ["sth_supply_btc", "lth_supply_btc", "sth_realized_price", "lth_realized_price", "sth_sopr", "lth_sopr",
            "sth_mvrv", "lth_mvrv", "utxos_1d_to_1w_old_supply_btc", "utxos_1btc_to_10btc_supply_btc",
            "p2pkh_supply_btc", "sth_cost_basis_pct50", "utxos_over_1btc_cost_basis_max", "class_2009_cost_basis_min"]
    for index_name in ("height", "date", "week", "month", "year"):
        row = _vecs(q, index=index_name, ids=",".join(want), **{"from": -1})
        assert len(row) == len(want)
    # A state on a day is its last block's; a flow (realized profit) is the sum of its blocks'.
    first = _vecs(q, index="date", ids="first_height", **{"from": -1})
    h = np.array(_vecs(q, index="height", ids="sth_supply,sth_realized_profit"), dtype=float)
    d = _vecs(q, index="date", ids="sth_supply,sth_realized_profit,sth_supply_usd,close", **{"from": -1})
    assert d[0][0] == h[0][-1] and d[1][0] == pytest.approx(h[1][first:].sum())
    assert d[2][0] == pytest.approx(h[0][-1] / 1e8 * d[3][0])
    cb = _vecs(q, index="height", ids="lth_cost_basis_pct50,sth_cost_basis_max", **{"from": -1})
    assert _vecs(q, index="date", ids="lth_cost_basis_pct50,sth_cost_basis_max", **{"from": -1}) == cb
    assert cb[0][0] > 0 and cb[1][0] > 0
    # One chunk from scratch: the same bytes.
    fresh = tmp_path / "fresh"
    shutil.copytree(generated, fresh)
    prices.save(fresh, [(d_, p, p, p, p) for d_, p in close.items()])
    monkeypatch.setattr(cohorts, "CHUNK_BLOCKS", 100_000)
    monkeypatch.setattr(cohorts, "HIST_ITEMS", 1_000_000)
    compute(fresh)
    assert _bytes(out) == _bytes(fresh)


def test_mainnet_first_blocks_recounted(tmp_path: Path) -> None:
    out = mainnet_store(tmp_path)
    days = _days(out)
    close = _closes(days, 9)
    prices.save(out, [(d, p, p, p, p) for d, p in close.items()])
    compute(out)
    _invariants(out)
    seen = _check(out, tmp_path / "blocks", close, list(range(0, 590, 1 if STRESS else 7)) + [589])
    assert seen["checked"] > 500 and seen["cost_basis"] > 100
    q = Interface(out)
    assert _vecs(q, index="height", ids="class_2009_supply", **{"from": -1}) == _vecs(
        q, index="height", ids="supply", **{"from": -1})
    assert q.get_vecid_count() >= 8_000  # ids after a price import, the cohorts' among them
    # Derived ids: ratios of the stored metrics, per height and per day.
    got = _vecs(q, index="date", ids="sth_supply,supply,sth_supply_rel_to_circulating_supply,sth_realized_profit,"
                "sth_realized_loss,sth_realized_gross_pnl,sth_net_realized_pnl,sth_unrealized_profit,"
                "sth_unrealized_loss,sth_net_unrealized_pnl,close,sth_realized_price,sth_realized_price_ratio",
                **{"from": -1})
    v = [x[0] for x in got]
    assert v[2] == pytest.approx(v[0] / v[1]) and v[5] == pytest.approx(v[3] + v[4])
    assert v[6] == pytest.approx(v[3] - v[4]) and v[9] == pytest.approx(v[7] - v[8])
    assert v[12] == pytest.approx(v[10] / v[11])


def test_price_change_reorg_and_kill_equal_a_fresh_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cohorts, "CHUNK_BLOCKS", 40)
    blocks = tmp_path / "blocks"
    write_sample(blocks, 300, seed=4, spread_blocks=400)
    out = tmp_path / "out"
    index(blocks, out, max_blocks=150)
    compute(out)
    series = [(d, 100.0 + d % 13, 0.0, 0.0, 100.0 + d % 13) for d in range(0, 6000)]
    prices.save(out, series)
    compute(out)
    index(blocks, out)
    compute(out)
    days = _days(out)
    mid = int(days[170])
    series = [(d, p if d < mid else p * 3, 0, 0, c if d < mid else c * 3) for d, p, _, _, c in series]
    prices.save(out, series)
    compute(out)
    # A reorg at 200, then a run killed between the state checkpoint and the commit.
    write_sample(blocks, 400, seed=4, fork_at=200, fork_seed=44, spread_blocks=400, first_file=1)
    index(blocks, out)
    env = dict(os.environ, CAIRN_BRK_COHORT_BLOCKS="40", CAIRN_BRK_FAULT="cohorts-state:2")
    code = "import sys; from pathlib import Path; from cairn_servers.brk.compute import compute; compute(Path(sys.argv[1]))"
    proc = subprocess.run([sys.executable, "-c", code, str(out)], env=env, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    compute(out)
    states = sorted(int(p.stem.split("-")[1]) for p in (cohorts.cohorts_dir(out) / "state").glob("cohorts-*.bin"))
    assert states[-1] == 400 and len(states) <= 12
    fresh_blocks = tmp_path / "fresh_blocks"
    write_sample(fresh_blocks, 400, seed=4, fork_at=200, fork_seed=44, spread_blocks=400)
    fresh = tmp_path / "fresh"
    index(fresh_blocks, fresh)
    prices.save(fresh, series)
    monkeypatch.setattr(cohorts, "CHUNK_BLOCKS", 100_000)
    compute(fresh)
    assert _bytes(out) == _bytes(fresh)
    _invariants(out)
    median = VecStore(cohorts.cohorts_dir(out), cohorts.specs()).read("height_to_cost_basis_pct50")
    assert median.shape == (400, len(cohorts.COHORTS))  # compared above with the other vecs, and not all null
    assert (median[170:] != cohorts.NO_BUCKET).sum() > 100 * len(cohorts.COHORTS)


def test_a_lagging_cohort_pass_is_read_once_it_commits(generated: Path, tmp_path: Path) -> None:
    """The cohort pass commits after the tip the interface serves: a day read before it commits (null) is read
    again after (not kept from the cache)."""
    from cairn_servers.brk.compute import run_passes

    out = tmp_path / "out"
    shutil.copytree(generated, out)
    want = _vecs(Interface(out), index="date", ids="sth_supply,p2pkh_utxo_count", **{"from": -1})
    shutil.rmtree(cohorts.cohorts_dir(out))
    q = Interface(out)
    assert _vecs(q, index="date", ids="sth_supply,p2pkh_utxo_count", **{"from": -1}) == [[None], [None]]
    run_passes(out, ("cohorts",))
    assert _vecs(q, index="date", ids="sth_supply,p2pkh_utxo_count", **{"from": -1}) == want
    assert want[0][0] > 0
    # Read a few rows at a time (as a long chain is): the same figures.
    from cairn_servers.brk import catalog

    some = "sth_supply,utxos_over_1btc_utxo_count,p2pkh_supply_btc"
    whole = _vecs(Interface(out), index="height", ids=some)
    assert len(whole[0]) == 600 and whole[0][-1] > 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(catalog, "COHORT_READ_ROWS", 7)
        assert _vecs(Interface(out), index="height", ids=some) == whole
