"""Read and parse blocks in a second process, so ``brk index`` works on two cores.

The indexer has two halves of about equal cost: reading and parsing blocks, and resolving prevouts,
building columns and writing them. :class:`ParseWorker` runs the first half in a child process
(``python -m cairn_servers.brk.blocks.worker``) that reads chunks of block positions from its stdin and
writes back the parsed blocks, a chunk at a time, in order. The pipes bound how far it runs ahead
(a chunk or two), so memory stays bounded; a thread feeds the requests, so neither side can block
the other. The child ignores Ctrl-C (the indexer stops at a committed height and then ends it), and
it ends by itself when the indexer goes away (end of file on stdin, a broken pipe on stdout).

What comes back is what :func:`parse_block` gives in process as a :class:`Packed` block: the fields the
indexer uses, each column one typed array or one bytes string (the txids and prevout txids, 32 bytes a
row), so a chunk crosses the pipe as a few buffers instead of an object per transaction and input (unpickling
those lists was a fifth of the indexer's time); a block that cannot be read or parsed comes back as its
error, class and message, in its place.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from cairn_servers.brk.blocks.parser import MalformedBlock, Packed, pack, parse_block
from cairn_servers.core.errors import CairnError, InvalidInput

# A read: (blk file path, offset, length). A chunk: a list of them, parsed and answered together.
Read = tuple[str, int, int]
_ERRORS: dict[str, type[InvalidInput]] = {"MalformedBlock": MalformedBlock, "InvalidInput": InvalidInput}


class _Reader:
    """``pread`` of blk files (two kept open: blocks are read nearly file after file), de-obfuscated."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self._fds: dict[str, int] = {}

    def read(self, path: str, offset: int, length: int) -> bytes:
        from cairn_servers.brk.blocks.files import unxor

        fd = self._fds.get(path)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                raise InvalidInput(f"{Path(path).name} disappeared from {Path(path).parent}") from None
            except OSError as exc:
                raise InvalidInput(f"{Path(path).name} cannot be read: {exc.strerror}") from None
            while len(self._fds) >= 2:
                os.close(self._fds.pop(next(iter(self._fds))))
            self._fds[path] = fd
        data = os.pread(fd, length, offset)
        if len(data) != length:
            raise InvalidInput(f"{path}: record at offset {offset} (+{length} bytes) runs past the end of the file")
        return unxor(data, self.key, offset)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def parse_chunk(reader: _Reader, reads: list[Read]) -> list[Packed | tuple[str, str]]:
    """Read and parse one chunk; a failing block is ``(error class name, message)`` in its place."""
    out: list[Packed | tuple[str, str]] = []
    for path, offset, length in reads:
        try:
            out.append(pack(parse_block(reader.read(path, offset, length))))
        except (MalformedBlock, InvalidInput) as exc:
            out.append((type(exc).__name__, str(exc)))
    return out


def main() -> None:
    """The child: ``key`` (8 bytes, hex) as the argument; pickled chunks in, pickled answers out."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the indexer handles Ctrl-C and then ends this process
    reader = _Reader(bytes.fromhex(sys.argv[1]))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        while True:
            try:
                reads = pickle.load(stdin)
            except EOFError:
                return
            pickle.dump(parse_chunk(reader, reads), stdout, protocol=pickle.HIGHEST_PROTOCOL)
            stdout.flush()
    except (BrokenPipeError, KeyboardInterrupt):
        return
    finally:
        reader.close()


class ParseWorker:
    """The parent's side: ``chunks(plan)`` yields each chunk's parsed blocks (or errors), in order."""

    def __init__(self, key: bytes) -> None:
        import subprocess

        import cairn_servers

        env = dict(os.environ)
        root = str(Path(cairn_servers.__file__).resolve().parents[1])  # where this cairn lives, installed or not
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self._proc = subprocess.Popen([sys.executable, "-m", "cairn_servers.brk.blocks.worker", key.hex()],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self._feeder: threading.Thread | None = None

    def _feed(self, plan: Iterable[list[Read]], pipe: IO[bytes]) -> None:
        try:
            for reads in plan:
                pickle.dump(reads, pipe, protocol=pickle.HIGHEST_PROTOCOL)
                pipe.flush()
            pipe.close()
        except (BrokenPipeError, OSError, ValueError):
            pass  # the worker ended (closed early, or killed): the reading side reports it

    def chunks(self, plan: Iterable[list[Read]]) -> Iterator[list[Packed | Exception]]:
        """Send ``plan`` (chunks of reads) from a thread and yield the answers as they arrive."""
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        self._feeder = threading.Thread(target=self._feed, args=(plan, proc.stdin), daemon=True)
        self._feeder.start()
        stdout = proc.stdout
        while True:
            try:
                answer: list[Any] = pickle.load(stdout)
            except EOFError:
                code = proc.wait()
                if code != 0:
                    raise CairnError(f"the block parsing process ended with exit code {code}; run `brk index` "
                                     "again to resume from the last committed height") from None
                return
            yield [_ERRORS.get(a[0], InvalidInput)(a[1]) if isinstance(a, tuple) else a for a in answer]

    def close(self) -> None:
        """End the worker (it may be mid-chunk: what it parsed ahead is dropped)."""
        proc = self._proc
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        if self._feeder is not None:
            self._feeder.join(timeout=5)


if __name__ == "__main__":
    main()
