"""A test-only experiment for the job tests: counts `n` steps of `step_s` seconds each through the progress protocol,
writes a table, and raises at step `fail_at` (>= 0) after its run folder exists. No model, so a job's own cost
(process start, imports) is all the tests pay. A job imports this module itself (`JobRecord.modules`)."""
from __future__ import annotations

import time
from dataclasses import dataclass

from interplab.core import progress
from interplab.core.progress import WorkSize
from interplab.experiments.registry import register_experiment

NAME = "test-jobs-sleepy"


@dataclass
class SleepyConfig:
    model: str = "none"
    n: int = 20
    step_s: float = 0.05
    fail_at: int = -1


def sleepy_size(cfg: SleepyConfig, model) -> WorkSize:  # noqa: ARG001 - no model needed
    return WorkSize(cfg.n, "steps", detail=f"{cfg.n} sleeps of {cfg.step_s} s")


@register_experiment(NAME, config=SleepyConfig, size=sleepy_size, help="test only: sleeps n steps")
def sleepy(cfg: SleepyConfig, run) -> None:
    import pandas as pd

    with progress.task(cfg.n, "steps") as bar:
        for i in range(cfg.n):
            if i == cfg.fail_at:
                raise RuntimeError(f"planned failure at step {i}")
            time.sleep(cfg.step_s)
            bar.advance()
    run.save_table("steps", pd.DataFrame({"step": range(cfg.n)}))
