"""Reading real data: a researcher's own files (JSON, JSONL, CSV, Parquet, Arrow) and Hugging Face hub datasets,
always as a stream of plain dict rows (never a full materialisation of a large source).

    read_records(path, limit=100)                  rows of a local file, in file order
    open_source("gsm8k", config="main", split="train", limit=128, seed=0)
                                                   a hub dataset (streamed) or, when `source` is a path, that file
    require_columns(["text"], ["text", "label"], source="my.csv")   -> DataError naming the missing column
    preview(path, n=5)                             the first rows as a DataFrame (the app's data box)

Offline (`HF_DATASETS_OFFLINE=1` / `HF_HUB_OFFLINE=1`) the hub route fails fast with `HubUnavailableError`, whose
message names the local-file route (download the split once elsewhere, save it as JSONL/Parquet, pass the path).
`seed` shuffles with a bounded buffer (like `datasets`' streaming shuffle), so memory stays flat in the source size.
"""
from __future__ import annotations

import csv
import json
import os
import random
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from interplab.core.errors import DataError, InputError

__all__ = ["FILE_SUFFIXES", "HubUnavailableError", "hub_offline", "read_records", "open_source", "load_hub",
           "require_columns", "preview", "shuffled", "take", "is_local_source"]

#: suffix -> reader kind; ".json" may hold a list of rows, {"data": [...]}, a dict of columns, or JSON lines
FILE_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv",
                 ".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".feather": "arrow"}
SHUFFLE_BUFFER = 10_000


class HubUnavailableError(DataError):
    """The Hugging Face hub cannot be reached (offline mode or no network); use a local file instead."""


def hub_offline() -> bool:
    """Are the hub routes switched off by the environment (HF_DATASETS_OFFLINE / HF_HUB_OFFLINE)?"""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))


def _local_route(name: str, config: str | None, split: str | None) -> str:
    cfg = f", {config!r}" if config else ""
    sp = split or "train"
    return (f"To use {name!r} without the hub: on a machine with the hub run `datasets.load_dataset({name!r}{cfg}, "
            f"split={sp!r}).to_json('{name.replace('/', '_')}_{sp}.jsonl')` (or `.to_parquet(...)`), copy the file "
            f"here and pass its path as the source (Python: source='path.jsonl'; CLI: --set data=path.jsonl; app: "
            f"the data box). JSON, JSONL, CSV, Parquet and Arrow files are read.")


def is_local_source(source: Any) -> bool:
    """A path (existing, or with a known data-file suffix) rather than a hub dataset name."""
    if isinstance(source, Path):
        return True
    s = str(source)
    return Path(s).suffix.lower() in FILE_SUFFIXES or Path(s).exists()


# --------------------------------------------------------------------------------------------- local files
def _kind(path: Path) -> str:
    kind = FILE_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise InputError(f"{path}: unknown data-file type {path.suffix!r}; use one of {sorted(FILE_SUFFIXES)}")
    return kind


def _json_rows(path: Path) -> Iterator[dict]:
    with path.open("r", encoding="utf-8") as f:
        head = f.read(1)
        while head and head.isspace():
            head = f.read(1)
    if head != "[" and head != "{":
        raise DataError(f"{path}: not JSON (starts with {head!r})")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        # a .json file holding JSON lines (what `Dataset.to_json` writes)
        yield from _jsonl_rows(path)
        return
    if isinstance(obj, dict) and isinstance(obj.get("data"), list):
        obj = obj["data"]
    if isinstance(obj, dict) and obj and all(isinstance(v, list) for v in obj.values()):
        n = {len(v) for v in obj.values()}
        if len(n) != 1:
            raise DataError(f"{path}: a dict of columns needs equal-length columns, got lengths {sorted(n)}")
        keys = list(obj)
        for i in range(n.pop()):
            yield {k: obj[k][i] for k in keys}
        return
    if not isinstance(obj, list):
        raise DataError(f"{path}: expected a list of rows, a dict of columns or JSON lines")
    for i, row in enumerate(obj):
        if not isinstance(row, dict):
            raise DataError(f"{path}: row {i} is {type(row).__name__}, expected an object")
        yield row


def _jsonl_rows(path: Path) -> Iterator[dict]:
    with path.open("r", encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}: line {i} is not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}: line {i} is {type(row).__name__}, expected an object")
            yield row


def _csv_rows(path: Path, delimiter: str) -> Iterator[dict]:
    with path.open("r", encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        if not reader.fieldnames:
            raise DataError(f"{path}: the file has no header row")
        for row in reader:
            yield {k: v for k, v in row.items() if k is not None}


def _arrow_batches_rows(batches: Iterable) -> Iterator[dict]:
    for batch in batches:
        yield from batch.to_pylist()


def _parquet_rows(path: Path) -> Iterator[dict]:
    import pyarrow.parquet as pq

    yield from _arrow_batches_rows(pq.ParquetFile(path).iter_batches(batch_size=1024))


def _arrow_rows(path: Path) -> Iterator[dict]:
    import pyarrow as pa

    with pa.memory_map(str(path), "r") as src:
        try:  # `datasets` caches write the IPC stream format
            reader = pa.ipc.open_stream(src)
            batches: Iterable = iter(reader)
        except pa.ArrowInvalid:
            src.seek(0)
            try:
                filer = pa.ipc.open_file(src)
            except pa.ArrowInvalid:
                raise DataError(f"{path}: not an Arrow IPC stream or file") from None
            batches = (filer.get_batch(i) for i in range(filer.num_record_batches))
        yield from _arrow_batches_rows(batches)


def read_records(path, *, limit: int | None = None, split: str | None = None) -> Iterator[dict]:
    """Rows of a local JSON/JSONL/CSV/TSV/Parquet/Arrow file as dicts, streamed in file order.

    split: keep only rows whose `split` field equals it (files without a `split` field are one split and every
    row is kept). limit: stop after this many rows."""
    p = Path(path).expanduser()
    if not p.exists():
        raise InputError(f"data file {p} does not exist")
    if p.is_dir():
        raise InputError(f"{p} is a folder; pass one data file (JSON, JSONL, CSV, Parquet or Arrow)")
    kind = _kind(p)
    rows = {"jsonl": _jsonl_rows, "json": _json_rows, "parquet": _parquet_rows, "arrow": _arrow_rows,
            "csv": lambda q: _csv_rows(q, ","), "tsv": lambda q: _csv_rows(q, "\t")}[kind](p)
    rows = _typed_errors(rows, p, kind)
    if split is not None:
        rows = (r for r in rows if "split" not in r or str(r["split"]) == split)
    return take(rows, limit)


def _typed_errors(rows: Iterator[dict], path: Path, kind: str) -> Iterator[dict]:
    """Re-raise a reader's low-level failure (bad encoding, malformed CSV, a damaged Parquet/Arrow file) as a
    DataError that names the file and the format it was read as."""
    import pyarrow as pa

    try:
        yield from rows
    except DataError:
        raise
    except (UnicodeDecodeError, csv.Error, pa.ArrowException, OSError, ValueError) as exc:
        raise DataError(f"{path} could not be read as {kind} ({type(exc).__name__}: {exc}); check the file's format "
                        "and encoding (UTF-8 text for CSV/TSV/JSON/JSONL)") from None


# --------------------------------------------------------------------------------------------- hub
def load_hub(name: str, *, config: str | None = None, split: str = "train", streaming: bool = True,
             revision: str | None = None) -> Iterable[dict]:
    """A hub dataset split as an iterable of rows (`datasets.load_dataset(..., streaming=True)`).

    Offline it raises `HubUnavailableError` at once (no network attempt), naming the local-file route; other load
    failures are re-raised as the same error with the library's message and the same advice."""
    if hub_offline():
        raise HubUnavailableError(f"the Hugging Face hub is switched off here (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE "
                                  f"is set), so hub dataset {name!r} cannot be loaded. " +
                                  _local_route(name, config, split))
    try:
        import datasets
    except ImportError as e:  # pragma: no cover - datasets is a core dependency
        raise HubUnavailableError(f"the `datasets` package is not importable ({e}). " +
                                  _local_route(name, config, split)) from None
    try:
        return datasets.load_dataset(name, config, split=split, streaming=streaming, revision=revision)
    except Exception as e:  # noqa: BLE001 - connection, missing config, script datasets: one typed error
        raise HubUnavailableError(f"could not load hub dataset {name!r} (config {config!r}, split {split!r}): "
                                  f"{type(e).__name__}: {e}. " + _local_route(name, config, split)) from None


def open_source(source=None, *, hub: str | None = None, config: str | None = None, split: str = "train",
                limit: int | None = None, seed: int | None = None, shuffle_buffer: int = SHUFFLE_BUFFER,
                file_split: bool = True) -> Iterator[dict]:
    """Rows of `source`: a local file path, or a hub name (default `hub`, the adapter's dataset).

    split: the hub split; for a local file, rows with a `split` field are filtered by it (file_split=True).
    seed: None keeps the source order; an int shuffles with a buffer of `shuffle_buffer` rows (deterministic).
    limit: at most this many rows (after shuffling)."""
    if source is not None and is_local_source(source):
        rows: Iterable[dict] = read_records(source, split=split if file_split else None)
    else:
        name = str(source) if source is not None else hub
        if not name:
            raise InputError("no data source given: pass a local file path or a hub dataset name")
        rows = load_hub(name, config=config, split=split)
    if seed is not None:
        rows = shuffled(rows, seed, buffer_size=shuffle_buffer)
    return take(iter(rows), limit)


def take(rows: Iterable[dict], limit: int | None) -> Iterator[dict]:
    """The first `limit` rows (all when limit is None)."""
    if limit is not None and limit < 0:
        raise InputError(f"limit must be >= 0, got {limit}")
    for i, r in enumerate(rows):
        if limit is not None and i >= limit:
            return
        yield r


def shuffled(rows: Iterable, seed: int, *, buffer_size: int = SHUFFLE_BUFFER) -> Iterator:
    """A seeded buffer shuffle: a uniform permutation when the source fits in the buffer, a local shuffle past it
    (memory stays O(buffer_size))."""
    if buffer_size < 1:
        raise InputError(f"buffer_size must be >= 1, got {buffer_size}")
    rng = random.Random(seed)
    buf: list = []
    for r in rows:
        if len(buf) < buffer_size:
            buf.append(r)
            continue
        j = rng.randrange(buffer_size)
        yield buf[j]
        buf[j] = r
    rng.shuffle(buf)
    yield from buf


# --------------------------------------------------------------------------------------------- validation
def require_columns(columns: Sequence[str], required: Sequence[str], *, source: str = "the data",
                    hint: str = "") -> None:
    """Raise DataError naming every required column missing from `columns`."""
    missing = [c for c in required if c not in set(columns)]
    if missing:
        raise DataError(f"{source} is missing column{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(repr(m) for m in missing)} (has: {', '.join(map(str, columns)) or 'none'})."
                        + (f" {hint}" if hint else ""))


def preview(path, n: int = 5):
    """The first n rows of a local file as a DataFrame (nested values kept as Python objects)."""
    import pandas as pd

    return pd.DataFrame(list(read_records(path, limit=n)))
