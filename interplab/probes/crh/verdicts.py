"""The verdicts of a CRH concept study (issue 46): each claim the study tests, what was measured,
and the checks that say whether the run could have shown it (`interplab.probes.validity`).

`crh_verdicts(study, choice)` is a pure function of a `ConceptStudy` (steered, with fluency scores)
and the `ReadChoice` that fixed its read position, steering block and strength step. Decision rules
(stated here, never tuned to a run):

* **Elicitation**: at the chosen step, the fluent concept rate of the diffmean (CAA) vector against
  the matched-norm pseudo-concept control (`control` method: the diffmean of a concept-free word
  set, scaled to the same norm), paired per prompt; reproduced when the 95 % cluster-bootstrap
  interval of the difference (concepts resampled) lies above 0, not reproduced otherwise.
* **Sensitive sectors**: the held-out gain of each concept's best sector (chosen on the first half
  of its prompts, scored on the rest, fluent hits); reproduced when its interval over concepts lies
  above 0.
* **Implication 1**: per test sample, the onset score (strength steps at or above its first concept
  reply, 0 if none) of its own diff direction (p = 0) minus that of the axis-only vector (p = 1);
  reproduced when the cluster interval lies above 0 (the normal component makes steering elicit at
  lower strength).
* **Implication 2**: the trig-law scan's max r over the (a, p) grid; reproduced when its permutation
  p (concepts shuffled, the max taken over the same grid) is below 0.05.
* **Implication 3**: within-concept pairs, cos(d_i, d_j) against |M_i − M_j|; not reproduced when
  the permutation p is below 0.05 (similarity does predict sensitivity); above it the numbers do not
  decide (a null result needs power this test does not show), so the verdict says inconclusive and
  why.
* **Geometry**: per layer, the plane share (top-2 EV) of each concept against its paired
  pseudo-concept (paired sign-flip test), Holm-adjusted over the layers; reproduced when the
  steering block's adjusted p is below 0.05 with the concepts above.

Every verdict carries: the held-out checks (the read position, block and step chosen on concepts
other than the scored ones; the judge's words in other word families than the words that built the
vector), the concept as the sampling unit (at least 20), and a multiple-testing check; the steering
verdicts also carry the generation checks (repeated replies, distinct tokens, reply NLL against the
unsteered replies') and a floor/ceiling check of the compared arms; the elicitation verdict the
control's norm against the concept vector's (within ±10 %)."""

from __future__ import annotations

import numpy as np

from interplab.core.errors import InputError
from interplab.probes import validity as V
from interplab.probes.stats import (
    bootstrap_ci,
    cluster_bootstrap_ci,
    holm_adjust,
    paired_signflip_test,
)

__all__ = ["crh_verdicts", "spiral_verdicts", "judge_check", "CLAIMS", "ALPHA"]

METHOD = "crh"
ALPHA = 0.05
#: an interval bound counts as above 0 only beyond float noise (bootstrap means of 0/1 hits)
EPS = 1e-9
CLAIMS = {
    "elicit": "Steering along a concept's difference vector elicits the concept, beyond a "
    "matched-norm control",
    "sector": "Sensitive sectors: some directions of the normal plane elicit the concept more than "
    "others",
    "impl1": "Implication 1: the normal component sets steering sensitivity",
    "impl2": "Implication 2: steerability follows sin^m θ cos^n θ",
    "impl3": "Implication 3: the sector cannot be inferred from diff-vector similarity",
    "geometry": "Concept difference vectors have a planar normal part beyond a concept-free word "
    "set",
    "spiral": "Spiral probe: norm-constrained optimised steering vectors trace a helix",
}


def _ci(est, lo, hi, fmt: str = ".2f") -> str:
    return f"{est:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


# ------------------------------------------------------------------------------------ shared checks
def judge_check(study) -> V.Check:
    """held_out over word families: the families of each concept's build words against its judge
    words'. A concept that records no build words was built from its judge's words (the issue-28
    pairs), so every family overlaps."""
    from interplab.data.concept_pairs import word_families

    built, judged = set(), set()
    for name, c in study.concepts.items():
        judge = tuple(c.judge_words)
        build = tuple(c.build_words) or judge
        for i, fam in enumerate(word_families((*build, *judge))):
            f = {w.casefold() for w in fam}
            if f & {w.casefold() for w in build}:
                built.add((name, i))
            if f & {w.casefold() for w in judge}:
                judged.add((name, i))
    return V.held_out(
        built, judged, subject="judge words against the words that built the vector (word families)"
    )


def _read_check(choice, study) -> V.Check:
    return V.held_out(
        choice.selection,
        list(study.concepts),
        subject=f"read position ({choice.position}), block {choice.layer} and strength step "
        f"{choice.step}, chosen on {len(choice.selection)} concepts",
    )


def _units(n: int, subject: str, resampled: str | None = "concept") -> V.Check:
    return V.sampling_units(n, unit="concept", subject=subject, resampled=resampled)


def _fluent(labels, nll, thr: float) -> np.ndarray:
    nll = np.asarray(nll, dtype=float)
    return (np.asarray(labels) == 2) & np.isfinite(nll) & (nll <= thr)


def _null_nll(study) -> np.ndarray:
    return np.concatenate([c.nll["null"] for c in study.concepts.values()])


def _method_rows(c, method: str, k: int):
    """(labels [S], nll [S], texts [S], mean norm) of one baseline method at step index k."""
    bl = c.baselines
    m = bl.methods.index(method)
    S, K = bl.labels.shape[1], bl.labels.shape[2]
    texts = [bl.texts[(m * S + s) * K + k] for s in range(S)] if bl.texts is not None else [""] * S
    norm = float(bl.norms[m, k]) if bl.norms is not None else float("nan")
    return bl.labels[m, :, k], c.nll["baselines"][m, :, k], texts, norm


# ------------------------------------------------------------------------------------- the verdicts
def _elicit(study, choice, thr: float, common: list, B: int, seed: int) -> V.Verdict:
    k = choice.step - 1
    rows = {"diffmean": ([], [], [], []), "control": ([], [], [], [])}
    clusters = []
    have_control = all("control" in c.baselines.methods for c in study.concepts.values())
    for name, c in study.concepts.items():
        if not 0 <= k < c.baselines.labels.shape[2]:
            raise InputError(
                f"strength step {choice.step} is outside concept {name!r}'s grid of "
                f"{c.baselines.labels.shape[2]} steps"
            )
        for method in ("diffmean", "control") if have_control else ("diffmean",):
            lab, nll, texts, norm = _method_rows(c, method, k)
            hits, lls, ts, norms = rows[method]
            hits.append(_fluent(lab, nll, thr))
            lls.append(nll)
            ts.extend(texts)
            norms.append(norm)
        clusters += [name] * c.baselines.labels.shape[1]
    hit_c = np.concatenate(rows["diffmean"][0]).astype(float)
    arm = {"diffmean": cluster_bootstrap_ci(hit_c, clusters, B=B, seed=seed)}
    ref = _null_nll(study)
    checks = [
        *V.degenerate_generation(
            rows["diffmean"][2],
            subject=f"diffmean replies, step {choice.step}",
            nll=np.concatenate(rows["diffmean"][1]),
            reference_nll=ref,
        )
    ]
    if have_control:
        hit_0 = np.concatenate(rows["control"][0]).astype(float)
        arm["control"] = cluster_bootstrap_ci(hit_0, clusters, B=B, seed=seed)
        diff = cluster_bootstrap_ci(hit_c - hit_0, clusters, B=B, seed=seed)
        checks += V.degenerate_generation(
            rows["control"][2],
            subject=f"control replies, step {choice.step}",
            nll=np.concatenate(rows["control"][1]),
            reference_nll=ref,
        )
        target, achieved = np.array(rows["diffmean"][3]), np.array(rows["control"][3])
        worst = int(np.argmax(np.abs(achieved / target - 1)))
        checks.append(
            V.match_target(
                achieved[worst],
                target[worst],
                quantity="norm",
                subject=f"control vector norm, worst of {len(target)} concepts",
            )
        )
        supported = bool(diff[1] > EPS)
        measured = (
            f"fluent concept rate at {_read(choice)}: diffmean {_ci(*arm['diffmean'][:3])} vs "
            f"pseudo-concept control {_ci(*arm['control'][:3])}; difference "
            f"{_ci(*diff[:3], fmt='+.2f')} ({diff[3]} concepts)"
        )
    else:
        checks.append(
            V.match_target(
                float("nan"), 1.0, quantity="norm", subject="no pseudo-concept control arm"
            )
        )
        supported = None
        measured = (
            f"fluent concept rate at {_read(choice)}: diffmean {_ci(*arm['diffmean'][:3])}; "
            "no control arm"
        )
    checks.append(
        V.floor_ceiling(
            {m: v[0] for m, v in arm.items()}, subject=f"fluent concept rate, step {choice.step}"
        )
    )
    checks += [
        *common,
        _units(arm["diffmean"][3], "concepts behind the interval"),
        V.multiple_testing(1, None, subject="one test: read, block and step fixed before scoring"),
    ]
    return V.Verdict(
        METHOD,
        CLAIMS["elicit"],
        measured,
        supported,
        tuple(checks),
        note="fluent: judge label 2 and reply NLL at most the unsteered replies' 95th percentile",
    )


def _read(choice) -> str:
    return f"{choice.position} read, block {choice.layer}, step {choice.step}"


def _sector(study, thr: float, common: list, B: int, seed: int) -> V.Verdict:
    from interplab.probes.crh.elicitation import sector_holdout

    df, h = sector_holdout(study, B=B, seed=seed, threshold=thr)
    chose = {(r.concept, j) for r in df.itertuples() for j in range(r.n_select)}
    scored = {(r.concept, j) for r in df.itertuples() for j in range(r.n_select, r.n_prompts)}
    texts = [t for c in study.concepts.values() for t in (c.sector.texts or [])]
    nll = np.concatenate([c.nll["sector"].ravel() for c in study.concepts.values()])
    checks = [
        V.held_out(
            chose, scored, subject="each concept's best sector (chosen on half its prompts)"
        ),
        V.floor_ceiling(
            {"best sector": h["heldout_best_rate"], "all sectors": h["heldout_mean_rate"]},
            subject="held-out fluent concept rate",
        ),
        *V.degenerate_generation(
            texts, subject="sector replies, every strength", nll=nll, reference_nll=_null_nll(study)
        ),
        *common,
        _units(h["n_concepts"], "concepts behind the interval"),
        V.multiple_testing(1, None, subject="one test: the held-out gain"),
    ]
    measured = (
        "held-out gain of the best sector "
        f"{_ci(h['heldout_gain'], h['heldout_gain_lo'], h['heldout_gain_hi'], '+.3f')}"
        f" ({h['n_positive']} concepts up, {h['n_negative']} down); fluent concept rate held out "
        f"{h['heldout_best_rate']:.3f} (best) vs {h['heldout_mean_rate']:.3f} (all sectors)"
    )
    return V.Verdict(
        METHOD, CLAIMS["sector"], measured, bool(h["heldout_gain_lo"] > EPS), tuple(checks)
    )


def _impl1(study, common: list, B: int, seed: int) -> V.Verdict:
    from interplab.probes.crh.sectors import first_activation

    score, act, clusters, texts, nll = {0: [], 1: []}, {0: [], 1: []}, [], [], []
    cos = []
    for name, c in study.concepts.items():
        pm = c.penalty
        K = pm.labels.shape[2]
        steps = np.arange(1, K + 1, dtype=float)
        for key, p in ((0, 0.0), (1, 1.0)):
            j = int(np.argmin(np.abs(pm.ps - p)))
            first = first_activation(pm.labels[:, j], steps)
            score[key].append(np.where(np.isnan(first), 0.0, K + 1 - np.nan_to_num(first)))
            act[key].append(~np.isnan(first))
            S, P = pm.labels.shape[:2]
            texts += (
                [pm.texts[(s * P + j) * K + kk] for s in range(S) for kk in range(K)]
                if pm.texts
                else []
            )
            nll.append(c.nll["penalty"][:, j].ravel())
        clusters += [name] * pm.labels.shape[0]
        cos.append(pm.cos_theta)
    s0, s1 = np.concatenate(score[0]), np.concatenate(score[1])
    a0, a1 = np.concatenate(act[0]), np.concatenate(act[1])
    diff = cluster_bootstrap_ci(s0 - s1, clusters, B=B, seed=seed)
    K = next(iter(study.concepts.values())).penalty.labels.shape[2]
    checks = [
        V.floor_ceiling(
            {"p=0": float(s0.mean() / K), "p=1": float(s1.mean() / K)},
            subject="onset score / steps (0: never names the concept, 1: from the first step)",
        ),
        *V.degenerate_generation(
            texts,
            subject="penalty replies at p = 0 and 1",
            nll=np.concatenate(nll),
            reference_nll=_null_nll(study),
        ),
        *common,
        _units(diff[3], "concepts behind the interval"),
        V.multiple_testing(1, None, subject="one test: the onset difference"),
    ]
    measured = (
        f"onset score (of {K} steps) with the normal component (p = 0) {s0.mean():.2f} vs the "
        f"axis only (p = 1) {s1.mean():.2f}: difference {_ci(*diff[:3], fmt='+.2f')}; samples "
        "that ever name the "
        f"concept {int(a0.sum())} / {int(a1.sum())} of {a0.size}"
    )
    note = (
        "the axis-only vector is shorter by cos θ (median "
        f"{np.median(np.concatenate(cos)):.2f}), as the repo "
        "defines it"
    )
    return V.Verdict(METHOD, CLAIMS["impl1"], measured, bool(diff[1] > EPS), tuple(checks),
                     note=note)


def _impl2(study, common: list) -> V.Verdict:
    tr = study.trig_concept
    n = len(study.concepts)
    if tr is None:
        return V.Verdict(
            METHOD,
            CLAIMS["impl2"],
            "not computable (no concept's steerability varies)",
            None,
            tuple([*common, _units(n, "concepts")]),
        )
    perm = tr.config.get("permuted", "sample")
    checks = [
        V.multiple_testing(
            int(tr.config.get("n_grid", tr.exponents.size)),
            "permutation max over the (a, p) grid" if tr.config.get("n_perm") else None,
            subject="the (a, p) grid of the scan",
        ),
        _units(
            int(tr.config.get("n_groups") or n),
            "concepts (steerability is one value per concept)",
            resampled="concept" if perm == "group" else "sample",
        ),
        *common,
    ]
    measured = (
        f"max r = {tr.global_r:.2f} at a = {tr.global_a:.2f} (permutation p of the max = "
        f"{tr.perm_p:.2f}, "
        f"{tr.config.get('n_perm')} permutations of {perm}s, n = {tr.n_used} samples)"
    )
    return V.Verdict(METHOD, CLAIMS["impl2"], measured, bool(tr.perm_p < ALPHA), tuple(checks))


def _impl3(study, common: list) -> V.Verdict:
    pt = study.pairwise
    if pt is None:
        return V.Verdict(
            METHOD,
            CLAIMS["impl3"],
            "not computable (too few samples name their concept)",
            None,
            tuple([*common, _units(len(study.concepts), "concepts")]),
        )
    groups = {
        name for name, c in study.concepts.items() if np.count_nonzero(c.penalty.margins(0)) >= 2
    }
    checks = [
        _units(
            len(groups),
            "concepts with a within-concept pair (M shuffled within each concept)",
            resampled=None,
        ),
        *common,
        V.multiple_testing(1, None, subject="one test: the pairwise correlation"),
    ]
    measured = (
        f"r = {pt.r:+.3f} (permutation p = {pt.p_perm:.2f}, {pt.x.size} pairs of "
        f"{pt.n_samples} samples)"
    )
    supported = False if pt.p_perm < ALPHA else None
    note = (
        "the paper predicts no relation; a non-significant r is that, but a null result decides "
        "nothing without the test's power at this size (the synthetic replica needs ~600 samples "
        "to see r ≈ −0.07)"
    )
    return V.Verdict(METHOD, CLAIMS["impl3"], measured, supported, tuple(checks), note=note)


def _geometry(study, choice, B: int, seed: int) -> V.Verdict:
    ctl, st = study.control_stats, study.stats
    read = _read_check(choice, study)
    if ctl is None or not len(ctl):
        return V.Verdict(
            METHOD,
            CLAIMS["geometry"],
            "no pseudo-concept control pairs were read",
            None,
            (read, _units(st["concept"].nunique(), "concepts")),
        )
    m = st.merge(ctl, on=["concept", "layer"], suffixes=("", "_control"))
    layers = sorted(m["layer"].unique())
    delta, p = [], []
    for L in layers:
        g = m[m["layer"] == L].sort_values("concept")
        delta.append(float((g["plane_explained"] - g["plane_explained_control"]).mean()))
        p.append(
            paired_signflip_test(g["plane_explained"], g["plane_explained_control"], seed=seed)
        )
    adj = holm_adjust(np.array(p))
    up = [L for L, d, a in zip(layers, delta, adj) if d > EPS and a < ALPHA]
    at = m[m["layer"] == study.steer_layer]
    if not len(at):
        raise InputError(f"the control statistics lack the steering block {study.steer_layer}")
    i = layers.index(study.steer_layer)
    d = bootstrap_ci(
        (at["plane_explained"] - at["plane_explained_control"]).to_numpy(), B=B, seed=seed
    )
    checks = (
        read,
        _units(len(at), "concepts (each paired with a pseudo-concept)"),
        V.multiple_testing(len(layers), "Holm", subject=f"{len(layers)} layers"),
    )
    span = f"{min(up)}–{max(up)}" if up else "none"
    measured = (
        f"plane share (top-2 EV) above the paired pseudo-concept at {len(up)} of {len(layers)} "
        f"layers (Holm p < {ALPHA}; layers {span}); block {study.steer_layer}: "
        f"{_ci(*d, fmt='+.3f')}, Holm p "
        f"{adj[i]:.3g}"
    )
    return V.Verdict(
        METHOD, CLAIMS["geometry"], measured, bool(adj[i] < ALPHA and delta[i] > EPS), checks
    )


def crh_verdicts(study, choice, *, B: int = 5000, seed: int = 0) -> list[V.Verdict]:
    """The verdicts of a steered, fluency-scored `ConceptStudy` and the `ReadChoice` behind its
    settings (see the module docstring for the decision rules)."""
    from interplab.probes.crh.elicitation import fluency_threshold

    if not study.steered:
        raise InputError(
            "crh_verdicts needs a steered study (steer=True); a geometry-only run has no "
            "steering claim"
        )
    if any(c.nll is None for c in study.concepts.values()):
        raise InputError(
            "crh_verdicts needs the replies' fluency scores; run the study with fluency=True"
        )
    thr = fluency_threshold(study)
    common = [_read_check(choice, study), judge_check(study)]
    return [
        _elicit(study, choice, thr, common, B, seed),
        _sector(study, thr, common, B, seed),
        _impl1(study, common, B, seed),
        _impl2(study, common),
        _impl3(study, common),
        _geometry(study, choice, B, seed),
    ]


def spiral_verdicts(spiral, *, seed: int = 0) -> list[V.Verdict]:
    """The spiral probe's verdict (`crh-spiral`): the held-out shape selection of its trajectory
    (`select_trajectory_shape`: line, planar arc, helix by cross-validated R²); reproduced when the
    helix is chosen (both gains' bootstrap lower bounds above 0, an intersection-union rule that
    needs no correction). One prompt pair is one sampling unit, and the bootstrap resamples the
    trajectory's points, not prompt pairs, so the unit check fails for a one-pair probe: a helix on
    one pair is an example, not the population claim."""
    from interplab.probes.crh.shape_selection import select_trajectory_shape

    units = V.sampling_units(1, unit="prompt pair", subject="prompt pairs probed",
                             resampled="trajectory point")
    try:
        sel = select_trajectory_shape(spiral.vectors.vectors, seed=seed)
    except InputError as e:  # too few budgets for held-out folds: the shape is not decided
        return [V.Verdict(METHOD, CLAIMS["spiral"], f"not computable: {e}", None, (units,))]
    r2 = dict(zip(sel.table["shape"], sel.table["cv_r2"]))
    g = sel.gains.set_index("comparison")
    gain = g.loc["helix-arc", ["gain", "lo", "hi"]].to_numpy(dtype=float)
    measured = (
        f"held-out R² line {r2['line']:.3f}, arc {r2['arc']:.3f}, helix {r2['helix']:.3f}; helix − "
        f"arc {_ci(*gain, fmt='+.4f')}; chosen: {sel.chosen}"
    )
    checks = (
        units,
        V.multiple_testing(2, "intersection-union: the helix must beat both the arc and the line",
                           subject="helix − arc and helix − line"),
    )
    return [V.Verdict(METHOD, CLAIMS["spiral"], measured, sel.chosen == "helix", checks)]
