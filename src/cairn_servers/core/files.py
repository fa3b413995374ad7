"""Atomic file replacement: a crash, a kill or a full disk leaves either the old content or the new.

One rule for every file Cairn replaces in place (a brk manifest or mirror state, a blz source file, a
ctx starter config, a sample block file): write a temporary file in the same directory (so the rename
cannot cross filesystems), fsync it, ``os.replace`` it over the target, then fsync the directory so
the rename itself survives a power cut. ``durable=False`` skips both fsyncs (the rename is still
atomic against a killed process) for callers that trade power-loss safety for speed on request
(``brk index --no-fsync``). docs/reliability.md states the rule.

Standard library only.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is kept off the CLIs' start-up path
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import BinaryIO

TEMP_PREFIX = ".tmp-"  # temporary files start with this (hidden; never matches blk*.dat or *.txt globs)


def grow_file(fh: BinaryIO, size: int) -> None:
    """Make the open file ``fh`` at least ``size`` bytes long, the new bytes zero and their disk space reserved:
    a file written in place through a memory map then never needs a block the disk no longer has (on a full
    disk that is a SIGBUS; here it is an ``OSError`` when the file grows)."""
    end = fh.seek(0, os.SEEK_END)
    if end >= size:
        return
    if hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fh.fileno(), end, size - end)
            return
        except OSError as exc:
            import errno

            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system without it: a sparse file
                raise
    fh.truncate(size)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Make what was written to file ``path`` (through any handle or memory map) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or creation inside directory ``path`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # Windows: directories cannot be opened; rename is durable there anyway
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_temp(folder: str, name: str, mode: int) -> tuple[int, str]:
    """A new, exclusively created file beside the target (``mode`` less the umask, like ``open``)."""
    while True:
        tmp = os.path.join(folder, f"{TEMP_PREFIX}{name}.{os.urandom(4).hex()}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode), tmp
        except FileExistsError:
            continue


@contextmanager
def atomic_file(path: str | os.PathLike[str], *, durable: bool = True, mode: int = 0o666) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` when the ``with`` block ends without an exception.

    If the block raises, the temporary file is removed and ``path`` is untouched. For content that
    is produced piece by piece (a generated block file); :func:`write_atomic` writes one buffer.
    ``mode`` is the new file's permission bits before the umask (0o600 for a file only its owner may read).
    """
    target = os.fspath(path)
    folder, name = os.path.split(target)
    folder = folder or "."
    fd, tmp = _create_temp(folder, name, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(folder)


def replace_file(tmp: str | os.PathLike[str], target: str | os.PathLike[str], *, durable: bool = True) -> None:
    """Move a finished temporary file ``tmp`` (written in place, e.g. through a memory map) over ``target``
    in the same directory: its data synced first, so a crash leaves either the old or the new content."""
    if durable:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    os.replace(tmp, target)
    if durable:
        fsync_dir(os.path.dirname(os.fspath(target)) or ".")


def write_atomic(path: str | os.PathLike[str], data: bytes, *, durable: bool = True, mode: int = 0o666) -> None:
    """Replace ``path``'s content with ``data`` so that a crash leaves either the old or the new content."""
    with atomic_file(path, durable=durable, mode=mode) as fh:
        fh.write(data)
