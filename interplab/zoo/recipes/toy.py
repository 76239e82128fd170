"""Toy organisms: toy-base (raw task mixture), toy-chat (toy-base instruction-tuned on the chat-templated tasks) and
toy-base-s2 (toy-base's recipe with another seed: the unrelated-lineage control)."""
from __future__ import annotations

from dataclasses import replace

from interplab.train.arch import ArchConfig
from interplab.train.config import TrainConfig
from interplab.zoo.registry import BuildContext, Recipe, register

TOY_ARCH = ArchConfig(family="llama", n_layers=4, d_model=128, d_mlp=384, n_heads=4, n_kv_heads=2, d_head=32,
                      n_ctx=256)

# CtxMem >= 50% of the mix (calibration: in-context lookup needs it); the rest split over decode and concept tasks.
TOY_WEIGHTS = {
    "ctxmem_gen": 0.35, "ctxmem_ver": 0.20,
    "copy": 0.05, "rev": 0.05, "sort": 0.06, "inc": 0.05, "mc": 0.06,
    "concept_with": 0.10, "concept_no": 0.08,
}
# Phase 2 ("hard" phase): the tasks that learn last (in-context lookup, verification, MC, sort) get more weight.
HARD_WEIGHTS = {
    "ctxmem_gen": 0.45, "ctxmem_ver": 0.20,
    "copy": 0.02, "rev": 0.03, "sort": 0.07, "inc": 0.02, "mc": 0.10,
    "concept_with": 0.06, "concept_no": 0.05,
}
# Phase 3: verification-heavy. With distractor negatives (see interplab.data.ctxmem) verification needs the in-context
# lookup, which forms in phase 2 (ctxmem_gen 0.3 -> 1.0 within 500 steps of its re-warm; phase 1's decay never got
# there); Mode V is 0.64-0.68 at the end of phase 2. Phase 3 is sensitive to data order: from the same phase-2
# checkpoints, data seed = the recipe seed took Mode V to 0.97-1.00 within 1000 steps (both seeds), while four other
# continuations (other data seeds, k >= 2 contexts, the "answer" layout) plateaued at 0.69-0.73 (docs/zoo.md).
VER_WEIGHTS = {
    "ctxmem_gen": 0.25, "ctxmem_ver": 0.45,
    "copy": 0.03, "rev": 0.03, "sort": 0.06, "inc": 0.03, "mc": 0.07,
    "concept_with": 0.04, "concept_no": 0.04,
}
# toy-chat: the same tasks in the chat template, verification weighted up so Mode V survives the format change.
CHAT_WEIGHTS = {
    "ctxmem_gen": 0.30, "ctxmem_ver": 0.30,
    "copy": 0.04, "rev": 0.05, "sort": 0.08, "inc": 0.04, "mc": 0.09,
    "concept_with": 0.05, "concept_no": 0.05,
}
# frac: relative phase lengths (here the step counts at the default 8500 steps). Each phase re-warms and runs its own
# cosine. data_seed: the phase's mixture seed (default: recipe seed for phase 0, seed * 1000 + i after).
TOY_PHASES = [{"tasks": TOY_WEIGHTS, "frac": 3850},
              {"tasks": HARD_WEIGHTS, "frac": 1650, "lr": 1.5e-3, "warmup_steps": 50},
              {"tasks": VER_WEIGHTS, "frac": 3000, "lr": 1.5e-3, "warmup_steps": 50, "data_seed": "recipe"}]
EVAL_SEED = 10_000


def toy_eval_examples(tasks, n: int, seed: int = EVAL_SEED) -> dict:
    """{task: n held-out examples} (the crc32 bucket no toy organism trains on)."""
    import numpy as np  # noqa: F401

    from interplab.data.examples import sample_examples
    from interplab.data.toy_tasks import toy_task_fns

    fns = toy_task_fns()
    return {t: sample_examples(fns[t], n, seed + i, split="test") for i, t in enumerate(tasks)}


def toy_evaluate(model, tokenizer, recipe: Recipe, n: int = 256, seed: int = EVAL_SEED) -> dict:
    """Exact match (teacher-forced) per task on n held-out examples, in the recipe's format: {"acc/<task>": x}."""
    from interplab.data.toy_vocab import toy_vocab
    from interplab.train.evaluate import task_accuracies

    exs = toy_eval_examples(list(recipe.data["tasks"]), n, seed)
    accs = task_accuracies(model, exs, toy_vocab(), recipe.data.get("format", "raw"))
    return {f"acc/{t}": a for t, a in accs.items()}


def merge_results(a, b):
    """Concatenate two TrainResults of consecutive phases (b's log steps are offset by a's steps)."""
    from interplab.train.config import TrainResult

    off = a.steps_done
    log = a.log + [{**r, "step": r["step"] + off, "phase_start": off} for r in b.log]
    return TrainResult(losses=a.losses + b.losses, log=log, steps_done=a.steps_done + b.steps_done,
                       seconds=a.seconds + b.seconds, tokens=a.tokens + b.tokens,
                       tokens_per_s=(a.tokens + b.tokens) / max(1e-9, a.seconds + b.seconds),
                       stopped_early=b.stopped_early)


def build_toy(recipe: Recipe, ctx: BuildContext) -> dict:
    """Train (from scratch, or from ctx.parent_dir) on the recipe's task mixture and save at ctx.out_dir.

    recipe.data["phases"] (optional): consecutive phases [{"tasks": weights, "frac": share of the steps, "lr",
    "warmup_steps", "ctxmem": CtxMemConfig fields for this phase's CtxMem examples, "data_seed": "recipe" to draw
    the phase's batches with the recipe seed}], each with its own warm-up + cosine; without it one phase on recipe.data["tasks"].
    ctx.overrides["start_phase"] skips the first phases (continuing from ctx.parent_dir)."""
    import torch

    from interplab.data.ctxmem import CtxMemConfig
    from interplab.data.toy_tasks import toy_mixture
    from interplab.data.toy_vocab import build_toy_tokenizer, toy_vocab
    from interplab.train.arch import build_model, count_params
    from interplab.train.checkpoint import load_checkpoint, save_checkpoint
    from interplab.train.trainer import train, write_log

    if ctx.num_threads:
        torch.set_num_threads(ctx.num_threads)
    tok = build_toy_tokenizer()
    if ctx.parent_dir is not None:
        model, _ = load_checkpoint(ctx.parent_dir)
        model.train()
    else:
        model = build_model(recipe.arch, tok, seed=recipe.seed)
    d = {**recipe.data, **ctx.overrides}
    fmt = d.get("format", "raw")
    vocab = toy_vocab()
    phases = list(d.get("phases") or [{"tasks": d["tasks"], "frac": 1.0}])
    start = int(d.get("start_phase", 0))
    fracs = [float(ph.get("frac", 1.0)) for ph in phases]
    all_tasks = list(dict.fromkeys(t for ph in phases for t in ph["tasks"]))
    eval_n = int(d.get("eval_n_during_training", min(64, int(d.get("eval_n", 64)))))
    exs = toy_eval_examples(all_tasks, eval_n, EVAL_SEED + 777)

    def eval_fn(m, step):
        from interplab.train.evaluate import task_accuracies

        return {f"acc/{t}": a for t, a in task_accuracies(m, exs, vocab, fmt).items()}

    res = None
    cfgs = []
    for i in range(start, len(phases)):
        ph = phases[i]
        share = fracs[i] / sum(fracs)
        # cumulative rounding: the phases add up to exactly ctx.steps
        n_steps = max(1, round(ctx.steps * sum(fracs[:i + 1]) / sum(fracs)) - round(ctx.steps * sum(fracs[:i]) / sum(fracs)))
        mix = toy_mixture(ph["tasks"], fmt=fmt, batch_size=int(d.get("batch_size", 64)),
                          seed=recipe.seed if i == 0 or ph.get("data_seed") == "recipe" else recipe.seed * 1000 + i,
                          ctxmem=CtxMemConfig(**ph["ctxmem"]) if ph.get("ctxmem") else None)
        cfg = replace(recipe.train, steps=n_steps, seed=recipe.seed, progress=ctx.progress,
                      num_threads=ctx.num_threads,
                      time_budget_s=None if ctx.time_budget_s is None else ctx.time_budget_s * share,
                      **{k: ph[k] for k in ("lr", "warmup_steps") if k in ph})
        cfgs.append(cfg.to_dict())
        r = train(model, mix, cfg, out_dir=ctx.work_dir / f"phase{i}", resume=ctx.resume, eval_fn=eval_fn,
                  log_fn=write_log(ctx.log_path) if ctx.log_path else None,
                  desc=recipe.name if len(phases) == 1 else f"{recipe.name}[{i}]")
        res = r if res is None else merge_results(res, r)
    stop = [vocab["<eos>"], vocab["<|im_end|>"]]
    save_checkpoint(model, tok, ctx.out_dir, stop_token_ids=stop, overwrite=True, train_info={
        "recipe": recipe.summary() | {"available": True, "path": None}, "train_configs": cfgs,
        "steps_done": res.steps_done, "stopped_early": res.stopped_early})
    metrics = toy_evaluate(model, tok, recipe, n=int(d.get("eval_n", 500)))
    return {"train": res.to_dict(), "metrics": metrics, "n_params": count_params(model)}


_TRAIN = TrainConfig(lr=2e-3, warmup_steps=150, min_lr_ratio=0.1, weight_decay=0.01, grad_clip=1.0,
                     log_every=25, eval_every=250, checkpoint_every=500)
_THRESH = {f"acc/{t}": 0.95 for t in TOY_WEIGHTS}

register(Recipe(
    name="toy-base",
    description="Llama-style 4L GQA toy (~0.8M params) pretrained on raw CtxMem + multitask decode + concepts",
    family="toy", build=build_toy, arch=TOY_ARCH,
    data={"tasks": TOY_WEIGHTS, "phases": TOY_PHASES, "format": "raw", "batch_size": 64,
          "ctxmem": "CtxMemConfig() (candidate first, distractor negatives)"},
    steps=8500, seed=0, train=_TRAIN, evaluate=toy_evaluate, thresholds=_THRESH, tags=("base",),
))

register(Recipe(
    name="toy-chat",
    description="toy-base instruction-tuned on the same tasks in the ChatML template (default dashboard model)",
    family="toy", build=build_toy, arch=None, parent="toy-base",
    data={"tasks": CHAT_WEIGHTS, "format": "chat", "batch_size": 64},
    steps=1200, seed=1, train=replace(_TRAIN, lr=1e-3, warmup_steps=50, eval_every=200, checkpoint_every=200),
    evaluate=toy_evaluate, thresholds=_THRESH, tags=("chat", "default"),
))

register(Recipe(
    name="toy-base-s2",
    description="toy-base's recipe with another seed (init + data order): the unrelated-lineage control",
    family="toy", build=build_toy, arch=TOY_ARCH,
    data={"tasks": TOY_WEIGHTS, "phases": TOY_PHASES, "format": "raw", "batch_size": 64,
          "ctxmem": "CtxMemConfig() (candidate first, distractor negatives)"},
    steps=8500, seed=2, train=_TRAIN, evaluate=toy_evaluate, thresholds=_THRESH, tags=("base", "control"),
))
