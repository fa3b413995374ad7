"""Random reads and writes of rows of a vec file whose resident size does not grow with the file.

The pages a memory map touches count in the process's resident size until the map is unmapped, so
one map over a whole column (hundreds of thousands of random rows of a file of many GB) would make
the computed passes' memory grow with the chain. These helpers sort the rows, then go through
short-lived maps of at most ``ROWS`` rows each (the indexer does the same for its look-ups).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

ROWS = 4096  # rows a map serves before it is unmapped


class Rows:
    """Row numbers sorted once, to read (or write) several files at the same rows."""

    def __init__(self, rows: np.ndarray) -> None:
        import numpy as np

        self.rows = np.asarray(rows, dtype=np.int64)
        self.order = np.argsort(self.rows)  # equal rows read the same value: no need for a stable sort
        self.sorted = self.rows[self.order]

    def _each(self, path: Path, dtype: str, length: int, write: bool, apply: Callable[..., None]) -> None:
        """``apply(first, rows, view)`` for each run of ``ROWS`` sorted rows: ``view`` maps the file from the
        page holding the first row (``rows`` are relative to it); unmapped right after."""
        import numpy as np

        item = np.dtype(dtype).itemsize
        fd = os.open(path, os.O_RDWR if write else os.O_RDONLY)
        try:
            for a in range(0, self.sorted.shape[0], ROWS):
                part = self.sorted[a:a + ROWS]
                if int(part[0]) < 0 or int(part[-1]) >= length:
                    raise IndexError(f"rows {int(part[0])}..{int(part[-1])} are not within the {length} of {path}")
                lo = int(part[0]) * item // mmap.ALLOCATIONGRANULARITY * mmap.ALLOCATIONGRANULARITY
                hi = (int(part[-1]) + 1) * item
                m = mmap.mmap(fd, hi - lo, offset=lo, access=mmap.ACCESS_WRITE if write else mmap.ACCESS_READ)
                try:
                    view = np.frombuffer(m, dtype=dtype)  # lo is a multiple of every row size
                    apply(a, part - lo // item, view)
                    del view
                finally:
                    m.close()  # unmapped here: its pages leave the resident set
        finally:
            os.close(fd)

    def take(self, path: Path, dtype: str, length: int) -> np.ndarray:
        """``file[rows]`` of a file of ``length`` rows of ``dtype``, in the order of the rows."""
        import numpy as np

        result = np.empty(self.rows.shape[0], dtype=np.dtype(dtype))
        if not self.rows.shape[0]:
            return result
        got = np.empty_like(result)

        def read(a: int, rel: np.ndarray, view: np.ndarray) -> None:
            got[a:a + rel.shape[0]] = view[rel]

        self._each(path, dtype, length, False, read)
        result[self.order] = got
        return result

    def put(self, path: Path, dtype: str, length: int, values: np.ndarray) -> None:
        """``file[rows] = values`` in place (rows distinct). Written pages stay in the page cache until an
        ``fsync`` of the file (or the kernel) writes them back."""
        import numpy as np

        if not self.rows.shape[0]:
            return
        ordered = np.asarray(values, dtype=np.dtype(dtype))[self.order]

        def write(a: int, rel: np.ndarray, view: np.ndarray) -> None:
            view[rel] = ordered[a:a + rel.shape[0]]

        self._each(path, dtype, length, True, write)

    def or_into(self, path: Path, length: int, masks: np.ndarray) -> np.ndarray:
        """``file[rows] |= masks`` in place for a file of ``<u8`` rows (rows distinct), in one pass of maps;
        returns the rows' values before."""
        import numpy as np

        old = np.empty(self.rows.shape[0], dtype=np.uint64)
        if not self.rows.shape[0]:
            return old
        ordered = np.asarray(masks, dtype=np.uint64)[self.order]
        got = np.empty_like(old)

        def apply(a: int, rel: np.ndarray, view: np.ndarray) -> None:
            before = view[rel]
            got[a:a + rel.shape[0]] = before
            view[rel] = before | ordered[a:a + rel.shape[0]]

        self._each(path, "<u8", length, True, apply)
        old[self.order] = got
        return old


def gather(path: Path, dtype: str, length: int, rows: np.ndarray) -> np.ndarray:
    """``file[rows]`` of a file of ``length`` rows of ``dtype`` (1-d), in the order of ``rows``."""
    return Rows(rows).take(path, dtype, length)


def scatter(path: Path, dtype: str, length: int, rows: np.ndarray, values: np.ndarray) -> None:
    """``file[rows] = values`` in place (rows distinct)."""
    Rows(rows).put(path, dtype, length, values)


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
