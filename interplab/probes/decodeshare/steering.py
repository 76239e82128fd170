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
from interplab.probes.decodeshare.subspaces import (
    haar_basis, repair_vector, spectrum_matched_basis, steering_overlap,
)
from interplab.probes.decodeshare.tasks import SEQ_TASKS, multitask_sets, transform
from interplab.probes.stats import bootstrap_ci, permutation_p

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


@dataclass
class _SteerEval:
    """What the steering loop scores: the steer_from prompts, their [from answer, to answer] forced-choice pairs,
    and the two generation scorers (rate of `to` answers, kept `from` accuracy) as functions of the edits."""
    prompts: list
    cands: list
    to_rate: Callable
    from_acc: Callable


def _toy_setup(model, cfg: DecodeShareConfig, layer: int, fmt: str) -> tuple[np.ndarray, _SteerEval]:
    src, dst = cfg.steer_from, cfg.steer_to
    if src not in SEQ_TASKS or dst not in SEQ_TASKS or src == dst:
        raise ConfigError(f"steer_from/steer_to must be two different sequence tasks of {SEQ_TASKS}")
    v = _task_vector(model, cfg, layer, fmt)
    vocab = model.tokenizer.get_vocab()
    evals = multitask_sets(model, [src], cfg.n_eval, seed=cfg.seed + 22, split="test", fmt=fmt)[src]
    targets = [[vocab[f"s{i}"] for i in transform(dst, x, 16)] for x in evals.inputs]
    kw = dict(max_new_tokens=cfg.eval_max_new_tokens, batch_size=cfg.batch_size, stop_tokens=[evals.stop])
    return v, _SteerEval(
        evals.prompts, [[a + [evals.stop], t + [evals.stop]] for a, t in zip(evals.answers, targets)],
        lambda e: generate_exact_match(model, evals.prompts, targets, edits=e, **kw).correct,
        lambda e: generate_exact_match(model, evals.prompts, evals.answers, edits=e, **kw).correct)


def _real_setup(model, cfg: DecodeShareConfig, layer: int) -> tuple[np.ndarray, _SteerEval]:
    """The built-in real-model tasks (data=real-tasks): v = mean decode state of steer_to prompts minus that of
    steer_from prompts on the same subjects (the calibration split's nouns); evaluated on the held-out steer_from
    prompts, whose steer_to answer is known (`decode_tasks.matched_rows`)."""
    from interplab.data.decode_tasks import STEER_PAIRS, matched_rows
    from interplab.probes.decodeshare.tasks import encode_rows, real_task_sets, reply_correct

    src, dst = cfg.steer_from, cfg.steer_to
    if (src, dst) not in STEER_PAIRS:
        raise ConfigError(f"steer_from/steer_to on the real-model tasks must share subjects: one of "
                          f"{sorted(STEER_PAIRS)}; got {src!r} -> {dst!r}")
    calib, evals = real_task_sets(model, [src], n_calib=cfg.n_calib, n_eval=cfg.n_eval, seed=cfg.seed)
    (cs, ce), stop = (calib[src], evals[src]), calib[src].stop
    c_pairs = matched_rows(cs.examples, dst, seed=cfg.seed)
    matched = encode_rows(model, [d for _, d in c_pairs], stop)
    keep = {r.subject for r, _ in c_pairs}
    src_prompts = [p for r, p in zip(cs.examples, cs.prompts) if r.subject in keep]
    st = collect_decode_states(model, {src: src_prompts, dst: matched.prompts}, layer=layer,
                               max_new_tokens=cfg.calib_max_new_tokens, seed=cfg.seed, batch_size=cfg.batch_size)
    v = st[dst].mean(0) - st[src].mean(0)
    e_pairs = matched_rows(ce.examples, dst, seed=cfg.seed)
    idx = [i for i, r in enumerate(ce.examples) if r.subject in {a.subject for a, _ in e_pairs}]
    prompts = [ce.prompts[i] for i in idx]
    to_parse = [(d.answer, d.echo, d.pool) for _, d in e_pairs]
    from_parse = [ce.parse[i] for i in idx]
    tok = model.tokenizer
    cands = [[ce.answers[i] + [stop], list(tok(d.answer, add_special_tokens=False)["input_ids"]) + [stop]]
             for i, (_, d) in zip(idx, e_pairs)]
    kw = dict(max_new_tokens=cfg.eval_max_new_tokens, batch_size=cfg.batch_size, stop_tokens=[stop])

    last: dict = {}

    def texts(e):
        # both rates parse the same greedy replies: generate once per edit list (the cache holds the edits, so
        # a later list cannot take their identity)
        if last.get("edits") is not e:
            last.update(edits=e, texts=generate_exact_match(model, prompts, [[]] * len(prompts), edits=e,
                                                            **kw).texts)
        return last["texts"]

    def rate(parse):
        return lambda e: reply_correct(ce, texts(e), None, parse=parse)
    return v, _SteerEval(prompts, cands, rate(to_parse), rate(from_parse))


def steering_study(model, cfg: DecodeShareConfig, layer: int, ss: SharedSubspace, fmt: str,
                   say: Callable[[str], None] = lambda msg: None, *, real: bool = False,
                   null_states=None) -> SteeringOverlap:
    """Add lam * v to steer_from prompts (boundary + decode positions) and measure the rate of steer_to answers
    (exact match; parsed replies on the real-model tasks), the source-task accuracy, and the teacher-forced
    margin shift log p(to-answer) - log p(from-answer) vs unsteered, for v and its repaired version
    (I - Q Q^T) v rescaled to ||v||. real: the built-in real-model tasks (`_real_setup`) instead of the
    organisms' sequence tasks.

    The overlap sh(v) is held against two nulls of subspaces of the same size: Haar-random ones, and ones drawn
    with the covariance spectrum of `null_states` ({task: decode states [n, d]}, the calibration states the
    shared subspace was estimated on; `spectrum_matched_basis`), which lean towards high-variance directions as
    Q_S does. Each p is one-sided and +1 corrected (`stats.permutation_p`); the overlap is special only if it
    beats both."""
    from interplab.interventions import Steer

    src, dst = cfg.steer_from, cfg.steer_to
    v, ev = _real_setup(model, cfg, layer) if real else _toy_setup(model, cfg, layer, fmt)
    v_rep = repair_vector(v, ss.basis, 1.0, rescale=True)
    sh = steering_overlap(v, ss.basis)
    n_null = 200 if real else 20
    haar_sh = [steering_overlap(v, haar_basis(ss.d, ss.k_s, seed=s)) for s in range(n_null)]
    sh_rand = float(np.mean(haar_sh))
    var_sh = ([steering_overlap(v, spectrum_matched_basis(null_states, ss.k_s, seed=s)) for s in range(n_null)]
              if null_states is not None else [])
    site = f"resid_post.{layer}"

    def boundary(ctx):
        return ctx.positions >= (ctx.prompt_lengths[:, None] - 1)

    rows, base_margin = [], None
    for lam in [0.0] + [float(x) for x in cfg.steer_scales]:
        for name, vec in (("v", v), ("repaired", v_rep)):
            if lam == 0.0 and name == "repaired":
                continue
            say(f"steering {name} x {lam}")
            edits = [Steer(site, vec, positions=boundary, scale=lam)]
            to_ok = np.asarray(ev.to_rate(edits), float)
            keep = np.asarray(ev.from_acc(edits), float)
            fc = score_forced_choice(model, ev.prompts, ev.cands, edits=edits, batch_size=cfg.batch_size * 4)
            margin = fc.logprobs[:, 1] - fc.logprobs[:, 0]  # log p(to-answer) - log p(from-answer)
            if base_margin is None:
                base_margin = margin
            m_, lo, hi = bootstrap_ci(to_ok, B=cfg.n_boot, seed=cfg.seed)
            ms, mlo, mhi = bootstrap_ci(margin - base_margin, B=cfg.n_boot, seed=cfg.seed)
            rows.append({"vector": "none" if lam == 0 else name, "scale": lam, "effect": m_, "lo": lo, "hi": hi,
                         "src_acc": float(keep.mean()), "margin_shift": ms, "margin_lo": mlo, "margin_hi": mhi})
    df = pd.DataFrame(rows)
    base = df[df["scale"] == 0.0]
    df = pd.concat([base.assign(vector="v"), base.assign(vector="repaired"), df[df["scale"] > 0]],
                   ignore_index=True)
    df.attrs["effect_label"] = f"rate of '{dst}' answers on '{src}' prompts"
    info = {"sh_v": sh, "sh_v_haar_mean": sh_rand, "sqrt_k_over_d": float(np.sqrt(ss.k_s / ss.d)),
            "norm_v": float(np.linalg.norm(v)), "from": src, "to": dst, "k_s": ss.k_s, "n_null": n_null,
            "sh_v_haar_q95": float(np.quantile(haar_sh, 0.95)), "p_sh_v_vs_haar": permutation_p(sh, haar_sh)}
    if var_sh:
        info |= {"sh_v_var_mean": float(np.mean(var_sh)), "sh_v_var_q95": float(np.quantile(var_sh, 0.95)),
                 "p_sh_v_vs_var": permutation_p(sh, var_sh)}
    if real:
        info["n_eval"] = len(ev.prompts)
    return SteeringOverlap(df, info)
