"""The Truth-Score experiments run end to end (released maps; random toy-vocabulary checkpoints standing in for
the zoo organisms) and write what the app and the report read."""
from __future__ import annotations


import numpy as np
import pytest

from interplab.experiments.registry import run_experiment
from interplab.results.runs import load_run
from tests.truth_scores._released import needs_released


@needs_released
def test_released_lineage_experiment(tmp_path):
    path = run_experiment("truth-released-lineage", {"n_permutations": "50", "figure_formats": ""}, root=tmp_path)
    run = load_run(path)
    assert round(run.json("summary")["r_llama2_vicuna"], 2) == 0.85
    res = run.result("released_lineage")
    lin = res.lineage
    assert len(lin) == 7 and {"pearson", "spearman", "pearson_centered", "topk_jaccard", "perm_p"} <= set(lin)
    gates = res.shipped_gates.set_index(["map", "mode", "alpha"])
    assert round(gates.loc[("qwen2.5", "contrast", 6.0), "gate_min"], 3) == -1.796
    assert "matrix_pearson" in run.figure_names


def test_truth_scores_experiment_on_random_toy(tmp_path, toy_random_ckpts):
    path = run_experiment("truth-scores", {"model": str(toy_random_ckpts["base"]), "n_samples": "40",
                                           "epochs": "20", "figure_formats": ""}, root=tmp_path)
    run = load_run(path)
    res = run.result("truth_scores")
    s = res.scores.to_frame()
    assert len(s) == 3 * 4 and s["score"].between(0, 1).all()
    em = res.evidence_mass
    assert em.shape == (3, 4) and np.all((em >= 0) & (em <= 1 + 1e-6))
    assert set(res.evidence_groups["group"]) == {"top-k", "bottom-k", "random-k"}
    summ = run.json("summary")
    drop = res.ablation_drop
    assert drop.shape == (3, 4) and 0 <= summ["verification_accuracy"] <= 1
    assert summ["max_ablation_drop"] == pytest.approx(drop.max())


def test_lineage_and_sweep_experiments_on_random_toy(tmp_path, toy_random_ckpts):
    c = toy_random_ckpts
    path = run_experiment("truth-lineage", {"base": str(c["base"]), "descendant": str(c["desc"]),
                                            "control": str(c["control"]), "n_samples": "60", "epochs": "30",
                                            "n_permutations": "50", "figure_formats": ""}, root=tmp_path)
    res = load_run(path).result("lineage")
    lin = res.lineage
    assert list(lin["pair"]) == ["base↔descendant", "base↔control"]
    wp = res.weight_summary.set_index("pair")
    assert wp.loc["base→descendant", "mean_cos_OV"] > 0.99 > abs(wp.loc["base→control", "mean_cos_OV"])
    path = run_experiment("truth-gating-sweep", {"target": str(c["desc"]), "score_source": str(c["base"]),
                                                 "target_fmt": "chat", "n_samples": "40", "epochs": "20",
                                                 "n_eval": "24", "alphas": "0,1", "figure_formats": ""},
                          root=tmp_path)
    sweep = load_run(path).result("sweep").table
    assert len(sweep) == 2 * 2 * 2 and sweep["context_acc"].between(0, 1).all()
    base = sweep[sweep["alpha"] == 0]
    assert base["context_acc"].nunique() == 1  # alpha 0 is the same ungated baseline for every mode and site
