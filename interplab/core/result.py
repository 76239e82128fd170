"""One save/load path for every result: `Result`, a mixin for result dataclasses.

A saved result is a folder with one naming convention:

    result.json          {"kind": class name, "format": 1, "fields": {...}}: scalars, strings, lists, dicts,
                         nested config dataclasses, and which fields live in the files below
    arrays.safetensors   every numpy / torch array field (a dict or list of arrays as "field/key" entries)
    <field>.csv          every pandas DataFrame field (``TABLE_FORMAT = "parquet"`` for .parquet)
    <field>/             every nested `Result` field, saved the same way

The folder is written next to its target and renamed into place, so a crash mid-save leaves the earlier folder (or
nothing) where it was, and nothing is overwritten unless ``overwrite=True``. `load` rebuilds the dataclass from the
files using its type hints (config dataclasses, tuples); `Result.load_any(dir)` picks the class from "kind".
Subclasses check their own shapes in ``__post_init__`` and offer ``to_frame()``; they write no file themselves.
"""
from __future__ import annotations

import dataclasses
import importlib
import shutil
import tempfile
import types
import typing
from pathlib import Path
from typing import ClassVar

import numpy as np

from interplab.core.errors import DataError, ResultsError
from interplab.core.io import read_arrays, read_json, read_table, write_arrays, write_json, write_table

RESULT_FILE = "result.json"
ARRAYS_FILE = "arrays.safetensors"
FORMAT = 1
_KINDS: dict[str, type] = {}


class Result:
    """Mixin for result dataclasses: ``save(dir)``, ``load(dir)`` and ``load_any(dir)`` from the field values."""

    TABLE_FORMAT: ClassVar[str] = "csv"

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        old = _KINDS.get(cls.__name__)
        # a saved result names its class by `kind` alone, so two classes of one name would load each other's files;
        # the same class defined again (a reloaded module) replaces itself
        if old is not None and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ResultsError(f"result class name {cls.__name__!r} is taken by {old.__module__}.{old.__qualname__}; "
                               f"rename {cls.__module__}.{cls.__qualname__} (results are found by class name)")
        _KINDS[cls.__name__] = cls

    # ------------------------------------------------------------------ save
    def save(self, path, *, overwrite: bool = False) -> Path:
        """Write this result into folder `path` (created); see the module docstring for the layout."""
        if not dataclasses.is_dataclass(self):
            raise TypeError(f"{type(self).__name__} must be a dataclass to use Result.save")
        target = Path(path)
        if (target / RESULT_FILE).exists() and not overwrite:
            raise ResultsError(f"{target} already holds a saved {_kind_of(target)}; pass overwrite=True or choose "
                               "another folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".saving", dir=target.parent))
        try:
            self._write(tmp)
            _swap_in(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return target

    def _write(self, d: Path) -> None:
        fields, arrays, tables = {}, {}, {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Result):
                v._write(_mk(d / f.name))
                fields[f.name] = {"$result": type(v).__name__}
            elif _is_result_map(v):
                for i, r in enumerate(v.values()):
                    r._write(_mk(d / f.name / str(i)))
                fields[f.name] = {"$result_map": list(v)}
            elif _is_result_seq(v):
                for i, r in enumerate(v):
                    r._write(_mk(d / f.name / str(i)))
                fields[f.name] = {"$result_list": len(v)}
            elif _is_frame(v):
                tables[f.name] = v
                fields[f.name] = {"$table": f"{f.name}.{self.TABLE_FORMAT}"}
            elif _is_array(v):
                arrays[f.name] = v
                fields[f.name] = {"$array": _array_type(v)}
            elif _is_array_map(v):
                arrays.update({f"{f.name}/{k}": a for k, a in v.items()})
                fields[f.name] = {"$array_map": list(v), "type": _array_type(next(iter(v.values())))}
            elif _is_array_seq(v):
                arrays.update({f"{f.name}/{i}": a for i, a in enumerate(v)})
                fields[f.name] = {"$array_list": len(v), "type": _array_type(v[0])}
            else:
                fields[f.name] = _jsonable(v, f.name, type(self).__name__)
        for name, df in tables.items():
            write_table(d / f"{name}.{self.TABLE_FORMAT}", df)
        if arrays:
            write_arrays(d / ARRAYS_FILE, arrays)
        write_json(d / RESULT_FILE, {"kind": type(self).__name__, "module": type(self).__module__, "format": FORMAT,
                                     "fields": fields})

    # ------------------------------------------------------------------ load
    @classmethod
    def load(cls, path):
        """Rebuild a result saved by `save`; a folder holding another kind, or no result, is a `ResultsError`."""
        d = Path(path)
        meta = _read_meta(d)
        if meta["kind"] != cls.__name__:
            raise ResultsError(f"{d} holds a saved {meta['kind']}, not a {cls.__name__}; load it with "
                               f"{meta['kind']}.load or Result.load_any")
        return cls._from_meta(d, meta)

    @staticmethod
    def load_any(path) -> "Result":
        """Load whatever result `path` holds; its class is imported on demand (see `_result_class`)."""
        d = Path(path)
        meta = _read_meta(d)
        return _result_class(meta["kind"], meta.get("module"), d)._from_meta(d, meta)

    @classmethod
    def _from_meta(cls, d: Path, meta: dict):
        arrays = read_arrays(d / ARRAYS_FILE) if (d / ARRAYS_FILE).exists() else {}
        hints = typing.get_type_hints(cls)
        kw = {}
        for name, v in meta["fields"].items():
            kw[name] = _restore(v, name, d, arrays, hints.get(name))
        try:
            return cls(**kw)
        except TypeError as exc:
            raise DataError(f"{d}/{RESULT_FILE} does not match {cls.__name__}'s fields ({exc}); it was saved by "
                            "another interplab version") from None


# ---------------------------------------------------------------------------------------------- helpers
def _mk(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    return d


def _swap_in(tmp: Path, target: Path) -> None:
    """Rename the finished folder into place; an existing one is moved aside first and removed only afterwards."""
    if not target.exists():
        tmp.rename(target)
        return
    old = target.with_name(f".{target.name}.old-{tmp.name.rsplit('.', 2)[-2]}")
    target.rename(old)
    try:
        tmp.rename(target)
    except BaseException:
        old.rename(target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _kind_of(d: Path) -> str:
    try:
        return read_json(d / RESULT_FILE).get("kind", "result")
    except Exception:  # noqa: BLE001 - only used to word an error
        return "result"


def _read_meta(d: Path) -> dict:
    p = d / RESULT_FILE
    if not p.exists():
        raise ResultsError(f"{d} holds no saved result ({RESULT_FILE} missing); save one with result.save(dir)")
    try:
        meta = read_json(p)
    except ValueError as exc:
        raise DataError(f"{p} is not valid JSON ({exc}); the result folder is damaged — re-run or delete it") from None
    if not isinstance(meta, dict) or "kind" not in meta or "fields" not in meta:
        raise DataError(f"{p} is not an interplab result file (needs 'kind' and 'fields')")
    return meta


def _is_frame(v) -> bool:
    return type(v).__name__ == "DataFrame" and hasattr(v, "to_csv")


def _is_result_map(v) -> bool:
    return isinstance(v, dict) and bool(v) and all(isinstance(k, str) for k in v) and all(
        isinstance(x, Result) for x in v.values())


def _is_result_seq(v) -> bool:
    return isinstance(v, (list, tuple)) and bool(v) and all(isinstance(x, Result) for x in v)


def _read_frame(path: Path):
    """A saved table; a table saved without columns (an empty CSV file) comes back as an empty DataFrame."""
    import pandas as pd

    try:
        return read_table(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def _is_array(v) -> bool:
    return isinstance(v, np.ndarray) or type(v).__name__ == "Tensor" and hasattr(v, "detach")


def _is_array_map(v) -> bool:
    return isinstance(v, dict) and bool(v) and all(isinstance(k, str) for k in v) and all(map(_is_array, v.values()))


def _is_array_seq(v) -> bool:
    return isinstance(v, (list, tuple)) and bool(v) and all(map(_is_array, v))


def _array_type(v) -> str:
    return "numpy" if isinstance(v, np.ndarray) else "torch"


def _as(a: np.ndarray, kind: str):
    if kind == "torch":
        import torch

        return torch.from_numpy(np.array(a))
    return a


def _jsonable(v, name: str, owner: str):
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {"$dataclass": type(v).__name__, "value": dataclasses.asdict(v)}
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, (tuple, list)):
        return [_jsonable(x, name, owner) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x, name, owner) for k, x in v.items()}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise DataError(f"{owner}.{name} holds a {type(v).__name__}, which a Result cannot save; use an array, a "
                    "DataFrame, a nested Result, a dataclass or JSON-able values")


def _result_class(kind: str, module: str | None, d: Path) -> type:
    """The registered class named `kind`. A class that is not imported yet is imported from the module its result
    file names (results record it since format 1 files gained the key), so a run loads without its class
    imported by hand (only interplab's own modules are imported this way; a class of yours must be imported
    first); a result saved before that needs its module imported first (`interplab.experiments`'s
    `discover()` imports every built-in one)."""
    if kind not in _KINDS and module and module.startswith("interplab."):  # never import code a file names
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    if kind not in _KINDS:
        raise ResultsError(f"{d} holds a {kind}, which is not a known result class (module "
                           f"{module or 'not recorded'}); import the module that defines it first")
    return _KINDS[kind]


def _restore(v, name: str, d: Path, arrays: dict, hint):
    if isinstance(v, dict) and len(v) >= 1:
        if "$result" in v:
            meta = _read_meta(d / name)
            return _result_class(v["$result"], meta.get("module"), d / name)._from_meta(d / name, meta)
        if "$result_map" in v:
            return {k: Result.load_any(d / name / str(i)) for i, k in enumerate(v["$result_map"])}
        if "$result_list" in v:
            out = [Result.load_any(d / name / str(i)) for i in range(v["$result_list"])]
            return tuple(out) if _origin(hint) is tuple else out
        if "$table" in v:
            return _read_frame(d / v["$table"])
        if "$array" in v:
            return _as(arrays[name], v["$array"])
        if "$array_map" in v:
            return {k: _as(arrays[f"{name}/{k}"], v["type"]) for k in v["$array_map"]}
        if "$array_list" in v:
            out = [_as(arrays[f"{name}/{i}"], v["type"]) for i in range(v["$array_list"])]
            return tuple(out) if _origin(hint) is tuple else out
        if "$dataclass" in v:
            cls = _dataclass_in(hint)
            return _build_dataclass(cls, v["value"]) if cls is not None else v["value"]
    if isinstance(v, list) and _origin(hint) is tuple:
        return tuple(v)
    return v


def _origin(hint):
    """tuple for tuple[...] / Optional[tuple[...]] hints, else the hint's origin."""
    o = typing.get_origin(hint)
    if o in (typing.Union, types.UnionType):
        for a in typing.get_args(hint):
            if typing.get_origin(a) is tuple or a is tuple:
                return tuple
        return None
    return tuple if hint is tuple else o


def _dataclass_in(hint) -> type | None:
    cands = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for c in cands:
        if isinstance(c, type) and dataclasses.is_dataclass(c):
            return c
    return None


def _build_dataclass(cls: type, value: dict):
    """A config dataclass from its saved dict: tuple fields back to tuples, nested dataclasses rebuilt."""
    hints = typing.get_type_hints(cls)
    kw = {}
    for k, x in value.items():
        h = hints.get(k)
        sub = _dataclass_in(h)
        if sub is not None and isinstance(x, dict):
            x = _build_dataclass(sub, x)
        elif isinstance(x, list) and _origin(h) is tuple:
            x = tuple(x)
        kw[k] = x
    return cls(**kw)


def result_kinds() -> dict[str, type]:
    """Every registered result class by name."""
    return dict(_KINDS)

