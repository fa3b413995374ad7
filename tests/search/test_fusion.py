from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn_servers.search.fusion import blend, fuse, minmax, rrf

scores = st.dictionaries(st.integers(0, 50), st.floats(-1e6, 1e6, allow_nan=False), max_size=30)


def test_minmax() -> None:
    assert minmax({"a": 2.0, "b": 4.0, "c": 3.0}) == {"a": 0.0, "b": 1.0, "c": 0.5}
    assert minmax({"a": 5.0}) == {"a": 1.0}
    assert minmax({}) == {}


def test_blend_is_the_reference_formula() -> None:
    out = dict(blend({"a": 10.0, "b": 0.0}, {"b": 0.9, "c": 0.1}, alpha=0.6))
    assert out["a"] == pytest.approx(0.4)  # keyword 1.0, no vector
    assert out["b"] == pytest.approx(0.6)  # keyword 0.0, vector 1.0
    assert out["c"] == pytest.approx(0.0)


def test_alpha_extremes_follow_one_signal() -> None:
    kw = {"a": 3.0, "b": 2.0, "c": 1.0}
    vec = {"a": 0.1, "b": 0.2, "c": 0.3}
    assert [k for k, _ in blend(kw, vec, 0.0)] == ["a", "b", "c"]
    assert [k for k, _ in blend(kw, vec, 1.0)] == ["c", "b", "a"]


def test_rrf_first_in_both_scores_one() -> None:
    out = dict(rrf({"a": 9.0, "b": 1.0}, {"a": 0.9, "b": 0.1}, 0.5))
    assert out["a"] == pytest.approx(1.0)
    assert 0 < out["b"] < 1


@given(scores, scores, st.floats(0, 1), st.sampled_from(["minmax", "rrf"]))
def test_fused_scores_in_unit_interval_and_deterministic(kw: dict[int, float], vec: dict[int, float],
                                                        alpha: float, method: str) -> None:
    out = fuse(method, kw, vec, alpha)
    assert {k for k, _ in out} == set(kw) | set(vec)
    assert all(0.0 <= s <= 1.0 for _, s in out)
    assert out == sorted(out, key=lambda kv: (-kv[1], str(kv[0])))
    assert out == fuse(method, dict(reversed(list(kw.items()))), vec, alpha)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="alpha"):
        blend({}, {}, 1.5)
    with pytest.raises(ValueError, match="unknown fusion"):
        fuse("max", {}, {}, 0.5)


def test_rrf_constant_decides_how_much_a_top_rank_outweighs_a_tail() -> None:
    # "a": 1st by keyword only; "b": 2nd by both lists. A large k flattens ranks, so being in both lists
    # wins; a small k lets a single first place win.
    kw = {"a": 9.0, "b": 8.0, "c": 7.0}
    vec = {"d": 0.9, "b": 0.8, "e": 0.7}
    assert [k for k, _ in rrf(kw, vec, 0.5, k=60)][0] == "b"
    assert [k for k, _ in rrf(kw, vec, 0.8, k=1)][0] == "d"
    assert [k for k, _ in fuse("rrf", kw, vec, 0.5, rrf_k=60)] == [k for k, _ in rrf(kw, vec, 0.5)]
    assert dict(rrf({"a": 1.0}, {"a": 1.0}, 0.5, k=10))["a"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least 1"):
        rrf(kw, vec, 0.5, k=0)
