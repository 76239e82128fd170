"""Submit, follow and cancel jobs through submitit (docs/results_figures_app.md, "Jobs").

Why submitit: it is the established small job engine of the research-Python world (Meta's, MIT-licensed, pure
Python, one dependency: cloudpickle). Its `LocalExecutor` runs a pickled call in a new process on this machine
(the embedded default: no server, no database, no daemon to install), and the very same `executor.submit(fn, ...)`
goes to a Slurm cluster through its `SlurmExecutor` when a researcher has one — the route past one machine for
sweeps. Celery / RQ / Dask need a broker or a scheduler process running beside the dashboard; Ray is a 100 MB
cluster runtime. A job is `interplab.jobs.worker.run_job`, which calls `run_experiment(name, overrides)`, so a job
computes exactly what `interplab run NAME --set ...` computes.

Executor: `$INTERPLAB_JOB_EXECUTOR` = local (default) | slurm | auto (submitit's choice: Slurm when `sbatch` is
there). Slurm parameters (partition, gpus, memory) come from `$INTERPLAB_SLURM_PARAMS` as a JSON object passed to
`executor.update_parameters`, and the interplab home must be on a file system the nodes share. Time limit:
`$INTERPLAB_JOB_TIMEOUT_MIN` (default 1440 minutes; submitit's local default would stop a job after 2 minutes)."""
from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from interplab.core.errors import ConfigError, InputError, InterplabError
from interplab.core.procs import pid_alive, process_start_time
from interplab.jobs.records import (CANCEL, ENGINE, JOB, OUTCOME, WORKER, JobRecord, job_dir, jobs_root, new_job_id,
                                    now_iso, read_file, write_file)

__all__ = ["JobStatus", "submit", "status", "list_jobs", "cancel", "wait", "executor_kind", "ACTIVE", "TERMINAL"]

EXECUTOR_ENV, SLURM_ENV, TIMEOUT_ENV = "INTERPLAB_JOB_EXECUTOR", "INTERPLAB_SLURM_PARAMS", "INTERPLAB_JOB_TIMEOUT_MIN"
ACTIVE = ("submitting", "queued", "running", "cancelling")
TERMINAL = ("complete", "failed", "cancelled")
START_GRACE_S = 120.0          # a job with no engine record after this long was never submitted
_LIVE: dict = {}               # submitit job objects submitted by this process (so their controllers are reaped)
atexit.register(_LIVE.clear)   # drop them before interpreter teardown (submitit's __del__ fails on a torn-down module)


@dataclass(frozen=True)
class JobStatus:
    """A job as it stands now. state: submitting | queued | running | cancelling | complete | failed | cancelled.
    run: the finished run folder (complete, or a failed run kept for inspection); progress: the run's
    progress.json while it runs (done, total, unit, rate, eta_s, tasks); error: why it failed."""

    record: JobRecord
    state: str
    run: Path | None = None
    progress: dict | None = None
    error: str = ""
    wall_s: float | None = None

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


def executor_kind() -> str:
    kind = (os.environ.get(EXECUTOR_ENV) or "local").strip().lower()
    if kind not in ("local", "slurm", "auto"):
        raise ConfigError(f"${EXECUTOR_ENV} must be local, slurm or auto, got {kind!r}")
    return kind


def _executor(folder: Path, kind: str):
    try:
        import submitit
    except ImportError:  # pragma: no cover - a dependency
        from interplab.core.errors import MissingDependencyError

        raise MissingDependencyError("jobs need submitit: pip install submitit") from None
    ex = submitit.AutoExecutor(folder=str(folder), cluster=None if kind == "auto" else kind)
    params = {"timeout_min": int(float(os.environ.get(TIMEOUT_ENV, 24 * 60)))}
    if ex.cluster == "slurm" and os.environ.get(SLURM_ENV):
        try:
            params.update(json.loads(os.environ[SLURM_ENV]))
        except ValueError as exc:
            raise ConfigError(f"${SLURM_ENV} must be a JSON object of submitit Slurm parameters: {exc}") from None
    ex.update_parameters(**params)
    return ex


def submit(experiment: str, overrides: dict | None = None, *, root=None, size=None, estimate_s: float | None = None,
           label: str = "") -> JobStatus:
    """Launch `run_experiment(experiment, overrides)` as a job and return at once. The config is built here first,
    so a bad override fails in the caller (a ConfigError), not in the job. size: the WorkSize shown before launch;
    estimate_s: its estimate (both recorded, for the page and for later estimates); label: free text for lists."""
    from interplab.core.paths import interplab_home
    from interplab.experiments.registry import resolve_config

    overrides = {str(k): str(v) for k, v in (overrides or {}).items()}
    exp, cfg, _, _ = resolve_config(experiment, overrides)
    home = str(interplab_home(root).resolve())
    job_id = new_job_id()
    d = job_dir(job_id, root)
    d.mkdir(parents=True, exist_ok=False)
    modules = [] if exp.module.startswith("interplab.experiments.") else [exp.module]
    rec = JobRecord(job_id, experiment, overrides, home, now_iso(), model=str(getattr(cfg, "model", "") or ""),
                    size=None if size is None else _size_dict(size), estimate_s=estimate_s, label=label,
                    modules=modules)
    write_file(d, JOB, rec.as_dict())
    kind = executor_kind()
    try:
        from interplab.jobs.worker import run_job

        ex = _executor(d / "submitit", kind)
        job = ex.submit(run_job, str(d), experiment, overrides, home, rec.run_name, modules)
    except Exception as exc:
        write_file(d, OUTCOME, {"state": "failed", "run": None, "error": f"could not submit: {exc}",
                                "finished": now_iso()})
        raise InterplabError(f"could not submit job {experiment}: {type(exc).__name__}: {exc}") from exc
    engine = {"executor": ex.cluster, "engine_id": str(job.job_id), "host": socket.gethostname(),
              "submitted": now_iso()}
    if ex.cluster == "local":  # the local job id is the controller's pid
        engine["start_time"] = process_start_time(int(job.job_id))
        _LIVE[job_id] = job
    write_file(d, ENGINE, engine)
    return status(job_id, root)


def _size_dict(size) -> dict:
    import dataclasses

    return dataclasses.asdict(size) if dataclasses.is_dataclass(size) else dict(size)


# --------------------------------------------------------------------------------------------------- status
def _log_tail(d: Path, n: int = 2000) -> str:
    logs = sorted((d / "submitit").glob("*_log.err")) if (d / "submitit").is_dir() else []
    if not logs:
        return ""
    try:
        return logs[-1].read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _engine_alive(d: Path, engine: dict | None) -> bool:
    if engine is None:
        return False
    if engine.get("executor") == "local":
        job = _LIVE.get(d.name)
        if job is not None:     # our own child: poll it (this also reaps it, so it never lingers as a zombie)
            return job.state == "RUNNING"
        return pid_alive(engine.get("engine_id"), engine.get("start_time"))
    try:
        import submitit

        state = submitit.SlurmJob(str(d / "submitit"), engine["engine_id"]).state
    except Exception:  # noqa: BLE001 - no sacct here: say alive, the worker file decides
        return True
    return state.upper() in ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "UNKNOWN", "SUSPENDED")


def _worker_alive(d: Path, worker: dict, engine: dict | None) -> bool:
    if worker.get("host") == socket.gethostname():
        return pid_alive(worker.get("pid"), worker.get("start_time"))
    return _engine_alive(d, engine)   # on another node: ask the scheduler


def _settle(d: Path, rec: JobRecord, state: str, error: str = "") -> dict:
    """The job's process is gone without saying how it ended: remove what its run left and record the outcome."""
    import shutil

    if rec.partial_path.exists():
        shutil.rmtree(rec.partial_path, ignore_errors=True)
    done = (read_file(rec.final_path, "run.json") or {}).get("status")
    if done == "complete":
        state, error = "complete", ""
    outcome = {"state": state, "run": str(rec.final_path) if done in ("complete", "failed") else None,
               "error": error or None, "finished": now_iso()}
    if read_file(d, OUTCOME) is None:
        write_file(d, OUTCOME, outcome)
    return read_file(d, OUTCOME) or outcome


def status(job_id: str, root=None) -> JobStatus:
    """The job's state, read from its folder and its run folder (any process can ask: the page that launched it,
    another tab, the CLI). A job whose process died without a word (killed, out of memory) is settled here: its
    hidden run folder is removed and it is reported failed with the end of its log."""
    from interplab.results.runs import read_progress

    d = job_dir(job_id, root)
    raw = read_file(d, JOB)
    if raw is None:
        raise InputError(f"no job {job_id!r} under {jobs_root(root)}; `interplab jobs list` shows the jobs")
    rec = JobRecord.from_dict(raw)
    out = read_file(d, OUTCOME)
    if out is not None:
        run = Path(out["run"]) if out.get("run") else None
        return JobStatus(rec, out["state"], run, read_progress(run) if run else None, out.get("error") or "",
                         out.get("wall_s"))
    engine, worker, cancel_req = read_file(d, ENGINE), read_file(d, WORKER), read_file(d, CANCEL)
    if worker is not None:
        if _worker_alive(d, worker, engine):
            return JobStatus(rec, "cancelling" if cancel_req else "running", None, read_progress(rec.partial_path))
        if cancel_req:
            o = _settle(d, rec, "cancelled")
        else:
            o = _settle(d, rec, "failed", "the job's process ended without a result (killed, or out of memory?)"
                                          + (f"\n{_log_tail(d)}" if _log_tail(d) else ""))
        return JobStatus(rec, o["state"], Path(o["run"]) if o.get("run") else None, None, o.get("error") or "")
    if _engine_alive(d, engine):
        return JobStatus(rec, "cancelling" if cancel_req else "queued")
    if engine is None and time.time() - _created_unix(rec) < START_GRACE_S:
        return JobStatus(rec, "submitting")
    if cancel_req:
        o = _settle(d, rec, "cancelled")
    else:
        o = _settle(d, rec, "failed", "the job's process ended before the experiment started"
                                      + (f":\n{_log_tail(d)}" if _log_tail(d) else ""))
    return JobStatus(rec, o["state"], None, None, o.get("error") or "")


def _created_unix(rec: JobRecord) -> float:
    import datetime as _dt

    try:
        return _dt.datetime.fromisoformat(rec.created).timestamp()
    except ValueError:
        return 0.0


def list_jobs(root=None, *, experiment: str | None = None, model: str | None = None,
              active: bool | None = None) -> list[JobStatus]:
    """Every job under the home, newest first; filter by experiment, by the config's model, or by active-ness."""
    base = jobs_root(root)
    if not base.is_dir():
        return []
    out = []
    for d in sorted((p for p in base.iterdir() if p.is_dir() and (p / JOB).is_file()), key=lambda p: p.name,
                    reverse=True):
        raw = read_file(d, JOB) or {}
        if experiment is not None and raw.get("experiment") != experiment:
            continue
        if model is not None and raw.get("model") != model:
            continue
        try:
            st = status(d.name, root)
        except InterplabError:
            continue
        if active is None or st.active == active:
            out.append(st)
    return out


# --------------------------------------------------------------------------------------------------- cancel
def _signal(pid, sig) -> None:
    try:
        os.kill(int(pid), sig)
    except (OSError, TypeError, ValueError):
        pass


def _wait_gone(check, timeout: float) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if not check():
            return True
        time.sleep(0.05)
    return not check()


def cancel(job_id: str, root=None, *, grace_s: float = 10.0) -> JobStatus:
    """Stop the job and remove its unfinished run. The worker gets SIGINT first (the run removes itself and the
    job records "cancelled"); after `grace_s` it is killed, and whatever it left is removed here. A job that has
    already ended is left as it is. Returns the settled status."""
    d = job_dir(job_id, root)
    st = status(job_id, root)
    if not st.active:
        return st
    if read_file(d, CANCEL) is None:
        write_file(d, CANCEL, {"requested": now_iso(), "by_pid": os.getpid()})
    engine = read_file(d, ENGINE) or {}
    local = engine.get("executor") == "local"
    worker = read_file(d, WORKER)
    if not local and engine.get("engine_id"):
        import submitit

        try:
            submitit.SlurmJob(str(d / "submitit"), engine["engine_id"]).cancel(check=False)
        except Exception:  # noqa: BLE001 - the scheduler may already have finished it
            pass
    elif worker is not None and worker.get("host") == socket.gethostname():
        alive = lambda: pid_alive(worker.get("pid"), worker.get("start_time"))  # noqa: E731
        _signal(worker["pid"], signal.SIGINT)
        if not _wait_gone(alive, grace_s):
            _signal(worker["pid"], signal.SIGKILL)
            _wait_gone(alive, 5.0)
    if local:  # the controller ends by itself once its task has; stop it too if it is still starting the task
        ctl_alive = lambda: _engine_alive(d, engine)  # noqa: E731
        if not _wait_gone(ctl_alive, 2.0):
            _signal(engine.get("engine_id"), signal.SIGINT)
            _wait_gone(ctl_alive, 5.0)
        worker = read_file(d, WORKER)          # it may have started meanwhile
        if worker is not None and pid_alive(worker.get("pid"), worker.get("start_time")):
            _signal(worker["pid"], signal.SIGKILL)
            _wait_gone(lambda: pid_alive(worker.get("pid"), worker.get("start_time")), 5.0)
    return status(job_id, root)


def wait(job_id: str, root=None, *, timeout: float = 600.0, poll_s: float = 0.5) -> JobStatus:
    """Block until the job ends (or `timeout` seconds pass) and return its status."""
    t0 = time.monotonic()
    while True:
        st = status(job_id, root)
        if not st.active or time.monotonic() - t0 > timeout:
            return st
        time.sleep(poll_s)
