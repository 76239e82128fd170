"""Validity checks: whether a run could have shown what its verdict says (DESIGN.md, "Validity").

A claim's verdict is *reproduced*, *not reproduced* or *inconclusive*. It is a function of what the numbers say
(`supported`) and of typed checks on the run that made them; one failed check makes it inconclusive, and the
verdict names the failed checks. Each check is a pure function of numbers a run already has and states what it
measured against which limit, so a reader can disagree with a limit without rerunning anything.

    checks = [*degenerate_generation(replies, subject="gated replies", nll=nll, reference_nll=nll0),
              floor_ceiling({"shared": 0.02, "random": 0.01}, subject="task accuracy, L15")]
    v = Verdict("truth", "gating raises context-following", "+0.03 [-0.05, +0.11]", supported=False,
                checks=tuple(checks))
    v.outcome      # 'inconclusive' when any check failed
    report = ValidityReport.of([v]); run.save_result("validity", report)   # `interplab runs show` prints it
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from interplab.core.errors import InputError
from interplab.core.result import Result

__all__ = ["Check", "Verdict", "ValidityReport", "CHECK_KINDS", "OUTCOMES", "repeated_reply", "distinct_tokens",
           "reply_nll", "degenerate_generation", "floor_ceiling", "match_target", "setting_range", "held_out",
           "sampling_units", "multiple_testing", "reliability_ceiling", "VALIDITY_RESULT",
           "arm_effect", "outlier_dominance"]

OUTCOMES = ("reproduced", "not reproduced", "inconclusive")
VALIDITY_RESULT = "validity"  # the name a run saves its report under

# kind -> what a failed check of that kind means (the reader's one-line gloss)
CHECK_KINDS: dict[str, str] = {
    "repeated_reply": "one reply repeated across prompts",
    "distinct_tokens": "replies that repeat their own tokens",
    "reply_nll": "replies far less likely under the unedited model than its own replies",
    "floor_ceiling": "the outcome sits at its floor or ceiling in every compared arm",
    "match_target": "a control missed its match target",
    "setting_range": "a setting outside the range where the method means what it claims",
    "held_out": "a setting chosen on the items it is scored on",
    "sampling_units": "too few sampling units, or an interval over the wrong unit",
    "multiple_testing": "several tests without a correction",
    "reliability_ceiling": "the comparison sits at its own reliability ceiling, so it could not have failed",
    "null_resolution": "a Monte-Carlo null too small to reach the (corrected) significance level",
    "arm_effect": "an intervention arm that left its output unchanged (or changed it only into "
                  "degenerate text)",
    "outlier_dominance": "one coordinate dominates the estimator (it moves when that coordinate is "
                         "dropped)",
}


@dataclass(frozen=True)
class Check:
    """One check of a run. measured / limit: the number looked at and the limit it was held to (`detail` says in
    which direction and what it means)."""

    kind: str
    subject: str
    passed: bool
    measured: float
    limit: float
    detail: str

    def __post_init__(self):
        if self.kind not in CHECK_KINDS:
            raise InputError(f"unknown check kind {self.kind!r}; the kinds are {sorted(CHECK_KINDS)}")
        object.__setattr__(self, "passed", bool(self.passed))
        object.__setattr__(self, "measured", float(self.measured))
        object.__setattr__(self, "limit", float(self.limit))

    def __str__(self) -> str:
        return f"[{'ok' if self.passed else 'FAILED'}] {self.kind} ({self.subject}): {self.detail}"


@dataclass(frozen=True)
class Verdict:
    """A claim, what was measured, whether the numbers support it, and the checks of the run behind them.

    supported: True / False when the decision rule is met / not met, None when the numbers decide nothing
    (e.g. an interval that straddles both thresholds); outcome is inconclusive then, or when a check failed."""

    method: str
    claim: str
    measured: str
    supported: bool | None
    checks: tuple[Check, ...] = ()
    note: str = ""

    def __post_init__(self):
        object.__setattr__(self, "checks", tuple(self.checks))
        for c in self.checks:
            if not isinstance(c, Check):
                raise InputError(f"Verdict.checks holds a {type(c).__name__}, not a Check")
        if self.supported is not None:
            object.__setattr__(self, "supported", bool(self.supported))

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.passed)

    @property
    def outcome(self) -> str:
        if self.failed or self.supported is None:
            return "inconclusive"
        return "reproduced" if self.supported else "not reproduced"

    @property
    def reason(self) -> str:
        """Why the outcome is what it is: the failed checks, or that the numbers decide nothing."""
        if self.failed:
            return "; ".join(f"{c.kind} ({c.subject}): {c.detail}" for c in self.failed)
        if self.supported is None:
            return "the numbers do not decide the claim" + (f": {self.note}" if self.note else "")
        return ""

    def checks_text(self) -> str:
        """The checks in one cell: 'all N pass' or the failed ones by kind and subject."""
        if not self.checks:
            return "none"
        if not self.failed:
            return f"all {len(self.checks)} pass"
        return "; ".join(f"FAILED {c.kind} ({c.subject})" for c in self.failed)


_VERDICT_COLS = ["method", "claim", "measured", "supported", "outcome", "reason", "note"]
_CHECK_COLS = ["claim", "kind", "subject", "passed", "measured", "limit", "detail"]


@dataclass
class ValidityReport(Result):
    """The verdicts of one run and every check behind them, as two tables (saved as CSV beside the numbers).

    verdicts: one row per claim (method, claim, measured, supported, outcome, reason, note);
    checks: one row per check (claim, kind, subject, passed, measured, limit, detail)."""

    verdicts: pd.DataFrame
    checks: pd.DataFrame

    def __post_init__(self):
        for name, cols in (("verdicts", _VERDICT_COLS), ("checks", _CHECK_COLS)):
            missing = [c for c in cols if c not in getattr(self, name).columns]
            if missing:
                raise InputError(f"ValidityReport.{name} lacks columns {missing}")

    @classmethod
    def of(cls, verdicts: Iterable[Verdict]) -> "ValidityReport":
        vs = list(verdicts)
        claims = [v.claim for v in vs]
        if len(set(claims)) != len(claims):
            raise InputError(f"a report names each claim once; repeated: "
                             f"{sorted(c for c, n in Counter(claims).items() if n > 1)}")
        vrows = [{"method": v.method, "claim": v.claim, "measured": v.measured,
                  "supported": "" if v.supported is None else ("yes" if v.supported else "no"),
                  "outcome": v.outcome, "reason": v.reason, "note": v.note} for v in vs]
        crows = [{"claim": v.claim, "kind": c.kind, "subject": c.subject, "passed": c.passed,
                  "measured": c.measured, "limit": c.limit, "detail": c.detail} for v in vs for c in v.checks]
        return cls(verdicts=pd.DataFrame(vrows, columns=_VERDICT_COLS),
                   checks=pd.DataFrame(crows, columns=_CHECK_COLS))

    def verdict_list(self) -> list[Verdict]:
        """The typed verdicts back (from a loaded report too)."""
        out = []
        for _, r in self.verdicts.iterrows():
            rows = self.checks[self.checks["claim"] == r["claim"]]
            checks = tuple(Check(kind=c["kind"], subject=_s(c["subject"]), passed=_bool(c["passed"]),
                                 measured=c["measured"], limit=c["limit"], detail=_s(c["detail"]))
                           for _, c in rows.iterrows())
            sup = _s(r["supported"])
            out.append(Verdict(method=_s(r["method"]), claim=r["claim"], measured=_s(r["measured"]),
                               supported=None if sup == "" else sup == "yes", checks=checks, note=_s(r["note"])))
        return out

    def verdict(self, claim: str) -> Verdict:
        for v in self.verdict_list():
            if v.claim == claim:
                return v
        raise InputError(f"no verdict for claim {claim!r}; the report has {list(self.verdicts['claim'])}")

    @property
    def outcomes(self) -> dict[str, str]:
        return dict(zip(self.verdicts["claim"], self.verdicts["outcome"]))

    @property
    def failed_checks(self) -> pd.DataFrame:
        return self.checks[~self.checks["passed"].map(_bool)]

    def to_frame(self) -> pd.DataFrame:
        return self.verdicts

    def summary(self) -> dict:
        out = Counter(self.verdicts["outcome"])
        return {"verdicts": len(self.verdicts), **{o: int(out.get(o, 0)) for o in OUTCOMES},
                "checks": len(self.checks), "failed_checks": len(self.failed_checks)}

    def render(self) -> str:
        """Plain text: each verdict, then its checks (what `interplab runs show` prints)."""
        lines = []
        for v in self.verdict_list():
            lines.append(f"{v.outcome.upper():15s} {v.claim}")
            lines.append(f"    measured: {v.measured}")
            if v.reason:
                lines.append(f"    why: {v.reason}")
            lines.extend(f"    {c}" for c in v.checks)
        return "\n".join(lines)

    def markdown(self) -> str:
        """The claim table of the docs: claim | measured | validity checks | verdict."""
        rows = ["| claim | measured | validity checks | verdict |", "|---|---|---|---|"]
        for v in self.verdict_list():
            cell = v.checks_text()
            rows.append(f"| {v.claim} | {v.measured} | {cell} | {v.outcome} |")
        return "\n".join(rows)


def _s(x) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)


def _bool(x) -> bool:
    return x if isinstance(x, bool) else str(x).strip().lower() in ("true", "1", "yes")


# -----------------------------------------------------------------------------------------------
# generation
def _tokens(text: str) -> list[str]:
    return str(text).split()


def repeated_reply(replies: Sequence[str], *, subject: str, max_share: float = 0.5) -> Check:
    """The most common reply's share of all replies (stripped, case-folded); it fails above `max_share`. Replies
    to different prompts that are one string mean the edit overrode the input."""
    rs = [str(r).strip().casefold() for r in replies]
    if not rs:
        return Check("repeated_reply", subject, False, float("nan"), max_share, "no replies to check")
    text, n = Counter(rs).most_common(1)[0]
    share = n / len(rs)
    shown = (text[:40] + "…") if len(text) > 40 else text
    return Check("repeated_reply", subject, share <= max_share, share, max_share,
                 f"{n} of {len(rs)} replies are one string ({shown!r}); at most {max_share:.0%} may be")


def distinct_tokens(replies: Sequence[str], *, subject: str, min_rate: float = 0.5,
                    tokenize: Callable[[str], list[str]] = _tokens) -> Check:
    """The mean over replies of distinct tokens / tokens (an empty reply counts 0); it fails below `min_rate`.
    A reply that loops one word or phrase scores 1/len."""
    rates = []
    for r in replies:
        toks = tokenize(r)
        rates.append(len(set(toks)) / len(toks) if toks else 0.0)
    rate = float(np.mean(rates)) if rates else float("nan")
    return Check("distinct_tokens", subject, bool(rates) and rate >= min_rate, rate, min_rate,
                 f"mean distinct-token rate {rate:.2f} over {len(rates)} replies; at least {min_rate:.2f} needed")


def reply_nll(nll: Sequence[float], reference_nll: Sequence[float], *, subject: str, quantile: float = 0.95,
              max_share: float = 0.5) -> Check:
    """Per-token NLL of the edited replies under the unedited model against the unedited replies' own: the share
    of edited replies above the reference's `quantile` (NaN, an empty reply, counts as above); it fails above
    `max_share`. With no edit about 1 − quantile of replies lie above."""
    x = np.asarray(nll, dtype=float).reshape(-1)
    ref = np.asarray(reference_nll, dtype=float).reshape(-1)
    ref = ref[np.isfinite(ref)]
    if x.size == 0 or ref.size == 0:
        return Check("reply_nll", subject, False, float("nan"), max_share, "no replies or no reference NLL")
    q = float(np.quantile(ref, quantile))
    share = float(np.mean(~(x <= q)))
    return Check("reply_nll", subject, share <= max_share, share, max_share,
                 f"{share:.0%} of {x.size} replies have NLL/token above the unedited replies' "
                 f"{quantile:.0%} quantile ({q:.2f} nats); at most {max_share:.0%} may")


def degenerate_generation(replies: Sequence[str], *, subject: str, nll: Sequence[float] | None = None,
                          reference_nll: Sequence[float] | None = None, max_share: float = 0.5,
                          min_rate: float = 0.5, tokenize: Callable[[str], list[str]] = _tokens) -> list[Check]:
    """The generation checks in one call: repeated reply, distinct-token rate and (given NLLs) reply NLL."""
    out = [repeated_reply(replies, subject=subject, max_share=max_share),
           distinct_tokens(replies, subject=subject, min_rate=min_rate, tokenize=tokenize)]
    if nll is not None and reference_nll is not None:
        out.append(reply_nll(nll, reference_nll, subject=subject))
    return out


# -----------------------------------------------------------------------------------------------
# outcomes
def floor_ceiling(arms: Mapping[str, float], *, subject: str, floor: float | None = 0.0,
                  ceiling: float | None = 1.0, margin: float = 0.05) -> Check:
    """Fails when every compared arm lies within `margin` of the floor, or every arm within `margin` of the
    ceiling: no difference between the arms could show there. measured: how far the arms get off the nearer
    bound (max arm − floor, or ceiling − min arm, whichever is smaller)."""
    vals = {k: float(v) for k, v in arms.items()}
    if len(vals) < 1 or not all(map(np.isfinite, vals.values())):
        return Check("floor_ceiling", subject, False, float("nan"), margin, f"arms not all finite: {vals}")
    room = []
    if floor is not None:
        room.append((max(vals.values()) - floor, "floor", floor))
    if ceiling is not None:
        room.append((ceiling - min(vals.values()), "ceiling", ceiling))
    if not room:
        raise InputError("floor_ceiling needs a floor or a ceiling")
    gap, side, bound = min(room)
    shown = ", ".join(f"{k} {v:.3g}" for k, v in vals.items())
    return Check("floor_ceiling", subject, gap > margin, gap, margin,
                 f"{shown}: every arm within {gap:.3g} of the {side} ({bound:g}); more than {margin:g} needed")


def match_target(achieved: float, target: float, *, subject: str, quantity: str = "energy",
                 rel_tol: float = 0.1) -> Check:
    """A control's achieved `quantity` against the one it was asked to match: ratio within 1 ± rel_tol."""
    a, t = float(achieved), float(target)
    ratio = a / t if t != 0 else (1.0 if a == 0 else float("inf"))
    ok = bool(np.isfinite(ratio) and abs(ratio - 1) <= rel_tol)
    return Check("match_target", subject, ok, ratio, rel_tol,
                 f"achieved {quantity} {a:.4g} against a target of {t:.4g} (ratio {ratio:.2f}); within "
                 f"±{rel_tol:.0%} needed")


def setting_range(value: float, lo: float, hi: float, *, subject: str, what: str) -> Check:
    """A setting (chosen or given) inside [lo, hi], the range where the method means what it claims (e.g. a
    projection strength in [0, 1]: above 1 it flips the component's sign instead of removing it)."""
    v = float(value)
    ok = lo <= v <= hi
    dist = 0.0 if ok else min(abs(v - lo), abs(v - hi))
    return Check("setting_range", subject, ok, v, hi if v > hi else lo,
                 f"{what} {v:g}; the valid range is [{lo:g}, {hi:g}]" + ("" if ok else f" ({dist:g} outside)"))


def held_out(selected_on: Iterable, scored_on: Iterable, *, subject: str) -> Check:
    """Units (facts, concepts, prompts) a setting was chosen on against those it is scored on: any overlap
    fails. Pass `selected_on=()` when nothing was chosen on data."""
    a, b = set(selected_on), set(scored_on)
    both = a & b
    return Check("held_out", subject, not both, len(both), 0,
                 f"{len(both)} of {len(b)} scored units were also used to choose the setting "
                 f"({len(a)} selection units)" if a else "no setting was chosen on data")


def sampling_units(n_units: int, *, unit: str, subject: str, minimum: int = 20,
                   resampled: str | None = None) -> Check:
    """An interval needs `minimum` independent units (the fact, the concept, the seed — not the text), and must
    resample that unit: `resampled` names what the interval resampled (None: the unit itself)."""
    n = int(n_units)
    right_unit = resampled is None or resampled == unit
    ok = n >= minimum and right_unit
    detail = f"{n} {unit}s (at least {minimum} needed)"
    if not right_unit:
        detail += f"; the interval resampled {resampled}s, not {unit}s"
    return Check("sampling_units", subject, ok, n, minimum, detail)


def multiple_testing(n_tests: int, correction: str | None, *, subject: str) -> Check:
    """Several tests read together need a correction (Holm, BH, maxT, ...) named in `correction`."""
    n = int(n_tests)
    corrected = bool(correction) and str(correction).lower() not in ("none", "uncorrected")
    ok = n <= 1 or corrected
    return Check("multiple_testing", subject, ok, n, 1,
                 f"{n} tests, " + (f"corrected ({correction})" if corrected else "no correction"))


def reliability_ceiling(observed: float, ceiling: float, *, subject: str, drift: float, min_drift: float,
                        drift_name: str = "weight drift", margin: float = 0.02) -> Check:
    """A similarity between a thing and its descendant is a test only when the descendant moved: it passes when
    `drift` ≥ `min_drift`, or when the similarity sits clearly below `ceiling` (the thing's own re-estimate
    reliability, e.g. a map against itself under another fold seed), so the comparison did show a change.
    It fails when the descendant barely moved and the similarity is at the ceiling: it could not have failed."""
    moved = float(drift) >= float(min_drift)
    below = float(observed) < float(ceiling) - margin
    ok = moved or below
    return Check("reliability_ceiling", subject, ok, drift, min_drift,
                 f"{drift_name} {drift:.3g} (at least {min_drift:.3g} to count as moved); similarity "
                 f"{observed:.3f} against the ceiling {ceiling:.3f} (the base's own reliability)")


# ----------------------------------------------------------------------------------------------- null size
__all__ += ["null_resolution"]


def null_resolution(n_draws: int, *, subject: str, n_tests: int = 1, level: float = 0.05) -> Check:
    """A Monte-Carlo p-value (1 + #{null >= observed}) / (1 + B) is at least 1 / (B + 1); read over `n_tests`
    tests with Holm or Bonferroni, the smallest corrected p is n_tests / (B + 1). It fails when that floor is above
    `level`: no observation could have been significant, so "not significant" says nothing (use more draws)."""
    b, n = int(n_draws), max(int(n_tests), 1)
    floor = n / (b + 1) if b >= 0 else float("inf")
    return Check("null_resolution", subject, floor <= level, floor, level,
                 f"{b} null draws: the smallest p is 1/{b + 1} = {1 / (b + 1):.3g}"
                 + (f", {floor:.3g} after correcting over {n} tests" if n > 1 else "")
                 + f"; at most {level:g} needed to reject (at least {math.ceil(n / level - 1e-9) - 1} draws)")


__all__ += ["arm_effect", "outlier_dominance"]


def arm_effect(changed: Mapping[str, float], *, subject: str, min_share: float = 0.1) -> Check:
    """An intervention arm tests something only where it changed the output: `changed` maps each
    usable setting (e.g. each strength whose replies are not degenerate) to the share of replies
    that differ from the unedited ones. It fails when no setting changed at least `min_share` of
    them (an arm that is token-identical to the unedited model at every strength, or that changes
    output only where it is degenerate, tests nothing)."""
    vals = {str(k): float(v) for k, v in changed.items()}
    best = max(vals.values()) if vals else 0.0
    at = max(vals, key=vals.get) if vals else "none"
    shown = ", ".join(f"{k} {v:.0%}" for k, v in vals.items()) or "no usable setting"
    return Check("arm_effect", subject, bool(vals) and best >= min_share, best, min_share,
                 f"share of replies changed per usable setting: {shown}; the largest ({at}) must "
                 f"reach {min_share:.0%}")


def outlier_dominance(change: float, *, subject: str, max_change: float = 0.1,
                      dropped: str = "") -> Check:
    """A dimension estimator over d coordinates should barely move when one coordinate is dropped.
    `change` is the largest relative change of the estimator over leave-one-coordinate-out
    (`dropped` names that coordinate); it fails above `max_change`: one (massive) coordinate then
    sets the estimate."""
    c = float(change)
    ok = bool(np.isfinite(c) and c <= max_change)
    where = f" (dropping {dropped})" if dropped else ""
    return Check("outlier_dominance", subject, ok, c, max_change,
                 f"the estimate moves by {c:.1%} when one coordinate is dropped{where}; at most "
                 f"{max_change:.0%} allowed")
