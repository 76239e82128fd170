"""Truth-Score maps and lineage checked the way issue 46 asks: a balanced metric beside S (AUROC,
checked against scikit-learn), intervals with the fact as the unit, effect sizes next to
significance counts, and verdicts whose checks fire on constructed bad runs (significant heads at
the majority rate, a shortcut map at ceiling, too few facts, a best head scored on the facts it was
chosen on, a descendant identical to its base) and stay quiet on good ones."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from interplab.probes.truth.facts_map import facts_map_from_activations
from interplab.probes.truth.map_stats import AUROC_MARGIN, head_intervals
from interplab.probes.truth.map_verdicts import (
    CLAIM_CEILING,
    CLAIM_EVIDENCE,
    CLAIM_HEADS,
    CLAIM_LINEAGE,
    CLAIM_WEIGHTS,
    MIN_DRIFT,
    lineage_verdicts,
    map_verdicts,
)
from interplab.probes.truth.scores import TruthScoresConfig
from interplab.probes.validity import ValidityReport

from tests.truth_scores.test_facts_map import bpe_ckpt  # noqa: F401  (the random BPE llama fixture)

FAST = TruthScoresConfig(solver="lbfgs", dtype="float64", folds=4)


def _triplets(
    n_facts: int,
    L=3,
    H=7,
    D=6,
    planted=None,
    strength=2.0,
    everywhere=False,
    shortcut=None,
    seed=0,
):
    """Triplet facts (context answer, memory answer, in-context distractor; label 1, 0, 0): L x H
    heads of noise, a planted head that tells the context answer from both, a shortcut head that
    only sees "the answer is in the context" (context and distractor alike), or (everywhere) the
    label in every head."""
    rng = np.random.default_rng(seed)
    y = np.tile([1, 0, 0], n_facts)
    kinds = np.tile(["context", "memory", "distractor"], n_facts)
    groups = np.repeat(np.arange(n_facts), 3)
    X = rng.normal(size=(3 * n_facts, L, H, D))
    if planted is not None:
        X[:, planted[0], planted[1], 0] += strength * (y - 1 / 3)
    if shortcut is not None:
        X[:, shortcut[0], shortcut[1], 0] += 4.0 * (kinds != "memory")
    if everywhere:
        X[..., 0] += 4.0 * (y - 1 / 3)[:, None, None]
    rows = pd.DataFrame({"index": groups, "label": y, "candidate_kind": kinds})
    return X, y, groups, rows


def _map(n_facts=60, **kw):
    X, y, g, rows = _triplets(n_facts, **kw)
    fm = facts_map_from_activations(
        X, y, g, config=FAST, n_null=19, fold_seeds=(1,), n_boot=200, rows=rows
    )
    fm.evidence_mass = np.random.default_rng(1).random(fm.scores.scores.shape)
    return fm


def _verdicts(fm, n_boot=200):
    from interplab.experiments.truth_scores import facts_contrast

    c = facts_contrast(fm, n_boot=n_boot, n_swaps=199)
    return ValidityReport.of(map_verdicts(fm, contrast=None if c is None else c[0]))


@pytest.fixture(scope="module")
def planted():
    return _map(planted=(1, 2), strength=3.0)


# ------------------------------------------------------------------------------------------
# balanced metric
def test_auroc_and_balanced_accuracy_match_scikit_learn():
    from sklearn.metrics import balanced_accuracy_score, roc_auc_score

    from interplab.probes.truth.probe_core import fit_head_probes

    X, y, _, _ = _triplets(40, L=2, H=3, planted=(1, 1), strength=1.0)
    X[:, 0, 0] = 0.0  # a constant head: every margin tied, AUROC exactly 0.5
    for solver in ("lbfgs", "adamw"):
        fit = fit_head_probes(X, y, folds=4, epochs=20, solver=solver, dtype=None)
        for f, (_, te) in enumerate(fit.folds):
            for la in range(2):
                for h in range(3):
                    m = fit.heldout_margin[te, la, h].astype(np.float64)
                    assert fit.auroc[f, la, h] == pytest.approx(roc_auc_score(y[te], m), abs=1e-6)
                    assert fit.balanced_accuracy[f, la, h] == pytest.approx(
                        balanced_accuracy_score(y[te], m > 0)
                    )
        assert fit.auroc[:, 0, 0] == pytest.approx(0.5)


def test_majority_rate_is_s_chance_and_auroc_is_not_fooled(planted):
    ts = planted.scores
    assert ts.majority_rate == pytest.approx(2 / 3)
    assert planted.summary()["null_mean_S"] < 0.7 and planted.summary()[
        "null_mean_auroc"
    ] == pytest.approx(0.5, abs=0.06)
    assert ts.auroc[1, 2] > 0.9 and np.nanmedian(ts.auroc) < 0.65
    df = planted.to_frame()
    assert {
        "auroc",
        "balanced_accuracy",
        "auroc_lo",
        "auroc_hi",
        "S_lo",
        "S_hi",
        "p_maxt_auroc",
        "sig_maxt_auroc",
    } <= set(df.columns)


def test_intervals_resample_facts_not_texts(planted):
    """Copying every text of every fact three times adds no information: a fact-level interval stays
    the same (a text-level one would shrink by √3)."""
    ts = planted.scores
    y = planted.rows["label"].to_numpy()
    g = planted.rows["index"].to_numpy()
    one = head_intervals(ts, y, g, B=200).set_index(["layer", "head"]).loc[(1, 2)]
    rep = np.tile(np.arange(len(y)), 3)
    ts3 = dataclasses.replace(
        ts,
        heldout_margin=ts.heldout_margin[rep],
        n_samples=3 * len(y),
        provenance={
            **ts.provenance,
            "fold_test_indices": [
                np.flatnonzero(np.isin(rep, te)).tolist()
                for te in ts.provenance["fold_test_indices"]
            ],
        },
    )
    three = head_intervals(ts3, y[rep], g[rep], B=200).set_index(["layer", "head"]).loc[(1, 2)]
    for c in ("S", "S_lo", "S_hi", "auroc", "auroc_lo", "auroc_hi"):
        assert three[c] == pytest.approx(one[c], abs=1e-12)
    assert one["n_facts"] == 60 and planted.top_head()["unit"] == "fact"


# ------------------------------------------------------------------------------------------ map
# verdicts
def test_planted_head_is_reproduced_with_every_check_passing(planted):
    rep = _verdicts(planted)
    v = rep.verdict(CLAIM_HEADS)
    assert v.outcome == "reproduced" and not v.failed
    assert {c.kind for c in v.checks} == {
        "sampling_units",
        "multiple_testing",
        "held_out",
        "floor_ceiling",
    }
    best = planted.best_held_out
    assert (best["layer"], best["head"]) == (1, 2) and best["lo"] >= 0.5 + AUROC_MARGIN
    assert not set(best["select_facts"]) & set(best["score_facts"])
    assert (
        rep.verdict(CLAIM_CEILING).outcome == "not reproduced"
    )  # one head of 21 is not a ceiling map
    assert rep.verdict(CLAIM_EVIDENCE).outcome in ("inconclusive", "not reproduced", "reproduced")
    assert rep.markdown().count("\n") == 4
    assert all(line.count("|") == 5 for line in rep.markdown().splitlines())


def test_significant_heads_at_the_majority_rate_are_not_context_truthful_heads():
    """The audit's case: heads called significant whose S sits at the majority rate (2/3). The
    effect counts say so, and with no head above chance on the balanced metric the claim is not
    reproduced."""
    fm = _map(seed=3)
    at_majority = np.abs(fm.scores.scores - 2 / 3) < 0.03
    assert at_majority.sum() >= 2
    bad = dataclasses.replace(
        fm, p_maxt=np.where(at_majority, 0.01, 1.0)
    )  # as if the S test had passed them
    eff = bad.effect_counts()
    assert eff["S"]["n_sig"] == at_majority.sum() and eff["S"]["n_sig_S_margin"] == 0
    assert eff["auroc"]["n_sig"] == 0 and eff["S"]["n_sig_auroc_lo_margin"] == 0
    v = _verdicts(bad).verdict(CLAIM_HEADS)
    assert v.outcome == "not reproduced" and not v.failed


def test_a_shortcut_map_at_ceiling_is_inconclusive():
    fm = _map(n_facts=40, everywhere=True)
    assert np.nanmedian(fm.scores.auroc) > 0.95
    v = _verdicts(fm).verdict(CLAIM_HEADS)
    assert v.outcome == "inconclusive" and [c.kind for c in v.failed] == ["floor_ceiling"]


def test_too_few_facts_and_a_best_head_scored_where_chosen_are_flagged(planted):
    few = _map(n_facts=16, planted=(1, 2), strength=3.0)
    v = _verdicts(few).verdict(CLAIM_HEADS)
    assert v.outcome == "inconclusive" and "sampling_units" in {c.kind for c in v.failed}
    from interplab.experiments.truth_scores import facts_contrast

    c = facts_contrast(planted, n_boot=200, n_swaps=199)[0]
    best = dict(c["best_held_out"], score_facts=c["best_held_out"]["select_facts"])
    v = ValidityReport.of(map_verdicts(planted, contrast=dict(c, best_held_out=best)))
    assert [c.kind for c in v.verdict(CLAIM_HEADS).failed] == ["held_out"]


def test_contrast_auroc_is_the_fold_mean_auroc_and_its_swap_null_is_calibrated():
    from interplab.probes.truth.map_contrast import contrast_auroc, swap_null
    from interplab.probes.truth.map_stats import fold_mean_auroc, fold_of_rows

    fm = _map(seed=4)
    ts, rows = fm.scores, fm.rows
    a = contrast_auroc(ts, rows, "distractor")
    sub = rows["candidate_kind"].isin(["context", "distractor"]).to_numpy()
    fold = fold_of_rows(ts)
    for la, h in ((0, 0), (2, 5)):
        ref = np.column_stack([fold, rows["label"], ts.heldout_margin[:, la, h]])[sub]
        assert a[la, h] == pytest.approx(fold_mean_auroc(ref), abs=1e-12)
    obs, null = swap_null(ts, rows, "distractor", n=400, seed=1)
    assert np.array_equal(obs, a) and null.shape == (400, 3, 7)
    assert null.mean() == pytest.approx(0.5, abs=0.01)
    # a null map's maximum over 21 noise heads is exceeded by the observed maximum about 1 time in 2
    assert 0.05 < (null.reshape(400, -1).max(1) >= obs.max()).mean() < 0.95


def test_an_answer_in_context_head_is_not_a_context_truthful_head():
    """A head that only sees "this answer also occurs in the context" ranks the context answer above
    the memory answer always and above the distractor never: pooled AUROC ~0.75 and significant,
    against the distractor chance. The claim is not reproduced on it."""
    from interplab.probes.truth.map_contrast import contrast_auroc

    fm = _map(shortcut=(2, 3))
    assert fm.scores.auroc[2, 3] > 0.7 and fm.significant("maxt", "auroc")[2, 3]
    assert abs(contrast_auroc(fm.scores, fm.rows, "distractor")[2, 3] - 0.5) < 0.1
    assert contrast_auroc(fm.scores, fm.rows, "memory")[2, 3] > 0.95
    v = _verdicts(fm).verdict(CLAIM_HEADS)
    assert v.outcome == "not reproduced" and not v.failed


def test_pairs_without_a_distractor_leave_the_claim_undecided():
    X, y, g, rows = _triplets(60, planted=(1, 2), strength=3.0)
    keep = (rows["candidate_kind"] != "distractor").to_numpy()
    fm = facts_map_from_activations(
        X[keep],
        y[keep],
        g[keep],
        config=FAST,
        n_null=19,
        fold_seeds=(),
        n_boot=100,
        rows=rows[keep].reset_index(drop=True),
    )
    fm.evidence_mass = np.zeros(fm.scores.scores.shape)
    v = _verdicts(fm).verdict(CLAIM_HEADS)
    assert v.outcome == "inconclusive" and not v.failed and "shortcut" in v.reason


def test_old_maps_without_the_balanced_metric_are_refused():
    from interplab.core.errors import InputError

    X, y, g, _ = _triplets(20)
    fm = facts_map_from_activations(
        X, y, g, config=FAST, n_null=3, fold_seeds=(), n_boot=0, split_half=False
    )
    with pytest.raises(InputError, match="rerun truth-scores"):
        map_verdicts(fm)


# ------------------------------------------------------------------------------------------ lineage
# verdicts
def _study(r=0.95, p=0.001, ceiling=0.96, one_minus_cos=0.01, auroc=0.7, n_facts=300, rho_sign=1):
    rng = np.random.default_rng(0)
    shape = (6, 5)
    s_base = 0.6 + 0.1 * rng.random(shape)
    dS = 0.02 * rng.random(shape)
    cos = 1 - one_minus_cos * (1 + (rho_sign * dS.ravel() / dS.max()))

    def org(s):
        return SimpleNamespace(scores=SimpleNamespace(scores=s, auroc=np.full(shape, auroc)))

    return SimpleNamespace(
        lineage=pd.DataFrame([{"pearson": r, "perm_p": p, "null_mean": 0.3, "null_q95": 0.4}]),
        weights_descendant=pd.DataFrame({"cos_OV": cos}),
        base=org(s_base),
        descendant=org(s_base + dS),
        reliability={
            "fold_seed_r_min": ceiling,
            "split_half_r": 0.8,
            "split_half_full": 0.89,
            "r_auroc": 0.9,
            "n_facts": n_facts,
        },
        drift={"global_rel_change": 0.05, "kl_facts": 0.2},
    )


def test_lineage_that_moved_is_reproduced_and_one_that_did_not_is_inconclusive():
    vs = {v.claim: v for v in lineage_verdicts(_study())}
    assert vs[CLAIM_LINEAGE].outcome == "reproduced" and not vs[CLAIM_LINEAGE].failed
    assert vs[CLAIM_WEIGHTS].outcome == "reproduced"
    # the committed pydoc descendant: cos(OV) 0.999994 and r at the fold-seed ceiling -> the test
    # could not fail
    still = {
        v.claim: v for v in lineage_verdicts(_study(r=0.961, ceiling=0.967, one_minus_cos=6e-6))
    }
    for claim in (CLAIM_LINEAGE, CLAIM_WEIGHTS):
        assert still[claim].outcome == "inconclusive"
        assert [c.kind for c in still[claim].failed] == ["reliability_ceiling"]
    # barely moved but clearly below the ceiling: the map did change, so the comparison could fail
    below = lineage_verdicts(_study(r=0.80, ceiling=0.967, one_minus_cos=6e-6))[0]
    assert not below.failed
    assert lineage_verdicts(_study(p=0.4))[0].outcome == "not reproduced"
    assert lineage_verdicts(_study(rho_sign=-1))[1].outcome == "not reproduced"
    floor = lineage_verdicts(_study(auroc=0.51))[0]
    assert [c.kind for c in floor.failed] == ["floor_ceiling"]
    assert MIN_DRIFT > 6e-6 * 100
    for line in ValidityReport.of(lineage_verdicts(_study())).markdown().splitlines():
        assert line.count("|") == 5, line  # no cell text breaks the docs' claim table


def test_lineage_study_flags_a_descendant_identical_to_its_base(tmp_path, bpe_ckpt):  # noqa: F811
    """End to end on a random BPE llama: the base against itself (no drift, r = 1 at the ceiling)
    fails the reliability check; against a copy with every matrix moved by half its RMS the check
    passes. The experiment saves the report."""
    import torch

    import interplab
    from interplab.data.world_facts import counterfactual_items, load_facts
    from interplab.experiments.registry import run_experiment
    from interplab.probes.truth.studies import ProbeRecipe, lineage_study
    from interplab.results import load_run
    from interplab.train.checkpoint import save_checkpoint

    base = interplab.load_model(str(bpe_ckpt), device="cpu")
    items = counterfactual_items(load_facts())[:30]
    recipe = ProbeRecipe(folds=3, solver="lbfgs")
    same = lineage_study(
        {"base": base, "descendant": base},
        recipe=recipe,
        items=items,
        n_null=3,
        n_permutations=50,
        top_k_frac=0.25,
    )
    assert same.drift["global_rel_change"] == 0.0 and same.drift["kl_facts"] == pytest.approx(
        0.0, abs=1e-9
    )
    assert same.reliability["n_facts"] == 30 and np.isfinite(same.reliability["split_half_r"])
    v = lineage_verdicts(same)[0]
    assert "reliability_ceiling" in {c.kind for c in v.failed} and v.outcome == "inconclusive"

    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(str(bpe_ckpt))
    with torch.no_grad():
        g = torch.Generator().manual_seed(3)
        for prm in hf.parameters():
            if prm.ndim == 2:
                prm.add_(0.5 * prm.std() * torch.randn(prm.shape, generator=g))
    moved_dir = save_checkpoint(
        hf, AutoTokenizer.from_pretrained(str(bpe_ckpt)), tmp_path / "moved"
    )
    path = run_experiment(
        "truth-lineage",
        {
            "base": str(bpe_ckpt),
            "descendant": str(moved_dir),
            "control": "",
            "data": "world-facts",
            "known": "all",
            "n_facts": "30",
            "n_null": "3",
            "folds": "3",
            "solver": "lbfgs",
            "n_permutations": "50",
            "figure_formats": "",
        },
        root=tmp_path,
    )
    run = load_run(path)
    rep = run.validity()
    moved = rep.verdict(CLAIM_LINEAGE)
    rc = [c for c in moved.checks if c.kind == "reliability_ceiling"][0]
    assert rc.passed and rc.measured >= MIN_DRIFT
    res = run.result("lineage")
    assert res.drift["kl_facts"] > 0 and res.drift["global_rel_change"] > 0.1
    assert len(pd.read_csv(path / "tables" / "weight_drift.csv")) == len(res.weight_drift) > 0


def test_validation_organism_map_passes_every_check(tmp_path):
    """The validation organism (heads planted by construction): its map passes every check and its
    planted heads clear the effect margin. Its prompts are independent, so each positive is grouped
    with one negative (the within-group null needs both labels in a group; a map of singletons is
    refused)."""
    import interplab
    from interplab.core.errors import InputError
    from interplab.probes.truth.scores import capture_head_outputs
    from interplab.zoo.validation import (
        PlantedTruthSpec,
        build_planted_truth_organism,
        planted_truth_items,
    )

    m = interplab.load_model(str(build_planted_truth_organism(tmp_path / "planted")), device="cpu")
    items = planted_truth_items(146, seed=0)
    X = capture_head_outputs(m, [it["text"] for it in items])
    y = np.array([it["label"] for it in items])
    with pytest.raises(InputError, match="both labels"):
        facts_map_from_activations(X, y, np.arange(len(y)), config=FAST, n_null=3, n_boot=0)
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    groups = np.arange(len(y))
    groups[neg[: len(pos)]] = pos[: len(neg)]  # pair i-th positive with i-th negative
    fm = facts_map_from_activations(X, y, groups, config=FAST, n_null=19, fold_seeds=(), n_boot=200)
    fm.evidence_mass = np.random.default_rng(0).random(fm.scores.scores.shape)
    v = _verdicts(fm).verdict(CLAIM_HEADS)
    # every check quiet; the organism's wrong answers are never in its context, so the claim stays
    # undecided (the answer-in-context shortcut cannot be excluded), as the rule says
    assert not v.failed and v.outcome == "inconclusive" and "shortcut" in v.reason
    best = fm.best_held_out
    assert PlantedTruthSpec().planted_mask()[best["layer"], best["head"]]
    assert fm.effect_counts()["auroc"]["n_sig_auroc_lo_margin"] >= 4  # the 4 planted heads at least


def test_world_facts_run_saves_its_contrast_and_verdicts(tmp_path, bpe_ckpt):  # noqa: F811
    from interplab.experiments.registry import run_experiment
    from interplab.results import load_run

    path = run_experiment(
        "truth-scores",
        {
            "model": str(bpe_ckpt),
            "data": "world-facts",
            "known": "all",
            "n_facts": "24",
            "n_null": "3",
            "folds": "3",
            "solver": "lbfgs",
            "n_boot": "50",
            "figure_formats": "",
        },
        root=tmp_path,
    )
    run = load_run(path)
    contrast = run.json("contrast")
    assert contrast["negative"] == "distractor" and contrast["n_facts"] == 24
    assert len(pd.read_csv(path / "tables" / "contrast.csv")) == 8
    rep = run.validity()
    assert set(rep.verdicts["claim"]) == {CLAIM_HEADS, CLAIM_CEILING, CLAIM_EVIDENCE}
    assert "context answer vs in-context distractor" in rep.verdict(CLAIM_HEADS).measured
