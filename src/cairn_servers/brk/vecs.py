"""The vec store: append-only fixed-width columnar files, one manifest as the single commit point.

Layout of an output directory::

    manifest.json            format, per-vec version/dtype/width/committed length, and free "meta"
    vecs/<name>.bin          raw little-endian rows of one vec, e.g. vecs/height_to_timestamp.bin

Crash safety: rows are appended to the files, the files are fsynced, and only then the manifest is
replaced atomically (``cairn_servers.core.files.write_atomic``: temp file + fsync + ``os.replace`` + directory fsync). The manifest's lengths
are the truth: on open every file is truncated back to its committed length, so a process killed at
any moment leaves exactly the last committed state. Rollback writes the shorter lengths to the
manifest first and truncates afterwards, so it is crash-safe the same way.

Readers get zero-copy ``numpy.memmap`` views limited to the committed length.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.core.errors import StorageError, write_failure
from cairn_servers.core.files import write_atomic

if TYPE_CHECKING:
    import numpy as np

FORMAT = "cairn-brk-vecs/1"


@dataclass(frozen=True, slots=True)
class VecSpec:
    """A vec's declaration: the index it is keyed by, its numpy dtype, bytes per row, and version."""

    name: str
    index: str  # height, txindex, inputindex, outputindex, ...
    dtype: str  # numpy dtype string, little-endian, e.g. "<u4"; "u1" with width > 1 for hashes
    width: int = 1  # values per row (32 for a hash stored as 32 x u1)
    version: int = 1

    @property
    def row_bytes(self) -> int:
        import numpy as np

        return int(np.dtype(self.dtype).itemsize) * self.width


class VecStore:
    """A directory of vecs. Append with ``append``, make it durable with ``commit``."""

    def __init__(self, root: Path, specs: list[VecSpec], *, durable: bool = True,
                 independent: bool = False) -> None:
        self.root = root
        # independent: a vec whose version (or dtype/width) changed is emptied on its own, the others
        # kept (derived vecs, each recomputable); otherwise one change resets the whole store.
        self.independent = independent
        self.specs = {s.name: s for s in specs}
        self.durable = durable  # fsync on commit (tests and benchmarks of throughput may turn it off)
        self.lengths: dict[str, int] = {s.name: 0 for s in specs}
        self.meta: dict[str, Any] = {}
        self._pending: dict[str, list[bytes]] = {s.name: [] for s in specs}
        self._pending_rows: dict[str, int] = {s.name: 0 for s in specs}
        try:
            (root / "vecs").mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # --out names a file, an unwritable place, a full disk...
            raise StorageError(f"Cannot use {root} as an output directory: {exc.strerror or exc}. "
                               "Point --out at a folder brk may create and write.") from exc
        self._load()

    # -- opening --------------------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    def path(self, name: str) -> Path:
        return self.root / "vecs" / f"{name}.bin"

    def _load(self) -> None:
        reset = False
        if self.manifest_path.exists():
            try:
                manifest = json.loads(self.manifest_path.read_text())
            except (OSError, ValueError) as exc:
                raise StorageError(
                    f"{self.manifest_path} is unreadable ({exc}). Delete {self.root} and index again."
                ) from exc
            if manifest.get("format") != FORMAT:
                raise StorageError(
                    f"{self.root} holds format {manifest.get('format')!r}, not {FORMAT!r}. Delete it and index again."
                )
            stored = manifest.get("vecs", {})
            changed = False
            for name, spec in self.specs.items():
                entry = stored.get(name)
                if entry is None or entry.get("version") != spec.version or entry.get("dtype") != spec.dtype \
                        or entry.get("width") != spec.width:
                    changed = True
                    if not self.independent:
                        reset = True
                        break
                    self.lengths[name] = 0
                    continue
                self.lengths[name] = int(entry["length"])
            self.meta = manifest.get("meta", {})
            if reset:
                # Raw vecs depend on each other (tx rows point at output rows), so one changed
                # version means the whole index is rebuilt rather than mixing formats. The empty
                # manifest is published before any file shrinks, as in ``truncate``.
                print(f"brk: vec versions changed in {self.root}; re-indexing from scratch", file=sys.stderr)
                self.lengths = {name: 0 for name in self.specs}
                self.meta = {}
                self._write_manifest()
            elif changed:
                self._write_manifest()  # the emptied vecs are committed before their files shrink
        # Drop whatever a crashed run appended past the committed lengths.
        for name, spec in self.specs.items():
            path = self.path(name)
            want = self.lengths[name] * spec.row_bytes
            if not path.exists():
                if want:
                    raise StorageError(f"{path} is missing but the manifest commits {self.lengths[name]} rows. "
                                       f"Delete {self.root} and index again.")
                path.touch()
                continue
            have = path.stat().st_size
            if have < want:
                raise StorageError(f"{path} holds {have} bytes but the manifest commits {want}. "
                                   f"Delete {self.root} and index again.")
            if have > want:
                os.truncate(path, want)
        if not self.manifest_path.exists():
            self._write_manifest()

    # -- writing --------------------------------------------------------------------------------
    def append(self, name: str, rows: np.ndarray) -> None:
        """Queue rows for ``name`` (converted to the vec's dtype); durable after ``commit``."""
        import numpy as np

        spec = self.specs[name]
        arr = np.ascontiguousarray(rows, dtype=np.dtype(spec.dtype))
        count = arr.shape[0] if spec.width == 1 else arr.size // spec.width
        if spec.width > 1 and arr.size != count * spec.width:
            raise StorageError(f"vec {name}: appended {arr.size} values, not a multiple of width {spec.width}")
        self._pending[name].append(arr.tobytes())
        self._pending_rows[name] += count

    def append_bytes(self, name: str, raw: bytes, count: int) -> None:
        """Queue ``count`` rows already encoded as bytes (e.g. concatenated 32-byte hashes)."""
        spec = self.specs[name]
        if len(raw) != count * spec.row_bytes:
            raise StorageError(f"vec {name}: {len(raw)} bytes is not {count} rows of {spec.row_bytes}")
        self._pending[name].append(raw)
        self._pending_rows[name] += count

    def pending_length(self, name: str) -> int:
        return self.lengths[name] + self._pending_rows[name]

    def commit(self, meta: dict[str, Any] | None = None) -> None:
        """Append queued rows to the files, sync them, then publish the new lengths atomically.

        A failed write (a full disk) raises StorageError and publishes nothing: the files keep
        bytes past the committed lengths, which the next open truncates away."""
        before = dict(self.lengths)
        try:
            self._commit(meta)
        except OSError as exc:
            self.lengths = before
            self.discard_pending()
            raise StorageError(f"Cannot write to {self.root}: {write_failure(exc)}. Free some space (or fix "
                               "the permissions) and run the same command again: the last commit is intact "
                               "and work resumes from it.") from exc

    def _commit(self, meta: dict[str, Any] | None) -> None:
        for name, chunks in self._pending.items():
            if not chunks:
                continue
            with open(self.path(name), "ab") as fh:
                fh.write(b"".join(chunks))
                fh.flush()
                if self.durable:
                    os.fsync(fh.fileno())
            self.lengths[name] += self._pending_rows[name]
            self._pending[name] = []
            self._pending_rows[name] = 0
        if meta is not None:
            self.meta = meta
        self._write_manifest()

    def truncate(self, lengths: dict[str, int], meta: dict[str, Any]) -> None:
        """Roll vecs back to shorter lengths (a reorg): manifest first, then the files."""
        if any(self._pending_rows.values()):
            raise StorageError("cannot roll back with uncommitted rows queued; commit or discard them first")
        for name, n in lengths.items():
            if n > self.lengths[name]:
                raise StorageError(f"cannot roll vec {name} forward from {self.lengths[name]} to {n}")
            self.lengths[name] = n
        self.meta = meta
        self._write_manifest()
        for name, n in lengths.items():
            os.truncate(self.path(name), n * self.specs[name].row_bytes)

    def discard_pending(self) -> None:
        for name in self._pending:
            self._pending[name] = []
            self._pending_rows[name] = 0

    def _write_manifest(self) -> None:
        body = {
            "format": FORMAT,
            "vecs": {
                name: {"index": s.index, "dtype": s.dtype, "width": s.width, "version": s.version,
                       "length": self.lengths[name]}
                for name, s in sorted(self.specs.items())
            },
            "meta": self.meta,
        }
        data = json.dumps(body, indent=1, sort_keys=True).encode()
        write_atomic(self.manifest_path, data, durable=self.durable)

    # -- reading --------------------------------------------------------------------------------
    def read(self, name: str) -> np.ndarray:
        """A read-only view of the committed rows (memory-mapped; shape (n,) or (n, width))."""
        import numpy as np

        spec = self.specs[name]
        n = self.lengths[name]
        dtype = np.dtype(spec.dtype)
        shape: tuple[int, ...] = (n,) if spec.width == 1 else (n, spec.width)
        if n == 0:
            return np.zeros(shape, dtype=dtype)
        return np.memmap(self.path(name), dtype=dtype, mode="r", shape=shape)


def read_manifest(root: Path) -> dict[str, Any]:
    """The committed manifest of an output directory (for readers that do not write)."""
    path = root / "manifest.json"
    if not path.exists():
        raise StorageError(f"{root} has no manifest.json. Run `brk index --out {root}` first.")
    result: dict[str, Any] = json.loads(path.read_text())
    return result
