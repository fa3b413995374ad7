"""supply_in_profit / supply_in_loss / supply_breakeven (cairn_servers.brk.utxo's realized pass): invariants, a
brute-force recount from the raw vecs, absent (not zero) without a close, and the same bytes after a
price change, a reorg and a kill between the state checkpoint and the commit."""

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

from cairn_servers.brk import prices, utxo
from cairn_servers.brk.compute import OUTPUT_TYPES, compute, computed_dir, specs
from cairn_servers.brk.indexer import index, open_store
from cairn_servers.brk.interface import Interface
from cairn_servers.brk.ops import OPS
from cairn_servers.brk.sample import write_sample
from cairn_servers.brk.vecs import VecStore

OPRETURN = OUTPUT_TYPES.index("opreturn")
PROFIT = ("supply_in_profit", "supply_in_loss", "supply_breakeven")


def _vecs(iface: Interface, **args: Any) -> Any:
    return OPS["get_vecs"].call(iface, args).value()


def _realized_bytes(out: Path) -> dict[str, bytes]:
    s = VecStore(utxo.realized_dir(out), utxo._specs(utxo._REALIZED))
    return {n: s.read(n).tobytes() for n in s.specs}


def _brute_force(out: Path, close: dict[int, float]) -> dict[str, np.ndarray]:
    """Profit / loss / breakeven after every height, from the raw vecs and the closes alone: every output
    alive after the height, valued at its creation day's close (else the last earlier one, else 0), against
    the height's day's close (NaN without one)."""
    raw = open_store(out)
    comp = VecStore(computed_dir(out), specs(), independent=True)
    day = np.asarray(comp.read("height_to_dateindex")).astype(np.int64)
    f_out = raw.read("height_to_first_outputindex").astype(np.int64)
    f_in = raw.read("height_to_first_inputindex").astype(np.int64)
    n_out, n_in = raw.lengths["outputindex_to_value"], raw.lengths["inputindex_to_outputindex"]
    value = raw.read("outputindex_to_value").astype(np.int64)
    typ = raw.read("outputindex_to_type").astype(np.int64)
    spent_by = raw.read("inputindex_to_outputindex")
    created_at = np.repeat(np.arange(f_out.shape[0]), np.diff(np.append(f_out, n_out)))

    def basis(d: int) -> float:
        known = [k for k in close if k <= d]
        return close[max(known)] if known else 0.0

    cost = np.array([basis(int(day[h])) for h in created_at])
    got: dict[str, list[float]] = {name: [] for name in PROFIT}
    for h in range(day.shape[0]):
        o_end = int(f_out[h + 1]) if h + 1 < f_out.shape[0] else n_out
        i_end = int(f_in[h + 1]) if h + 1 < f_in.shape[0] else n_in
        alive = np.ones(o_end, dtype=bool)
        s = spent_by[:i_end]
        alive[s[s != np.uint64((1 << 64) - 1)].astype(np.int64)] = False
        alive &= typ[:o_end] != OPRETURN
        today = close.get(int(day[h]))
        v, c = value[:o_end][alive], cost[:o_end][alive]
        for name, mask in (("supply_in_profit", c < (today or 0)), ("supply_in_loss", c > (today or 0)),
                           ("supply_breakeven", c == today)):
            got[name].append(float(v[mask].sum()) if today is not None else np.nan)
    return {k: np.array(v) for k, v in got.items()}


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("brk_profit")
    write_sample(base / "blocks", 500, seed=21)
    index(base / "blocks", base / "out")
    compute(base / "out")
    return base / "out"


def _days(out: Path) -> np.ndarray:
    comp = VecStore(computed_dir(out), specs(), independent=True)
    return np.asarray(comp.read("height_to_dateindex")).astype(np.int64)


def test_profit_loss_breakeven_brute_force(chain: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(utxo, "CHUNK_ROWS", 400)  # many chunks: the supply by day crosses commits
    out = tmp_path / "out"
    shutil.copytree(chain, out)
    days = _days(out)
    first, last = int(days[0]), int(days[-1])
    # A price that goes up and down, with gaps (days without a close) in the middle.
    rng = np.random.default_rng(3)
    close = {d: float(rng.choice([100.0, 150.0, 200.0, 250.0])) for d in range(first + 5, last + 1)
             if not (first + 40 <= d < first + 45)}
    prices.save(out, [(d, p, p, p, p) for d, p in close.items()])
    compute(out)
    q = Interface(out)
    got = {name: np.array(_vecs(q, index="height", ids=name), dtype=float) for name in PROFIT}
    want = _brute_force(out, close)
    for name in PROFIT:
        assert np.array_equal(np.isnan(got[name]), np.isnan(want[name])), name
        ok = ~np.isnan(want[name])
        assert np.array_equal(got[name][ok], want[name][ok]), name
    # Where priced: profit + loss + breakeven = supply; without a close: absent, never zero.
    supply = np.array(_vecs(q, index="height", ids="supply"), dtype=float)
    priced = ~np.isnan(got["supply_in_profit"])
    assert priced.sum() > 100 and (~priced).sum() > 5
    total = got["supply_in_profit"] + got["supply_in_loss"] + got["supply_breakeven"]
    assert np.array_equal(total[priced], supply[priced])
    assert got["supply_in_loss"][priced].max() > 0 and got["supply_in_profit"][priced].max() > 0
    gap = np.flatnonzero((days >= first + 40) & (days < first + 45))
    assert gap.size and all(v is None for v in _vecs(q, index="height", ids="supply_in_profit")[gap[0]:gap[-1] + 1])
    # On days: the last block's figure; _btc and _usd variants.
    d = _vecs(q, index="date", ids="supply_in_profit,supply_in_profit_btc,supply_in_loss_usd,close", **{"from": -1})
    assert d[0][0] == got["supply_in_profit"][-1] and d[1][0] == got["supply_in_profit"][-1] / 1e8
    assert d[2][0] == pytest.approx(got["supply_in_loss"][-1] / 1e8 * d[3][0])
    # Recomputed in one chunk from scratch: the same bytes.
    fresh = tmp_path / "fresh"
    shutil.copytree(chain, fresh)
    prices.save(fresh, [(d_, p, p, p, p) for d_, p in close.items()])
    monkeypatch.setattr(utxo, "CHUNK_ROWS", 1_000_000)
    compute(fresh)
    assert _realized_bytes(out) == _realized_bytes(fresh)


def test_constant_price_is_all_breakeven(chain: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(chain, out)
    prices.save(out, [(d, 500.0, 500.0, 500.0, 500.0) for d in range(0, 6000)])
    compute(out)
    q = Interface(out)
    got = _vecs(q, index="height", ids="supply_in_profit,supply_in_loss,supply_breakeven,supply")
    assert set(got[0]) == {0} and set(got[1]) == {0}
    assert got[2] == got[3]
    # Coins older than the first price count at 0 (as in realized_cap): all in profit once a price exists.
    late = tmp_path / "late"
    shutil.copytree(chain, late)
    days = _days(late)
    start = int(days[len(days) // 2])
    prices.save(late, [(d, 500.0, 500.0, 500.0, 500.0) for d in range(start, 6000)])
    compute(late)
    ql = Interface(late)
    at = int(np.searchsorted(days, start))
    got = _vecs(ql, index="height", ids="supply_in_profit,supply_breakeven,supply_in_loss,supply")
    assert all(v is None for v in got[0][:at])
    assert got[0][at] + got[1][at] == got[3][at] and got[2][at] == 0
    assert got[0][at] > 0 and got[1][-1] > 0


def test_price_change_reorg_and_kill_equal_a_fresh_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(utxo, "CHUNK_ROWS", 300)
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
    # A price change from a day in the middle: recomputed from there, from a state checkpoint and a replay.
    days = _days(out)
    mid = int(days[170])
    series = [(d, p if d < mid else p * 3, 0, 0, c if d < mid else c * 3) for d, p, _, _, c in series]
    prices.save(out, series)
    compute(out)
    # A reorg at 200, then a run killed between the state checkpoint and the commit.
    write_sample(blocks, 400, seed=4, fork_at=200, fork_seed=44, spread_blocks=400, first_file=1)
    index(blocks, out)
    env = dict(os.environ, CAIRN_BRK_UTXO_CHUNK="300", CAIRN_BRK_FAULT="realized-state:1")
    code = "import sys; from pathlib import Path; from cairn_servers.brk.compute import compute; compute(Path(sys.argv[1]))"
    proc = subprocess.run([sys.executable, "-c", code, str(out)], env=env, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    compute(out)
    states = sorted(int(p.stem.split("-")[1]) for p in (utxo.realized_dir(out) / "state").glob("byday-*.bin"))
    assert states[-1] == 400 and len(states) <= 12
    fresh_blocks = tmp_path / "fresh_blocks"
    write_sample(fresh_blocks, 400, seed=4, fork_at=200, fork_seed=44, spread_blocks=400)
    fresh = tmp_path / "fresh"
    index(fresh_blocks, fresh)
    prices.save(fresh, series)
    monkeypatch.setattr(utxo, "CHUNK_ROWS", 1_000_000)
    compute(fresh)
    assert _realized_bytes(out) == _realized_bytes(fresh)
    by_day = np.fromfile(utxo.realized_dir(out) / "state" / "byday-400.bin", dtype="<i8")
    assert by_day.sum() == _vecs(Interface(out), index="height", ids="supply", **{"from": -1})
