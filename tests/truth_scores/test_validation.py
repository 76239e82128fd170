"""Issue 16: Truth Scores recover heads planted by construction, and the negative controls do not.

The organism's designated heads carry the verdict; the unchanged `truth_scores` must rank them on top (AUROC
planted vs rest >= 0.95, all in the top |planted| + 2), a descendant must keep the map (r >= 0.8, p < 0.01) while an
organism with other designated heads must not (r <= 0.3), and shuffled labels must not recover the heads."""
import numpy as np
import pytest

import interplab
from interplab.probes.truth import lineage_correlation, truth_scores
from interplab.probes.truth.validation import PlantedRecovery, planted_recovery, validate_truth_scores
from interplab.zoo.validation import (PlantedTruthSpec, build_planted_truth_organism, load_planted_truth,
                                      perturb_checkpoint, planted_conflict_items, planted_truth_items)

N = 146
OTHER = [(0, 2), (1, 6), (2, 0), (3, 4)]


@pytest.fixture(scope="module")
def organisms(tmp_path_factory):
    d = tmp_path_factory.mktemp("planted-truth")
    base = build_planted_truth_organism(d / "planted")
    other = build_planted_truth_organism(d / "other", PlantedTruthSpec(heads=OTHER))
    desc = perturb_checkpoint(base, d / "descendant", scale=0.05, seed=0)
    load = lambda p: interplab.load_model(str(p), device="cpu")  # noqa: E731
    return {"paths": {"base": base, "other": other, "descendant": desc},
            "models": {"base": load(base), "other": load(other), "descendant": load(desc)}}


@pytest.fixture(scope="module")
def maps(organisms):
    items = planted_truth_items(N, seed=0)
    return {k: truth_scores(m, items) for k, m in organisms["models"].items()}


def test_planted_truth_is_recorded_next_to_the_checkpoint(organisms):
    truth = load_planted_truth(organisms["paths"]["base"])
    assert truth["planted_heads"] == [list(h) for h in PlantedTruthSpec().heads]
    assert sum(r == "planted" for r in truth["head_roles"].values()) == 4
    assert load_planted_truth(organisms["paths"]["descendant"])["descendant_of"]["scale"] == 0.05


def test_planted_recovery_metric():
    mask = np.zeros((2, 3), bool)
    mask[0, 1] = mask[1, 2] = True
    s = np.array([[0.5, 0.9, 0.4], [0.6, 0.95, 0.3]])
    r = planted_recovery(s, mask)  # 0.9 beats 3 of the 4 others, 0.3 none: AUROC 3/8; 0.3 ranks last (6)
    assert isinstance(r, PlantedRecovery)
    assert r["auroc"] == pytest.approx(3 / 8) and r["worst_planted_rank"] == 6 and r["all_in_top"] == 0
    s[1, 2] = 0.99
    assert planted_recovery(s, mask) == {"auroc": 7 / 8, "worst_planted_rank": 3.0, "all_in_top": 1.0}


def test_truth_scores_recover_the_planted_heads(maps):
    mask = PlantedTruthSpec().planted_mask()
    rec = planted_recovery(maps["base"], mask)
    assert rec["auroc"] >= 0.95 and rec["all_in_top"] == 1.0, rec
    assert maps["base"].scores[mask].min() >= 0.95


def test_shuffled_labels_do_not_recover(organisms):
    items = planted_truth_items(N, seed=0)
    y = np.random.default_rng(1).permutation([it["label"] for it in items])
    ts = truth_scores(organisms["models"]["base"], [{**it, "label": int(v)} for it, v in zip(items, y)])
    rec = planted_recovery(ts, PlantedTruthSpec().planted_mask())
    assert rec["auroc"] < 0.95 and rec["all_in_top"] == 0.0, rec
    assert ts.scores.max() < 0.75


def test_other_heads_organism_is_a_failing_control(maps):
    # the planted heads' mask against the other organism's map: the check can fail
    rec = planted_recovery(maps["other"], PlantedTruthSpec().planted_mask())
    assert rec["auroc"] < 0.95 and rec["all_in_top"] == 0.0, rec
    assert maps["other"].scores[PlantedTruthSpec().planted_mask()].max() < 0.75
    assert planted_recovery(maps["other"], PlantedTruthSpec(heads=OTHER).planted_mask())["auroc"] >= 0.95


def test_lineage_descendant_keeps_the_map_other_heads_do_not(maps):
    d = lineage_correlation(maps["base"], maps["descendant"], n_permutations=1000, seed=0)
    o = lineage_correlation(maps["base"], maps["other"], n_permutations=1000, seed=0)
    assert d["pearson"] >= 0.8 and d["perm_p"] < 0.01, d
    assert o["pearson"] <= 0.3, o


def test_conflict_prompts_follow_memory_until_the_planted_heads_are_gated(organisms):
    from interplab.interventions.head_gate import HeadGate
    from interplab.probes.truth import ContextFollowing, context_following

    m = organisms["models"]["base"]
    items = planted_conflict_items(64, seed=3)
    assert isinstance(context_following(m, items[:4], max_new_tokens=1), ContextFollowing)
    assert context_following(m, items, max_new_tokens=1)["context_acc"] == pytest.approx(3 / 8)
    g = np.ones((4, 8))
    # tripling the planted copy (effective weight ~0.9 after the RMSNorms) beats every memory strength (max 1.8)
    g[PlantedTruthSpec().planted_mask()] = 3.0
    assert context_following(m, items, [HeadGate(g)], max_new_tokens=1)["context_acc"] == 1.0
    g = np.ones((4, 8))
    g[PlantedTruthSpec(heads=OTHER).planted_mask()] = 3.0  # the same gates on decoy heads change nothing
    assert context_following(m, items, [HeadGate(g)], max_new_tokens=1)["context_acc"] == pytest.approx(3 / 8)


@pytest.mark.slow
def test_validate_truth_scores_meets_the_targets(tmp_path):
    res = validate_truth_scores(seeds=(0,), n_samples=N, n_maps=40, workdir=tmp_path)
    table = res.recovery_table()
    assert res.passed(), table
    assert res.per_seed["ctx_gated"].iloc[0] > res.per_seed["ctx_baseline"].iloc[0]
    back = type(res).load(res.save(tmp_path / "saved"))
    assert back.per_seed.equals(res.per_seed) or np.allclose(back.per_seed.to_numpy(float),
                                                             res.per_seed.to_numpy(float))


def test_recovery_figure_highlights_the_planted_heads():
    from interplab.figures import truth_scores as F

    s = np.full((4, 8), 0.5)
    s[0, 5] = s[1, 2] = 1.0
    fig = F.planted_recovery_bars(s, [(0, 5), (1, 2)])
    bar = fig.data[0]
    assert list(bar.x[:2]) == ["L0H5", "L1H2"] and len(set(bar.marker.color[:2])) == 1
    assert bar.marker.color[0] != bar.marker.color[2]
    assert "context-following" in F.null_histogram(np.zeros(5), 0.8, 0.01, statistic="context-following").layout.xaxis.title.text
