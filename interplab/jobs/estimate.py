"""How long will it take? The size of a job before it runs, an estimate from a measured rate, and the budget.

Rates, best first:
1. earlier runs of the same experiment on the same model and device (CLI runs and jobs alike): each finished run's
   progress.json says how many units its main loop did in how many seconds, and its manifest how long the whole run
   took; the estimate is median(seconds per unit) x units + median(the rest: loading, saving). Only runs whose loop
   counted the same unit are used.
2. a calibration forward: timed forwards of the loaded model (the fastest of three) gives this machine's FLOP rate on it; the estimate is
   the work's FLOPs (`WorkSize.flops`) at that rate, for the main loop only (loading and saving come on top), and is
   labelled as such: it is good to about a factor of two.

Budget: a job whose estimate exceeds `time_budget_s()` (default 30 minutes, `$INTERPLAB_JOB_TIME_BUDGET_S`) is not
launched without an explicit confirmation (the page's checkbox, the CLI's --yes)."""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

from interplab.core.progress import WorkSize

__all__ = ["Estimate", "estimate", "time_budget_s", "calibrate", "earlier_rates", "format_seconds",
           "DEFAULT_TIME_BUDGET_S"]

DEFAULT_TIME_BUDGET_S = 30 * 60
BUDGET_ENV = "INTERPLAB_JOB_TIME_BUDGET_S"
MAX_EARLIER = 5


def time_budget_s() -> float:
    try:
        return float(os.environ.get(BUDGET_ENV, DEFAULT_TIME_BUDGET_S))
    except ValueError:
        return float(DEFAULT_TIME_BUDGET_S)


@dataclass(frozen=True)
class Estimate:
    """seconds: the estimate (None = no rate to go by); source: where the rate comes from, in words; size: the work;
    budget_s: the time budget; over_budget: the estimate exceeds it (launch only when confirmed)."""

    seconds: float | None
    source: str
    size: WorkSize | None
    budget_s: float

    @property
    def over_budget(self) -> bool:
        return self.seconds is not None and self.seconds > self.budget_s

    def describe(self) -> str:
        size = self.size.describe() if self.size is not None else "size unknown"
        when = "no estimate" if self.seconds is None else f"≈ {format_seconds(self.seconds)}"
        return f"{size} · {when} ({self.source})"


def format_seconds(s: float | None) -> str:
    if s is None:
        return "?"
    s = float(s)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def earlier_rates(experiment: str, model: str, unit: str, *, device: str = "cpu", root=None) -> list[tuple]:
    """[(seconds per unit, other seconds)] of the newest finished runs of `experiment` on `model` and `device`
    whose main loop counted `unit`."""
    from interplab.results.runs import list_runs, load_run, read_progress

    try:
        df = list_runs(experiment, root=root)
    except OSError:
        return []
    out = []
    for path in list(df["path"])[::-1] if len(df) else []:
        try:
            run = load_run(path)
        except Exception:  # noqa: BLE001 - an unreadable run is no rate
            continue
        cfg = run.config
        if str(cfg.get("model", "")) != model or str(cfg.get("device", "cpu")) != device:
            continue
        p = read_progress(path)
        if not p or p.get("unit") != unit or not p.get("done"):
            continue
        loop = float(p.get("elapsed_s") or 0.0)
        total = float(run.manifest.get("duration_s") or loop)
        out.append((loop / float(p["done"]), max(0.0, total - loop)))
        if len(out) >= MAX_EARLIER:
            break
    return out


def calibrate(model, tokens: int = 32, rows: int = 16, threads: int = 1) -> float:
    """This machine's FLOP rate on `model`: the fastest of three forwards of `rows` x `tokens` tokens after a
    warm-up (the fastest, because a shared machine's load only ever slows a forward down), with the job's torch
    threads (a job runs with 1 by default; the page's process may use more)."""
    import torch

    from interplab.models.cost import forward_flops

    ids = [[int(t) % max(2, model.d_vocab) for t in range(7, 7 + tokens)]] * rows
    times = []
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            model.run(ids[:1])
            for _ in range(3):
                t0 = time.perf_counter()
                model.run(ids)
                times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(before)
    return forward_flops(model, tokens, rows=rows) / max(min(times), 1e-6)


def estimate(experiment: str, size: WorkSize | None, *, model: str = "", device: str = "cpu", loaded=None,
             root=None, flop_rate: float | None = None) -> Estimate:
    """The estimate for `size` units of `experiment` on `model` (see the module docstring). `loaded`: the loaded
    LabModel, for a calibration forward when no earlier run has a rate (or pass a measured `flop_rate`)."""
    budget = time_budget_s()
    if size is None:
        return Estimate(None, "this experiment does not say its size", None, budget)
    rates = earlier_rates(experiment, model, size.unit, device=device, root=root)
    if rates:
        per_unit = statistics.median(r[0] for r in rates)
        other = statistics.median(r[1] for r in rates)
        n = len(rates)
        return Estimate(per_unit * size.units + other,
                        f"measured: {n} earlier run{'s' if n > 1 else ''} on this model", size, budget)
    if size.flops and (flop_rate or loaded is not None):
        # calibrate on the work's own prompt length: on a small model a forward's fixed cost dominates its FLOPs
        per_row = size.tokens // size.forwards if size.forwards else 32
        rate = flop_rate or calibrate(loaded, tokens=max(4, min(per_row, 512)), rows=16)
        return Estimate(size.flops / rate, f"calibrated: a forward at {rate / 1e9:.1f} GFLOP/s; the loop only, "
                                           "±2×", size, budget)
    return Estimate(None, "no earlier run on this model to measure a rate from", size, budget)
