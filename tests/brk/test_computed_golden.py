"""Every computed vec keeps its bytes: checksums against those the earlier code wrote (``tests/brk/golden``).

The expected files were produced by the code before the computed passes were reworked for scale, on
the bundled mainnet 0..589 and on dense generated chains, with daily prices (gaps and changes), so the
realized and profit families are covered too. See ``tests/brk/_golden.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import _golden as golden


def _compare(kind: str, tmp_path: Path) -> None:
    got = golden.checksums(golden.build(kind, tmp_path))
    want = golden.expected(kind)
    assert sorted(got) == sorted(want)
    differ = [name for name in want if got[name] != want[name]]
    assert not differ, f"{kind}: computed vecs changed: {differ}"


@pytest.mark.parametrize("kind", ["mainnet", "dense"])
def test_computed_bytes_unchanged(kind: str, tmp_path: Path) -> None:
    _compare(kind, tmp_path)


@pytest.mark.slow
def test_computed_bytes_unchanged_dense_500k(tmp_path: Path) -> None:
    _compare("dense500k", tmp_path)
