from __future__ import annotations

import numpy as np
import onnxruntime

from cairn_servers.search.onnxproto import matmul_integer


def test_matmul_integer_multiplies_exactly() -> None:
    """The hand-encoded model loads in onnxruntime and multiplies exactly at the ranges the vector scan uses
    (uint8 query up to 127, int8 matrix over its whole range), with any number of columns."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(matmul_integer(), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(2)
    for columns in (1, 17, 5000):
        q = rng.integers(0, 128, size=(1, 384)).astype(np.uint8)
        m = rng.integers(-127, 128, size=(384, columns)).astype(np.int8)
        (y,) = session.run(None, {"q": q, "m": m})
        assert y.dtype == np.int32 and y.shape == (1, columns)
        assert np.array_equal(y, q.astype(np.int64) @ m.astype(np.int64))
