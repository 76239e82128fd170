"""The hyperfitting table (spec methods/hyperfit_geometry.md §5.3): on the same held-out prompts, the base greedy, the
base sampled at the entropy-matched T* (and at T = 1) over seeds, the static vocabulary injection alpha sweep, and every
target model, each with its diversity metrics, teacher-forced entropy / top-1 agreement with the base and the base's
rank of every generated token."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Sequence

import numpy as np

from interplab.core.errors import ConfigError, InputError
from interplab.core.record import Record
from interplab.core.result import Result
from interplab.probes.hyperfit.repetition import generation_metrics
from interplab.probes.stats import intervals, spearman
from interplab.probes.hyperfit.inputs import context_prompts, generate_continuations, teacher_forced_logits
from interplab.probes.hyperfit.ranks import (base_scores_of, compare_teacher_forced, static_delta,
                                             text_nll)
from interplab.probes.hyperfit.temperature import (TemperatureMatch, entropy, match_temperature,
                                                   per_position_matched_temperature)

__all__ = ["EvalConfig", "HyperfitEvalResult", "evaluate_settings", "teacher_forced_summary",
           "TeacherForcedSummary", "text_unit"]


class TeacherForcedSummary(Record):
    """`teacher_forced_summary`: entropy (mean, nats), top1_agreement (with the base) over teacher-forced
    positions."""

    KEYS = ("entropy", "top1_agreement")


def teacher_forced_summary(base, texts, *, transform=None, target=None, batch_size: int = 16,
                           max_tokens: int | None = None) -> TeacherForcedSummary:
    """Mean entropy and top-1 agreement with the base over teacher-forced positions of `texts`, for the base's
    logits passed through `transform(z)` (e.g. z / T, z + alpha * delta) or for a `target` model."""
    h, agree, n = 0.0, 0.0, 0
    for zb, zt, _ in teacher_forced_logits(base, target, texts, batch_size, max_tokens):
        z = zt if target is not None else (transform(zb) if transform is not None else zb)
        h += float(entropy(z).sum())
        agree += float((z.argmax(-1) == zb.argmax(-1)).sum())
        n += zb.shape[0]
    if n == 0:
        raise InputError("no teacher-forced positions")
    return TeacherForcedSummary(entropy=h / n, top1_agreement=agree / n)


@dataclass
class EvalConfig:
    """n_prompts: held-out prompts (each contributes its first `context_tokens` tokens;
    `prompts_per_text` non-overlapping windows per text: every text's first window comes before any
    second window). new_tokens: generated tokens per prompt (exactly; EOS suppressed). batch_size:
    generation batch. tf_texts: the first `tf_texts` held-out texts are the teacher-forced ones
    (entropy, agreement, the reference NLL of human text) and the ones T* and the static delta are
    chosen on; the prompts come from the texts after them, so no setting is scored on the texts it
    was chosen on. static_k: K of the static delta; static_reference: what its changes are measured
    against (`static_delta`). seeds: sampling seeds for the T* (and T=1) rows. alphas:
    static-injection strengths (the paper's 0.01-0.5 plus 1 and 2). sample_t1: also sample the base
    at T=1. pool_targets: the targets are seeds of one recipe: add a row "targets pooled" with the
    mean, sd and a 95 % Student-t interval over them (n = number of targets) of every metric."""

    n_prompts: int = 200
    context_tokens: int = 32
    new_tokens: int = 96
    batch_size: int = 50
    tf_texts: int = 64
    static_k: int = 500
    static_reference: str = "vocab_mean"
    prompts_per_text: int = 3
    seeds: int = 5
    alphas: list[float] = field(default_factory=lambda: [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0])
    sample_t1: bool = True
    pool_targets: bool = False


@dataclass
class HyperfitEvalResult(Result):
    """table: one row per setting (metrics of the generations, teacher-forced entropy and top-1
    agreement with the base, gen_top1 = fraction of generated tokens that are the base's greedy
    choice given the same prefix, changed_share = fraction of prompts whose generation differs from
    the base greedy one, nll = mean NLL/token of the generations under the base; sampled settings
    carry mean and `<metric>_sd` over seeds). sweep: the static-injection rows with alpha. spearman:
    {"ttr": rho, "diversity": rho} of alpha vs metric. match: the TemperatureMatch. examples:
    {setting: [first generations as text]}. ranks: {setting: base ranks [n_prompts, n_new]}.
    replies: {setting: every generation as text} (a sampled setting: all seeds, seed-major).
    reply_nll: {setting: [replies] NLL/token under the base}. reference_nll: the base's NLL/token on
    each teacher-forced (human-written) text, what a reply's NLL is held to. units: {"selected_on":
    the texts T* and delta were chosen on, "scored_on": the texts the prompts came from} as short
    hashes (the held-out check)."""

    config: EvalConfig
    table: object  # pandas.DataFrame
    sweep: object  # pandas.DataFrame
    spearman: dict
    match: TemperatureMatch
    examples: dict = field(default_factory=dict)
    ranks: dict = field(default_factory=dict)
    replies: dict = field(default_factory=dict)
    reply_nll: dict = field(default_factory=dict)
    reference_nll: object = None  # numpy array [tf_texts]
    units: dict = field(default_factory=dict)

    def to_frame(self):
        return self.table.copy()


def text_unit(text: str) -> str:
    """A text's identity for the held-out check (a duplicated paragraph is one unit)."""
    import hashlib

    return hashlib.sha1(str(text).encode("utf-8")).hexdigest()[:12]


def _mean_sd(rows: list[dict]) -> dict:
    """Mean, sd and a 95% t interval over seeds (`stats.intervals`; NaN bounds for one seed) of every numeric key."""
    out = {}
    for k in rows[0]:
        vals = [r[k] for r in rows]
        if all(isinstance(v, (int, float, np.floating)) for v in vals):
            out[k] = float(np.mean(vals))
            out[f"{k}_sd"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
            ci = intervals(vals, method="t")
            out[f"{k}_lo"], out[f"{k}_hi"] = ci["lo"], ci["hi"]
        else:
            out[k] = vals[0]
    return out


class _Table:
    """The rows of the table, with the base ranks, NLLs and texts of every setting."""

    def __init__(self, base, prompts, cfg: EvalConfig):
        self.base, self.prompts, self.cfg = base, prompts, cfg
        self.rows, self.examples, self.ranks, self.replies, self.nll = [], {}, {}, {}, {}
        # the base's greedy generations: what a setting's "changed" share is measured against
        self.greedy: list[list[int]] | None = None

    def row(self, name, kind, gens, gtexts, tfs, extra=None) -> dict:
        r, nll = base_scores_of(self.base, self.prompts, gens, self.cfg.batch_size)
        self.ranks[name] = r
        self.examples[name] = gtexts[:5]
        # a sampled setting adds one seed's replies after another
        self.replies[name] = self.replies.get(name, []) + list(gtexts)
        self.nll[name] = np.concatenate([self.nll.get(name, np.zeros(0)), nll])
        if self.greedy is None:
            self.greedy = [list(g) for g in gens]
        changed = float(np.mean([list(a) != b for a, b in zip(gens, self.greedy)]))
        return {"setting": name, "kind": kind, **generation_metrics(gens, gtexts), **tfs,
                "gen_top1": float((r == 1).mean()), "changed_share": changed,
                "nll": float(np.nanmean(nll)),
                **(extra or {})}

    def rename(self, old: str, new: str) -> None:
        for d in (self.ranks, self.examples, self.replies, self.nll):
            d[new] = d.pop(old)

    def generate(self, model, **kw):
        return generate_continuations(model, self.prompts, max_new_tokens=self.cfg.new_tokens,
                                      batch_size=self.cfg.batch_size, **kw)


def _sampled_rows(t: _Table, tf, match: TemperatureMatch, say) -> None:
    """Base sampled at T* (and T = 1): mean and sd over seeds."""
    cfg, base = t.cfg, t.base
    temps = [("T*", match.T)] + ([("T=1", 1.0)] if cfg.sample_t1 else [])
    for label, T in temps:
        per_seed = []
        tf_T = teacher_forced_summary(base, tf, transform=lambda z, T=T: z / T)
        for s in range(cfg.seeds):
            say(f"base sampled at {label} seed {s}")
            g, txt = t.generate(base, greedy=False, temperature=T, seed=1000 * s)
            per_seed.append(t.row(f"base sampled {label}", "temperature", g, txt, tf_T, {"temperature": T}))
        row = _mean_sd(per_seed)
        row["setting"] = f"base sampled {label}={T:.3f}" if label == "T*" else "base sampled T=1"
        row["n_seeds"] = cfg.seeds
        t.rename(f"base sampled {label}", row["setting"])
        t.rows.append(row)


def _static_rows(t: _Table, primary, tf, say) -> list[dict]:
    """The static-injection alpha sweep: base + alpha * delta with delta from the primary target."""
    from interplab.interventions.logit_bias import StaticLogitBias

    base = t.base
    delta = static_delta(compare_teacher_forced(base, primary, tf), t.cfg.static_k,
                         reference=t.cfg.static_reference)
    sweep = []
    for a in [float(x) for x in t.cfg.alphas]:
        say(f"static injection alpha={a}")
        g, txt = t.generate(base, edits=[StaticLogitBias(delta, a)])
        d = delta.to(base.device)
        row = t.row(f"static α={a:g}", "static", g, txt,
                    teacher_forced_summary(base, tf, transform=lambda z, a=a, d=d: z + a * d),
                    {"alpha": a, "delta_positive": int((delta > 0).sum()),
                     "delta_nonzero": int((delta != 0).sum())})
        t.rows.append(row)
        sweep.append(row)
    return sweep


def _spearman(sweep) -> dict:
    out = {}
    for suffix, part in (("", sweep), ("_le0.5", sweep[sweep["alpha"] <= 0.5] if len(sweep) else sweep)):
        if len(part) >= 3:
            for metric in ("ttr", "diversity", "rep2"):
                ok = part[["alpha", metric]].dropna()  # pairwise-complete, as pandas' corr was
                out[metric + suffix] = spearman(ok["alpha"], ok[metric])
    return out


def _own_config(cfg) -> EvalConfig:
    """The EvalConfig part of a config that extends it (an experiment's adds which models to load)."""
    return EvalConfig(**{f.name: getattr(cfg, f.name) for f in fields(EvalConfig)})


def _split(base, texts: Sequence[str], cfg: EvalConfig) -> tuple[list[str], list[list[int]], dict]:
    """The teacher-forced texts (T* and delta are chosen on them) and the prompts, cut from the
    texts after them."""
    tf, rest = list(texts[:cfg.tf_texts]), list(texts[cfg.tf_texts:])
    if not tf or not rest:
        raise ConfigError(f"{len(texts)} texts with tf_texts={cfg.tf_texts}: T* and the static "
                          "delta are chosen on the first tf_texts texts and the prompts come from "
                          "the others, so both must be non-empty (pass more texts or lower "
                          "tf_texts)")
    prompts, src = context_prompts(base, rest, cfg.context_tokens, per_text=cfg.prompts_per_text,
                                   with_sources=True)
    prompts, src = prompts[:cfg.n_prompts], src[:cfg.n_prompts]
    units = {"selected_on": [text_unit(x) for x in tf],
             "scored_on": sorted({text_unit(rest[i]) for i in src})}
    return tf, prompts, units


def evaluate_settings(base, targets: dict, texts: Sequence[str], cfg: EvalConfig | None = None,
                      progress=None) -> HyperfitEvalResult:
    """Generate from every setting on the same held-out prompts and measure the table (see
    HyperfitEvalResult). `targets` maps a name to a model; the first one is the one T* and the
    static delta are computed from. The first `cfg.tf_texts` texts choose T* and delta; the prompts
    come from the others."""
    import pandas as pd

    from interplab.interventions.logit_bias import LogitTemperature

    cfg = _own_config(cfg or EvalConfig())
    if not targets:
        raise ConfigError("evaluate_settings needs at least one target model")
    say = progress or (lambda msg: None)
    tf, prompts, units = _split(base, texts, cfg)
    primary = next(iter(targets.values()))
    t = _Table(base, prompts, cfg)

    say("base greedy")
    g, txt = t.generate(base)
    t.rows.append(t.row("base greedy", "base", g, txt, teacher_forced_summary(base, tf), {"temperature": 1.0}))
    reference = text_nll(base, tf, batch_size=cfg.batch_size,
                         max_tokens=cfg.context_tokens + cfg.new_tokens)

    say("entropy-matched temperature")
    match = match_temperature(base, primary, tf)
    per_pos = per_position_matched_temperature(base, primary, tf).summary()
    _sampled_rows(t, tf, match, say)
    say("greedy at T* (identical to base greedy by construction)")
    few = prompts[:min(8, len(prompts))]
    g_t, _ = generate_continuations(base, few, max_new_tokens=cfg.new_tokens, edits=[LogitTemperature(match.T)],
                                    batch_size=cfg.batch_size)
    g_0, _ = generate_continuations(base, few, max_new_tokens=cfg.new_tokens, batch_size=cfg.batch_size)

    say("static injection")
    sweep_rows = _static_rows(t, primary, tf, say)
    for name, m in targets.items():
        say(f"target {name}")
        g, txt = t.generate(m)
        t.rows.append(t.row(name, "target", g, txt, teacher_forced_summary(base, tf, target=m)))
    if cfg.pool_targets and len(targets) >= 2:
        pooled = _mean_sd([r for r in t.rows if r["kind"] == "target"])
        t.rows.append({**pooled, "setting": "targets pooled", "kind": "target-pooled", "n_seeds": len(targets)})
    sweep = pd.DataFrame(sweep_rows)
    spear = _spearman(sweep)
    spear["greedy_at_T*_identical_to_base"] = bool(g_t == g_0)
    spear["T*"] = match.T
    spear.update({f"per_position_{k}": v for k, v in per_pos.items()})
    return HyperfitEvalResult(cfg, pd.DataFrame(t.rows), sweep, spear, match, t.examples, t.ranks,
                              replies=t.replies, reply_nll=t.nll, reference_nll=reference,
                              units=units)
