"""Verdicts of the FAST SAE claims (issue 46): pure functions of a run's saved outputs -> `Verdict`s
with the validity checks behind them (`interplab.probes.validity`). They live with the experiments
because `interplab.sae` sits beside `interplab.probes` in the layering and may not import the
checks.

* `pareto_verdicts(table)`: FAST against BT(F) / BT(P) at matched L0 (TopK points; one row per SAE x
  evaluation distribution, the `sae-pareto` table). Differences are paired by SAE seed; one-sided t
  tests over seeds, Holm over the tests of a claim.
* `eval_verdicts(metrics, conventions, reference)`: the Delta Loss claim under every position
  convention (`interplab.sae.conventions`) and the agreement of interplab's SAELens-convention
  numbers with SAELens's own `run_evals` on the same tokens (`sae-eval`).
* `steering_verdicts(top, null, ...)`: special-token feature steering against a random-feature null
  (`sae-steer-sweep` tables of both arms).

Decision rules, stated here and in docs/sae.md, never tuned to a run:
* a direction claim is supported when every Holm-adjusted one-sided p-value of the claim's tests is
  < ALPHA, not supported when one test shows the opposite direction at that level, undecided (None)
  otherwise;
* a steering strength is tested only when neither arm's replies collapsed (one reply for most
  prompts, or replies that loop on their own tokens: `repeated_reply`, `distinct_tokens` at their
  default limits); a strength where the model is broken tests nothing about the feature;
* "near-zero Delta Loss" means |Delta Loss| <= NEAR_ZERO_DELTA_LOSS % (about 2x the paper's own
  range, -0.51 % to 0.37 %)."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from interplab.probes.stats import holm_adjust, intervals, paired_signflip_test, t_test_p
from interplab.probes.validity import (
    Check,
    Verdict,
    distinct_tokens,
    floor_ceiling,
    held_out,
    multiple_testing,
    repeated_reply,
    reply_nll,
    sampling_units,
)

__all__ = [
    "pareto_verdicts",
    "eval_verdicts",
    "steering_verdicts",
    "template_text",
    "ALPHA",
    "SEED_MINIMUM",
    "NULL_FEATURE_MINIMUM",
    "NEAR_ZERO_DELTA_LOSS",
    "TEMPLATE_TEXT",
    "AGREEMENT_RTOL",
]

METHOD = "sae"
ALPHA = 0.05
# an interval over training seeds needs 2 degrees of freedom: with 2 seeds the t interval rests on
# one difference
# (t = 12.7) and cannot estimate the seed-to-seed spread it divides by
SEED_MINIMUM = 3
# the top feature must beat every null draw for p = 1 / (1 + n) to reach 0.05: 19 random features
NULL_FEATURE_MINIMUM = 19
NEAR_ZERO_DELTA_LOSS = 1.0
AGREEMENT_RTOL = 1e-3  # SAELens computes in float32, interplab in float64
TEMPLATE_TEXT = r"assistant|<\|im_start\|>|<\|im_end\|>"
ARMS = ("BT(F)", "BT(P)")
EVAL_NAMES = {"fast": "per-dialogue (FAST) evaluation", "packed": "packed-block evaluation"}


def _ci(x: np.ndarray, fmt: str = "+.3f") -> str:
    iv = intervals(x, method="t")
    return f"{iv['mean']:{fmt}} [{iv['lo']:{fmt}}, {iv['hi']:{fmt}}]"


def _decide(p_want: Sequence[float], p_opposite: Sequence[float]) -> tuple[bool | None, np.ndarray]:
    """The direction rule of the module docstring on one claim's tests."""
    adj = holm_adjust(np.asarray(p_want, dtype=float))
    opp = holm_adjust(np.asarray(p_opposite, dtype=float))
    if adj.size and np.all(adj < ALPHA):
        return True, adj
    if opp.size and np.any(opp < ALPHA):
        return False, adj
    return None, adj


# ------------------------------------------------------------------------------------------- FAST
# vs block training
def _pairs(
    table: pd.DataFrame, metric: str, ev: str, arms: Sequence[str]
) -> dict[tuple[float, str], np.ndarray]:
    """FAST − arm differences of `metric`, paired by seed, per (TopK k, arm) on evaluation `ev`."""
    t = table[(table["architecture"] == "topk") & (table["eval"] == ev)]
    out = {}
    for k, g in t.groupby("sparsity", sort=True):
        fast = g[g["method"] == "FAST"].set_index("seed")[metric]
        for arm in arms:
            other = g[g["method"] == arm].set_index("seed")[metric]
            both = fast.index.intersection(other.index)
            if len(both):
                out[(float(k), arm)] = (fast.loc[both] - other.loc[both]).to_numpy(float)
    return out


def _comparison(
    table: pd.DataFrame,
    claim: str,
    metric: str,
    label: str,
    ev: str,
    arms: Sequence[str],
    want: str,
    note: str = "",
) -> Verdict | None:
    diffs = _pairs(table, metric, ev, arms)
    if not diffs:
        return None
    opposite = "greater" if want == "less" else "less"
    keys = list(diffs)
    supported, adj = _decide(
        [t_test_p(diffs[k], alternative=want) for k in keys],
        [t_test_p(diffs[k], alternative=opposite) for k in keys],
    )
    parts = []
    for (k, arm), p in zip(keys, adj):
        seeds = ", ".join(f"{v:+.2f}" for v in diffs[(k, arm)])
        parts.append(
            f"k={k:g} FAST − {arm} {_ci(diffs[(k, arm)])} (per seed {seeds}; Holm p {p:.3g})"
        )
    n_seeds = min(len(v) for v in diffs.values())
    t = table[(table["architecture"] == "topk") & (table["eval"] == ev)]
    ev_arms = {
        m: float(t[t["method"] == m]["explained_variance"].mean())
        for m in ("FAST", *arms)
        if (t["method"] == m).any()
    }
    checks = (
        sampling_units(
            n_seeds,
            unit="SAE seed",
            subject=f"seed-paired FAST − BT differences ({label})",
            minimum=SEED_MINIMUM,
        ),
        floor_ceiling(
            ev_arms, subject=f"explained variance of the compared SAEs, {EVAL_NAMES[ev]}"
        ),
        multiple_testing(len(keys), "Holm", subject=f"{len(keys)} comparison(s) of this claim"),
    )
    return Verdict(
        METHOD, claim, f"{label}, {EVAL_NAMES[ev]}: " + "; ".join(parts), supported, checks, note
    )


def pareto_verdicts(table: pd.DataFrame) -> list[Verdict]:
    """FAST vs block training at matched L0 (TopK points of the `sae-pareto` table; 95 % t intervals
    over seeds)."""
    need = {
        "method",
        "architecture",
        "sparsity",
        "seed",
        "eval",
        "log2_mse",
        "log2_mse_special",
        "explained_variance",
    }
    missing = need - set(table.columns)
    if missing:
        from interplab.core.errors import InputError

        raise InputError(
            f"pareto_verdicts needs the sae-pareto table's columns; missing {sorted(missing)}"
        )
    specs = [
        (
            "FAST has the lowest special-token error (log2 MSE_st) on chat activations",
            "log2_mse_special",
            "log2 MSE_st",
            "fast",
            ARMS,
            "less",
            "the paper's headline (Table 6: 0.6468 vs 1.5093 vs 5.1985)",
        ),
        (
            "FAST reconstructs chat activations better than BT(F) (log2 MSE)",
            "log2_mse",
            "log2 MSE",
            "fast",
            ("BT(F)",),
            "less",
            "",
        ),
        (
            "FAST reconstructs chat activations better than BT(P) (log2 MSE)",
            "log2_mse",
            "log2 MSE",
            "fast",
            ("BT(P)",),
            "less",
            "",
        ),
        (
            "(ours) each SAE is best on its own distribution: on packed blocks BT(F) beats FAST "
            "(log2 MSE)",
            "log2_mse",
            "log2 MSE",
            "packed",
            ("BT(F)",),
            "greater",
            "FAST − BT(F) > 0 on packed blocks",
        ),
    ]
    out = []
    for claim, metric, label, ev, arms, want, note in specs:
        v = _comparison(table, claim, metric, label, ev, arms, want, note)
        if v is not None:
            out.append(v)
    return out


# --------------------------------------------------------------------------------------------------
# evaluation
def eval_verdicts(
    metrics: Mapping, conventions: Mapping, reference: Mapping | None = None
) -> list[Verdict]:
    """metrics: `evaluate_sae(..., positions="both")` of one SAE; conventions: its
    `evaluate_conventions`; reference: SAELens's `run_evals` on the same tokens
    (`saelens_run_evals`), or None."""
    out = []
    n = int(metrics["n_sequences"])
    sets = {
        "assistant answers": metrics.get("delta_loss_pct_response", float("nan")),
        "interplab's positions": conventions["delta_loss_pct_interplab_positions"],
        "SAELens's positions": conventions["delta_loss_pct_saelens_positions"],
        "all tokens": conventions["delta_loss_pct_all_tokens"],
    }
    sets = {k: float(v) for k, v in sets.items() if np.isfinite(float(v))}
    near = [abs(v) <= NEAR_ZERO_DELTA_LOSS for v in sets.values()]
    supported = True if all(near) else (False if not any(near) else None)
    measured = "Delta Loss " + "; ".join(f"{k} {v:+.2f} %" for k, v in sets.items())
    out.append(
        Verdict(
            METHOD,
            "Near-zero Delta Loss (paper: −0.51 % to 0.37 %)",
            measured,
            supported,
            (sampling_units(n, unit="held-out dialogue", subject="evaluation dialogues"),),
            f"near zero = |Delta Loss| <= {NEAR_ZERO_DELTA_LOSS:g} % in every position set; "
            "one SAE (the committed FAST SAE), so the claim is read per SAE, the dialogue the unit",
        )
    )
    if reference is not None:
        pairs = {
            "MSE": (conventions["mse_sum_d_saelens_positions"], reference["mse"]),
            "CE-loss score": (
                conventions["ce_loss_score_saelens_positions"],
                reference["ce_loss_score"],
            ),
            "KL": (conventions["kl_sae_saelens_positions"], reference["kl_div_with_sae"]),
            "explained variance": (
                conventions["explained_variance_saelens_positions"],
                reference["explained_variance"],
            ),
        }
        rel = {k: abs(a - b) / max(abs(b), 1e-12) for k, (a, b) in pairs.items()}
        measured = "; ".join(f"{k} {a:.6g} vs {b:.6g}" for k, (a, b) in pairs.items())
        out.append(
            Verdict(
                METHOD,
                "(ours) interplab's SAELens-positions numbers equal SAELens's run_evals on the "
                "same tokens",
                measured,
                max(rel.values()) <= AGREEMENT_RTOL,
                (),
                f"interplab vs SAELens; equal = relative difference <= {AGREEMENT_RTOL:g}",
            )
        )
    return out


# --------------------------------------------------------------------------------------------------
# steering
def template_text(texts: pd.Series) -> np.ndarray:
    """1.0 where a reply contains chat-template text ("assistant", <|im_start|>, <|im_end|>). Claims
    and checks name the markers without their pipes (im_start): a pipe would split a markdown
    claim-table cell."""
    return texts.fillna("").astype(str).str.contains(TEMPLATE_TEXT, regex=True).to_numpy(float)


def _by_alpha(t: pd.DataFrame, a: float) -> pd.DataFrame:
    return t[np.isclose(t["alpha_rel"].to_numpy(float), a)].sort_values("prompt_idx")


def _collapsed(replies: Sequence[str], subject: str) -> list[Check]:
    return [repeated_reply(replies, subject=subject), distinct_tokens(replies, subject=subject)]


def _generation_checks(rows: pd.DataFrame, base: pd.DataFrame, subject: str) -> list[Check]:
    checks = _collapsed(rows["text"].fillna("").tolist(), subject)
    if "reply_nll" in rows and "reply_nll" in base:
        checks.append(
            reply_nll(
                rows["reply_nll"].to_numpy(float),
                base["reply_nll"].to_numpy(float),
                subject=subject,
            )
        )
    return checks


def _testable(top: pd.DataFrame, null: pd.DataFrame | None) -> list[float]:
    """Strengths > 0 at which no compared arm's replies collapsed (the module's rule)."""
    out = []
    for a in sorted(set(top["alpha_rel"].astype(float))):
        if a <= 0:
            continue
        arms = [_by_alpha(top, a)] + ([_by_alpha(null, a)] if null is not None else [])
        if all(c.passed for r in arms for c in _collapsed(r["text"].fillna("").tolist(), "")):
            out.append(a)
    return out


def steering_verdicts(
    top: pd.DataFrame,
    null: pd.DataFrame | None,
    *,
    ranked_on: Sequence,
    prompts: Sequence,
    n_null_features: int = 1,
    feature: int | None = None,
    null_feature: int | None = None,
) -> list[Verdict]:
    """top / null: the `steering` tables of the top <|im_start|> feature and of the random live
    feature (columns alpha_rel, prompt_idx, text, optional answer_kept and reply_nll). ranked_on /
    prompts: the dialogues the top feature was chosen on and the prompts its replies are scored on
    (any hashable ids). Without a null only the sweet-spot claim (which compares the feature's
    strengths with its own α = 0) is judged."""
    sel = held_out(ranked_on, prompts, subject="the top feature, chosen by its im_start ranking")
    n_prompts = int(top["prompt_idx"].nunique())
    names = (
        f"#{feature}" if feature is not None else "top feature",
        f"#{null_feature}" if null_feature is not None else "random feature",
    )
    out = []
    if null is not None:
        out.append(_feature_effect(top, null, names, sel, n_prompts, n_null_features))
    sweet = _sweet_spot(top, names, sel)
    return out + ([sweet] if sweet is not None else [])


def _feature_effect(
    top: pd.DataFrame, null: pd.DataFrame, names, sel: Check, n_prompts: int, n_null_features: int
) -> Verdict:
    """S1: the feature effect, top vs null, paired by prompt at every testable strength."""
    base_top = _by_alpha(top, 0.0)
    tested = _testable(top, null)
    p, rates, checks = [], [], []
    for a in tested:
        t, n = _by_alpha(top, a), _by_alpha(null, a)
        x, y = template_text(t["text"]), template_text(n["text"])
        p.append(paired_signflip_test(x, y) if x.size == y.size else float("nan"))
        rates.append((a, x.mean(), y.mean()))
        checks += _generation_checks(t, base_top, f"{names[0]} replies at α={a:g}")
        checks += _generation_checks(n, _by_alpha(null, 0.0), f"{names[1]} replies at α={a:g}")
    adj = holm_adjust(np.asarray(p, dtype=float)) if p else np.array([])
    up = [a for (a, x, y), q in zip(rates, adj) if q < ALPHA and x > y]
    supported = None if not tested else bool(up)
    shown = "; ".join(
        f"α={a:g}: {x:.2f} vs {y:.2f} (Holm p {q:.2g})" for (a, x, y), q in zip(rates, adj)
    )
    skipped = sorted(set(top["alpha_rel"].astype(float)) - set(tested) - {0.0})
    measured = (
        f"replies with template text, {names[0]} vs {names[1]}: {shown or 'no strength testable'}"
        + (
            f"; not tested (replies collapsed): α={', '.join(f'{a:g}' for a in skipped)}"
            if skipped
            else ""
        )
    )
    return Verdict(
        METHOD,
        "Special-token features steer: the top im_start feature writes chat-template "
        "text where a random live feature at the same strength does not",
        measured,
        supported,
        (
            sel,
            sampling_units(n_prompts, unit="prompt", subject="steering prompts (paired test)"),
            sampling_units(
                n_null_features,
                unit="null feature",
                subject="the random-feature null",
                minimum=NULL_FEATURE_MINIMUM,
            ),
            multiple_testing(len(tested), "Holm", subject="strengths tested"),
            *checks,
        ),
        "paired sign-flip test over prompts at each strength where no arm collapsed",
    )


def _sweet_spot(top: pd.DataFrame, names, sel: Check) -> Verdict | None:
    """S2: the paper's sweet spot, operationalised as keeping the public-fact answer (None without
    answers)."""
    base_top = _by_alpha(top, 0.0)
    if "answer_kept" in top:
        facts = base_top[base_top["answer_kept"].notna()]["prompt_idx"]
        base = base_top.set_index("prompt_idx").loc[facts, "answer_kept"].to_numpy(float)
        tested = _testable(top, None)
        p, rates, checks = [], [], []
        for a in tested:
            t = _by_alpha(top, a).set_index("prompt_idx")
            x = t.loc[facts, "answer_kept"].to_numpy(float)
            p.append(paired_signflip_test(x, base))
            rates.append((a, x.mean()))
            checks += _generation_checks(
                _by_alpha(top, a), base_top, f"{names[0]} replies at α={a:g}"
            )
        adj = holm_adjust(np.asarray(p, dtype=float)) if p else np.array([])
        better = [a for (a, x), q in zip(rates, adj) if q < ALPHA and x > base.mean()]
        supported = None if not tested else bool(better)
        arms = {"α=0": float(base.mean()), **{f"α={a:g}": float(x) for a, x in rates}}
        shown = "; ".join(f"α={a:g} {x:.2f} (Holm p {q:.2g})" for (a, x), q in zip(rates, adj))
        return Verdict(
            METHOD,
            "A steering sweet spot: some strength > 0 improves the replies (paper: α ≈ 25–100 "
            "on Qwen)",
            f"fact answer kept ({names[0]}): α=0 {base.mean():.2f}; "
            f"{shown or 'no strength testable'}",
            supported,
            (
                sel,
                sampling_units(
                    len(base), unit="fact prompt", subject="prompts with a public-fact answer"
                ),
                floor_ceiling(arms, subject="share of fact answers kept"),
                multiple_testing(len(tested), "Holm", subject="strengths tested"),
                *checks,
            ),
            "no judge for the paper's politeness / detail: the answer kept is the measure",
        )
    return None
