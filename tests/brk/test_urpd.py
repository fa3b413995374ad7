"""URPD (cairn_servers.brk.urpd, the ``get_urpd`` operation): a cohort's supply by creation-price bucket at one
height, recounted in the test from the blk files (test_cohorts' parser and cohort masks) on the generated chain
and on mainnet 0..589; it starts from a checkpoint of the cohorts pass, never from block 0; clear errors."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cairn_servers.brk import cohorts, prices
from cairn_servers.brk.compute import compute
from cairn_servers.brk.indexer import open_store
from cairn_servers.brk.interface import Interface
from cairn_servers.brk.ops import OPS
from cairn_servers.core.errors import InvalidInput, NotFound

from .conftest import mainnet_store
from .test_cohorts import Coins, _basis, _closes, _cohort_masks, _days, generated  # noqa: F401 (a fixture)


def _urpd(out: Path, **args: Any) -> Any:
    return OPS["get_urpd"].call(Interface(out), args)


def _recount(c: Coins, close: dict[int, float], cohort: str, h: int, per_decade: int) -> list[dict[str, Any]]:
    """The buckets recounted from the coins: floor(per_decade x log10(price / $0.01)), price 0 apart."""
    alive = np.flatnonzero((c.created <= h) & ((c.spent == -1) | (c.spent > h)))
    mask = np.ones(alive.shape[0], bool) if cohort == "all" else _cohort_masks(c, h, alive)[cohort]
    coins = alive[mask]
    price = np.array([_basis(close, int(c.day[b])) for b in c.created[coins]])
    rows: dict[float, dict[str, Any]] = {}
    for p, v in zip(price.tolist(), c.value[coins].tolist()):
        floor = 0.0 if p == 0 else 0.01 * 10 ** (np.floor(per_decade * np.log10(max(p, 0.01) / 0.01)) / per_decade)
        row = rows.setdefault(float(floor), {"supply": 0, "utxo_count": 0, "realized_cap": 0.0})
        row["supply"] += v
        row["utxo_count"] += 1
        row["realized_cap"] += v / 1e8 * p
    return [{"price_floor": f, **rows[f]} for f in sorted(rows)]


def _same(got: dict[str, Any], want: list[dict[str, Any]]) -> None:
    assert [(b["supply"], b["utxo_count"]) for b in got["buckets"]] == [(w["supply"], w["utxo_count"]) for w in want]
    for b, w in zip(got["buckets"], want):
        assert b["price_floor"] == pytest.approx(w["price_floor"], rel=1e-12)
        assert b["realized_cap"] == pytest.approx(w["realized_cap"], rel=1e-9, abs=1e-9)
        assert b["supply_btc"] == b["supply"] / 1e8
    assert got["supply"] == sum(w["supply"] for w in want)


def test_generated_chain_urpd_recounted_from_a_checkpoint(generated: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cohorts, "CHUNK_BLOCKS", 37)
    monkeypatch.setattr(cohorts, "URPD_EVERY", 100)
    out = tmp_path / "out"
    shutil.copytree(generated, out)
    with pytest.raises(NotFound, match=r"^No prices: the URPD prices each coin"):
        _urpd(out, cohort="sth")
    close = _closes(_days(out), 5)
    prices.save(out, [(d, p, p, p, p) for d, p in close.items()])
    compute(out)
    c = Coins(generated.parent / "blocks", open_store(out).read("height_to_blockhash"))
    checked = 0
    for cohort, h, k in (("all", 599, 10), ("sth", 301, 100), ("lth", 450, 3), ("utxos_1d_to_1w_old", 123, 10),
                         ("utxos_over_1btc", 555, 100), ("utxos_under_10sats", 250, 10), ("p2pkh", 37, 10),
                         ("epoch_0", 599, 1), ("class_2009", 410, 100), ("utxos_under_1w_old", 2, 10)):
        got = _urpd(out, cohort=cohort, height=h, per_decade=k)
        assert got["cohort"] == cohort and got["height"] == h and got["per_decade"] == k
        _same(got, _recount(c, close, cohort, h, k))
        # Advanced from the newest checkpoint at or below the height: one per 100 heights kept, 37-block chunks.
        assert got["from_checkpoint"] <= h + 1 and got["blocks_read"] == h + 1 - got["from_checkpoint"]
        assert got["blocks_read"] < 100 + 37
        checked += len(got["buckets"]) > 1
    assert checked >= 5
    assert _urpd(out, cohort="sth", height=301)["from_checkpoint"] > 0  # not from block 0
    # A date: its day's last block.
    day = int(c.day[300])
    last = int(np.flatnonzero(c.day == day)[-1])
    from cairn_servers.brk.dates import date_of_dateindex

    iso = date_of_dateindex(day).isoformat()
    by_date = _urpd(out, cohort="lth", date=iso)
    assert by_date["height"] == last and by_date["date"] == iso
    assert by_date == _urpd(out, cohort="lth", height=last)
    assert _urpd(out, cohort="lth")["height"] == 599  # the tip by default
    # Errors, stated with the fix.
    with pytest.raises(NotFound, match=r"^Unknown cohort 'lthx': give all or a UTXO cohort id"):
        _urpd(out, cohort="lthx")
    with pytest.raises(NotFound, match=r"^Height 600 is past the cohorts' tip \(599\)\.$"):
        _urpd(out, cohort="sth", height=600)
    first = date_of_dateindex(int(c.day[0]))
    with pytest.raises(NotFound, match=rf"^No block on or before 2009-01-01: the chain starts on {first}\.$"):
        _urpd(out, cohort="sth", date="2009-01-01")
    with pytest.raises(NotFound, match=r"^2100-01-01 is after the tip's day"):
        _urpd(out, cohort="sth", date="2100-01-01")
    with pytest.raises(InvalidInput, match=r"^Invalid date 'yesterday': give YYYY-MM-DD\.$"):
        _urpd(out, cohort="sth", date="yesterday")
    with pytest.raises(InvalidInput, match=r"^Give a height or a date, not both\.$"):
        _urpd(out, cohort="sth", date=iso, height=3)
    with pytest.raises(InvalidInput, match=r"^Invalid per_decade 1001: it must be at most 1000\.$"):
        _urpd(out, cohort="sth", per_decade=1001)


def test_mainnet_first_blocks_urpd(tmp_path: Path) -> None:
    out = mainnet_store(tmp_path)
    close = _closes(_days(out), 9)
    prices.save(out, [(d, p, p, p, p) for d, p in close.items()])
    compute(out)
    c = Coins(tmp_path / "blocks", open_store(out).read("height_to_blockhash"))
    for cohort, h in (("all", 589), ("class_2009", 589), ("utxos_under_1w_old", 400), ("p2pk65", 170),
                      ("utxos_1d_to_1w_old", 589)):
        got = _urpd(out, cohort=cohort, height=h, per_decade=100)
        _same(got, _recount(c, close, cohort, h, 100))
    whole = _urpd(out, cohort="all")
    assert whole["buckets"][0]["price_floor"] == 0.0  # coins of the first days, before the first close
    supply = OPS["get_vecs"].call(Interface(out), {"index": "height", "ids": "supply", "from": -1}).value()
    assert whole["supply"] == supply == 590 * 50 * 10 ** 8 and whole["height"] == 589
