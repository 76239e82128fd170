"""Per-example evaluation of a condition (a list of edits) by forced choice and generation, and the accuracy /
delta summary with bootstrap CIs and paired sign-flip p-values."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from interplab.core.result import Result
from interplab.probes.decodeshare.model import generate_exact_match, score_forced_choice
from interplab.probes.decodeshare.tasks import TaskSet, reply_correct
from interplab.probes.stats import bootstrap_ci, paired_signflip_test

__all__ = ["decode_projection", "evaluate_condition", "summarize", "TaskScreen", "screen_tasks"]


def decode_projection(layer, basis, alpha, variant, phases=("decode",), positions="all"):
    """`SubspaceProjection` of `basis` at `layer`; the boundary variant applies only where decode steps are edited."""
    from interplab.interventions.projection import SubspaceProjection

    return SubspaceProjection(layer, basis, alpha, phases=phases, boundary=(variant == "boundary"
                                                                            and "decode" in phases),
                              positions=positions)


def _budget(edits) -> tuple[int, float]:
    n = sum(int(getattr(e, "n_edited", 0)) for e in edits)
    en = sum(float(getattr(e, "energy_removed", 0.0)) for e in edits)
    return n, en


def _reset(edits) -> None:
    for e in edits:
        if hasattr(e, "reset_counters"):
            e.reset_counters()


def evaluate_condition(model, sets: Mapping[str, TaskSet], edits: Sequence = (), *, condition: str = "baseline",
                       metrics: Sequence[str] = ("fc", "gen"), max_new_tokens: int = 12, batch_size: int = 32,
                       tasks: Sequence[str] | None = None):
    """Per-example correctness under `edits`: a DataFrame with condition, task, metric, example, correct,
    n_edited and energy (the edit budget spent on that task and metric)."""
    edits = list(edits)
    frames = []
    for task in (tasks or list(sets)):
        s = sets[task]
        if "fc" in metrics:
            _reset(edits)
            fc = score_forced_choice(model, s.prompts, s.fc_cands, s.fc_gold, edits=edits, batch_size=batch_size * 4)
            correct = s.fc_equiv[np.arange(len(s)), fc.pred]
            n, en = _budget(edits)
            frames.append(pd.DataFrame({"condition": condition, "task": task, "metric": "fc",
                                        "example": np.arange(len(s)), "correct": correct.astype(float),
                                        "n_edited": n, "energy": en}))
        if "gen" in metrics:
            _reset(edits)
            g = generate_exact_match(model, s.prompts, s.answers, max_new_tokens=max_new_tokens, edits=edits,
                                     batch_size=batch_size, stop_tokens=[s.stop])
            n, en = _budget(edits)
            correct = reply_correct(s, g.texts, g.correct)
            # parsed tasks keep their replies: what the parser read is open to inspection
            replies = {"reply": list(g.texts)} if s.parse is not None else {}
            frames.append(pd.DataFrame({"condition": condition, "task": task, "metric": "gen",
                                        "example": np.arange(len(s)), "correct": correct.astype(float),
                                        "stopped": g.stopped.astype(float), "length": g.lengths,
                                        "n_edited": n, "energy": en, **replies}))
    _reset(edits)
    return pd.concat(frames, ignore_index=True)


def summarize(per_example, *, baseline: str = "baseline", n_boot: int = 2000, seed: int = 0,
              group: Sequence[str] = ("condition",)):
    """Accuracy with percentile-bootstrap 95% CIs per (group..., task, metric) plus an 'all' task pooling every
    example; delta vs `baseline` (same task/metric and same value of the other group columns) with a paired
    bootstrap CI (delta_lo, delta_hi) and a paired sign-flip p-value."""
    df = per_example
    df = df.assign(orig_task=df["task"])
    pooled = df.copy()
    pooled["task"] = "all"
    pooled["example"] = pooled.groupby(list(group) + ["metric", "task"]).cumcount()
    both = pd.concat([df, pooled], ignore_index=True)
    keys = list(group) + ["task", "metric"]
    extra = [g for g in group if g != "condition"]  # e.g. alpha: the baseline is matched within each value
    bkeys = extra + ["task", "metric"]
    base = {key: d.sort_values("example")["correct"].to_numpy()
            for key, d in both[both["condition"] == baseline].groupby(bkeys)}
    rows = []
    for key, d in both.groupby(keys, sort=False):
        kv = dict(zip(keys, key))
        x = d.sort_values("example")["correct"].to_numpy()
        acc, lo, hi = bootstrap_ci(x, B=n_boot, seed=seed)
        b = base.get(tuple(kv[k] for k in bkeys))
        if b is not None and len(b) == len(x):
            delta, p = float(x.mean() - b.mean()), paired_signflip_test(x, b, B=n_boot, seed=seed)
            _, dlo, dhi = bootstrap_ci(x - b, B=n_boot, seed=seed)
        else:
            delta = p = dlo = dhi = float("nan")
        gen_stats = {}
        if "stopped" in d.columns and d["stopped"].notna().any():
            gen_stats = {"stop_rate": float(d["stopped"].mean()), "mean_length": float(d["length"].mean())}
        rows.append({**kv, "acc": acc, "lo": lo, "hi": hi, "delta": delta, "delta_lo": dlo, "delta_hi": dhi,
                     "p_vs_baseline": p, "n": len(x), **gen_stats,
                     "n_edited": int(d.groupby("orig_task")["n_edited"].first().sum()),
                     "energy": float(d.groupby("orig_task")["energy"].first().sum())})
    return pd.DataFrame(rows)



@dataclass
class TaskScreen(Result):
    """Which tasks a model answers unedited (`screen_tasks`): table (`summarize` rows of the baseline, fc and gen,
    with bootstrap CIs, plus `passes`), examples (per-example rows with the generated replies), min_acc and the
    passing tasks (generation exact match >= min_acc)."""
    table: pd.DataFrame
    examples: pd.DataFrame
    min_acc: float
    passing: list

    def to_frame(self):
        return self.table


def screen_tasks(model, evals: Mapping[str, TaskSet], *, min_acc: float = 0.6, max_new_tokens: int = 12,
                 batch_size: int = 32, n_boot: int = 2000, seed: int = 0) -> TaskScreen:
    """Unedited forced choice and generation of every task in `evals` (e.g. `real_task_sets(...)[1]`), and which
    reach `min_acc` generation exact match (the DecodeShare study needs tasks the model does)."""
    per_example = evaluate_condition(model, evals, [], max_new_tokens=max_new_tokens, batch_size=batch_size)
    table = summarize(per_example, n_boot=n_boot, seed=seed)
    gen = table[(table["metric"] == "gen") & (table["task"] != "all")].set_index("task")["acc"]
    table["passes"] = table["task"].map(lambda t: bool(gen.get(t, float("nan")) >= min_acc))
    return TaskScreen(table, per_example, float(min_acc), [t for t in evals if gen[t] >= min_acc])
