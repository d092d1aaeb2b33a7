"""ONNX model bytes written directly, so building a graph needs no ``onnx`` package.

onnxruntime loads a model from its protobuf bytes; a graph of a few dozen nodes and raw
initialisers needs only a handful of the schema's fields (``onnx.proto``, proto2), encoded
here by hand: varints, length-delimited fields and little-endian floats.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# TensorProto.DataType values for the arrays a graph here holds.
_DATA_TYPES = {
    np.dtype(np.float32): 1,
    np.dtype(np.uint8): 2,
    np.dtype(np.int8): 3,
    np.dtype(np.int32): 6,
    np.dtype(np.int64): 7,
    np.dtype(np.float16): 10,
}
# AttributeProto.AttributeType.
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7
# The IR version of the opset-17 era: what onnxruntime 1.17 and later all read.
_IR_VERSION = 8
CONTRIB_DOMAIN = "com.microsoft"


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 fields: two's complement, ten bytes
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _int_field(number: int, value: int) -> bytes:
    return _key(number, 0) + _varint(value)


def _bytes_field(number: int, value: bytes) -> bytes:
    return _key(number, 2) + _varint(len(value)) + value


def _str_field(number: int, value: str) -> bytes:
    return _bytes_field(number, value.encode())


def _attribute(name: str, value: Any) -> bytes:
    out = _str_field(1, name)
    if isinstance(value, float):
        return out + _key(2, 5) + struct.pack("<f", value) + _int_field(20, _ATTR_FLOAT)
    if isinstance(value, int):
        return out + _int_field(3, value) + _int_field(20, _ATTR_INT)
    if isinstance(value, (list, tuple)) and all(isinstance(item, int) for item in value):
        return out + b"".join(_int_field(8, item) for item in value) + _int_field(20, _ATTR_INTS)
    raise TypeError(f"attribute {name}: unsupported value {value!r}")


def _tensor(name: str, array: Any) -> bytes:
    data = np.ascontiguousarray(array)
    data_type = _DATA_TYPES.get(data.dtype)
    if data_type is None:
        raise TypeError(f"initialiser {name}: unsupported dtype {data.dtype}")
    dims = b"".join(_int_field(1, size) for size in data.shape)
    little = data.astype(data.dtype.newbyteorder("<"), copy=False)
    return dims + _int_field(2, data_type) + _str_field(8, name) + _bytes_field(9, little.tobytes())


def _value_info(name: str, elem_type: int, shape: tuple[int | str, ...]) -> bytes:
    dims = b"".join(
        _bytes_field(1, _str_field(2, size) if isinstance(size, str) else _int_field(1, size))
        for size in shape
    )
    tensor_type = _int_field(1, elem_type) + _bytes_field(2, dims)
    return _str_field(1, name) + _bytes_field(2, _bytes_field(1, tensor_type))


@dataclass
class GraphWriter:
    """Nodes, initialisers, inputs and outputs, serialised by ``model_bytes``."""

    name: str
    _nodes: list[bytes] = field(default_factory=list)
    _initialisers: list[bytes] = field(default_factory=list)
    _inputs: list[bytes] = field(default_factory=list)
    _outputs: list[bytes] = field(default_factory=list)
    _num_nodes: int = 0

    def const(self, name: str, array: Any) -> str:
        """An initialiser named ``name``; returns the name, to feed to a node."""
        self._initialisers.append(_tensor(name, array))
        return name

    def node(
        self, op: str, inputs: list[str], output: str, *, domain: str = "", **attrs: Any
    ) -> str:
        """One node with one output (``""`` in ``inputs`` skips an optional input)."""
        self.node_multi(op, inputs, [output], domain=domain, **attrs)
        return output

    def node_multi(
        self, op: str, inputs: list[str], outputs: list[str], *, domain: str = "", **attrs: Any
    ) -> None:
        """One node with several outputs (``Split``)."""
        self._num_nodes += 1
        body = b"".join(_str_field(1, item) for item in inputs)
        body += b"".join(_str_field(2, item) for item in outputs)
        body += _str_field(3, f"n{self._num_nodes}") + _str_field(4, op)
        body += b"".join(_bytes_field(5, _attribute(k, v)) for k, v in sorted(attrs.items()))
        if domain:
            body += _str_field(7, domain)
        self._nodes.append(body)

    def input(self, name: str, dtype: type, shape: tuple[int | str, ...]) -> None:
        self._inputs.append(_value_info(name, _DATA_TYPES[np.dtype(dtype)], shape))

    def output(self, name: str, dtype: type, shape: tuple[int | str, ...]) -> None:
        self._outputs.append(_value_info(name, _DATA_TYPES[np.dtype(dtype)], shape))

    def model_bytes(self, *, opset: int = 17) -> bytes:
        """The ``ModelProto``: this graph, the default opset and Microsoft's contrib ops."""
        graph = b"".join(_bytes_field(1, item) for item in self._nodes)
        graph += _str_field(2, self.name)
        graph += b"".join(_bytes_field(5, item) for item in self._initialisers)
        graph += b"".join(_bytes_field(11, item) for item in self._inputs)
        graph += b"".join(_bytes_field(12, item) for item in self._outputs)
        opsets = _bytes_field(8, _str_field(1, "") + _int_field(2, opset))
        opsets += _bytes_field(8, _str_field(1, CONTRIB_DOMAIN) + _int_field(2, 1))
        header = _int_field(1, _IR_VERSION) + _str_field(2, "hasten")
        return header + opsets + _bytes_field(7, graph)
