"""A GGUF file's header read with the `gguf` package (llama.cpp's own reader): its version, metadata
and tensor table, checked against the file before anything is trusted. The tensor data is memory-
mapped by the reader, never read: a 70 GB file costs the same as a 7 MB one.

Byte sizes come from each tensor's GGML type (elements x type size / block size, the table in
gguf.constants.GGML_QUANT_SIZES), which is also how llama.cpp lays the data out; the file's own
size bounds them (a tensor that ends past the end of the file is a truncated file or a header that
lies).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

from advisor.inputs import open_input
from advisor.models.structure import ModelConfigError
from importlib.metadata import PackageNotFoundError, version

MAGIC = b"GGUF"


class GGUFError(ModelConfigError):
    """Not a GGUF file, a truncated one, or a header that does not match its data."""


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    type: str  # the GGML type's name: Q4_K, IQ4_XS, F32 ...
    shape: tuple[int, ...]
    elements: int
    nbytes: int


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    metadata: dict[str, object]  # scalars as Python values; arrays as their length ("[n items]") except short ones
    tensors: list[GGUFTensor]
    data_offset: int
    size: int


_UNKNOWN_TYPE = re.compile(r"(?:np\.uint32\()?(\d+)\)? is not a valid GGMLQuantizationType")


def read(path: Path) -> GGUFHeader:
    """The header of one GGUF file. Raises GGUFError in one line."""
    try:
        size = path.stat().st_size
        with open_input(path, GGUFError, limit=None) as f:  # a FIFO or a device is refused, not read
            head = f.read(24)
    except OSError as e:
        raise GGUFError(f"{path}: {e.strerror or e}") from None
    if head[:4] != MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (magic {head[:4]!r}, expected b'GGUF')")
    if len(head) < 24:
        raise GGUFError(f"{path}: {size} bytes, too short for a GGUF header (truncated)")
    version, n_tensors, n_kv = struct.unpack("<IQQ", head[4:24])
    # Every tensor entry and key takes at least 8 bytes of the header: counts beyond what the file can
    # hold are a header that lies, refused before the reader loops over them.
    if n_tensors > size // 8 or n_kv > size // 8:
        raise GGUFError(f"{path}: the header claims {n_tensors} tensors and {n_kv} metadata keys in a file of "
                        f"{size} bytes: truncated, or a header that lies")
    import gguf  # ~0.2 s: numpy and the constants tables; only when a GGUF file is read

    try:
        reader = gguf.GGUFReader(path, "r")
    except ValueError as e:
        m = _UNKNOWN_TYPE.search(str(e))
        if m:
            known = max(int(t) for t in gguf.GGMLQuantizationType)
            raise GGUFError(f"{path}: a tensor has GGML type {m.group(1)}, which gguf {_gguf_version()} does not know "
                            f"(its types end at {known}): a newer llama.cpp format, or a corrupt header") from None
        raise GGUFError(f"{path}: not a readable GGUF file ({_short(e)}): truncated, or a header that lies") from None
    except (IndexError, KeyError, OverflowError, MemoryError, UnicodeDecodeError, struct.error) as e:
        raise GGUFError(f"{path}: not a readable GGUF file ({type(e).__name__}: {_short(e)}): truncated, or a "
                        "header that lies") from None
    tensors = []
    for t in reader.tensors:
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size:
            raise GGUFError(f"{path}: tensor {t.name!r} ({t.tensor_type.name}, {int(t.n_elements)} elements) ends at "
                            f"byte {end} of a {size}-byte file: truncated, or a header that lies about sizes")
        tensors.append(GGUFTensor(name=t.name, type=t.tensor_type.name,
                                  shape=tuple(int(d) for d in t.shape), elements=int(t.n_elements),
                                  nbytes=int(t.n_bytes)))
    meta = {name: _value(field) for name, field in reader.fields.items() if not name.startswith("GGUF.")}
    return GGUFHeader(version=int(version), metadata=meta, tensors=tensors, data_offset=int(reader.data_offset),
                      size=size)


def _value(field) -> object:
    """A metadata value as Python: a scalar or string as itself, a short array as a list, a long one
    (a tokenizer's vocabulary) as its length."""
    try:
        n = len(field.data)
        if field.types and field.types[0].name == "ARRAY":
            if n > 16:
                return f"[{n} items]"
            return [field.contents(i) for i in range(n)]
        return field.contents()
    except (ValueError, IndexError, UnicodeDecodeError):
        return "(unreadable)"


def _short(e: Exception) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:160]


def _gguf_version() -> str:
    try:
        return version("gguf")
    except PackageNotFoundError:
        return "(unknown version)"


def looks_like_gguf(path: Path) -> bool:
    if path.suffix.lower() == ".gguf":
        return True
    try:
        with open_input(path, GGUFError, limit=None) as f:
            return f.read(4) == MAGIC
    except (OSError, GGUFError):
        return False
