"""safetensors headers read without loading a single weight: each tensor's dtype, shape and byte
range, checked against the file (a header that lies about sizes is refused, never trusted).

The format: 8 bytes little-endian header length N, N bytes of JSON {name: {dtype, shape,
data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the data; offsets are relative to
the end of the header.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from advisor.inputs import open_input
from advisor.models.structure import ModelConfigError

# Bits per element of each safetensors dtype (F8_*: the FP8 formats; packed int4 travels as I32/U8).
DTYPE_BITS = {"F64": 64, "F32": 32, "F16": 16, "BF16": 16, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
              "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "I64": 64, "I32": 32, "I16": 16, "I8": 8, "U64": 64,
              "U32": 32, "U16": 16, "U8": 8, "BOOL": 8}
MAX_HEADER = 100 * 2**20  # the reference implementation's own limit


class SafetensorsError(ModelConfigError):
    """A file that is not a safetensors file, is truncated, or whose header does not match its data."""


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


def read_header(path: Path) -> tuple[list[Tensor], dict[str, str]]:
    """(tensors, __metadata__) of one .safetensors file. Raises SafetensorsError in one line."""
    try:
        size = path.stat().st_size
        with open_input(path, SafetensorsError, limit=None) as f:  # a FIFO or a device is refused, not read
            head = f.read(8)
            if len(head) < 8:
                raise SafetensorsError(f"{path}: {size} bytes, too short for a safetensors header")
            (n,) = struct.unpack("<Q", head)
            if n > min(MAX_HEADER, size - 8):
                raise SafetensorsError(f"{path}: not a safetensors file, or truncated (header of {n} bytes in a "
                                       f"file of {size})")
            raw = f.read(n)
    except OSError as e:
        raise SafetensorsError(f"{path}: {e.strerror or e}") from None
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise SafetensorsError(f"{path}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: not a safetensors file (its header is not a JSON object)")
    data = size - 8 - n
    meta = header.pop("__metadata__", None) or {}
    tensors = []
    for name, spec in header.items():
        try:
            dtype, shape, (begin, end) = spec["dtype"], tuple(int(d) for d in spec["shape"]), spec["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path}: tensor {name!r} has no dtype, shape and data_offsets") from None
        bits = DTYPE_BITS.get(dtype)
        if bits is None:
            raise SafetensorsError(f"{path}: tensor {name!r} has an unknown dtype {dtype!r}")
        if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end <= data):
            raise SafetensorsError(f"{path}: tensor {name!r} lies outside the file's {data} bytes of data "
                                   f"(offsets {begin}-{end}): truncated, or a header that lies")
        want = math.ceil(math.prod(shape) * bits / 8)
        if end - begin != want:
            raise SafetensorsError(f"{path}: tensor {name!r} is {dtype} {list(shape)} ({want} bytes) but spans "
                                   f"{end - begin} bytes: a header that lies about sizes")
        tensors.append(Tensor(name, dtype, shape, end - begin))
    return tensors, {str(k): str(v) for k, v in meta.items()}
