"""A fast completeness check of a GGUF file: its header says where every tensor lies and how large it is, so a file
shorter than that is truncated. The `gguf` package's reader finds out only after parsing every metadata field into
numpy views (13 s for SmolLM2's 49k-token vocabulary on this machine) and then fails with an untyped
`ValueError: cannot reshape array ...`; this walk reads the same header with `struct` in well under a second.

Layout (GGUF v2/v3, little-endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv; n_kv x (string key, u32
type, value); n_tensors x (string name, u32 n_dims, n_dims x u64, u32 ggml type, u64 offset); padding to
`general.alignment` (default 32); tensor data. A string is u64 length + bytes; an array is u32 item type, u64 count,
items."""
from __future__ import annotations

import mmap
import struct
from pathlib import Path

from interplab.core.errors import CheckpointError

_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}   # GGUFValueType -> bytes
_STRING, _ARRAY = 8, 9


class _Cut(Exception):
    """The header itself runs past the end of the file."""


def _walk(buf, size: int) -> tuple[int, int]:
    """(bytes the header and tensor data need, end of the header) of a GGUF held in `buf`."""
    pos = 0

    def take(fmt: str):
        nonlocal pos
        n = struct.calcsize(fmt)
        if pos + n > size:
            raise _Cut
        out = struct.unpack_from(fmt, buf, pos)
        pos += n
        return out[0] if len(out) == 1 else out

    def skip_string() -> bytes:
        nonlocal pos
        n = take("<Q")
        if pos + n > size:
            raise _Cut
        pos += n
        return bytes(buf[pos - n:pos])

    def skip_value(kind: int):
        nonlocal pos
        if kind in _SCALAR:
            return take("<" + {1: "B", 2: "H", 4: "I", 8: "Q"}[_SCALAR[kind]])
        if kind == _STRING:
            skip_string()
            return None
        if kind != _ARRAY:
            raise CheckpointError(f"unknown GGUF value type {kind}")
        item, count = take("<IQ")
        if item in _SCALAR:
            pos += _SCALAR[item] * count
            if pos > size:
                raise _Cut
        else:
            for _ in range(count):
                skip_value(item)
        return None

    if take("<4s") != b"GGUF":
        raise CheckpointError("not a GGUF file (its first bytes are not 'GGUF')")
    version = take("<I")
    if version < 2:
        raise CheckpointError(f"GGUF version {version} is older than any current reader supports")
    n_tensors, n_kv = take("<QQ")
    alignment = 32
    for _ in range(n_kv):
        key = skip_string()
        value = skip_value(take("<I"))
        if key == b"general.alignment" and value:
            alignment = int(value)
    ends = []
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    for _ in range(n_tensors):
        skip_string()
        dims = [take("<Q") for _ in range(take("<I"))]
        kind, offset = take("<IQ")
        block, nbytes = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        n = 1
        for d in dims:
            n *= d
        ends.append(offset + n // block * nbytes)
    start = -(-pos // alignment) * alignment
    return start + max(ends, default=0), pos


def check_gguf_complete(path: Path, redo: str) -> None:
    """CheckpointError naming `path`, its size and what it should be when the file is shorter than its header says
    (or not a GGUF at all); `redo` says how to get an intact copy."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            need, _ = _walk(buf, size)
    except _Cut:
        raise CheckpointError(f"the GGUF file {path} ({size:,} bytes) is truncated: it ends inside its own header "
                              f"(the list of metadata and tensors). {redo}") from None
    except (CheckpointError, ValueError, KeyError) as e:
        raise CheckpointError(f"{path} ({size:,} bytes) is not a readable GGUF file: {e}. {redo}") from None
    if size < need:
        raise CheckpointError(f"the GGUF file {path} is truncated: it holds {size:,} bytes, but its header places "
                              f"tensor data up to byte {need:,} ({size / need:.0%} of it is there). {redo}")
