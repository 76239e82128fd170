"""Jobs: long work leaves the page (issue 48; docs/results_figures_app.md, "Jobs").

A job runs `run_experiment(name, overrides)` — what `interplab run NAME --set ...` runs — in its own process
through submitit (its local executor by default, Slurm where a user has one), writes progress and results into its
run folder, outlives the browser tab that launched it, and can be cancelled (its unfinished run is removed).

    from interplab import jobs
    est = jobs.estimate_for("patching", {"model": "zoo:toy-chat"}, loaded=model)   # size, seconds, source, budget
    st = jobs.submit("patching", {"model": "zoo:toy-chat"}, size=est.size, estimate_s=est.seconds)
    jobs.status(st.id).progress          # {"done": 120, "total": 640, "unit": "cells", "rate": .., "eta_s": ..}
    jobs.cancel(st.id)                   # stops the process, removes the unfinished run
    jobs.wait(st.id).run                 # the finished run folder (also in `list_runs()` and the Runs page)
"""
from __future__ import annotations

from interplab.jobs.engine import (ACTIVE, TERMINAL, JobStatus, cancel, executor_kind, list_jobs, status, submit,
                                   wait)
from interplab.jobs.estimate import Estimate, estimate, format_seconds, time_budget_s
from interplab.jobs.records import JobRecord, jobs_root

__all__ = ["submit", "status", "list_jobs", "cancel", "wait", "JobStatus", "JobRecord", "Estimate", "estimate",
           "estimate_for", "work_size", "time_budget_s", "format_seconds", "executor_kind", "jobs_root", "ACTIVE",
           "TERMINAL"]


def work_size(experiment: str, overrides: dict | None = None, model=None):
    """The WorkSize of a run of `experiment` with `overrides` on the loaded `model` (None when the experiment does
    not declare its size, or no model is given)."""
    from interplab.experiments.registry import resolve_config

    exp, cfg, _, _ = resolve_config(experiment, overrides or {})
    if exp.size is None or model is None:
        return None
    return exp.size(cfg, model)


def estimate_for(experiment: str, overrides: dict | None = None, *, loaded=None, root=None,
                 flop_rate: float | None = None) -> Estimate:
    """Size + estimate of a run of `experiment` with `overrides` (the loaded model sizes it and calibrates)."""
    from interplab.experiments.registry import resolve_config

    exp, cfg, _, _ = resolve_config(experiment, overrides or {})
    if exp.size is not None and loaded is None:
        return Estimate(None, "no loaded model to size it with", None, time_budget_s())
    size = work_size(experiment, overrides, loaded)
    return estimate(experiment, size, model=str(getattr(cfg, "model", "") or ""),
                    device=str(getattr(cfg, "device", "cpu") or "cpu"), loaded=loaded, root=root,
                    flop_rate=flop_rate)
