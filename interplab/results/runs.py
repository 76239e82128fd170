"""Run directories: one folder per experiment run, written atomically.

Layout of a finished run (``<root>/runs/<kind>/<timestamp>-<shortid>/``)::

    run.json            manifest: kind, name, status ("complete"), created/finished times, files
    config.json         the config (dataclass or dict) + interplab/torch/transformers versions, seed, timestamp
    arrays/<name>.safetensors
    tables/<name>.csv | tables/<name>.parquet
    figures/<name>.plotly.json (+ <name>.html / .png / .svg / .pdf as asked)
    json/<name>.json

A run is written into the hidden folder ``<root>/runs/<kind>/.<name>.partial`` and renamed into place by
`RunDir.finish()` (or on leaving ``with new_run(...) as run:`` without an exception). A run that raises is moved to
its visible folder with ``run.json`` status "failed" and the error (its files kept for inspection): it never shows up
as a complete run (`list_runs` lists it only with ``include_failed``, `load_run` refuses it, `clean_runs` removes
it), and no hidden folder is left behind. A run that is cancelled (KeyboardInterrupt, i.e. SIGINT / Ctrl-C, or a
job's cancel) is removed. Only a process killed outright (SIGKILL, out of memory) leaves its hidden ``.partial``
folder; `leftovers` / `clean_runs` find it once its writer is gone. Earlier runs are never touched, and nothing is
ever overwritten silently: an existing run directory raises `ResultsError`.

While it runs, ``progress.json`` in the run folder says how far it is (`RunDir.progress`, or any
`interplab.core.progress` task reported inside `run_experiment`): done / total units, rate, ETA; written
atomically, at most every `PROGRESS_INTERVAL_S` seconds.

The root is, in order: the ``root`` argument, the ``INTERPLAB_HOME`` environment variable, ``~/.interplab``.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import re
import sys
import traceback
import uuid
from pathlib import Path
from typing import Any, Mapping

from interplab.core import progress as _progress
from interplab.core.errors import InputError, ResultsError
from interplab.core.procs import pid_alive
from interplab.core.io import read_arrays, read_json, read_table, write_arrays, write_json, write_table, write_text
from interplab.core.paths import interplab_home

__all__ = [
    "RunDir",
    "LoadedRun",
    "new_run",
    "list_runs",
    "shipped_runs",
    "run_model",
    "shipped_runs_root",
    "load_run",
    "interplab_home",
    "runs_root",
    "config_to_dict",
    "environment_info",
    "run_problems",
    "leftovers",
    "clean_runs",
    "remove_run",
    "read_progress",
    "PROGRESS_FILE",
]

RUN_MANIFEST = "run.json"
CONFIG_FILE = "config.json"
PARTIAL_SUFFIX = ".partial"
PROGRESS_FILE = "progress.json"
PROGRESS_INTERVAL_S = 0.5   # progress.json is rewritten at most this often (a page polls it every second or two)
TABLE_FORMATS = ("csv", "parquet")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]*$")


# --------------------------------------------------------------------------------------------------- helpers
def runs_root(root: str | os.PathLike | None = None) -> Path:
    return interplab_home(root) / "runs"


def shipped_runs_root() -> Path:
    """The project's committed run outputs, `<project>/results/` (long sweeps run once, small enough to ship);
    `$INTERPLAB_SHIPPED_RESULTS` overrides it. Absent in a wheel install, where nothing is shipped."""
    env = os.environ.get("INTERPLAB_SHIPPED_RESULTS")
    return Path(env).expanduser() if env else Path(__file__).resolve().parents[2] / "results"


def shipped_runs(kind: str) -> list[Path]:
    """The committed complete, intact runs of experiment `kind` under `shipped_runs_root()/<kind>/` and
    `<kind>-<model>/` (e.g. `truth-scores-smollm2/`, a real-model run): each folder itself or its sub-folders, whose
    manifest names `kind` and lists only committed files; sorted by folder, then name. They are read-only
    references: list_runs() does not list them."""
    root = shipped_runs_root()
    if not root.is_dir():
        return []
    bases = [b for b in [root / kind, *sorted(root.glob(f"{kind}-*"))] if b.is_dir()]
    found = [d for b in bases
             for d in ([b] if (b / RUN_MANIFEST).is_file() else sorted(d for d in b.iterdir() if d.is_dir()))]
    # a sibling experiment may share the prefix (pcfg-depth / pcfg-depth-sweep): the manifest says whose run it is
    return [d for d in found if (m := read_manifest(d) or {}).get("status") == "complete"
            and m.get("kind", kind) == kind and not run_problems(d, m)]


def _check_name(what: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name) or name.endswith(PARTIAL_SUFFIX):
        raise InputError(f"{what} {name!r} is not a valid name: use letters, digits and . _ - + = "
                         f"(no slashes, no leading dot or dash, not ending in {PARTIAL_SUFFIX!r})")
    return name


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _iso(t: _dt.datetime) -> str:
    return t.isoformat(timespec="milliseconds")


def config_to_dict(cfg: Any) -> dict:
    """A dataclass (nested dataclasses included) or a mapping as a plain JSON-ready dict."""
    if cfg is None:
        return {}
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return dataclasses.asdict(cfg)
    if isinstance(cfg, Mapping):
        return dict(cfg)
    raise InputError(f"a config must be a dataclass instance or a dict, got {type(cfg).__name__}")


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment_info() -> dict:
    """Versions that change numbers: interplab, python, torch, transformers, transformer-lens, nnsight, sae-lens."""
    iv = _version("interplab")
    if iv is None:
        iv = getattr(sys.modules.get("interplab"), "__version__", None) or "unknown"
    return {
        "interplab": iv,
        "python": sys.version.split()[0],
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "transformer_lens": _version("transformer-lens"),
        "nnsight": _version("nnsight"),
        "sae_lens": _version("sae-lens"),
        "numpy": _version("numpy"),
    }


# --------------------------------------------------------------------------------------------------- writing
class RunDir:
    """A run being written. Use `new_run(...)` to make one."""

    def __init__(self, kind: str, name: str, root: Path, runner: dict | None = None):
        self.kind = kind
        self.runner = dict(runner) if runner else None  # how the run was executed (e.g. torch threads)
        self.name = name
        self.root = Path(root)
        self.kind_dir = runs_root(self.root) / kind
        self.final_path = self.kind_dir / name
        self.partial_path = self.kind_dir / f".{name}{PARTIAL_SUFFIX}"
        self.status = "new"
        self.created = _now()
        self._files: dict[str, str] = {}
        self._moved = False                 # a failed run moved to its visible folder
        self._progress = _ProgressFile(self)

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def _create(self) -> "RunDir":
        if self.final_path.exists():
            raise ResultsError(f"run directory {self.final_path} already exists; interplab never overwrites a run. "
                               "Pick another name or delete it yourself.")
        self.kind_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.partial_path.mkdir()
        except FileExistsError:
            raise ResultsError(f"a run named {self.name!r} is already being written (or crashed) at "
                               f"{self.partial_path}; pick another name or delete that folder.") from None
        self.status = "running"
        self._write_manifest()
        return self

    @property
    def path(self) -> Path:
        """Where the run's files are now: the hidden partial folder until `finish()`, then the final folder."""
        return self.final_path if self.status == "complete" or self._moved else self.partial_path

    def relative(self, p) -> str:
        """`p` as a path relative to the run folder (POSIX), so a path recorded in a table or JSON stays valid after
        `finish()` renames the folder; a path outside the run comes back absolute."""
        p = Path(p).resolve()
        try:
            return p.relative_to(self.path.resolve()).as_posix()
        except ValueError:
            return str(p)

    def _write_manifest(self, **extra) -> None:
        manifest = {
            "kind": self.kind,
            "name": self.name,
            "status": self.status,
            "created": _iso(self.created),
            "pid": os.getpid(),
            "files": dict(sorted(self._files.items())),
        }
        if self.runner:
            manifest["runner"] = self.runner
        manifest.update(extra)
        write_json(self.path / RUN_MANIFEST, manifest)

    def _check_writable(self) -> None:
        if self.status != "running":
            raise ResultsError(f"run {self.name!r} is {self.status}; its files can no longer change "
                               "(start a new run instead)")

    def target(self, sub: str, name: str, suffix: str, overwrite: bool) -> Path:
        self._check_writable()
        _check_name("artifact name", name)
        rel = f"{sub}/{name}{suffix}" if sub else f"{name}{suffix}"
        target = self.path / rel
        if target.exists() and not overwrite:
            raise ResultsError(f"{rel} already exists in run {self.name!r}; pass overwrite=True to replace it")
        return target

    def record(self, target: Path, kind: str) -> Path:
        self._files[target.relative_to(self.path).as_posix()] = kind
        return target

    def finish(self) -> Path:
        """Mark the run complete and move it into place (atomic rename). Returns the final path."""
        if self.status == "complete":
            return self.final_path
        self._check_writable()
        if self.final_path.exists():
            raise ResultsError(f"cannot finish run: {self.final_path} appeared while this run was being written; "
                               f"its files are left in {self.partial_path}")
        finished = _now()
        self._write_manifest(status="complete", finished=_iso(finished),
                             duration_s=round((finished - self.created).total_seconds(), 3))
        try:
            os.rename(self.partial_path, self.final_path)
        except OSError as exc:
            self._write_manifest(status="running")
            raise ResultsError(f"could not move {self.partial_path} to {self.final_path}: {exc}") from None
        self.status = "complete"
        return self.final_path

    def fail(self, exc: BaseException | None = None) -> None:
        """Mark the run failed and move it to its visible folder (status "failed", the error in run.json, its files
        kept for inspection): no hidden folder is left, and it never lists as a complete run. Where the move itself
        fails (a full disk), the hidden folder stays and `clean_runs` finds it."""
        if self.status != "running":
            return
        self.status = "failed"
        err = None
        if exc is not None:
            err = {"type": type(exc).__name__, "message": str(exc),
                   "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))}
        try:
            self._write_manifest(status="failed", failed=_iso(_now()), error=err)
        except OSError:  # the disk may be the reason we failed; the run is not complete either way
            pass
        if not self.final_path.exists():
            try:
                os.rename(self.partial_path, self.final_path)
                self._moved = True
            except OSError:
                pass

    def cancel(self) -> None:
        """Remove the run (it was cancelled: nothing of it is kept, so nothing half-made is ever offered)."""
        if self.status != "running":
            return
        import shutil

        self.status = "cancelled"
        shutil.rmtree(self.partial_path, ignore_errors=True)

    def progress(self, done: int, total: int, unit: str = "steps", phase: str = "") -> None:
        """Record how far the run is in `progress.json` (throttled, atomic): for loops that count themselves.
        Code below the experiment reports through `interplab.core.progress` instead (see run_experiment)."""
        self._progress.direct(done, total, unit, phase)

    def report_progress(self, snapshot) -> None:
        """A sink for `interplab.core.progress.reporting_to` (run_experiment installs it)."""
        self._progress(snapshot)

    def __enter__(self) -> "RunDir":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.finish()
        elif issubclass(exc_type, KeyboardInterrupt):  # Ctrl-C, SIGINT, a job's cancel
            self.cancel()
        else:
            self.fail(exc)
        return False

    def __repr__(self) -> str:
        return f"RunDir(kind={self.kind!r}, name={self.name!r}, status={self.status!r}, path={str(self.path)!r})"

    # -- artifacts ---------------------------------------------------------------------------------------------
    def save_config(self, cfg: Any, *, overwrite: bool = False) -> Path:
        """config.json: the config's fields plus versions, seed (if the config has one) and a timestamp."""
        target = self.target("", "config", ".json", overwrite)
        d = config_to_dict(cfg)
        cls = type(cfg)
        payload = {
            "kind": self.kind,
            "run": self.name,
            "config": d,
            "config_class": (f"{cls.__module__}.{cls.__qualname__}"
                             if dataclasses.is_dataclass(cfg) else None),
            "seed": d.get("seed"),
            "timestamp": _iso(_now()),
            "versions": environment_info(),
        }
        payload["interplab_version"] = payload["versions"]["interplab"]
        write_json(target, payload)
        return self.record(target, "config")

    def save_arrays(self, name: str, arrays: Mapping[str, Any], *, overwrite: bool = False,
                    metadata: Mapping[str, str] | None = None) -> Path:
        """arrays/<name>.safetensors from a dict of numpy arrays / torch tensors."""
        if not isinstance(arrays, Mapping) or not arrays:
            raise InputError(f"save_arrays({name!r}) needs a non-empty dict of arrays")
        target = self.target("arrays", name, ".safetensors", overwrite)
        write_arrays(target, arrays, metadata=metadata)
        return self.record(target, "arrays")

    def save_table(self, name: str, df, fmt: str = "csv", *, overwrite: bool = False) -> Path:
        """tables/<name>.csv or .parquet from a pandas DataFrame."""
        if fmt not in TABLE_FORMATS:
            raise InputError(f"table format {fmt!r} is not supported; use one of {TABLE_FORMATS}")
        if not hasattr(df, "to_csv"):
            raise InputError(f"save_table({name!r}) needs a pandas DataFrame, got {type(df).__name__}")
        other = "parquet" if fmt == "csv" else "csv"
        if (self.path / "tables" / f"{name}.{other}").exists():
            raise ResultsError(f"table {name!r} is already saved as .{other} in this run")
        target = self.target("tables", name, f".{fmt}", overwrite)
        write_table(target, df)
        return self.record(target, "table")

    def save_json(self, name: str, obj: Any, *, overwrite: bool = False) -> Path:
        """json/<name>.json (numpy scalars/arrays, Paths and dataclasses are converted)."""
        target = self.target("json", name, ".json", overwrite)
        write_json(target, obj)
        return self.record(target, "json")

    def save_result(self, name: str, result, *, overwrite: bool = False) -> Path:
        """<name>/ holding a saved `interplab.core.result.Result` (reload with `LoadedRun.result(name)`)."""
        target = self.target("", name, "", overwrite)
        result.save(target, overwrite=overwrite)
        return self.record(target, "result")


class _ProgressFile:
    """Writes a run's progress.json from progress snapshots: atomically, at most every PROGRESS_INTERVAL_S seconds,
    and always the last state before the work ends (an empty snapshot = every task closed = flush)."""

    def __init__(self, run: "RunDir"):
        self.run = run
        self.last_write = float("-inf")     # the first state is always written
        self.pending = None
        self.starts: dict[str, float] = {}

    def direct(self, done: int, total: int, unit: str, phase: str) -> None:
        import time

        start = self.starts.setdefault(unit, time.perf_counter())
        state = _progress.TaskState(unit, int(done), int(total), phase, time.perf_counter() - start)
        self(_progress.Snapshot((state,)))

    def __call__(self, snapshot) -> None:
        import time

        if self.run.status != "running":
            return
        if not snapshot.tasks:          # the work ended: write what was last seen
            if self.pending is not None:
                self._write(self.pending)
            return
        now = time.monotonic()
        if now - self.last_write >= PROGRESS_INTERVAL_S or snapshot.finished:
            self._write(snapshot)
        else:
            self.pending = snapshot

    def _write(self, snapshot) -> None:
        import time

        self.pending = None
        self.last_write = time.monotonic()
        main = snapshot.main.as_dict()
        payload = {**main, "tasks": [t.as_dict() for t in snapshot.tasks], "pid": os.getpid(),
                   "updated": _iso(_now()), "updated_unix": time.time()}
        try:
            write_json(self.run.path / PROGRESS_FILE, payload)
        except (OSError, ResultsError):  # progress is advisory: never let it fail the run
            pass


def read_progress(path) -> dict | None:
    """A run folder's progress.json (None when it has none yet or it cannot be read)."""
    try:
        d = read_json(Path(path) / PROGRESS_FILE)
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def new_run(kind: str, config: Any = None, root: str | os.PathLike | None = None,
            name: str | None = None, runner: dict | None = None) -> RunDir:
    """Start a run of `kind` under `<root>/runs/<kind>/` (see the module docstring); saves `config` if given.

    Use as a context manager so the run is finished on success and marked failed on an exception::

        with new_run("next-token", cfg) as run:
            run.save_table("top_tokens", df)
        run.path   # the finished folder
    """
    _check_name("run kind", kind)
    if name is None:
        name = f"{_now().strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    _check_name("run name", name)
    run = RunDir(kind, name, interplab_home(root), runner=runner)._create()
    if config is not None:
        try:
            run.save_config(config)
        except BaseException as exc:
            run.__exit__(type(exc), exc, exc.__traceback__)
            raise
    return run


# --------------------------------------------------------------------------------------------------- reading
class LoadedRun:
    """A finished run, read back. Arrays, tables and figures load on demand."""

    def __init__(self, path: Path, manifest: dict):
        self.path = Path(path)
        self.manifest = manifest
        self.kind = manifest.get("kind")
        self.name = manifest.get("name", self.path.name)
        cfg_path = self.path / CONFIG_FILE
        self.meta: dict = read_json(cfg_path) if cfg_path.exists() else {}

    @property
    def config(self) -> dict:
        """The config's fields as saved (a dict)."""
        return dict(self.meta.get("config", {}))

    def config_as(self, cls):
        """Rebuild the config dataclass `cls` from the saved fields (unknown fields are an error)."""
        return cls(**self.config)

    def _names(self, sub: str, suffixes: tuple[str, ...]) -> list[str]:
        d = self.path / sub
        if not d.is_dir():
            return []
        out = set()
        for p in d.iterdir():
            if p.name.startswith("."):
                continue
            for s in suffixes:
                if p.name.endswith(s):
                    out.add(p.name[: -len(s)])
        return sorted(out)

    @property
    def array_names(self) -> list[str]:
        return self._names("arrays", (".safetensors",))

    @property
    def table_names(self) -> list[str]:
        return self._names("tables", (".csv", ".parquet"))

    @property
    def json_names(self) -> list[str]:
        return self._names("json", (".json",))

    @property
    def figure_names(self) -> list[str]:
        return self._names("figures", (".plotly.json",))

    def _missing(self, what: str, name: str, have: list[str]):
        return ResultsError(f"run {self.path} has no {what} {name!r}; it has: {have or 'none'}")

    def arrays(self, name: str) -> dict:
        p = self.path / "arrays" / f"{name}.safetensors"
        if not p.exists():
            raise self._missing("arrays", name, self.array_names)
        return read_arrays(p)

    def table(self, name: str):
        for fmt in TABLE_FORMATS:
            p = self.path / "tables" / f"{name}.{fmt}"
            if p.exists():
                return read_table(p)
        raise self._missing("table", name, self.table_names)

    def json(self, name: str):
        p = self.path / "json" / f"{name}.json"
        if not p.exists():
            raise self._missing("json", name, self.json_names)
        return read_json(p)

    @property
    def result_names(self) -> list[str]:
        return sorted(k for k, v in self.manifest.get("files", {}).items() if v == "result")

    def result(self, name: str):
        """The `Result` saved with `run.save_result(name, ...)` (its class must be importable)."""
        from interplab.core.result import Result

        if name not in self.result_names:
            raise self._missing("result", name, self.result_names)
        return Result.load_any(self.path / name)

    def validity(self):
        """The run's `ValidityReport` (verdicts and the checks behind them), or None for a run saved without one."""
        name = "validity"  # interplab.probes.validity.VALIDITY_RESULT (results sit below probes)
        return self.result(name) if name in self.result_names else None

    def figure(self, name: str):
        p = self.path / "figures" / f"{name}.plotly.json"
        if not p.exists():
            raise self._missing("figure", name, self.figure_names)
        import json as _json

        import plotly.graph_objects as go

        return go.Figure(_decode_typed_arrays(_json.loads(p.read_text(encoding="utf-8"))), skip_invalid=True)

    @property
    def figures(self) -> dict:
        """name -> plotly Figure, for every figure saved in the run."""
        return {n: self.figure(n) for n in self.figure_names}

    def figure_files(self, name: str) -> list[Path]:
        d = self.path / "figures"
        return sorted(p for p in d.glob(f"{name}.*") if not p.name.startswith(".") and p.suffix != ".json")

    def __repr__(self) -> str:
        return f"LoadedRun(kind={self.kind!r}, name={self.name!r}, path={str(self.path)!r})"


def _decode_typed_arrays(obj):
    """plotly >= 6 stores numpy arrays in figure JSON as {"dtype", "bdata"[, "shape"]}; turn them back into arrays."""
    if isinstance(obj, dict):
        if "bdata" in obj and "dtype" in obj and set(obj) <= {"bdata", "dtype", "shape"}:
            import base64

            import numpy as np

            arr = np.frombuffer(base64.b64decode(obj["bdata"]), dtype=np.dtype(obj["dtype"]))
            shape = obj.get("shape")
            if shape is not None:
                if isinstance(shape, str):
                    shape = [int(x) for x in shape.split(",") if x.strip()]
                arr = arr.reshape(shape)
            return arr.copy()
        return {k: _decode_typed_arrays(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode_typed_arrays(v) for v in obj]
    return obj


def read_manifest(path: Path) -> dict | None:
    try:
        m = read_json(path / RUN_MANIFEST)
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) else None


def load_run(path: str | os.PathLike, *, root: str | os.PathLike | None = None) -> LoadedRun:
    """Load a finished run from its folder (or `<kind>/<name>` relative to the runs root)."""
    p = Path(path).expanduser()
    if not p.exists() and not p.is_absolute():
        alt = runs_root(root) / p
        if alt.exists():
            p = alt
    if not p.is_dir():
        raise ResultsError(f"no run directory at {str(path)!r}; `interplab run --list` shows experiments and "
                           "`interplab.results.list_runs()` lists finished runs")
    m = read_manifest(p)
    if m is None:
        raise ResultsError(f"{p} is not an interplab run (no readable {RUN_MANIFEST})")
    status = m.get("status")
    if status != "complete" or p.name.endswith(PARTIAL_SUFFIX):
        msg = f"run {p} is not complete (status {status!r})"
        if m.get("error"):
            msg += f"; it failed with {m['error'].get('type')}: {m['error'].get('message')}"
        raise ResultsError(msg)
    return LoadedRun(p, m)


def list_runs(kind: str | None = None, root: str | os.PathLike | None = None, *,
              include_failed: bool = False):
    """A DataFrame of finished runs (newest last): kind, name, path, created, finished, n_arrays, n_tables,
    n_figures, status. `include_failed=True` also lists hidden partial runs (status running/failed)."""
    import pandas as pd

    base = runs_root(root)
    cols = ["kind", "name", "status", "created", "finished", "path", "n_arrays", "n_tables", "n_figures"]
    rows = []
    kinds = [kind] if kind is not None else (sorted(p.name for p in base.iterdir() if p.is_dir()
                                                    and not p.name.startswith(".")) if base.is_dir() else [])
    for k in kinds:
        kd = base / k
        if not kd.is_dir():
            continue
        for d in kd.iterdir():
            if not d.is_dir():
                continue
            hidden = d.name.startswith(".")
            if hidden and not include_failed:
                continue
            m = read_manifest(d)
            if m is None:
                continue
            status = m.get("status")
            if hidden and status == "complete":  # renamed-away leftovers cannot exist; be strict anyway
                status = "incomplete"
            if status == "complete" and run_problems(d, m):
                status = "damaged"  # listed only with include_failed, so nothing offers it as a good run
            if status != "complete" and not include_failed:
                continue
            files = m.get("files", {})
            rows.append({
                "kind": m.get("kind", k),
                "name": m.get("name", d.name),
                "status": status,
                "created": m.get("created"),
                "finished": m.get("finished"),
                "path": str(d),
                "n_arrays": sum(v == "arrays" for v in files.values()),
                "n_tables": sum(v == "table" for v in files.values()),
                "n_figures": sum(v == "figure" for v in files.values()),
            })
    df = pd.DataFrame(rows, columns=cols)
    if len(df):
        df = df.sort_values(["created", "name"], kind="stable").reset_index(drop=True)
    return df


def run_model(path) -> str | None:
    """The `model` field of a saved run's config (None when it has none or the config cannot be read): which model a
    committed run was made with, for the readers that pick runs by model."""
    cfg_path = Path(path) / CONFIG_FILE
    try:
        cfg = read_json(cfg_path).get("config", {})
    except (OSError, ValueError, AttributeError):
        return None
    return cfg.get("model") if isinstance(cfg, dict) else None


def run_problems(path, manifest: dict | None = None) -> list[str]:
    """What is wrong with a run folder: an unreadable manifest, files the manifest lists that are missing or empty.
    An empty list means the folder is intact (as far as a cheap check can tell)."""
    path = Path(path)
    m = manifest if manifest is not None else read_manifest(path)
    if m is None:
        return [f"no readable {RUN_MANIFEST}"]
    probs = []
    for rel in m.get("files", {}):
        f = path / rel
        if not f.exists():
            probs.append(f"{rel} is missing")
        elif f.is_file() and f.stat().st_size == 0:
            probs.append(f"{rel} is empty")
    return probs


def leftovers(root: str | os.PathLike | None = None) -> list[Path]:
    """What failed, crashed or killed runs left behind: failed runs (visible folders with status "failed"),
    `.NAME.partial` runs whose writer process is gone (or that failed), and temporary files of interrupted atomic
    writes."""
    base = runs_root(root)
    out: list[Path] = []
    if not base.is_dir():
        return out
    for kd in sorted(p for p in base.iterdir() if p.is_dir()):
        for d in sorted(kd.iterdir()):
            if not d.name.startswith("."):
                if d.is_dir() and (read_manifest(d) or {}).get("status") == "failed":
                    out.append(d)
                continue
            if d.is_dir() and d.name.endswith(PARTIAL_SUFFIX):
                m = read_manifest(d)
                if m is not None and m.get("status") == "running" and pid_alive(m.get("pid")):
                    continue  # still being written by a live process
                out.append(d)
            elif d.name.endswith((".tmp", ".saving")) or ".old-" in d.name:
                out.append(d)
    return out


def clean_runs(root: str | os.PathLike | None = None, *, dry_run: bool = False) -> list[Path]:
    """Remove `leftovers(root)`; finished runs are never touched. Returns what was (or would be) removed."""
    import shutil

    found = leftovers(root)
    if not dry_run:
        for p in found:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    return found


def remove_run(path: str | os.PathLike, *, root: str | os.PathLike | None = None) -> Path:
    """Delete one run folder (it must live under the runs root, so a typo cannot remove anything else)."""
    import shutil

    p = Path(path).expanduser()
    if not p.exists() and not p.is_absolute():
        p = runs_root(root) / p
    base = runs_root(root).resolve()
    rp = p.resolve()
    if base not in rp.parents or rp.parent == base or not rp.is_dir():
        raise ResultsError(f"{path} is not a run folder under {base}; `interplab runs list` shows the runs")
    shutil.rmtree(rp)
    return rp
