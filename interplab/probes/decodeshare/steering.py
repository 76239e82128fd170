"""DecodeShare steering overlap: a diff-of-means task vector, its overlap with the shared subspace, and what it
and its repaired version (shared part removed, rescaled to the same norm) do when added during generation."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from interplab.core.errors import ConfigError, InputError
from interplab.core.result import Result
from interplab.probes.decodeshare.config import DecodeShareConfig
from interplab.probes.decodeshare.estimator import SharedSubspace
from interplab.probes.decodeshare.model import collect_decode_states, generate_exact_match, score_forced_choice
from interplab.probes.decodeshare.subspaces import haar_basis, repair_vector, steering_overlap
from interplab.probes.decodeshare.tasks import SEQ_TASKS, multitask_sets, transform
from interplab.probes.stats import bootstrap_ci

__all__ = ["SteeringOverlap", "steering_study"]


@dataclass
class SteeringOverlap(Result):
    """table: one row per (vector, scale) with the steer_to answer rate (effect, lo, hi), the source-task accuracy
    (src_acc) and the teacher-forced margin shift (margin_shift, margin_lo, margin_hi); the unsteered row is
    repeated for both vectors. info: sh(v), its Haar mean, sqrt(k/d), ||v||, the task pair and k_s."""
    table: pd.DataFrame
    info: dict

    def to_frame(self):
        return self.table


def _task_vector(model, cfg: DecodeShareConfig, layer: int, fmt: str) -> np.ndarray:
    """v = mean decode state(steer_to) - mean decode state(steer_from) on the same inputs (task word swapped)."""
    src, dst = cfg.steer_from, cfg.steer_to
    vocab = model.tokenizer.get_vocab()
    calib = multitask_sets(model, [src], cfg.n_calib, seed=cfg.seed + 21, split="train", fmt=fmt)[src]
    tw = vocab[dst]
    src_id = vocab[src]
    matched = [[tw if t == src_id else t for t in p] for p in calib.prompts]
    if matched == calib.prompts:
        raise InputError(f"could not find the task word {src!r} in the prompts")
    st = collect_decode_states(model, {src: calib.prompts, dst: matched}, layer=layer,
                               max_new_tokens=cfg.calib_max_new_tokens, seed=cfg.seed, batch_size=cfg.batch_size)
    return st[dst].mean(0) - st[src].mean(0)


def steering_study(model, cfg: DecodeShareConfig, layer: int, ss: SharedSubspace, fmt: str,
                   say: Callable[[str], None] = lambda msg: None) -> SteeringOverlap:
    """Add lam * v to steer_from prompts (boundary + decode positions) and measure the rate of steer_to answers
    (exact match), the source-task accuracy, and the teacher-forced margin shift log p(to-answer) -
    log p(from-answer) vs unsteered, for v and its repaired version (I - Q Q^T) v rescaled to ||v||."""
    from interplab.interventions import Steer

    src, dst = cfg.steer_from, cfg.steer_to
    if src not in SEQ_TASKS or dst not in SEQ_TASKS or src == dst:
        raise ConfigError(f"steer_from/steer_to must be two different sequence tasks of {SEQ_TASKS}")
    v = _task_vector(model, cfg, layer, fmt)
    v_rep = repair_vector(v, ss.basis, 1.0, rescale=True)
    sh = steering_overlap(v, ss.basis)
    sh_rand = float(np.mean([steering_overlap(v, haar_basis(ss.d, ss.k_s, seed=s)) for s in range(20)]))
    vocab = model.tokenizer.get_vocab()
    evals = multitask_sets(model, [src], cfg.n_eval, seed=cfg.seed + 22, split="test", fmt=fmt)[src]
    targets = [[vocab[f"s{i}"] for i in transform(dst, x, 16)] for x in evals.inputs]
    site = f"resid_post.{layer}"

    def boundary(ctx):
        return ctx.positions >= (ctx.prompt_lengths[:, None] - 1)

    cands = [[a + [evals.stop], t + [evals.stop]] for a, t in zip(evals.answers, targets)]
    gen_kw = dict(max_new_tokens=cfg.eval_max_new_tokens, batch_size=cfg.batch_size, stop_tokens=[evals.stop])
    rows, base_margin = [], None
    for lam in [0.0] + [float(x) for x in cfg.steer_scales]:
        for name, vec in (("v", v), ("repaired", v_rep)):
            if lam == 0.0 and name == "repaired":
                continue
            say(f"steering {name} x {lam}")
            e = Steer(site, vec, positions=boundary, scale=lam)
            g = generate_exact_match(model, evals.prompts, targets, edits=[e], **gen_kw)
            keep = generate_exact_match(model, evals.prompts, evals.answers, edits=[e], **gen_kw)
            fc = score_forced_choice(model, evals.prompts, cands, edits=[e], batch_size=cfg.batch_size * 4)
            margin = fc.logprobs[:, 1] - fc.logprobs[:, 0]  # log p(to-answer) - log p(from-answer)
            if base_margin is None:
                base_margin = margin
            m_, lo, hi = bootstrap_ci(g.correct.astype(float), B=cfg.n_boot, seed=cfg.seed)
            ms, mlo, mhi = bootstrap_ci(margin - base_margin, B=cfg.n_boot, seed=cfg.seed)
            rows.append({"vector": "none" if lam == 0 else name, "scale": lam, "effect": m_, "lo": lo, "hi": hi,
                         "src_acc": keep.accuracy, "margin_shift": ms, "margin_lo": mlo, "margin_hi": mhi})
    df = pd.DataFrame(rows)
    base = df[df["scale"] == 0.0]
    df = pd.concat([base.assign(vector="v"), base.assign(vector="repaired"), df[df["scale"] > 0]],
                   ignore_index=True)
    df.attrs["effect_label"] = f"rate of '{dst}' answers on '{src}' prompts"
    info = {"sh_v": sh, "sh_v_haar_mean": sh_rand, "sqrt_k_over_d": float(np.sqrt(ss.k_s / ss.d)),
            "norm_v": float(np.linalg.norm(v)), "from": src, "to": dst, "k_s": ss.k_s}
    return SteeringOverlap(df, info)
