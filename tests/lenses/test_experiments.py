"""`interplab run patching` and `interplab run logit-lens` write their results on a random checkpoint."""
from __future__ import annotations

import numpy as np
import pytest

from interplab.experiments import run_experiment
from interplab.results import load_run


@pytest.mark.slow
def test_patching_and_logit_lens_experiments(llama_ckpt, tmp_path):
    import interplab.probes.lenses  # noqa: F401 - registers the result classes for load_run

    path = run_experiment("patching", {"model": str(llama_ckpt), "clean": "w1 w2 w3 w4 w5",
                                       "corrupt": "w1 w9 w3 w4 w5", "sites": "resid_pre,mlp_out", "ig_steps": "2"},
                          root=tmp_path)
    run = load_run(path)
    exact = run.result("exact")
    assert exact["resid_pre"].values.shape == (3, 6)
    assert run.result("attribution_ig")["mlp_out"].method == "ig"
    assert (path / "figures" / "patching_resid_pre.html").is_file()
    path = run_experiment("logit-lens", {"model": str(llama_ckpt), "prompt": "w1 w2 w3 w4 w5", "tuned_steps": "5",
                                         "n_tuned_prompts": "2"}, root=tmp_path)
    run = load_run(path)
    assert run.result("logit_lens").kl.shape == (3, 6) and run.result("tuned_lens").A.shape[0] == 3
    d = run.result("dla")
    assert np.abs(d.component_sum - d.total).max() < 1e-4


def test_atlas_experiment_smoke(llama_ckpt, tmp_path):
    """The `atlas` experiment's fast configuration: the planted-truth organism (built into the run folder) and a
    random checkpoint, where most methods do not apply and say why."""
    import json

    import torch

    import interplab.probes.lenses  # noqa: F401 - registers the result classes for load_run

    n = torch.get_num_threads()
    try:
        path = run_experiment("atlas", {"models": f"planted:truth,{llama_ckpt}", "n_boot": "200",
                                        "n_truth_items": "64"}, root=tmp_path)
    finally:
        torch.set_num_threads(n)
    run = load_run(path)
    a = run.result("atlas_planted-truth")
    assert a.planted["passed"].all() and set(a.top_heads("patching", 4)) == {(0, 5), (1, 2), (2, 6), (3, 1)}
    summary = json.loads((path / "json" / "summary.json").read_text())
    rnd = next(v for k, v in summary["models"].items() if k != "planted-truth")
    # a model without the toy vocabulary reads the real-model data: world facts (truth), built-in chat tasks
    # (decodeshare); CRH has no data for it and no SAE is shipped
    assert {"crh", "sae"} <= set(rnd["unavailable"]) and not {"truth", "decodeshare"} & set(rnd["unavailable"])
    assert "truth" in rnd["top_heads"] and rnd["planted_passed"] is None
    assert (path / "figures" / "planted-truth_heads_truth.html").is_file()
    assert (path / "tables" / "planted.csv").is_file()
