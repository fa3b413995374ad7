"""Hybrid fusion of keyword and vector rankings.

Two methods, both returning scores in [0, 1] and a deterministic order (score desc, then key asc):

* ``minmax`` (the reference's): each signal is min-max normalised over its own candidate set
  (a single candidate, or all-equal scores, normalise to 1.0), a key missing from one list scores 0
  there, and the blend is ``(1 - alpha) * keyword + alpha * vector``.
* ``rrf`` (reciprocal rank fusion, ``k`` = 60 unless given): ``sum 1 / (k + rank)`` over the lists,
  scaled by the best possible value so a key ranked first in both lists scores 1.0. ``alpha`` weights
  the lists the same way (``2 * (1 - alpha)`` and ``2 * alpha``). A small ``k`` lets the top ranks of
  a list count more against its tail; the ctx default per embedding provider is in
  :data:`cairn_servers.search.embed.HYBRID_DEFAULTS` (tuned on benchmarks/ctx_quality.py).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

RRF_K = 60


def minmax(scores: Mapping[K, float]) -> dict[K, float]:
    """Scores rescaled to [0, 1] over this set; all-equal scores become 1.0."""
    if not scores:
        return {}
    lo = min(scores.values())
    hi = max(scores.values())
    if hi == lo:
        return {key: 1.0 for key in scores}
    span = hi - lo
    return {key: (value - lo) / span for key, value in scores.items()}


def _ordered(scores: dict[K, float]) -> list[tuple[K, float]]:
    return sorted(scores.items(), key=lambda kv: (-kv[1], str(kv[0])))


def ranks(scores: Mapping[K, float]) -> dict[K, int]:
    """Each key's rank (1 = best) in the order :func:`rrf` ranks a list: score desc, then key asc."""
    return {key: rank for rank, (key, _) in enumerate(_ordered(dict(scores)), start=1)}


def blend(keyword: Mapping[K, float], vector: Mapping[K, float], alpha: float) -> list[tuple[K, float]]:
    """Alpha-weighted min-max blend: ``(1-alpha)*norm(keyword) + alpha*norm(vector)``."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be within [0, 1], not {alpha}")
    kw = minmax(keyword)
    vec = minmax(vector)
    out: dict[K, float] = {}
    for key in set(kw) | set(vec):
        out[key] = min(1.0, max(0.0, (1 - alpha) * kw.get(key, 0.0) + alpha * vec.get(key, 0.0)))
    return _ordered(out)


def rrf(keyword: Mapping[K, float], vector: Mapping[K, float], alpha: float = 0.5,
        k: int = RRF_K) -> list[tuple[K, float]]:
    """Reciprocal rank fusion of two score maps (higher score = better rank), scaled to [0, 1]."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be within [0, 1], not {alpha}")
    if k < 1:
        raise ValueError(f"the RRF constant k must be at least 1, not {k}")
    weights = (2 * (1 - alpha), 2 * alpha)
    out: dict[K, float] = {}
    for weight, scores in zip(weights, (keyword, vector)):
        for rank, (key, _) in enumerate(_ordered(dict(scores)), start=1):
            out[key] = out.get(key, 0.0) + weight / (k + rank)
    best = sum(weights) / (k + 1)
    if best <= 0:
        return _ordered({key: 0.0 for key in out})
    return _ordered({key: min(1.0, value / best) for key, value in out.items()})


def fuse(
    method: str, keyword: Mapping[K, float], vector: Mapping[K, float], alpha: float, rrf_k: int = RRF_K
) -> list[tuple[K, float]]:
    """Dispatch to :func:`blend` (``"minmax"``) or :func:`rrf` (``"rrf"``, constant ``rrf_k``)."""
    if method == "minmax":
        return blend(keyword, vector, alpha)
    if method == "rrf":
        return rrf(keyword, vector, alpha, rrf_k)
    raise ValueError(f"unknown fusion method {method!r}; use minmax or rrf")
