"""Random reads and writes of rows of a vec file whose resident size does not grow with the file.

The pages a memory map touches count in the process's resident size until the map is unmapped, so
one map over a whole column (hundreds of thousands of random rows of a file of many GB) would make
the computed passes' memory grow with the chain. These helpers sort the rows, then go through
short-lived maps of at most ``ROWS`` rows each (the indexer does the same for its look-ups).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

ROWS = 4096  # rows a map serves before it is unmapped


def gather(path: Path, dtype: str, length: int, rows: np.ndarray) -> np.ndarray:
    """``file[rows]`` of a file of ``length`` rows of ``dtype`` (1-d), in the order of ``rows``."""
    import numpy as np

    rows = np.asarray(rows, dtype=np.int64)
    result = np.empty(rows.shape[0], dtype=np.dtype(dtype))
    if not rows.shape[0]:
        return result
    order = np.argsort(rows, kind="stable")
    ordered = rows[order]
    got = np.empty_like(result)
    for a in range(0, ordered.shape[0], ROWS):
        view = np.memmap(path, dtype=dtype, mode="r", shape=(length,))
        got[a:a + ROWS] = view[ordered[a:a + ROWS]]
        del view  # unmapped here: its pages leave the resident set
    result[order] = got
    return result


def scatter(path: Path, dtype: str, length: int, rows: np.ndarray, values: np.ndarray) -> None:
    """``file[rows] = values`` in place (rows distinct). Written pages stay in the page cache until an
    ``fsync`` of the file (or the kernel) writes them back."""
    import numpy as np

    rows = np.asarray(rows, dtype=np.int64)
    if not rows.shape[0]:
        return
    order = np.argsort(rows, kind="stable")
    ordered, vals = rows[order], np.asarray(values)[order]
    for a in range(0, ordered.shape[0], ROWS):
        view = np.memmap(path, dtype=dtype, mode="r+", shape=(length,))
        view[ordered[a:a + ROWS]] = vals[a:a + ROWS]
        del view


def read_rows(path: Path, dtype: str, start: int, stop: int) -> np.ndarray:
    """Rows ``[start, stop)`` of a file of ``dtype`` rows (one ``pread``: anonymous memory, freed with the
    array)."""
    import numpy as np

    item = np.dtype(dtype).itemsize
    if stop <= start:
        return np.zeros(0, dtype=dtype)
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.pread(fd, (stop - start) * item, start * item)
    finally:
        os.close(fd)
    if len(data) != (stop - start) * item:
        from cairn_servers.core.errors import StorageError

        raise StorageError(f"{path} is shorter than its manifest says")
    return np.frombuffer(data, dtype=dtype)
