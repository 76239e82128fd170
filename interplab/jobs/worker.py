"""The function a job runs in its own process: `run_experiment(name, overrides)`, exactly what `interplab run` runs.

It is pickled by reference and called by submitit in the job's process (locally or on a Slurm node), so this module
imports nothing heavy at the top: the process has written worker.json before torch is even imported, and the page
can tell "starting" from "lost".

Cancellation: SIGINT (what submitit's local controller and `interplab jobs cancel` send) raises KeyboardInterrupt
wherever the experiment is; SIGTERM (what Slurm's scancel sends; submitit itself only logs it) is turned into the
same. The run folder is removed on the way out (`RunDir.__exit__`) and outcome.json says "cancelled"."""
from __future__ import annotations

import signal
import time
from pathlib import Path

from interplab.jobs.records import OUTCOME, now_iso, read_file, record_worker, write_file

__all__ = ["run_job"]


def _sigterm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise KeyboardInterrupt(f"job cancelled (signal {signum})")


def run_job(job_dir: str, experiment: str, overrides: dict, home: str, run_name: str,
            modules: list | None = None) -> dict:
    """Run the experiment into `<home>/runs/<experiment>/<run_name>`; returns (and writes) the outcome."""
    d = Path(job_dir)
    record_worker(d)
    signal.signal(signal.SIGTERM, _sigterm)
    t0 = time.time()
    final = Path(home) / "runs" / experiment / run_name
    outcome: dict = {"state": "failed", "run": None, "error": None}
    try:
        import importlib

        for m in modules or ():          # experiments registered outside interplab.experiments
            importlib.import_module(m)
        from interplab.experiments.registry import run_experiment

        path = run_experiment(experiment, overrides, root=home, run_name=run_name)
        outcome = {"state": "complete", "run": str(path), "error": None}
    except KeyboardInterrupt:
        # a cancel that lands after the run was renamed into place leaves a complete run: keep it, say so
        done = (read_file(final, "run.json") or {}).get("status") == "complete"
        outcome = {"state": "complete" if done else "cancelled", "run": str(final) if done else None,
                   "error": None}
    except BaseException as exc:  # noqa: BLE001 - every failure is recorded for the page, then re-raised
        import traceback

        outcome = {"state": "failed", "run": str(final) if final.is_dir() else None,
                   "error": f"{type(exc).__name__}: {exc}",
                   "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:]}
        _write(d, outcome, t0)
        raise
    _write(d, outcome, t0)
    return outcome


def _write(d: Path, outcome: dict, t0: float) -> None:
    if read_file(d, OUTCOME) is None:
        write_file(d, OUTCOME, {**outcome, "finished": now_iso(), "wall_s": round(time.time() - t0, 3)})
