"""Build a zoo organism from its recipe: resolve the parent, train, save, write the model card."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from interplab.core.errors import ResultsError


def train_organism(name: str, *, steps: int | None = None, out: str | Path | None = None, force: bool = False,
                   resume: bool = False, progress: bool = True, num_threads: int | None = None,
                   log_path: str | Path | None = None, time_budget_s: float | None = None,
                   overrides: dict | None = None) -> Path:
    """Build zoo organism `name` and return its checkpoint directory.

    out: target directory (default: the user zoo, `$INTERPLAB_HOME/zoo/<name>`). An existing checkpoint there is
    never replaced unless `force`. steps: override recipe.steps (e.g. a quick smoke build). resume: continue an
    interrupted build from its resumable checkpoints (kept in `<out>.work/` until the build succeeds).
    time_budget_s: finish the schedule within this many seconds (steps becomes a cap; not bit-reproducible).
    overrides: smoke-build knobs passed to the recipe (see `BuildContext.overrides`).
    """
    from interplab.zoo.cards import write_card
    from interplab.zoo.registry import BuildContext, get_recipe
    from interplab.zoo.resolve import resolve, user_zoo_dir

    recipe = get_recipe(name)
    out_dir = Path(out) if out is not None else user_zoo_dir() / recipe.name
    if out_dir.exists() and any(out_dir.iterdir()) and not force:
        raise ResultsError(f"{out_dir} already exists; pass --force to rebuild it (the old checkpoint is replaced "
                           "only after the new one is complete)")
    parent_dir = resolve(recipe.parent) if recipe.parent else None
    work = out_dir.parent / f".{out_dir.name}.work"
    if work.exists() and not resume:
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    ctx = BuildContext(out_dir=out_dir, work_dir=work, steps=int(steps or recipe.steps), parent_dir=parent_dir,
                       resume=resume, log_path=Path(log_path) if log_path else work / "train_log.jsonl",
                       progress=progress, num_threads=num_threads,
                       time_budget_s=time_budget_s, overrides=dict(overrides or {}))
    t0 = time.perf_counter()
    report = recipe.build(recipe, ctx)
    report["build_seconds"] = time.perf_counter() - t0
    report["steps"] = ctx.steps
    report["parent"] = f"zoo:{recipe.parent}" if recipe.parent else None
    write_card(recipe, out_dir, report)
    shutil.rmtree(work, ignore_errors=True)
    return out_dir
