"""Address cohorts (cairn_servers.brk.addrcohorts): every balance band and address type recounted in the test from
the blk files (parsed by python-bitcoinlib, grouped by output script here, not by brk's passes), on the generated
chain of fourteen months and on mainnet 0..589; the same bytes after a price change, a reorg and a kill mid-pass."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cairn_servers.brk import addrcohorts, prices
from cairn_servers.brk.compute import compute
from cairn_servers.brk.indexer import index, open_store
from cairn_servers.brk.interface import Interface
from cairn_servers.brk.sample import write_sample
from cairn_servers.brk.vecs import VecStore

from .conftest import mainnet_store
from .test_cohorts import STRESS, TYPES, Coins, _basis, _closes, _days, _vecs, generated  # noqa: F401 - a fixture

ADDRESS_TYPES = [TYPES.index(t) for t in addrcohorts.TYPE_NAMES]  # Coins' type codes of the address types
METRICS = ("supply", "addr_count", "realized_cap", "supply_in_profit", "supply_in_loss", "unrealized_profit",
           "unrealized_loss", "sopr", "realized_profit", "realized_loss")


def _addresses(c: Coins, coins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The address (an index into the unique scripts of ``coins``) of each coin, and each address's first coin."""
    keys = np.array([c.script[i] for i in coins.tolist()], dtype=object)
    _, first, inverse = np.unique(keys.astype(bytes), return_index=True, return_inverse=True)
    return inverse.ravel(), coins[first]


def _check(out: Path, blocks: Path, close: dict[int, float], heights: list[int]) -> dict[str, int]:
    """Every atomic address cohort at ``heights``, served over get_vecs, against a recount from the blocks."""
    q = Interface(out)
    c = Coins(blocks, open_store(out).read("height_to_blockhash"))
    basis = np.array([_basis(close, int(d)) for d in c.day])
    addressed = np.isin(c.kind, ADDRESS_TYPES)
    names = addrcohorts.ATOMIC
    got = {(n, m): np.array(_vecs(q, index="height", ids=f"{n}_{m}"), dtype=float) for n in names for m in METRICS}
    count = np.array(_vecs(q, index="height", ids="address_count"), dtype=float)
    edges = 10 ** np.arange(14)
    seen = {"checked": 0, "sopr": 0, "bands_used": 0}
    for h in heights:
        # Held after block h: created by h, not spent by h. Held when h spends: not spent before h (receipts first).
        alive = np.flatnonzero(addressed & (c.created <= h) & ((c.spent == -1) | (c.spent > h)))
        spending = np.flatnonzero(addressed & (c.created <= h) & ((c.spent == -1) | (c.spent >= h)))
        today = close.get(int(c.day[h]))
        addr, first = _addresses(c, alive)
        bal = np.bincount(addr, weights=c.value[alive], minlength=first.shape[0])
        real = np.bincount(addr, weights=c.value[alive] / 1e8 * basis[c.created[alive]], minlength=first.shape[0])
        n_out = np.bincount(addr, minlength=first.shape[0])
        band = np.searchsorted(edges, bal, "right")
        kind = c.kind[first]
        # The spends of block h, each in the cohort of its address holding what it held before them.
        s_addr, s_first = _addresses(c, spending)
        s_bal = np.bincount(s_addr, weights=c.value[spending], minlength=s_first.shape[0])
        gone = c.spent[spending] == h
        sv, sb = c.value[spending][gone], basis[c.created[spending][gone]]
        s_band = np.searchsorted(edges, s_bal, "right")[s_addr[gone]]
        s_kind = c.kind[s_first][s_addr[gone]]
        assert count[h] == (bal > 0).sum()  # the address pass's count: the bands but 0 sats
        assert sum(got[(n, "addr_count")][h] for n in addrcohorts.BAND_COHORTS[1:]) == count[h]
        for names_ in (addrcohorts.BAND_COHORTS, addrcohorts.TYPE_COHORTS):
            assert sum(got[(n, "supply")][h] for n in names_) == bal.sum(), h
            assert sum(got[(n, "addr_count")][h] for n in names_) == bal.shape[0], h
        for i, n in enumerate(names):
            m = band == i if i < addrcohorts.NBAND else kind == ADDRESS_TYPES[i - addrcohorts.NBAND]
            sm = s_band == i if i < addrcohorts.NBAND else s_kind == ADDRESS_TYPES[i - addrcohorts.NBAND]
            assert got[(n, "supply")][h] == bal[m].sum(), (n, h)
            assert got[(n, "addr_count")][h] == m.sum(), (n, h)
            seen["bands_used"] += i < addrcohorts.NBAND and bool(m.any())
            if today is None:
                assert np.isnan(got[(n, "realized_cap")][h]) and np.isnan(got[(n, "sopr")][h])
                continue
            # realized values are kept in milli-dollars per output: at most half of one each
            tol = 0.0005 * n_out[m].sum() + 1e-6
            assert got[(n, "realized_cap")][h] == pytest.approx(real[m].sum(), rel=1e-9, abs=tol), (n, h)
            # Unrealized: exact but for the addresses within one cost-basis bucket of the close.
            cost = np.divide(real[m], bal[m] / 1e8, out=np.zeros(m.sum()), where=bal[m] > 0)
            near = np.abs(np.log10(np.maximum(cost, 1e-9) / today)) < 1.0 / addrcohorts.BUCKETS_PER_DECADE
            slack = bal[m][near].sum()
            assert abs(got[(n, "supply_in_profit")][h] - bal[m][cost < today].sum()) <= slack, (n, h)
            assert abs(got[(n, "supply_in_loss")][h] - bal[m][cost > today].sum()) <= slack, (n, h)
            up = bal[m] / 1e8 * today - real[m]
            usd_slack = (bal[m][near] / 1e8 * today * 0.012).sum() + tol
            assert got[(n, "unrealized_profit")][h] == pytest.approx(up[up > 0].sum(), abs=usd_slack), (n, h)
            assert got[(n, "unrealized_loss")][h] == pytest.approx(-up[up < 0].sum(), abs=usd_slack), (n, h)
            made, paid = (sv[sm] / 1e8 * today).sum(), (sv[sm] / 1e8 * sb[sm]).sum()
            pnl = sv[sm] / 1e8 * (today - sb[sm])
            assert got[(n, "realized_profit")][h] == pytest.approx(pnl[pnl > 0].sum(), rel=1e-9, abs=1e-6)
            assert got[(n, "realized_loss")][h] == pytest.approx(-pnl[pnl < 0].sum(), rel=1e-9, abs=1e-6)
            if paid > 0:  # SOPR = spent value x spend-day close / spent value x creation-day close
                assert got[(n, "sopr")][h] == pytest.approx(made / paid, rel=1e-9), (n, h)
                seen["sopr"] += 1
            seen["checked"] += 1
    return seen


def _bytes(out: Path) -> dict[str, bytes]:
    s = VecStore(addrcohorts.addrcohorts_dir(out), addrcohorts.specs())
    return {n: s.read(n).tobytes() for n in s.specs}


def test_generated_chain_recounted_from_the_blocks(generated: Path, tmp_path: Path,  # noqa: F811
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(addrcohorts, "CHUNK_ROWS", 900)  # many commits: the state crosses chunks mid-day
    out = tmp_path / "out"
    shutil.copytree(generated, out)
    blocks = generated.parent / "blocks"
    days = _days(out)
    assert days[-1] - days[0] > 400  # more than 150 days of block times
    close = _closes(days, 5)
    prices.save(out, [(d, p, p, p, p) for d, p in close.items()])
    compute(out, blocks_dir=blocks)
    assert addrcohorts.addrcohorts_dir(out).joinpath("manifest.json").exists()
    step = 1 if STRESS else 7
    seen = _check(out, blocks, close, list(range(0, 600, step)) + [599])
    assert seen["sopr"] > 100 and seen["checked"] > 1500 and seen["bands_used"] > 300
    q = Interface(out)
    want = ["addrs_1btc_to_10btc_supply_btc", "p2pkh_addrs_addr_count",
            "addrs_over_1btc_realized_price", "p2wpkh_addrs_sopr", "addrs_under_1btc_mvrv", "p2tr_addrs_nupl",
            "addrs_1m_sats_to_10m_sats_net_realized_pnl"]
    for index_name in ("height", "date", "week", "month", "year", "decade"):
        row = _vecs(q, index=index_name, ids=",".join(want), **{"from": -1})
        assert len(row) == len(want)
    # Sums of bands (over_, under_) and the day's state and flow.
    h = np.array(_vecs(q, index="height", ids="addrs_over_1btc_supply,addrs_1btc_to_10btc_supply,"
                       "addrs_10btc_to_100btc_supply,addrs_100btc_to_1k_btc_supply,p2pkh_addrs_realized_profit"),
                 dtype=float)
    assert np.array_equal(h[0], h[1] + h[2] + h[3] + sum(
        np.array(_vecs(q, index="height", ids=f"{n}_supply"), dtype=float) for n in addrcohorts.BAND_COHORTS[12:]))
    first = _vecs(q, index="date", ids="first_height", **{"from": -1})
    d = _vecs(q, index="date", ids="addrs_over_1btc_supply,p2pkh_addrs_realized_profit", **{"from": -1})
    assert d[0][0] == h[0][-1] and d[1][0] == pytest.approx(h[4][first:].sum())
    # One chunk from scratch: the same bytes.
    fresh = tmp_path / "fresh"
    shutil.copytree(generated, fresh)
    prices.save(fresh, [(d_, p, p, p, p) for d_, p in close.items()])
    monkeypatch.setattr(addrcohorts, "CHUNK_ROWS", 10_000_000)
    compute(fresh, blocks_dir=blocks)
    assert _bytes(out) == _bytes(fresh)


def test_mainnet_first_blocks_recounted(tmp_path: Path) -> None:
    out = mainnet_store(tmp_path, addresses=True)
    days = _days(out)
    close = _closes(days, 9)
    prices.save(out, [(d, p, p, p, p) for d, p in close.items()])
    compute(out)  # prices after indexing: the pass starts again, now with dollar figures
    seen = _check(out, tmp_path / "blocks", close, list(range(0, 590, 1 if STRESS else 5)) + [589])
    assert seen["checked"] > 1000
    q = Interface(out)
    got = _vecs(q, index="height", ids="p2pk65_addrs_supply,addrs_over_1sat_supply,supply", **{"from": -1})
    assert got[0] == got[1] == got[2]  # every coin of those blocks is a P2PK output of 50 BTC or more


def test_without_prices_supply_and_counts_only(generated: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "out"
    shutil.copytree(generated, out)
    compute(out, blocks_dir=generated.parent / "blocks")
    q = Interface(out)
    assert _vecs(q, index="height", ids="p2pkh_addrs_supply_btc", **{"from": -1}) > 0
    assert _vecs(q, index="month", ids="addrs_under_1btc_addr_count", **{"from": -1}) > 0
    from cairn_servers.brk.catalog import ids

    have = set(ids("dateindex", False))
    assert "p2pkh_addrs_addr_count" in have and "p2pkh_addrs_realized_cap" not in have


def test_price_change_reorg_and_kill_equal_a_fresh_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(addrcohorts, "CHUNK_ROWS", 1200)
    blocks = tmp_path / "blocks"
    write_sample(blocks, 300, seed=4, spread_blocks=400)
    out = tmp_path / "out"
    index(blocks, out, max_blocks=150)
    compute(out, blocks_dir=blocks)
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
    assert addrcohorts.addrcohorts_dir(out).joinpath("undo").glob("*.npy")
    # A reorg at 200, then runs killed between the undo rows and the commit, and after a commit.
    write_sample(blocks, 400, seed=4, fork_at=200, fork_seed=44, spread_blocks=400, first_file=1)
    index(blocks, out)
    code = "import sys; from pathlib import Path; from cairn_servers.brk.compute import compute; compute(Path(sys.argv[1]))"
    for point in ("addrcohorts-undo:2", "addrcohorts-commit:1"):
        env = dict(os.environ, CAIRN_BRK_ADDRCOHORT_ROWS="1200", CAIRN_BRK_FAULT=point)
        proc = subprocess.run([sys.executable, "-c", code, str(out)], env=env, capture_output=True)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
    compute(out)
    states = list((addrcohorts.addrcohorts_dir(out) / "state").glob("hist-*.bin"))
    assert [p.name for p in states] == ["hist-400.bin"]
    fresh_blocks = tmp_path / "fresh_blocks"
    write_sample(fresh_blocks, 400, seed=4, fork_at=200, fork_seed=44, spread_blocks=400)
    fresh = tmp_path / "fresh"
    index(fresh_blocks, fresh)
    prices.save(fresh, series)
    monkeypatch.setattr(addrcohorts, "CHUNK_ROWS", 10_000_000)
    compute(fresh, blocks_dir=fresh_blocks)
    assert _bytes(out) == _bytes(fresh)


def test_ids_are_brks_and_collide_with_no_other_id() -> None:
    from cairn_servers.brk import catalog, cohorts

    mine = set(catalog.ADDR_COHORT_BASES)
    others = set(catalog.BASES) | set(catalog.REALIZED_BASES) | set(catalog.COHORT_BASES) | cohorts.all_ids()
    assert mine and not mine & others and not addrcohorts.all_ids() & cohorts.all_ids()
    assert {"addrs_1k_sats_to_10k_sats_supply", "addrs_10m_sats_to_1btc_addr_count", "addrs_over_100k_btc_sopr",
            "addrs_over_1btc_realized_cap", "addrs_under_1k_btc_mvrv", "p2pkh_addrs_nupl",
            "p2a_addrs_supply_in_loss_btc"} <= addrcohorts.all_ids()
    assert len(addrcohorts.COHORTS) == 49


def test_prices_after_indexing_beyond_the_undo_rows_start_again(generated: Path, tmp_path: Path,  # noqa: F811
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Prices stored after indexing change every day: when the undo rows kept do not reach back to the chain's
    first day, the pass starts again from 0 (and ends as a run that had the prices from the start)."""
    monkeypatch.setattr(addrcohorts, "CHUNK_ROWS", 900)
    monkeypatch.setattr(addrcohorts, "UNDO_HEIGHTS", 50)
    out = tmp_path / "out"
    shutil.copytree(generated, out)
    blocks = generated.parent / "blocks"
    compute(out, blocks_dir=blocks)
    undo = sorted(int(p.stem.split("-")[0]) for p in (addrcohorts.addrcohorts_dir(out) / "undo").glob("*.npy"))
    assert undo and undo[0] > 0  # the first chunks' undo rows are gone
    close = _closes(_days(out), 5)
    prices.save(out, [(d, p, p, p, p) for d, p in close.items()])
    assert compute(out) is not None
    fresh = tmp_path / "fresh"
    shutil.copytree(generated, fresh)
    prices.save(fresh, [(d, p, p, p, p) for d, p in close.items()])
    compute(fresh, blocks_dir=blocks)
    assert _bytes(out) == _bytes(fresh)
    assert _vecs(Interface(out), index="height", ids="p2pkh_addrs_realized_cap", **{"from": -1}) > 0
