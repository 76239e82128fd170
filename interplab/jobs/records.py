"""A job's folder: what was asked, where it runs, how it ended (`<home>/jobs/<id>/`).

    job.json      the request (experiment, overrides, run folder, size and estimate), written before submission
    engine.json   the executor and its job id (local: the controller's pid and start time), written after it
    worker.json   the process running the experiment (pid, start time, host), written by that process first thing
    cancel.json   a cancel was asked for (by the page, the CLI, anyone)
    outcome.json  how it ended: complete | failed | cancelled, the run folder, the error; written once
    submitit/     the job engine's own files (pickled call, stdout/stderr logs)

The job's run is `<home>/runs/<experiment>/<run_name>` (hidden `.<run_name>.partial` while it runs), so a page that
was closed finds its job again from the run folder, and a finished job is simply a run in `list_runs`."""
from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from interplab.core.errors import InputError
from interplab.core.io import read_json, write_json
from interplab.core.paths import interplab_home
from interplab.core.procs import process_start_time

__all__ = ["JobRecord", "jobs_root", "new_job_id", "job_dir", "read_file", "write_file", "record_worker",
           "JOB", "ENGINE", "WORKER", "CANCEL", "OUTCOME"]

JOB, ENGINE, WORKER, CANCEL, OUTCOME = "job.json", "engine.json", "worker.json", "cancel.json", "outcome.json"


def jobs_root(root=None) -> Path:
    return interplab_home(root) / "jobs"


def new_job_id() -> str:
    """Also the run's name, so the job and its run folder are one name (UTC time, then 6 hex)."""
    return f"{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class JobRecord:
    """What a job was asked to do. home: the interplab home its run is written under; model: the config's model
    (for finding a page's jobs and earlier rates); size / estimate_s: what the launcher showed before launching."""

    id: str
    experiment: str
    overrides: dict
    home: str
    created: str
    model: str = ""
    size: dict | None = None
    estimate_s: float | None = None
    label: str = ""
    modules: list = field(default_factory=list)

    @property
    def run_name(self) -> str:
        return self.id

    @property
    def final_path(self) -> Path:
        return Path(self.home) / "runs" / self.experiment / self.run_name

    @property
    def partial_path(self) -> Path:
        return Path(self.home) / "runs" / self.experiment / f".{self.run_name}.partial"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "JobRecord":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def job_dir(job_id: str, root=None) -> Path:
    if not isinstance(job_id, str) or not job_id or "/" in job_id or job_id.startswith("."):
        raise InputError(f"{job_id!r} is not a job id; `interplab jobs list` shows them")
    return jobs_root(root) / job_id


def read_file(d: Path, name: str) -> dict | None:
    try:
        v = read_json(Path(d) / name)
    except (OSError, ValueError):
        return None
    return v if isinstance(v, dict) else None


def write_file(d: Path, name: str, payload: dict) -> None:
    write_json(Path(d) / name, payload)


def record_worker(d: Path) -> None:
    """Called by the job's own process first thing: who runs it (for status and cancel)."""
    write_file(d, WORKER, {"pid": os.getpid(), "start_time": process_start_time(), "host": socket.gethostname(),
                           "started": now_iso()})
