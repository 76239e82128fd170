"""Verdicts of the hyperfitting experiments (issue 46): each paper claim, what the run measured,
whether the numbers support it, and the validity checks of the run behind them
(`interplab.probes.validity`). Pure functions of saved results, so a committed run's verdict can be
recomputed and a doc table cannot drift from it.

Decision rules (stated here and in docs/hyperfit.md; never tuned to a run):
* the sampling unit is the training seed (the hyperfitted models) or the sampling seed (the T* row):
  95 % Student-t intervals over seeds, at least `SEED_MINIMUM` of them;
* "clearly above" means one interval's lower bound is above the other's upper bound (a single
  number, e.g. the base greedy row, is its own interval); claims are supported when the paper's
  direction is clear, not supported when the opposite direction is clear, and undecided
  (inconclusive) when the intervals overlap;
* generations that are scored must not be degenerate: one reply repeated across prompts
  (`repeated_reply`), or replies far less likely under the base than human-written held-out text
  (`reply_nll`, the reference being the base's NLL on the teacher-forced texts). The distinct-token
  check is not applied: the claims' outcome *is* the distinct-token rate (TTR), so a check on it
  would turn every negative result into "inconclusive";
* the dimension estimator (standardised PR, position 0 excluded: `geometry.HEADLINE_ESTIMATOR`) must
  not move by more than 10 % when one coordinate is dropped (`outlier_dominance`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from interplab.probes import validity as V
from interplab.probes.stats import intervals
from interplab.probes.validity import Check, Verdict

__all__ = [
    "SEED_MINIMUM",
    "MIN_CHANGED",
    "MAX_COORDINATE_CHANGE",
    "PAPER",
    "eval_verdicts",
    "geometry_verdicts",
    "controls_verdicts",
    "ksweep_verdicts",
    "Span",
]

METHOD = "hyperfit"
SEED_MINIMUM = 3  # a t interval over seeds with 2 degrees of freedom; fewer seeds give no interval
MIN_CHANGED = (
    0.1  # an injection arm must change at least 10 % of replies at some non-degenerate strength
)
MAX_COORDINATE_CHANGE = (
    0.1  # a dimension estimator over d coordinates may move at most 10 % when one is dropped
)
# the paper's numbers the rank claim is held to (Li et al., TinyLlama; spec §5.2): override rate,
# and the share of overrides the base ranks below 10th; the rule asks for at least a quarter of each
PAPER = {"override_rate": 0.391, "deep_share": 0.129, "delta_dim": 80.8}


class Span:
    """A mean and its 95 % t interval over units (a single value is its own interval)."""

    def __init__(self, values: Sequence[float]):
        v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
        self.n = int(v.size)
        if self.n >= 2:
            ci = intervals(v, method="t")
            self.mean, self.lo, self.hi = float(ci["mean"]), float(ci["lo"]), float(ci["hi"])
        else:
            self.mean = self.lo = self.hi = float(v[0]) if self.n else float("nan")

    def above(self, other: "Span") -> bool:
        return self.lo > other.hi

    def text(self, digits: int = 3, sign: str = "") -> str:
        if self.n < 2:
            return f"{self.mean:{sign}.{digits}f}"
        return (
            f"{self.mean:{sign}.{digits}f} [{self.lo:{sign}.{digits}f}, {self.hi:{sign}.{digits}f}]"
        )


def _direction(paper_side: bool, other_side: bool) -> bool | None:
    """True when the paper's direction is clear, False when the opposite one is, None when neither
    is."""
    if paper_side and not other_side:
        return True
    if other_side and not paper_side:
        return False
    return None


# -----------------------------------------------------------------------------------------------
# hyperfit-eval
def _replies_ok(res, setting: str, subject: str) -> list[Check]:
    return [
        V.repeated_reply(res.replies.get(setting, []), subject=subject),
        V.reply_nll(res.reply_nll.get(setting, []), res.reference_nll, subject=subject),
    ]


def _pooled_replies_ok(res, settings: list[str], subject: str) -> list[Check]:
    replies = [r for s in settings for r in res.replies.get(s, [])]
    nll = (
        np.concatenate([np.asarray(res.reply_nll.get(s, []), dtype=float) for s in settings])
        if settings
        else []
    )
    return [
        V.repeated_reply(replies, subject=subject),
        V.reply_nll(nll, res.reference_nll, subject=subject),
    ]


def _rank_stats(ranks) -> tuple[float, float]:
    r = np.asarray(ranks)
    over = float((r > 1).mean())
    deep = float((r > 10).mean() / over) if over > 0 else 0.0
    return over, deep


def eval_verdicts(res) -> list[Verdict]:
    """The `hyperfit-eval` claims: less repetitive greedy text, claim 1 (entropy-matched
    temperature), claim 2 (static reweighting), and rank reordering. `res`: a HyperfitEvalResult
    (saved by issue 46's code or later)."""
    t = res.table
    base = t[t["kind"] == "base"].iloc[0]
    tgt = t[t["kind"] == "target"]
    names = list(tgt["setting"])
    seeds = V.sampling_units(
        len(names), unit="seed", subject="hyperfitted models (training seeds)", minimum=SEED_MINIMUM
    )
    hyper_ok = _pooled_replies_ok(res, names, f"hyperfitted replies ({len(names)} seeds)")
    ttr, loops = Span(tgt["ttr"]), Span(tgt["loop_rate"])
    b_ttr, b_loop = Span([base["ttr"]]), Span([base["loop_rate"]])
    out = [
        Verdict(
            METHOD,
            "Hyperfitting makes greedy text less repetitive (Carlsson et al.)",
            f"TTR {base['ttr']:.3f} → {ttr.text()}; loop rate {base['loop_rate']:.3f} → "
            f"{loops.text()} "
            f"({ttr.n} seeds; paper TTR .400 → .684)",
            _direction(
                ttr.above(b_ttr) and not loops.above(b_loop),
                b_ttr.above(ttr) or loops.above(b_loop),
            ),
            (
                seeds,
                V.floor_ceiling(
                    {"base greedy": base["ttr"], "hyperfitted": ttr.mean}, subject="TTR"
                ),
                *hyper_ok,
            ),
            note="supported: TTR clearly up and the loop rate not clearly up; not supported: TTR "
                 "clearly down or loops "
            "clearly up",
        )
    ]

    ts = t[t["setting"].astype(str).str.startswith("base sampled T*")].iloc[0]
    n_t = int(ts.get("n_seeds", 1))
    tstar = Span([ts["ttr"]]) if n_t < 2 else _span_of_row(ts, "ttr", n_t)
    ent = float(np.mean(tgt["entropy"]))
    units = res.units or {}
    out.append(
        Verdict(
            METHOD,
            "1. Sampling at the entropy-matched temperature T* does not reach hyperfitting's "
            "diversity",
            f"T* = {res.match.T:.3f}: TTR {tstar.text()} ({n_t} sampling seeds) vs hyperfitted "
            f"{ttr.text()}; "
            f"entropy at T* {ts['entropy']:.3f} vs hyperfitted {ent:.3f} nats (paper: T* .59, TTR "
            ".397 vs .684)",
            _direction(ttr.above(tstar), tstar.above(ttr)),
            (
                seeds,
                V.sampling_units(
                    n_t, unit="seed", subject="sampling seeds at T*", minimum=SEED_MINIMUM
                ),
                V.match_target(
                    ts["entropy"],
                    ent,
                    subject="base at T* vs the hyperfitted models' teacher-forced entropy",
                    quantity="entropy (nats)",
                ),
                V.held_out(
                    units.get("selected_on", ()),
                    units.get("scored_on", ()),
                    subject="T* chosen on teacher-forced texts, scored on prompts",
                ),
                *_replies_ok(res, ts["setting"], f"replies sampled at T* ({n_t} seeds)"),
                *hyper_ok,
            ),
            note="supported: the hyperfitted TTR interval clearly above the T* one; not supported: "
                 "the T* one clearly above",
        )
    )
    out.append(_static_verdict(res, ttr, seeds, units))

    over, deep = zip(*[_rank_stats(res.ranks[n]) for n in names]) if names else ((), ())
    so, sd = Span(over), Span(deep)
    q_o, q_d = PAPER["override_rate"] / 4, PAPER["deep_share"] / 4
    out.append(
        Verdict(
            METHOD,
            "Hyperfitting reorders the base's ranking: its greedy token is often not the base's "
            "top-1, "
            "sometimes from below the base's top-10",
            f"override rate {so.text()}; rank > 10 among overrides {sd.text()} ({so.n} seeds; "
            "paper .391, .129)",
            _direction(so.lo >= q_o and sd.lo >= q_d, so.hi < q_o or sd.hi < q_d),
            (seeds, *hyper_ok),
            note="supported: both intervals at or above a quarter of the paper's values "
                 f"({q_o:.3f}, {q_d:.3f}); not "
            "supported: either clearly below",
        )
    )
    return out


def _span_of_row(row, col: str, n: int) -> Span:
    """A Span from a table row's saved mean and interval over n seeds."""
    s = Span([])
    s.n, s.mean, s.lo, s.hi = n, float(row[col]), float(row[f"{col}_lo"]), float(row[f"{col}_hi"])
    return s


def _static_verdict(res, ttr: Span, seeds: Check, units: dict) -> Verdict:
    t = res.table
    st = t[t["kind"] == "static"]
    usable, cells = {}, []
    for _, r in st.iterrows():
        ok = all(c.passed for c in _replies_ok(res, r["setting"], r["setting"]))
        if ok:
            usable[f"α={r['alpha']:g}"] = float(r.get("changed_share", 0.0))
        cells.append(
            f"{r['alpha']:g}: {r['ttr']:.3f} ({100 * float(r.get('changed_share', 0.0)):.0f} % "
            "changed"
            + ("" if ok else ", degenerate")
            + ")"
        )
    good = st[st["setting"].map(lambda s: all(c.passed for c in _replies_ok(res, s, s)))]
    best = Span([good["ttr"].max()]) if len(good) else Span([])
    rho = res.spearman.get("ttr", float("nan"))
    supported = _direction(ttr.above(best), best.above(ttr)) if len(good) else None
    return Verdict(
        METHOD,
        "2. A static vocabulary reweighting does not reach hyperfitting's diversity",
        f"TTR at α = {'; '.join(cells)}; hyperfitted {ttr.text()}; Spearman(α, TTR) {rho:+.2f} "
        "(paper: α .01 → .5 "
        "lowers TTR .409 → .215)",
        supported,
        (
            seeds,
            V.arm_effect(
                usable, subject="static injection (non-degenerate strengths)", min_share=MIN_CHANGED
            ),
            V.held_out(
                units.get("selected_on", ()),
                units.get("scored_on", ()),
                subject="static delta chosen on teacher-forced texts, scored on prompts",
            ),
        ),
        note="supported: the hyperfitted TTR interval clearly above the best non-degenerate static "
             "strength; not supported: that strength clearly above",
    )


# -----------------------------------------------------------------------------------------------
# hyperfit-geometry
def _frame_with_std(frame):
    f = frame.copy()
    if "delta_pr_std" not in f.columns:
        f["delta_pr_std"] = f["pr_std_b"] - f["pr_std_a"]
    return f


def _per_layer(f, col: str) -> dict[int, Span]:
    rp = f[f["site"] == "resid_post"]
    return {int(layer): Span(g[col]) for layer, g in rp.groupby("layer")}


def _terminal(f, col: str) -> tuple[int, Span, int, Span, bool | None]:
    """The last block's ΔDim, the earlier block with the largest ΔDim, and the terminal-expansion
    decision."""
    spans = _per_layer(f, col)
    last = max(spans)
    earlier = {k: v for k, v in spans.items() if k < last}
    top = max(earlier, key=lambda k: earlier[k].mean) if earlier else last
    s = spans[last]
    clear = s.lo > 0 and all(s.lo > e.hi for e in earlier.values())
    against = s.hi <= 0 or any(e.lo > s.hi for e in earlier.values())
    return last, s, top, spans[top], _direction(clear, against)


def _loo_check(f, col: str, subject: str) -> Check:
    if col not in f.columns:
        return V.outlier_dominance(
            float("nan"),
            subject=subject + " (not measured by this run)",
            max_change=MAX_COORDINATE_CHANGE,
        )
    i = f[col].idxmax()
    return V.outlier_dominance(
        float(f.loc[i, col]),
        subject=subject,
        max_change=MAX_COORDINATE_CHANGE,
        dropped=f"coordinate {int(f.loc[i, col.replace('_loo_', '_loo_dim_')])}",
    )


def geometry_verdicts(frame) -> list[Verdict]:
    """The Terminal Expansion claim from a `hyperfit-geometry` frame (targets = seeds of one
    recipe): headline on the standardised PR with position 0 excluded, and the paper's raw PR beside
    it as its own row."""
    f = _frame_with_std(frame)
    bos = f["bos"].map(
        lambda x: str(x).strip().lower() in ("true", "1")
    )  # bool, or text from a CSV
    tf = f[(f["tokens"] == "teacher_forced") & ~bos]
    with0 = f[(f["tokens"] == "teacher_forced") & bos]
    n = tf["target"].nunique()
    seeds = V.sampling_units(
        n, unit="seed", subject="hyperfitted models (training seeds)", minimum=SEED_MINIMUM
    )
    out = []
    for col, name, loo in (
        ("delta_pr_std", "standardised PR (headline)", "pr_std_loo"),
        ("delta_pr", "raw PR (the paper's estimator)", "pr_loo"),
    ):
        last, s, top, e, supported = _terminal(tf, col)
        lastrows = tf[(tf["site"] == "resid_post") & (tf["layer"] == last)]
        w0 = Span(with0[(with0["site"] == "resid_post") & (with0["layer"] == last)][col])
        fn = Span(tf[tf["site"] == "final_norm"][col])
        checks = (
            seeds,
            _loo_check(lastrows, f"{loo}_a", f"{name}, base, block {last}"),
            _loo_check(lastrows, f"{loo}_b", f"{name}, hyperfitted, block {last}"),
        )
        out.append(
            Verdict(
                METHOD,
                "3. Terminal Expansion: the last block's dimension grows, more than any earlier "
                f"block's — {name}",
                f"ΔDim block {last} {s.text(1, '+')} (largest earlier: block {top} "
                f"{e.text(1, '+')}); after the final "
                f"norm {fn.text(1, '+')}; with position 0 {w0.text(1, '+')} ({s.n} seeds; paper "
                "raw PR +80.8)",
                supported,
                checks,
                note="supported: the last block's interval above 0 and above every earlier "
                     "block's; not supported: at "
                "or below 0, or below an earlier block's",
            )
        )
    return out


# -----------------------------------------------------------------------------------------------
# hyperfit-controls
def controls_verdicts(res) -> list[Verdict]:
    """Our control (not the paper's): is the last block's expansion (headline estimator) larger
    after hyperfitting than after a step-matched ordinary fine-tune and after hyperfitting on
    token-shuffled windows?"""
    g = _frame_with_std(res.geometry)
    rp = g[g["site"] == "resid_post"]
    last = int(rp["layer"].max())
    at = rp[rp["layer"] == last]
    spans = {arm: Span(a.sort_values("seed")["delta_pr_std"]) for arm, a in at.groupby("arm")}
    h = spans.get("hyperfit", Span([]))
    controls = [c for c in ("finetune-steps", "shuffled") if c in spans]
    runs = res.runs
    steps_h = runs[runs["arm"] == "hyperfit"].set_index("seed")["steps"]
    steps_f = runs[runs["arm"] == "finetune-steps"].set_index("seed")["steps"]
    checks = [
        V.sampling_units(
            min([h.n] + [spans[c].n for c in controls]),
            unit="seed",
            subject="seeds per arm",
            minimum=SEED_MINIMUM,
        )
    ]
    if len(steps_f):
        checks.append(
            V.match_target(
                float(steps_f.sum()),
                float(steps_h.loc[steps_f.index].sum()),
                subject="step-matched fine-tune vs hyperfitting",
                quantity="training steps",
            )
        )
    if "pr_std_loo_b" in at.columns:
        checks.append(_loo_check(at, "pr_std_loo_b", f"standardised PR, every arm, block {last}"))
    cells = "; ".join(f"{c} {spans[c].text(1, '+')}" for c in controls)
    return [
        Verdict(
            METHOD,
            "The last-block expansion is specific to hyperfitting (our control) — standardised PR",
            f"ΔDim block {last}: hyperfit {h.text(1, '+')}; {cells} ({h.n} seeds per arm)",
            _direction(
                bool(controls) and all(h.above(spans[c]) for c in controls),
                any(spans[c].above(h) for c in controls),
            ),
            tuple(checks),
            note="supported: hyperfitting's interval above every control's; not supported: a "
                 "control's above "
            "hyperfitting's"
            + (
                ""
                if "pr_std_loo_b" in at.columns
                else "; this run predates the leave-one-coordinate-out columns, so the estimator's "
                "dominance check is not among its checks"
            ),
        )
    ]


# -----------------------------------------------------------------------------------------------
# hyperfit-ksweep
def ksweep_verdicts(res, n_seeds: int = 1) -> list[Verdict]:
    """Claim 4 from a `hyperfit-ksweep` result: Late-Stage LoRA (the paper's last 5 blocks, or the
    largest late k below L) gives about what Full-LoRA gives. The sweep trains one seed per
    placement, and its TTR interval resamples prompts, not seeds."""
    f = res.frame
    late = f[f["placement"] == "late"]
    L = int(late["k"].max())
    ks = sorted(int(k) for k in late["k"] if int(k) < L)
    k = 5 if 5 in ks else (ks[-1] if ks else L)
    r_k, r_full = late[late["k"] == k].iloc[0], late[late["k"] == L].iloc[0]
    lk, lf = _span_of_row(r_k, "ttr", 2), _span_of_row(r_full, "ttr", 2)
    conv = {f"k={k}": bool(r_k["converged"]), f"k={L}": bool(r_full["converged"])}
    return [
        Verdict(
            METHOD,
            f"4. Late-Stage LoRA (last {k} blocks) gives about what Full-LoRA gives",
            f"TTR {lk.text()} (last {k}) vs {lf.text()} (all {L}); converged: "
            + ", ".join(f"{a} {'yes' if b else 'no'}" for a, b in conv.items())
            + " (paper: .469 vs .508)",
            _direction(lk.hi >= lf.lo, lk.hi < lf.lo),
            (
                V.sampling_units(
                    n_seeds,
                    unit="seed",
                    subject="training seeds per placement",
                    minimum=SEED_MINIMUM,
                    resampled="prompt",
                ),
            ),
            note="supported: the Late-Stage interval reaches the Full-LoRA one; not supported: it "
                 "lies below",
        )
    ]
