import json

import numpy as np
import pytest

from interplab.experiments.registry import get_experiment, run_experiment


def test_crh_synthetic_experiment(tmp_path):
    path = run_experiment("crh-synthetic", {"n_seeds": 3, "impl3_concepts": 4, "impl3_test": 20, "n_perm": 50},
                          root=tmp_path)
    s = json.loads((path / "json" / "summary.json").read_text())
    assert all(s["pass"].values()), s["pass"]
    assert s["median"]["null_plane_explained"] < 0.1 < 0.9 < s["median"]["plane_explained"]
    assert abs(s["helix"]["helix_n1.0"]["n_rot"] - 1.0) < 0.05
    assert (path / "figures" / "cylinder_scene.html").exists()
    # tied facilitating: label-2 rate at L_max non-increasing in p
    r = np.array(s["penalty_label2_rate_at_Lmax"]["tied_facilitating"])
    assert np.all(np.diff(r) <= 1e-12)
    # the run reopens as its typed result (issue 26 §3), whose tables are the saved ones
    import pandas as pd

    from interplab.probes.crh.study import SyntheticStudy
    from interplab.results import load_run

    study = load_run(path).result("study")
    assert isinstance(study, SyntheticStudy)
    pd.testing.assert_frame_equal(study.recovery.reset_index(drop=True),
                                  pd.read_csv(path / "tables" / "recovery.csv"), check_dtype=False)


@pytest.mark.slow
def test_crh_toy_experiment_on_random_checkpoint(tmp_path, checkpoint_factory):
    ckpt = checkpoint_factory("llama", n_layers=2, vocab=96)
    assert get_experiment("crh-toy").config.__name__ == "CRHToyConfig"
    path = run_experiment("crh-toy", {"model": str(ckpt), "concepts": "animal,color", "n_train": 12, "n_test": 4,
                                      "n_p": 3, "n_strengths": 3, "n_bins": 4, "max_new_tokens": 4, "n_perm": 20,
                                      "vocab_fallback": True}, root=tmp_path)
    s = json.loads((path / "json" / "summary.json").read_text())
    assert s["steer_layer"] == 1
    assert set(s["cylinder"]["cylinder_score"]) == {"0", "1"} or set(s["cylinder"]["cylinder_score"]) == {0, 1}
    assert (path / "tables" / "cylinder_stats.csv").exists()
    assert (path / "figures" / "penalty_heatmaps.html").exists()
    assert 0.0 <= s["penalty_max_label2_rate"] <= 1.0
    from interplab.probes.crh.study import ConceptStudy
    from interplab.results import load_run

    assert isinstance(load_run(path).result("study"), ConceptStudy)


def test_toy_data_without_fallback_says_what_to_do(llama):
    from interplab.core.errors import ConfigError
    from interplab.probes.crh import toy_concept_data

    m = llama
    with pytest.raises(ConfigError, match="vocab_fallback"):
        toy_concept_data(m, "animal", n_train=2, n_test=1)


def test_run_concept_study_on_random_checkpoint(llama):
    from interplab.probes.crh import ConceptStudyConfig, run_concept_study, toy_concept_data

    m = llama
    cfg = ConceptStudyConfig(n_p=3, n_strengths=3, n_bins=4, max_new_tokens=4, n_perm=20, layers=[0, 1])
    data = [toy_concept_data(m, c, n_train=12, n_test=4, seed=i, vocab_fallback=True)
            for i, c in enumerate(["animal", "food"])]
    res = run_concept_study(m, data, cfg, log=lambda *_: None)
    assert len(res.stats) == 2 * 2 and res.steer_layer == 1
    assert np.all(res.stats["plane_explained"].between(0, 1))
    assert res.pooled_penalty.labels.shape == (8, 3, 3)
    assert res.pooled_sector.labels.shape == (8, 4, 3)
    assert set(res.concepts["animal"].baselines.methods) == {"diffmean", "pca", "probe"}
    # the diffs used for the cylinder are the train pairs' at the steering layer: the axis matches diffmean
    from interplab.probes.crh import concept_diffs, diffmean_direction

    d = concept_diffs(m, data[0].train_pairs, layer=res.steer_layer)
    np.testing.assert_allclose(res.concepts["animal"].cylinder.axis, diffmean_direction(d), atol=1e-12)


def test_toy_data_raw_and_chat_formats(llama):
    from interplab.probes.crh import model_format, toy_concept_data

    tok = llama.tokenizer
    assert model_format(llama) == "chat"                      # random checkpoints carry a chat template, no card
    raw = toy_concept_data(llama, "animal", n_train=3, n_test=2, vocab_fallback=True, fmt="raw")
    no, yes = raw.train_pairs[0]
    assert no[0] == yes[0] == tok.bos_token_id and no[-1] == yes[-1] == tok.eos_token_id
    p = raw.test_prompts[0]
    assert raw.test_pairs[0][0][: len(p)] == p and raw.test_pairs[0][1][: len(p)] == p     # prompt = shared prefix
    assert sum(t in {tok.convert_tokens_to_ids(w) for w in raw.words} for t in yes) > 0
    assert not any(t in {tok.convert_tokens_to_ids(w) for w in raw.words} for t in no)
    last = toy_concept_data(llama, "animal", n_train=3, n_test=2, vocab_fallback=True, fmt="raw",
                            read_at="last_response")
    assert last.train_pairs[0][0] == no[:-1]
    chat = toy_concept_data(llama, "animal", n_train=3, n_test=2, vocab_fallback=True, fmt="chat")
    end = tok.convert_tokens_to_ids("<|im_end|>")
    assert chat.train_pairs[0][0][-1] == end and chat.test_prompts[0][-1] == tok.convert_tokens_to_ids("assistant")


def test_synthetic_study_roundtrip(tmp_path):
    from interplab.core.result import Result
    from interplab.probes.crh import SyntheticStudyConfig, synthetic_study

    cfg = SyntheticStudyConfig(n_seeds=2, n_train=100, n_strengths=6, n_bins=12, impl3_concepts=3, impl3_test=10,
                               n_perm=50)
    study = synthetic_study(cfg)
    back = Result.load_any(study.save(tmp_path / "study"))
    assert back.config == cfg and back.summary() == study.summary()
    np.testing.assert_array_equal(back.example_sector_map.labels, study.example_sector_map.labels)
