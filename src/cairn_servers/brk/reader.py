"""Read-only access to a vec store that another process may be writing.

Readers see committed rows only: lengths come from the store's manifest (replaced atomically by the
writer), and rows are read with ``os.pread`` rather than memory maps, so a writer truncating a file
on a reorg can never fault a reader (a memory map past the end of a file raises SIGBUS); a short read
is reported as a clear ``StorageError`` and the next manifest check picks up the new lengths.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.core.errors import StorageError

if TYPE_CHECKING:
    import numpy as np


class StoreReader:
    """A snapshot of one store's manifest plus cached file descriptors for ``pread``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.manifest_path = root / "manifest.json"
        self._stamp: tuple[int, int, int] | None = None
        self.vecs: dict[str, dict[str, Any]] = {}
        self.meta: dict[str, Any] = {}
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()

    def refresh(self) -> bool:
        """Reload the manifest if it changed; True when it did (or appeared)."""
        try:
            st = os.stat(self.manifest_path)
        except FileNotFoundError:
            if self._stamp is not None:
                self._stamp, self.vecs, self.meta = None, {}, {}
                return True
            return False
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return False
        try:
            manifest = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError):
            return False  # replaced under us (os.replace is atomic, so retry on the next request)
        self.vecs = manifest.get("vecs", {})
        self.meta = manifest.get("meta", {})
        self._stamp = stamp
        return True

    @property
    def exists(self) -> bool:
        return self._stamp is not None

    def length(self, name: str) -> int:
        entry = self.vecs.get(name)
        return int(entry["length"]) if entry else 0

    def _fd(self, name: str) -> int:
        fd = self._fds.get(name)
        if fd is None:
            with self._lock:
                fd = self._fds.get(name)
                if fd is None:
                    path = self.root / "vecs" / f"{name}.bin"
                    try:
                        fd = os.open(path, os.O_RDONLY)
                    except OSError as exc:
                        raise StorageError(f"{path} cannot be opened ({exc.strerror}). "
                                           f"Re-run `brk index --out {self.root}`.") from exc
                    self._fds[name] = fd
        return fd

    def read(self, name: str, start: int = 0, stop: int | None = None, length: int | None = None) -> np.ndarray:
        """Rows ``[start, stop)`` of a committed vec (clamped to its committed length)."""
        import numpy as np

        entry = self.vecs.get(name)
        if entry is None:
            raise StorageError(f"{self.root} has no vec {name!r}. Re-run `brk index --out {self.root.parent}`.")
        n = int(entry["length"]) if length is None else min(length, int(entry["length"]))
        stop = n if stop is None else min(stop, n)
        start = max(0, min(start, stop))
        dtype = np.dtype(entry["dtype"])
        width = int(entry.get("width", 1))
        row = dtype.itemsize * width
        count = stop - start
        if count <= 0:
            return np.zeros((0,) if width == 1 else (0, width), dtype=dtype)
        want = count * row
        data = os.pread(self._fd(name), want, start * row)
        if len(data) != want:
            raise StorageError(f"vec {name} in {self.root} is shorter than its manifest says (a writer is "
                               f"rolling it back); retry the request.")
        arr = np.frombuffer(data, dtype=dtype)
        return arr if width == 1 else arr.reshape(count, width)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
