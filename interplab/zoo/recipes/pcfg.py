"""PCFG organisms: tiny causal LMs trained on fresh samples of a synthetic grammar every step (infinite data).

pcfg-L2 / pcfg-L4 / pcfg-L6: 2, 4 and 6 layers on the same uniform-binary grammar (4 levels: every string has
length 16 = 2^4, so log2 n = 4): the depth sweep of the log-depth claim. pcfg-rcnf-L4: 4 layers on a recursive
random CNF grammar (variable lengths). Models are Llama-style (RoPE, RMSNorm, SwiGLU), d_model 64, small enough to
ship (< 1 MB each) and to train in about 3 CPU-minutes. pcfg-sib-L4: pcfg-L4's architecture and training on a
dependent-siblings grammar (`interplab.grammar.dependent_siblings`), where the k-level truncated predictors differ
at the output, so the local-to-global reading of the construction mirror can be tested.
"""
from __future__ import annotations

from dataclasses import replace

from interplab.train.arch import ArchConfig
from interplab.train.config import TrainConfig
from interplab.zoo.registry import BuildContext, Recipe, register

# grammar specs (JSON-able; `make_grammar` turns them into PCFGs)
UB_SPEC = {"family": "uniform_binary", "L": 4, "K": 3, "q": 4, "V": 8, "k_lex": 2, "alpha": 0.5, "alpha_lex": 0.5,
           "seed": 0}
# dependent sibling blocks (interplab.grammar.siblings): KL(p_G ‖ p_trunc,k) is large and falls with k, so the
# output can tell the truncation levels apart (on UB_SPEC they are within a few thousandths of a nat for k >= 1)
SIB_SPEC = {"family": "dependent_siblings", "L": 4, "q": 4, "k_lex": 2, "inherit": 0.95, "couple": 0.9,
            "lex_noise": 0.0}
RCNF_SPEC = {"family": "random_cnf", "N": 6, "V": 8, "p_bin": 0.45, "n_binary": 8, "n_lexical": 3, "seed": 1}
MAX_LEN = {"uniform_binary": 16, "dependent_siblings": 16, "random_cnf": 30}
EVAL_SEED = 20_000
DYADIC_FAMILIES = ("uniform_binary", "dependent_siblings")  # one string length 2^L (= max_len): nothing truncated


def make_grammar(spec: dict):
    """A PCFG from a recipe's grammar spec ({"family": ..., **constructor kwargs})."""
    from interplab.grammar import dependent_siblings, layered, random_cnf, uniform_binary

    kw = {k: v for k, v in spec.items() if k != "family"}
    fam = {"uniform_binary": uniform_binary, "random_cnf": random_cnf, "layered": layered,
           "dependent_siblings": dependent_siblings}[spec["family"]]
    return fam(**kw)


def pcfg_tokenizer(g):
    """Word tokenizer over the grammar's terminals (<pad>=0, <bos>=1, <eos>=2, ..., terminals from 6)."""
    from interplab.data.tokenizers import build_word_tokenizer

    return build_word_tokenizer(g.terminals, chat=False, add_bos=True)


def grammar_batches(g, tokenizer, batch_size: int, seed: int, max_len: int):
    """A step -> batch function: fresh grammar samples every step (seeded by (seed, step), so resumable).
    Sequences are BOS w EOS, right-padded; over-long samples are truncated (exact prefixes, no EOS target)."""
    import torch

    from interplab.grammar import grammar_vocab, to_model_ids

    gv = grammar_vocab(g, tokenizer)

    def batch(step: int):
        toks, trees = g.sample(batch_size, seed=seed * 1_000_003 + step + 1, max_len=max_len, on_long="truncate")
        lengths = torch.tensor([t.length for t in trees])
        ids, att = to_model_ids(g, toks, lengths, gv)
        trunc = torch.tensor([t.truncated for t in trees])
        if trunc.any():  # no EOS after a truncated prefix
            rows = torch.nonzero(trunc).flatten()
            ids[rows, lengths[rows] + 1] = gv["pad"]
            att[rows, lengths[rows] + 1] = 0
        return {"input_ids": ids, "attention_mask": att, "loss_mask": att.bool()}

    return batch


def pcfg_evaluate(model, tokenizer, recipe: Recipe, n: int = 512, seed: int = EVAL_SEED) -> dict:
    """KL / TV / excess NLL against the exact grammar distribution on n held-out samples, with baselines."""
    from interplab.train.grammar_eval import grammar_kl, kl_summary

    g = make_grammar(recipe.data["grammar"])
    df = grammar_kl(model, g, n, seed, tokenizer=tokenizer, max_len=recipe.data["max_len"])
    s = kl_summary(df)
    out = {k: s[k] for k in ("kl", "kl_se", "tv", "excess_nll", "entropy_rate", "kl_unigram", "kl_bigram")}
    out["kl_ratio_bigram"] = s["kl"] / max(s["kl_bigram"], 1e-12)
    return out


def build_pcfg(recipe: Recipe, ctx: BuildContext) -> dict:
    """Train from scratch on fresh grammar samples and save at ctx.out_dir."""
    import torch

    from interplab.train.arch import build_model, count_params
    from interplab.train.checkpoint import save_checkpoint
    from interplab.train.trainer import train, write_log
    from interplab.core.io import write_json

    if ctx.num_threads:
        torch.set_num_threads(ctx.num_threads)
    d = {**recipe.data, **ctx.overrides}
    g = make_grammar(d["grammar"])
    tok = pcfg_tokenizer(g)
    model = build_model(recipe.arch, tok, seed=recipe.seed)
    data = grammar_batches(g, tok, int(d.get("batch_size", 32)), recipe.seed, int(d["max_len"]))
    cfg = replace(recipe.train, steps=ctx.steps, seed=recipe.seed, progress=ctx.progress,
                  num_threads=ctx.num_threads, time_budget_s=ctx.time_budget_s)
    eval_n = int(d.get("eval_n_during_training", 128))
    from interplab.grammar import sample_eval_set
    from interplab.train.grammar_eval import grammar_kl, kl_summary

    ev = sample_eval_set(g, eval_n, EVAL_SEED + 777, int(d["max_len"]))

    def eval_fn(m, step):
        s = kl_summary(grammar_kl(m, g, eval_n, tokenizer=tok, eval_set=ev, baselines=False))
        return {"kl": s["kl"], "tv": s["tv"]}

    res = train(model, data, cfg, out_dir=ctx.work_dir, resume=ctx.resume, eval_fn=eval_fn,
                log_fn=write_log(ctx.log_path) if ctx.log_path else None, desc=recipe.name)
    save_checkpoint(model, tok, ctx.out_dir, stop_token_ids=[tok.eos_token_id], overwrite=True, train_info={
        "recipe": recipe.summary() | {"available": True, "path": None}, "train_config": cfg.to_dict(),
        "steps_done": res.steps_done, "stopped_early": res.stopped_early})
    write_json(ctx.out_dir / "grammar.json", g.to_dict())
    n_eval = int(d.get("eval_n", 512))  # 0: no end-of-training evaluation (the caller measures the model itself)
    metrics = pcfg_evaluate(model, tok, recipe, n=n_eval) if n_eval > 0 else {}
    notes = ("Trained on fresh samples of the grammar every step. Metrics are nats per token, averaged per "
             "sequence, against the exact grammar next-token distribution (interplab.grammar); "
             "kl_ratio_bigram = KL(model) / KL(bigram baseline).")
    # every string fits: pcfg-depth draws the very same sample
    if n_eval > 0 and d["grammar"]["family"] in DYADIC_FAMILIES:
        notes += (f" The KL metrics (kl, kl_se, tv, kl_bigram, ...) are the recipe's evaluation on {n_eval} held-out "
                  f"sequences with sample seed {EVAL_SEED} (EVAL_SEED); `interplab run pcfg-depth --set "
                  f"models=zoo:{recipe.name}` (its defaults) evaluates the same sample and gives the same numbers "
                  "(committed in results/pcfg-depth/, quoted in docs/pcfg.md).")
    return {"train": res.to_dict(), "metrics": metrics, "n_params": count_params(model), "notes": notes}


def _arch(n_layers: int, n_ctx: int = 40) -> ArchConfig:
    return ArchConfig(family="llama", n_layers=n_layers, d_model=64, d_mlp=128, n_heads=4, n_kv_heads=2, d_head=16,
                      n_ctx=n_ctx)


_TRAIN = TrainConfig(lr=2e-3, warmup_steps=100, min_lr_ratio=0.1, weight_decay=0.1, betas=(0.9, 0.95),
                     grad_clip=1.0, log_every=50, eval_every=500, checkpoint_every=0)
# each organism must beat the bigram baseline on KL (the honest minimum; measured values are on the card)
_CEIL = {"kl_ratio_bigram": 1.0}

for _L in (2, 4, 6):
    register(Recipe(
        name=f"pcfg-L{_L}",
        description=f"{_L}-layer Llama-style LM (d=64) trained on a uniform-binary PCFG (4 levels, n=16)",
        family="pcfg", build=build_pcfg, arch=_arch(_L),
        data={"grammar": UB_SPEC, "max_len": MAX_LEN["uniform_binary"], "batch_size": 32,
              "format": "BOS w_1..w_n EOS, fresh samples every step"},
        steps=4000, seed=0, train=_TRAIN, evaluate=pcfg_evaluate, ceilings=_CEIL, tags=("pcfg", "depth-sweep"),
    ))

register(Recipe(
    name="pcfg-sib-L4",
    description="4-layer Llama-style LM (d=64) trained on a dependent-siblings PCFG (4 levels, n=16): the "
                "truncated predictors of different k differ at the output",
    family="pcfg", build=build_pcfg, arch=_arch(4),
    data={"grammar": SIB_SPEC, "max_len": MAX_LEN["dependent_siblings"], "batch_size": 32,
          "format": "BOS w_1..w_n EOS, fresh samples every step"},
    steps=4000, seed=0, train=_TRAIN, evaluate=pcfg_evaluate, ceilings=_CEIL, tags=("pcfg", "local-to-global"),
))

register(Recipe(
    name="pcfg-rcnf-L4",
    description="4-layer Llama-style LM (d=64) trained on a recursive random CNF PCFG (6 NTs, lengths <= 30)",
    family="pcfg", build=build_pcfg, arch=_arch(4),
    data={"grammar": RCNF_SPEC, "max_len": MAX_LEN["random_cnf"], "batch_size": 32,
          "format": "BOS w_1..w_n EOS, fresh samples every step; >30 tokens truncated (no EOS target)"},
    steps=4000, seed=0, train=_TRAIN, evaluate=pcfg_evaluate, ceilings=_CEIL, tags=("pcfg",),
))


def grammar_of(model_or_path):
    """The PCFG a PCFG organism was trained on: reads ``grammar.json`` from its checkpoint directory. Accepts a
    LabModel (uses ``.path``), a zoo name ("zoo:pcfg-L4") or a checkpoint path."""
    from pathlib import Path

    from interplab.core.errors import InputError
    from interplab.grammar import PCFG
    from interplab.core.io import read_json

    path = getattr(model_or_path, "path", None) if not isinstance(model_or_path, (str, Path)) else model_or_path
    if path is None:
        raise InputError("cannot tell where this model was loaded from; pass its checkpoint path or zoo name.")
    path = str(path)
    if path.startswith("zoo:") or not Path(path).exists():
        from interplab.zoo.resolve import resolve

        path = str(resolve(path))
    f = Path(path) / "grammar.json"
    if not f.is_file():
        raise InputError(f"{path} has no grammar.json: it is not a PCFG organism. Pass the grammar explicitly.")
    return PCFG.from_dict(read_json(f))


def depth_recipe(n_layers: int, seed: int, steps: int, *, batch_size: int = 32) -> Recipe:
    """The pcfg-L* recipe (uniform-binary grammar, same architecture family and `TrainConfig`) at another depth and
    training seed, unregistered: the organisms of the seeded depth sweep (`interplab run pcfg-depth-sweep`)."""
    return Recipe(
        name=f"pcfg-sweep-L{n_layers}-s{seed}",
        description=f"{n_layers}-layer Llama-style LM (d=64) on the uniform-binary PCFG, training seed {seed}",
        family="pcfg", build=build_pcfg, arch=_arch(n_layers),
        data={"grammar": UB_SPEC, "max_len": MAX_LEN["uniform_binary"], "batch_size": batch_size,
              "format": "BOS w_1..w_n EOS, fresh samples every step"},
        steps=steps, seed=seed, train=_TRAIN, evaluate=pcfg_evaluate, ceilings=_CEIL, tags=("pcfg", "depth-sweep"))


def train_depth_organism(n_layers: int, seed: int, steps: int, out_dir, *, num_threads: int | None = 1,
                         batch_size: int = 32, eval_n: int = 0, log_path=None) -> dict:
    """Train `depth_recipe(n_layers, seed, steps)` for exactly `steps` optimiser steps (no wall-clock budget, so
    every depth gets the same step budget) and save the checkpoint at `out_dir`. Returns `build_pcfg`'s report
    (train log, n_params, end-of-training metrics on `eval_n` held-out samples; none for eval_n = 0, the default,
    since the depth sweep measures every organism on its own shared held-out sample)."""
    import tempfile
    from pathlib import Path

    recipe = depth_recipe(n_layers, seed, steps, batch_size=batch_size)
    Path(out_dir).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".work-", dir=Path(out_dir).parent) as work:
        ctx = BuildContext(out_dir=Path(out_dir), work_dir=Path(work), steps=steps, progress=False,
                           num_threads=num_threads, time_budget_s=None, log_path=log_path,
                           overrides={"eval_n": eval_n})
        return build_pcfg(recipe, ctx)
