"""The filesystem connector: files under ``root`` matching include/exclude globs.

Policy: ``.git`` directories are never entered; symlinks (files and directories) are skipped
unless ``follow_symlinks = true`` (then directory loops are cut); binary files are skipped, and
files over their cap (``max_document_bytes`` for PDF and Office files, ``max_file_bytes`` for the
rest) are skipped with a warning before a byte is read, and so are files and folders that cannot be
read (permissions, gone since the scan). Documents are extracted
(:func:`cairn_servers.ctx.connectors.file_item`). The fingerprint is size + mtime (ns), so an unchanged
file costs one stat per sync.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from cairn_servers.core.errors import NotFound
from cairn_servers.ctx.config import ConnectorConfig
from cairn_servers.ctx.connectors.base import Entry, Item, Matcher, Skips, file_cap, file_item, register, too_big


class FilesystemConnector(Skips):
    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__()
        self.config = config
        self.root = Path(config.options["root"])
        self.matcher = Matcher(config.options["include_globs"], config.options["exclude_globs"])
        self.follow = bool(config.options["follow_symlinks"])
        self.max_bytes = int(config.options["max_file_bytes"])
        self.max_doc_bytes = int(config.options.get("max_document_bytes", self.max_bytes))

    def scan(self) -> Iterator[Entry]:
        if not self.root.is_dir():
            raise NotFound(
                f"{self.config.source}: root {self.root} is not a directory. "
                f"Fix [connectors.filesystem.{self.config.name}] root in the config."
            )
        self.reset()
        seen_dirs = {os.path.realpath(self.root)}
        yield from self._walk(str(self.root), "", seen_dirs)

    def _walk(self, path: str, rel: str, seen_dirs: set[str]) -> Iterator[Entry]:
        try:
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            self.warn(rel.rstrip("/") or ".", f"cannot read the folder ({exc.strerror or exc})")
            return
        for entry in entries:
            child = f"{rel}{entry.name}"
            try:
                is_link = entry.is_symlink()
                if is_link and not self.follow:
                    self.skipped += 1
                    continue
                if entry.is_dir(follow_symlinks=self.follow):
                    if entry.name == ".git" or self.matcher.excludes_dir(child):
                        continue
                    if is_link:
                        real = os.path.realpath(entry.path)
                        if real in seen_dirs:
                            continue
                        seen_dirs.add(real)
                    yield from self._walk(entry.path, child + "/", seen_dirs)
                    continue
                if not entry.is_file(follow_symlinks=self.follow) or not self.matcher(child):
                    continue
                st = entry.stat(follow_symlinks=self.follow)
            except OSError as exc:
                self.warn(child, f"cannot read it ({exc.strerror or exc})")
                continue
            cap = file_cap(child, self.max_bytes, self.max_doc_bytes)
            if too_big(self, child, st.st_size, cap):
                continue
            yield Entry(child, f"{st.st_size}:{st.st_mtime_ns}", self._loader(entry.path, child, int(st.st_mtime), cap))

    def _loader(self, path: str, rel: str, mtime: int, cap: tuple[int, str]) -> Callable[[], Item | None]:
        def load() -> Item | None:
            try:
                with open(path, "rb") as f:
                    data = f.read(cap[0] + 1)  # the file may have grown since the scan
            except OSError as exc:  # unreadable (permissions) or gone since the scan: told, not dropped silently
                self.warn(rel, f"cannot read it ({exc.strerror or exc})")
                return None
            if too_big(self, rel, len(data), cap):
                return None
            return file_item(data, rel, self, updated_at=mtime)

        return load


register("filesystem", FilesystemConnector)
