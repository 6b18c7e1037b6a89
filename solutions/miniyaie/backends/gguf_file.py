"""A GGUF file's tensors without parsing its metadata into Python objects.

`gguf.GGUFReader` turns every metadata value into numpy views, the bundled model's 49,152-token vocabulary
and its merges included: 4 s of a 5 s start. The weights only need the tensor index after the metadata,
so this reader steps over the metadata (reading string lengths, not strings) and keeps one value, the
architecture. The tensors are views of one read-only memory map, in the shapes and types GGUFReader gives.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

# metadata value types (the GGUF spec's numbering) -> the size of one value; 8 is a string, 9 an array
SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9
# tensor types stored as plain numbers: their numpy type; every other type is blocks of bytes
PLAIN = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8, "I16": np.int16, "I32": np.int32,
         "I64": np.int64}


class _Cursor:
    """Little-endian reads from a buffer, advancing a position."""

    def __init__(self, buffer) -> None:
        self.buffer, self.at = buffer, 0

    def unpack(self, fmt: str):
        values = struct.unpack_from("<" + fmt, self.buffer, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    def string(self) -> str:
        length = self.unpack("Q")
        self.at += length
        return bytes(self.buffer[self.at - length : self.at]).decode("utf-8")

    def skip_value(self, kind: int) -> None:
        if kind == STRING:
            length = self.unpack("Q")  # read before adding: unpack moves `at` too
            self.at += length
        elif kind == ARRAY:
            item, count = self.unpack("IQ")
            if item in SCALAR_BYTES:
                self.at += SCALAR_BYTES[item] * count
            else:
                for _ in range(count):
                    self.skip_value(item)
        elif kind in SCALAR_BYTES:
            self.at += SCALAR_BYTES[kind]
        else:
            raise ValueError(f"unknown GGUF metadata type {kind} at byte {self.at}")


def read_tensors(path: str | Path) -> tuple[str, dict[str, tuple[str, np.ndarray, tuple[int, ...]]]]:
    """(general.architecture, name -> (type name, data, shape [rows, cols])) of a GGUF file (version 2 or 3).

    `data` is what GGUFReader's `tensor.data` is: numbers for the plain types, uint8 rows of blocks otherwise.
    """
    data = np.memmap(path, mode="r")
    cursor = _Cursor(data)
    magic, version, tensor_count, kv_count = cursor.unpack("4sIQQ")
    if magic != b"GGUF" or version not in (2, 3):
        raise ValueError(f"{path} is not a GGUF file of version 2 or 3 (magic {magic!r}, version {version})")
    architecture, alignment = None, 32
    for _ in range(kv_count):
        key, kind = cursor.string(), cursor.unpack("I")
        if key == "general.architecture" and kind == STRING:
            architecture = cursor.string()
        elif key == "general.alignment" and kind == 4:
            alignment = cursor.unpack("I")
        else:
            cursor.skip_value(kind)
    infos = []
    for _ in range(tensor_count):
        name, n_dims = cursor.string(), cursor.unpack("I")
        dims = [cursor.unpack("Q") for _ in range(n_dims)]
        kind, offset = cursor.unpack("IQ")
        infos.append((name, dims, GGMLQuantizationType(kind), offset))
    start = -(-cursor.at // alignment) * alignment
    tensors = {}
    for name, dims, kind, offset in infos:
        shape = tuple(int(d) for d in reversed(dims))  # GGUF lists the fastest axis first
        count = int(np.prod(dims))
        block, block_bytes = GGML_QUANT_SIZES[kind]
        at = start + offset
        if kind.name in PLAIN:
            values = data[at : at + count * np.dtype(PLAIN[kind.name]).itemsize].view(PLAIN[kind.name]).reshape(shape)
        else:
            values = data[at : at + count // block * block_bytes].reshape(*shape[:-1], shape[-1] // block * block_bytes)
        tensors[name] = (kind.name, values, shape)
    return architecture, tensors
