"""The filesystem connector: files under ``root`` matching include/exclude globs.

Policy: ``.git`` directories are never entered; symlinks (files and directories) are skipped
unless ``follow_symlinks = true`` (then directory loops are cut); files over ``max_file_bytes``
and binary files are skipped. The fingerprint is size + mtime (ns), so an unchanged file costs one
stat per sync.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from cairn.core.errors import NotFound
from cairn.ctx.chunk import title_of
from cairn.ctx.config import ConnectorConfig
from cairn.ctx.connectors.base import Entry, Item, Matcher, decode, register


class FilesystemConnector:
    def __init__(self, config: ConnectorConfig) -> None:
        self.config = config
        self.root = Path(config.options["root"])
        self.matcher = Matcher(config.options["include_globs"], config.options["exclude_globs"])
        self.follow = bool(config.options["follow_symlinks"])
        self.max_bytes = int(config.options["max_file_bytes"])
        self.skipped = 0

    def scan(self) -> Iterator[Entry]:
        if not self.root.is_dir():
            raise NotFound(
                f"{self.config.source}: root {self.root} is not a directory. "
                f"Fix [connectors.filesystem.{self.config.name}] root in the config."
            )
        self.skipped = 0
        seen_dirs = {os.path.realpath(self.root)}
        yield from self._walk(str(self.root), "", seen_dirs)

    def _walk(self, path: str, rel: str, seen_dirs: set[str]) -> Iterator[Entry]:
        try:
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            self.skipped += 1
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
            except OSError:
                self.skipped += 1
                continue
            if st.st_size > self.max_bytes:
                self.skipped += 1
                continue
            yield Entry(child, f"{st.st_size}:{st.st_mtime_ns}", self._loader(entry.path, child, int(st.st_mtime)))

    def _loader(self, path: str, rel: str, mtime: int) -> Callable[[], Item | None]:
        def load() -> Item | None:
            try:
                with open(path, "rb") as f:
                    data = f.read(self.max_bytes + 1)
            except OSError:
                return None
            if len(data) > self.max_bytes:
                return None
            body = decode(data)
            if body is None:
                self.skipped += 1
                return None
            return Item(source_id=rel, body=body, title=title_of(body, os.path.basename(rel)), updated_at=mtime)

        return load


register("filesystem", FilesystemConnector)
