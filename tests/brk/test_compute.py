"""The computer: exact derived values on mainnet 0..589, incremental runs equal one full run, a reorg
rolls computed vecs back, a changed vec version recomputes that vec alone; calendar index rules."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np

from cairn_servers.brk import compute as computer
from cairn_servers.brk.compute import compute, computed_dir, specs
from cairn_servers.brk.dates import (
    date_of_dateindex,
    dateindex_of_date,
    first_day_of_period,
    format_days,
    period_of_dateindex,
)
from cairn_servers.brk.indexer import Indexer, index
from cairn_servers.brk.sample import write_sample
from cairn_servers.brk.vecs import VecStore


def _store(out: Path) -> VecStore:
    return VecStore(computed_dir(out), specs(), independent=True)


def _bytes(out: Path) -> dict[str, bytes]:
    s = _store(out)
    return {name: s.read(name).tobytes() for name in s.specs}


def test_mainnet_values(mainnet_blocks: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    index(mainnet_blocks, out)
    summary = compute(out)
    assert summary == {"height": 589, "computed_heights": 590, "rolled_back_to": None, "generation": 0}
    s = _store(out)
    supply = s.read("height_to_supply")
    assert supply[-1] == 590 * 50 * 100_000_000  # the genesis output counts (see docs/brk.md)
    assert (s.read("height_to_coinbase") == 50 * 100_000_000).all()
    assert (s.read("height_to_subsidy") == 50 * 100_000_000).all()
    di = s.read("height_to_dateindex")
    assert di[0] == 0 and (di[1:15] == 1).all() and di[15] == 2  # 2009-01-03, then 14 blocks on 2009-01-09
    # 605 transactions make 615 outputs (all p2pk) and 614 inputs, 590 of them coinbase inputs:
    # 615 - 24 spent = 591 unspent. Block 170 holds the first payment (1 input, 2 outputs).
    assert s.read("height_to_utxo_count")[-1] == 591
    assert s.read("height_to_output_count_cumulative")[-1] == 615
    assert s.read("height_to_input_count_cumulative")[-1] == 614
    assert s.read("height_to_tx_count_cumulative")[-1] == 605
    assert s.read("height_to_input_count")[170] == 2 and s.read("height_to_p2pk65_count")[170] == 3
    assert s.read("height_to_p2pk65_count_cumulative")[-1] == 615
    assert s.read("height_to_block_interval")[1] == 1231469665 - 1231006505
    mts = s.read("height_to_mtimestamp")
    assert (np.diff(mts.astype(np.int64)) >= 0).all()
    diff1 = 2**32  # difficulty 1 => 2^32 hashes per block
    hr = s.read("height_to_hash_rate")
    assert abs(hr[0] - diff1 / 600) < 1e-6
    window = mts[589] - mts[589 - 144]
    assert abs(hr[589] - 144 * diff1 / window) < 1e-6


def test_incremental_equals_full_and_version_recompute(tmp_path: Path) -> None:
    blocks = tmp_path / "blocks"
    write_sample(blocks, 260, seed=3)
    step, full = tmp_path / "step", tmp_path / "full"
    indexer = Indexer(blocks, step)
    for _ in range(4):
        indexer.run(max_blocks=70)
        compute(step)
    index(blocks, full)
    compute(full)
    expected = _bytes(full)
    assert _bytes(step) == expected
    # A new version of one vec empties it alone; the next run recomputes it and keeps the others.
    manifest_path = computed_dir(step) / "manifest.json"
    before = json.loads(manifest_path.read_text())
    old = computer._COMPUTED["fee_rate"]
    computer._COMPUTED["fee_rate"] = (old[0], old[1] + 1)
    try:
        summary = compute(step)
        after = json.loads(manifest_path.read_text())
        assert after["vecs"]["height_to_fee_rate"]["version"] == old[1] + 1
        assert summary["computed_heights"] == 260
        assert _bytes(step) == expected  # fee_rate recomputed from height 0 to the same bytes
        assert before["vecs"]["height_to_supply"] == after["vecs"]["height_to_supply"]
    finally:
        computer._COMPUTED["fee_rate"] = old


def test_reorg_rolls_computed_vecs_back(tmp_path: Path) -> None:
    blocks = tmp_path / "blocks"
    write_sample(blocks, 300, seed=4, spread_blocks=400)
    out = tmp_path / "out"
    index(blocks, out)
    assert compute(out)["generation"] == 0
    write_sample(blocks, 400, seed=4, fork_at=200, fork_seed=44, spread_blocks=400, first_file=1)
    index(blocks, out)
    summary = compute(out)
    assert summary["rolled_back_to"] == 200 and summary["generation"] == 1 and summary["height"] == 399
    fresh_blocks = tmp_path / "fresh_blocks"
    write_sample(fresh_blocks, 400, seed=4, fork_at=200, fork_seed=44, spread_blocks=400)
    fresh = tmp_path / "fresh"
    index(fresh_blocks, fresh)
    compute(fresh)
    assert _bytes(out) == _bytes(fresh)


def test_calendar_indexes() -> None:
    assert dateindex_of_date(dt.date(2009, 1, 3)) == 0
    assert dateindex_of_date(dt.date(2009, 1, 8)) == 0
    assert dateindex_of_date(dt.date(2009, 1, 9)) == 1
    assert dateindex_of_date(dt.date(2009, 1, 10)) == 2
    assert date_of_dateindex(0) == dt.date(2009, 1, 3) and date_of_dateindex(366) == dt.date(2010, 1, 9)
    days = [dt.date(2009, 1, 3), dt.date(2009, 1, 9), dt.date(2009, 1, 11), dt.date(2009, 1, 12),
            dt.date(2009, 12, 31), dt.date(2010, 1, 1), dt.date(2019, 12, 31), dt.date(2024, 7, 1)]
    di = np.array([dateindex_of_date(d) for d in days])
    assert di[:4].tolist() == [0, 1, 3, 4]
    # Independent oracle: the calendar arithmetic done with datetime.
    assert period_of_dateindex("weekindex", di).tolist() == [(d - dt.date(2008, 12, 29)).days // 7 for d in days]
    assert period_of_dateindex("weekindex", di).tolist()[:4] == [0, 1, 1, 2]
    months = [(d.year - 2009) * 12 + d.month - 1 for d in days]
    assert period_of_dateindex("monthindex", di).tolist() == months
    assert period_of_dateindex("quarterindex", di).tolist() == [m // 3 for m in months]
    assert period_of_dateindex("semesterindex", di).tolist() == [m // 6 for m in months]
    assert period_of_dateindex("yearindex", di).tolist() == [d.year - 2009 for d in days]
    assert period_of_dateindex("decadeindex", di).tolist() == [0, 0, 0, 0, 0, 1, 1, 2]
    assert format_days(first_day_of_period("weekindex", np.array([0, 1]))) == ["2008-12-29", "2009-01-05"]
    assert format_days(first_day_of_period("quarterindex", np.array([0, 5]))) == ["2009-01-01", "2010-04-01"]
    assert format_days(first_day_of_period("decadeindex", np.array([0, 1]))) == ["2000-01-01", "2010-01-01"]
    assert format_days(first_day_of_period("semesterindex", np.array([3]))) == ["2010-07-01"]
