"""Hyperfitted descendants of text-base (spec methods/hyperfit_geometry.md §4.3, §4.6).

* text-hyperfit: all parameters, Adam (weight decay 0), constant lr 1e-3, trained until the epoch-mean loss on
  32 windows of 128 tokens is below 0.05 nats (or the step cap / time budget ends it).
* text-late-lora: Late-Stage LoRA, peft adapters (r=16, alpha=32, attention + MLP projections) on the last 2 of the
  4 blocks, lr 5e-3, merged back into the weights. On the CPU budget LoRA does not reach 0.05 nats (its card records
  the final loss and `converged`).
* text-full-lora: the Full-LoRA baseline (same adapters on every block).

The hyperfitting sequences are windows of the corpus's *training* split (text the base was pretrained on, as in
Carlsson et al., whose data was in-distribution); evaluation prompts come from the held-out split that none of the
models trained on. Checkpoints are stored in float16 (`save_dtype`) so each fits the 3 MB budget for shipped weights;
they load as float32.
"""
from __future__ import annotations

import math

import numpy as np

from interplab.train.hyperfit import RESULT_DIR, HyperfitConfig
from interplab.zoo.registry import BuildContext, Recipe, register

HYPERFIT_DATA = {"sources": ["pydoc"], "heldout_frac": 0.1, "corpus_seed": 0, "seq_len": 128, "n_sequences": 32,
                 "window_seed": 7, "save_dtype": "float16"}


def text_file_paragraphs(path) -> list[str]:
    """The paragraphs (blank-line separated, stripped, empty ones dropped) of a UTF-8 text file: the held-in text
    of `hyperfit-train --set text=FILE` instead of the recipe's corpus."""
    from pathlib import Path

    from interplab.core.errors import DataError

    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError(f"no such text file: {str(p)!r} (give a UTF-8 .txt file; paragraphs separated by blank lines)")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{str(p)!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    paragraphs = [" ".join(b.split()) for b in text.replace("\r\n", "\n").split("\n\n")]
    paragraphs = [b for b in paragraphs if b]
    if not paragraphs:
        raise DataError(f"{str(p)!r} holds no text")
    return paragraphs


def _stream_and_slots(tokenizer, data: dict):
    from interplab.data.corpus import load_corpus
    from interplab.zoo.recipes.text import encode_paragraphs

    if data.get("text_file"):
        paragraphs = text_file_paragraphs(data["text_file"])
    else:
        paragraphs = load_corpus(tuple(data["sources"]), data["heldout_frac"], data["corpus_seed"]).train
    stream = encode_paragraphs(tokenizer, paragraphs)
    L = int(data["seq_len"]) - 1
    n_slots = len(stream) // L
    n = int(data["n_sequences"])
    if n_slots < n:
        from interplab.core.errors import DataError

        raise DataError(f"the training stream has {n_slots} windows of {L} tokens; {n} were asked for")
    slots = np.random.default_rng(int(data["window_seed"])).choice(n_slots, size=n, replace=False)
    return stream, L, n_slots, slots


def hyperfit_sequences(tokenizer, data: dict) -> list[list[int]]:
    """`n_sequences` non-overlapping windows (<bos> + seq_len - 1 tokens) from the corpus's training split, at
    seeded positions (the same windows for every descendant)."""
    stream, L, _, slots = _stream_and_slots(tokenizer, data)
    return [[tokenizer.bos_token_id] + stream[s * L:(s + 1) * L].tolist() for s in sorted(slots)]


def hyperfit_windows(tokenizer, data: dict, n_heldout: int) -> tuple[list[list[int]], list[list[int]]]:
    """(train, heldout): train is exactly `hyperfit_sequences(tokenizer, data)`; heldout is `n_heldout` other
    windows of the same stream (same format, none overlapping a training window), for the held-out loss of an
    ordinary fine-tuning control."""
    stream, L, n_slots, slots = _stream_and_slots(tokenizer, data)
    rest = np.setdiff1d(np.arange(n_slots), slots)
    if len(rest) < n_heldout:
        from interplab.core.errors import DataError

        raise DataError(f"only {len(rest)} windows are left for a held-out split; {n_heldout} were asked for")
    held = np.random.default_rng(int(data["window_seed"]) + 1).choice(rest, size=int(n_heldout), replace=False)

    def win(s):
        return [tokenizer.bos_token_id] + stream[s * L:(s + 1) * L].tolist()

    return [win(s) for s in sorted(slots)], [win(s) for s in sorted(held)]


def build_hyperfit(recipe: Recipe, ctx: BuildContext) -> dict:
    import copy

    import torch

    from interplab.train.checkpoint import load_checkpoint, save_checkpoint
    from interplab.train.hyperfit import hyperfit
    from interplab.zoo.recipes.text import text_evaluate

    if ctx.num_threads:
        torch.set_num_threads(ctx.num_threads)
    if ctx.parent_dir is None:
        raise ValueError(f"{recipe.name} needs its parent ({recipe.parent}) to be built first")
    cfg: HyperfitConfig = copy.deepcopy(recipe.train)
    over = dict(getattr(ctx, "overrides", None) or {})  # smoke builds: n_sequences, seq_len, eval_n
    data = {**recipe.data, **{k: over[k] for k in ("n_sequences", "seq_len") if k in over}}
    cfg.seq_len = int(data["seq_len"])
    _, tok = load_checkpoint(ctx.parent_dir)
    seqs = hyperfit_sequences(tok, data)
    steps_per_epoch = math.ceil(len(seqs) / cfg.batch_size)
    cfg.max_epochs = max(1, min(cfg.max_epochs, ctx.steps // steps_per_epoch))
    cfg.seed = recipe.seed
    cfg.progress = ctx.progress
    if ctx.time_budget_s:
        cfg.max_time_s = float(ctx.time_budget_s)
    res = hyperfit(str(ctx.parent_dir), seqs, config=cfg)
    res.parent = f"zoo:{recipe.parent}"  # shipped records name organisms, never a build machine's paths
    model = res.model
    dtype = recipe.data.get("save_dtype", "float32")
    saved = model.to(getattr(torch, dtype)) if dtype != "float32" else model
    save_checkpoint(saved, tok, ctx.out_dir, overwrite=True, train_info={
        "recipe": recipe.summary() | {"available": True, "path": None}, "kind": "hyperfit",
        "parent": recipe.parent, "hyperfit": res.to_dict(), "save_dtype": dtype})
    res.checkpoint = f"zoo:{recipe.name}"
    res.save(ctx.out_dir / RESULT_DIR)
    # evaluate the weights as shipped (rounded to save_dtype), in float32
    model_eval = saved.float().eval()
    metrics = text_evaluate(model_eval, tok, recipe, n=int(over.get("eval_n", 24)))
    metrics.update({"final_train_loss": res.final_loss, "converged": float(res.converged),
                    "epochs": float(res.epochs), "trainable_params": float(res.trainable_params)})
    train_dict = {"losses": [h["train_loss"] for h in res.history],
                  "log": [{"step": h["step"], "loss": h["train_loss"], "lr": h["lr"], "epoch": h["epoch"]}
                          for h in res.history],
                  "steps_done": res.steps, "seconds": res.seconds, "tokens": res.steps * cfg.batch_size * cfg.seq_len,
                  "tokens_per_s": res.steps * cfg.batch_size * cfg.seq_len / max(res.seconds, 1e-9),
                  "stopped_early": not res.converged}
    return {"train": train_dict, "metrics": metrics, "n_params": res.total_params,
            "trainable_params": res.trainable_params, "lora_layers": res.lora_layers,
            "converged": res.converged, "epochs": res.epochs,
            "notes": "Loss values are epoch means (one card 'step' = one epoch); stopped_early = did not reach "
                     f"the {cfg.stop_loss} nats stop loss within the budget."}


_COMMON = dict(family="hyperfit", build=build_hyperfit, arch=None, parent="text-base", data=HYPERFIT_DATA, seed=0)

register(Recipe(
    name="text-hyperfit",
    description="text-base hyperfitted (all parameters) to < 0.05 nats on 32 x 128-token windows",
    steps=4 * 300, train=HyperfitConfig(method="full", lr=1e-3, stop_loss=0.05, max_epochs=300, batch_size=8,
                                        seq_len=128),
    tags=("hyperfit",), notes="Carlsson et al.'s hyperfitting on a CPU budget: Adam (wd 0), constant lr 1e-3.",
    **_COMMON,
))

register(Recipe(
    name="text-late-lora",
    description="text-base + Late-Stage LoRA (r=16, alpha=32) on the last 2 of 4 blocks, hyperfitting data",
    steps=4 * 300, train=HyperfitConfig(method="lora", lora_layers="last:2", lora_r=16, lora_alpha=32.0, lr=5e-3,
                                        stop_loss=0.05, max_epochs=300, batch_size=8, seq_len=128),
    tags=("hyperfit", "lora"), notes="Late-Stage LoRA (Li et al. 2026) scaled to a 4-block model: last 2 blocks.",
    **_COMMON,
))

register(Recipe(
    name="text-full-lora",
    description="text-base + Full-LoRA (r=16, alpha=32) on all 4 blocks, hyperfitting data (baseline)",
    steps=4 * 300, train=HyperfitConfig(method="lora", lora_layers="all", lora_r=16, lora_alpha=32.0, lr=5e-3,
                                        stop_loss=0.05, max_epochs=300, batch_size=8, seq_len=128),
    tags=("hyperfit", "lora", "control"), notes="Full-LoRA baseline for Late-Stage LoRA.",
    **_COMMON,
))
