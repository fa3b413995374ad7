"""The repository's test data (``tests/data``, origins and licences in its README), made readable.

Large files are stored compressed (``NAME.xz``); :func:`materialise` writes the whole tree into a
directory with those decompressed under their original names (``llms/hono/llms-small.txt``,
``btc/hadoopcryptoledger/firstblocks.blk``, ...). ``.bz2`` files are upstream's own and stay as they
are. Tests get the tree from the session fixture ``test_data`` (tests/conftest.py); benchmarks call
:func:`data_dir`. Standard library only.
"""

from __future__ import annotations

import atexit
import functools
import lzma
import re
import shutil
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"

# A skip whose reason says test data is absent: the suite fails on it (tests/conftest.py), because the
# data ships with the repository and a user cannot act on such a skip.
_DATA_WORDS = r"(\bdata\b|\bcorpus\b|\bcorpora\b|\bfixture files?\b|beside this clone|tests/data)"
_ABSENT_WORDS = r"(not present|\babsent\b|\bmissing\b|not found|\bunavailable\b|does not exist|no such file)"
DATA_SKIP = re.compile(rf"(?is){_DATA_WORDS}.*{_ABSENT_WORDS}|{_ABSENT_WORDS}.*{_DATA_WORDS}")


def materialise(dest: Path) -> Path:
    """Write every file of ``tests/data`` (``.xz`` ones decompressed, the README left out) under ``dest``."""
    if not (DATA / "llms").is_dir() or not (DATA / "btc").is_dir():
        raise FileNotFoundError(f"{DATA} is incomplete: the test data ships with the repository (git checkout?)")
    for src in sorted(DATA.rglob("*")):
        if not src.is_file() or src.parent == DATA:
            continue
        rel = src.relative_to(DATA)
        if src.suffix == ".xz":
            out, data = dest / rel.with_suffix(""), lzma.decompress(src.read_bytes())
        else:
            out, data = dest / rel, src.read_bytes()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    return dest


@functools.cache
def data_dir() -> Path:
    """The materialised test data in a temporary directory, once per process, removed at exit (benchmarks)."""
    tmp = Path(tempfile.mkdtemp(prefix="cairn-test-data-"))
    atexit.register(shutil.rmtree, tmp, True)
    return materialise(tmp)


def is_data_skip(reason: str) -> bool:
    """Whether a skip reason says test data is missing."""
    return bool(DATA_SKIP.search(reason))
