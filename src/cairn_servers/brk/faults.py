"""Crash-test hook shared by the indexer and the analytics passes.

``CAIRN_BRK_FAULT=point:n`` SIGKILLs the process the n-th time it reaches ``point`` (the SIGKILL tests use
it to land kills between two writes that must commit as one: the vecs and the transaction index, a
checkpoint and its manifest, the address undo rows and the balances). Unset, it costs one lookup.
"""

from __future__ import annotations

import os

_counts: dict[str, int] = {}


def fault(point: str) -> None:
    spec = os.environ.get("CAIRN_BRK_FAULT")
    if not spec or not spec.startswith(point + ":"):
        return
    _counts[point] = _counts.get(point, 0) + 1
    if _counts[point] == int(spec.rsplit(":", 1)[1]):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
