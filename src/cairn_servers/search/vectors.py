"""Exact vector search over one contiguous, L2-normalised float32 matrix held in memory.

The matrix is built once per process (or per index generation). Filters arrive as boolean masks and
are applied *before* top-k, so a filtered query still gets its full ``k`` results.

Small indexes are searched with one float32 matrix-vector product. From :data:`INT8_MIN_ROWS` rows
on, that product is memory-bound (100k x 384 float32 is 154 MB: ~13-30 ms a query on a 2-core VM),
so the index also keeps an int8 copy (a quarter of the bytes, one scale per dimension), transposed
and scanned by onnxruntime's integer kernel (``MatMulInteger``, ~2 ms at 100k x 384); the best
:func:`rescore_count` rows of that scan are then scored again in float32, so the hits and their
scores are the float32 ones (the int8 scan only chooses which rows to look at). Without
onnxruntime the float32 product is used at every size.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# One BLAS thread: a matrix-vector product is memory-bound, and on a busy 2-core machine a second
# thread tripled p95 (100k x 256: p50 5.6 / p95 6.0 ms single-threaded; 4.1 / 12 ms with two).
# Effective only when numpy is not imported yet, as in the ctx and blz processes; override by
# setting OPENBLAS_NUM_THREADS yourself.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


def normalize(matrix: "npt.NDArray[Any]") -> "npt.NDArray[np.float32]":
    """Rows scaled to unit length as contiguous float32; all-zero rows stay zero."""
    import numpy as np

    m = np.ascontiguousarray(matrix, dtype=np.float32)
    if m.ndim == 1:
        m = m.reshape(1, -1)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(m / norms, dtype=np.float32)


def normalize_in_place(matrix: "npt.NDArray[np.float32]") -> "npt.NDArray[np.float32]":
    """:func:`normalize` of a C-contiguous float32 matrix, in place and in blocks of :data:`BUILD_ROWS` rows
    (no temporary the size of the matrix). Each row's norm is the same reduction over the same row as in
    :func:`normalize`, so the values are identical."""
    import numpy as np

    for start in range(0, matrix.shape[0], BUILD_ROWS):
        block = matrix[start : start + BUILD_ROWS]
        norms = np.linalg.norm(block, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        np.divide(block, norms, out=block)
    return matrix


@dataclass(frozen=True)
class Hit:
    """One vector hit: its row in the matrix and its cosine similarity."""

    row: int
    score: float


INT8_MIN_ROWS = 20_000  # below this the float32 product takes about a millisecond: no int8 copy
QUERY_LEVELS = 63  # the query is quantised to +-63 (see _Int8Scan.scores)
BUILD_ROWS = 8192  # rows quantised at a time when the int8 copy is built


def rescore_count(k: int, n: int) -> int:
    """How many rows of the int8 scan are scored again in float32 for a top ``k`` among ``n``.

    The int8 scores differ from the float32 cosines by ~0.001 (one standard deviation, unit vectors);
    a true top-``k`` row would have to fall below hundreds of others to be missed.
    """
    return min(n, max(4 * k, k + 256))


class VectorIndex:
    """Rows of unit vectors plus a cosine top-k that honours a boolean row mask."""

    def __init__(self, matrix: "npt.NDArray[Any]", *, int8_min_rows: int | None = None, owned: bool = False) -> None:
        """``owned``: ``matrix`` is a writable C-contiguous float32 array nobody else uses, normalised in place
        (the same values as :func:`normalize`, without a second copy of the matrix)."""
        import numpy as np

        if matrix.size == 0:
            self.matrix = np.zeros((0, matrix.shape[1] if matrix.ndim == 2 else 0), dtype=np.float32)
        elif owned and matrix.dtype == np.float32 and matrix.ndim == 2 and matrix.flags.c_contiguous \
                and matrix.flags.writeable:
            self.matrix = normalize_in_place(matrix)
        else:
            self.matrix = normalize(matrix)
        least = INT8_MIN_ROWS if int8_min_rows is None else int8_min_rows
        self.scan = _Int8Scan.build(self.matrix) if self.size and self.size >= least else None

    @property
    def size(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def dims(self) -> int:
        return int(self.matrix.shape[1]) if self.matrix.ndim == 2 else 0

    def search(self, query: "npt.NDArray[Any]", k: int, mask: "npt.NDArray[np.bool_] | None" = None) -> list[Hit]:
        """The ``k`` rows most similar to ``query`` among rows where ``mask`` is true.

        Ties break by row number, so the order is deterministic.
        """
        import numpy as np

        if self.size == 0 or k <= 0:
            return []
        q = normalize(query)[0]
        if q.shape[0] != self.dims:
            raise ValueError(f"query has {q.shape[0]} dimensions, the index has {self.dims}")
        scores = self.matrix @ q if self.scan is None else self.scan.scores(q)
        if mask is not None:
            candidates = np.flatnonzero(mask)
            if candidates.size == 0:
                return []
            sub = scores[candidates]
        else:
            candidates = None
            sub = scores
        k = min(k, sub.shape[0])
        part = _largest(sub, k if self.scan is None else rescore_count(k, sub.shape[0]))
        rows = part if candidates is None else candidates[part]
        if self.scan is None:
            best = sub[part]
        else:  # the int8 scan chose the rows; their float32 cosines rank them
            best = self.matrix[rows] @ q
        # lexsort: last key is primary -> by score desc, then row asc.
        order = np.lexsort((rows, -best))[:k]
        return [Hit(int(rows[i]), float(best[i])) for i in order]


def _largest(scores: "npt.NDArray[np.float32]", n: int) -> "npt.NDArray[np.intp]":
    """Positions of the ``n`` largest scores; of equal scores at the boundary, the lowest positions
    (so rows with the same vector come in row order, whichever scan scored them)."""
    import numpy as np

    if n >= scores.shape[0]:
        return np.arange(scores.shape[0])
    cut = scores[np.argpartition(scores, scores.shape[0] - n)[scores.shape[0] - n]]
    above = np.flatnonzero(scores > cut)
    return np.concatenate([above, np.flatnonzero(scores == cut)[: n - above.shape[0]]])


class _Int8Scan:
    """The matrix as int8 with one scale per dimension, transposed (dims x rows) for onnxruntime's
    ``MatMulInteger``, which multiplies a uint8 query row by it in one pass over a quarter of the bytes."""

    def __init__(self, transposed: "npt.NDArray[np.int8]", scales: "npt.NDArray[np.float32]",
                 shifts: "npt.NDArray[np.int32]", session: Any) -> None:
        self.transposed = transposed
        self.scales = scales
        self.shifts = shifts  # (QUERY_LEVELS + 1) x each row's sum
        self.session = session

    @classmethod
    def build(cls, matrix: "npt.NDArray[np.float32]") -> "_Int8Scan | None":
        import numpy as np

        session = _matmul_integer()
        if session is None:
            return None
        rows, dims = matrix.shape
        scales = np.zeros(dims, dtype=np.float32)
        for start in range(0, rows, BUILD_ROWS):  # in blocks: no temporary the size of the matrix
            np.maximum(scales, np.abs(matrix[start : start + BUILD_ROWS]).max(axis=0), out=scales)
        scales /= 127
        scales[scales == 0] = 1.0
        transposed = np.empty((dims, rows), dtype=np.int8)
        shifts = np.empty(rows, dtype=np.int32)
        for start in range(0, rows, BUILD_ROWS):
            block = np.rint(matrix[start : start + BUILD_ROWS] / scales).astype(np.int8)
            transposed[:, start : start + block.shape[0]] = block.T
            shifts[start : start + block.shape[0]] = block.sum(axis=1, dtype=np.int32)
        shifts *= np.int32(QUERY_LEVELS + 1)
        return cls(transposed, scales, shifts, session)

    def scores(self, query: "npt.NDArray[np.float32]") -> "npt.NDArray[np.float32]":
        """Approximate cosines of every row with the unit vector ``query``.

        The query, times the per-dimension scales, is quantised to +-63 and shifted by 64 into uint8:
        x86's uint8 x int8 kernels add pairs of products in 16 bits, which 2 x 127 x 127 fits and
        2 x 255 x 127 would overflow. The shift comes back off as 64 x each row's sum.
        """
        import numpy as np

        weighted = query * self.scales
        top = float(np.abs(weighted).max())
        if top == 0.0:
            return np.zeros(self.transposed.shape[1], dtype=np.float32)
        step = top / QUERY_LEVELS
        shifted = (np.rint(weighted / step) + (QUERY_LEVELS + 1)).astype(np.uint8).reshape(1, -1)
        raw: "npt.NDArray[np.int32]" = self.session.run(None, {"q": shifted, "m": self.transposed})[0][0]
        np.subtract(raw, self.shifts, out=raw)
        out = raw.astype(np.float32)
        out *= np.float32(step)
        return out


_session: list[Any] = []
_session_lock = threading.Lock()


def _matmul_integer() -> Any:
    """A one-node onnxruntime session computing uint8 [1, d] x int8 [d, n] -> int32 [1, n] (one thread),
    or None without onnxruntime. Built once per process (:func:`cairn_servers.search.onnxproto.matmul_integer`)."""
    with _session_lock:
        if not _session:
            try:
                import onnxruntime
            except ImportError:
                _session.append(None)
                return None
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = 1  # memory-bound, as the float32 product (see OPENBLAS_NUM_THREADS)
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            from cairn_servers.search.onnxproto import matmul_integer

            _session.append(onnxruntime.InferenceSession(matmul_integer(), options,
                                                         providers=["CPUExecutionProvider"]))
        return _session[0]
