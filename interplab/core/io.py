"""Atomic file writes. Every artifact goes to a temporary file in the same directory and is renamed into place,
so a crash mid-write never leaves a half-written file where a complete one (or nothing) was before."""
from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from interplab.core.errors import ResultsError


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def _atomic(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give results the usual permissions
        write(tmp)
        with open(tmp, "rb") as fh:  # flush to disk before the rename makes it visible
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise ResultsError(f"could not write {path}: {exc.strerror or exc} (no space left?). Nothing was "
                               "replaced; free some disk space or set INTERPLAB_HOME to another disk, then re-run") \
                from exc
        raise
    return path


def write_bytes(path, data: bytes) -> Path:
    def w(tmp):
        with open(tmp, "wb") as fh:
            fh.write(data)
    return _atomic(path, w)


def write_text(path, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def _json_default(obj: Any):
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "__dataclass_fields__"):
        from dataclasses import asdict
        return asdict(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


def write_json(path, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def read_json(path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def write_arrays(path, arrays: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> Path:
    """Save a dict of numpy arrays / torch tensors as one safetensors file."""
    import torch
    from safetensors.torch import save_file

    tensors = {}
    for k, v in arrays.items():
        t = v if isinstance(v, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(np.asarray(v)))
        tensors[k] = t.detach().cpu().contiguous()
    return _atomic(path, lambda tmp: save_file(tensors, tmp, metadata=dict(metadata or {})))


def read_arrays(path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path))


def write_table(path, df) -> Path:
    """CSV or Parquet by suffix."""
    path = Path(path)
    if path.suffix == ".parquet":
        return _atomic(path, lambda tmp: df.to_parquet(tmp, index=False))
    return _atomic(path, lambda tmp: df.to_csv(tmp, index=False))


def read_table(path):
    import pandas as pd

    path = Path(path)
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
