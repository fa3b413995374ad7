from __future__ import annotations

import numpy as np
import pytest

from cairn_servers.search.vectors import VectorIndex, normalize


def test_normalize_unit_rows_and_zero_rows() -> None:
    m = normalize(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert m.dtype == np.float32 and m.flags["C_CONTIGUOUS"]
    assert np.allclose(m[0], [0.6, 0.8])
    assert np.allclose(m[1], [0.0, 0.0])


def test_exact_topk_matches_brute_force() -> None:
    rng = np.random.default_rng(7)
    data = rng.normal(size=(500, 32)).astype(np.float32)
    index = VectorIndex(data)
    q = rng.normal(size=32)
    hits = index.search(q, 10)
    unit = data / np.linalg.norm(data, axis=1, keepdims=True)
    expected = np.argsort(-(unit @ (q / np.linalg.norm(q))))[:10]
    assert [h.row for h in hits] == list(expected)
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))


def test_mask_applies_before_topk() -> None:
    rng = np.random.default_rng(1)
    data = rng.normal(size=(1000, 16)).astype(np.float32)
    mask = np.zeros(1000, dtype=bool)
    mask[::100] = True  # only 10 rows allowed
    hits = VectorIndex(data).search(data[5], 10, mask)
    assert len(hits) == 10  # all allowed rows, even though none is near the query's own row
    assert {h.row for h in hits} == set(range(0, 1000, 100))


def test_ties_break_by_row_and_empty_cases() -> None:
    index = VectorIndex(np.ones((5, 4), dtype=np.float32))
    assert [h.row for h in index.search(np.ones(4), 3)] == [0, 1, 2]
    assert index.search(np.ones(4), 0) == []
    assert index.search(np.ones(4), 3, np.zeros(5, dtype=bool)) == []
    assert VectorIndex(np.zeros((0, 4), dtype=np.float32)).search(np.ones(4), 3) == []
    with pytest.raises(ValueError, match="dimensions"):
        index.search(np.ones(3), 1)


def test_int8_scan_gives_the_float32_hits_and_scores() -> None:
    """From INT8_MIN_ROWS rows an int8 copy (onnxruntime MatMulInteger) chooses the rows and float32 ranks
    them: the hits, their order and their scores must be those of the float32 product, masked or not."""
    rng = np.random.default_rng(3)
    data = rng.normal(size=(3000, 384)).astype(np.float32)
    data[2000:2010] = data[7]  # identical vectors (chunks with the same text): ties break by row
    exact = VectorIndex(data, int8_min_rows=10**9)
    fast = VectorIndex(data, int8_min_rows=1)
    assert exact.scan is None and fast.scan is not None
    mask = rng.random(3000) < 0.3
    mask[2000:2010] = True
    for i in range(40):
        q = data[7] if i == 0 else rng.normal(size=384) + (data[i] if i % 2 else 0)
        for m in (None, mask):
            want, got = exact.search(q, 20, m), fast.search(q, 20, m)
            assert [h.row for h in got] == [h.row for h in want]
            assert np.allclose([h.score for h in got], [h.score for h in want], atol=1e-6)
    assert [h.row for h in fast.search(data[7], 11)] == [7, *range(2000, 2010)]


def test_int8_scores_are_close_to_the_cosines() -> None:
    rng = np.random.default_rng(5)
    index = VectorIndex(rng.normal(size=(1000, 384)).astype(np.float32), int8_min_rows=1)
    assert index.scan is not None
    q = normalize(rng.normal(size=384))[0]
    approx = index.scan.scores(q)
    assert approx.dtype == np.float32 and approx.shape == (1000,)
    assert float(np.abs(approx - index.matrix @ q).max()) < 0.01
    assert not index.scan.scores(np.zeros(384, dtype=np.float32)).any()


def test_owned_matrix_is_normalised_in_place_to_the_same_values() -> None:
    # More rows than one block of normalize_in_place, zero rows and non-unit rows: bit for bit normalize's values.
    from cairn_servers.search.vectors import BUILD_ROWS, normalize_in_place

    rng = np.random.default_rng(11)
    data = (rng.normal(size=(BUILD_ROWS * 2 + 37, 48)) * rng.uniform(0.1, 30, size=(BUILD_ROWS * 2 + 37, 1))).astype(np.float32)
    data[[0, BUILD_ROWS, BUILD_ROWS * 2 + 36]] = 0.0
    expected = normalize(data)
    owned = data.copy()
    assert normalize_in_place(owned) is owned
    assert owned.tobytes() == expected.tobytes()
    index = VectorIndex(data.copy(), owned=True, int8_min_rows=1)
    reference = VectorIndex(data, int8_min_rows=1)
    assert index.matrix.tobytes() == reference.matrix.tobytes()
    assert index.scan is not None and reference.scan is not None
    assert index.scan.transposed.tobytes() == reference.scan.transposed.tobytes()
    q = rng.normal(size=48)
    assert index.search(q, 25) == reference.search(q, 25)
