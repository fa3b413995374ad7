"""The ONNX model of the int8 vector scan (:mod:`cairn_servers.search.vectors`), encoded by hand in the protobuf
wire format: onnxruntime ships without the ``onnx`` package, and one ``MatMulInteger`` node needs only a
few fields of onnx.proto: ModelProto 1 ir_version, 7 graph, 8 opset_import; OperatorSetIdProto 1 domain,
2 version; GraphProto 1 node, 2 name, 11 input, 12 output; NodeProto 1 input, 2 output, 4 op_type;
ValueInfoProto 1 name, 2 type; TypeProto 1 tensor_type; TypeProto.Tensor 1 elem_type, 2 shape;
TensorShapeProto 1 dim; Dimension 2 dim_param.
"""

from __future__ import annotations

UINT8, INT8, INT32 = 2, 3, 6  # TensorProto.DataType


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _number(field: int, n: int) -> bytes:
    return _varint(field << 3) + _varint(n)


def _message(field: int, body: bytes | str) -> bytes:
    raw = body.encode() if isinstance(body, str) else body
    return _varint((field << 3) | 2) + _varint(len(raw)) + raw


def _value_info(name: str, elem_type: int, dims: tuple[str, ...]) -> bytes:
    shape = b"".join(_message(1, _message(2, d)) for d in dims)
    return _message(1, name) + _message(2, _message(1, _number(1, elem_type) + _message(2, shape)))


def matmul_integer() -> bytes:
    """``MatMulInteger(q: uint8 [one, d], m: int8 [d, n]) -> y: int32 [one, n]`` (opset 13)."""
    node = _message(1, "q") + _message(1, "m") + _message(2, "y") + _message(4, "MatMulInteger")
    graph = (_message(1, node) + _message(2, "scan") + _message(11, _value_info("q", UINT8, ("one", "d")))
             + _message(11, _value_info("m", INT8, ("d", "n"))) + _message(12, _value_info("y", INT32, ("one", "n"))))
    return _number(1, 8) + _message(8, _message(1, "") + _number(2, 13)) + _message(7, graph)
