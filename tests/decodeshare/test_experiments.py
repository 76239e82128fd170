"""The DecodeShare experiments end to end on a tiny random model with the toy vocabulary (no trained organism):
every section runs, writes its tables/figures, and the bookkeeping (controls, budgets, LOTO provenance) holds."""
import numpy as np
import pandas as pd
import pytest
import torch


@pytest.fixture(scope="module")
def toy_random(tmp_path_factory):
    from interplab.data.toy_vocab import build_toy_tokenizer
    from interplab.train.arch import ArchConfig, build_model
    from interplab.train.checkpoint import save_checkpoint

    torch.set_num_threads(1)
    tok = build_toy_tokenizer()
    m = build_model(ArchConfig(n_layers=2, d_model=32, d_mlp=64, n_heads=2, n_kv_heads=1, d_head=16, n_ctx=128),
                    tok, seed=0)
    return save_checkpoint(m, tok, tmp_path_factory.mktemp("toyrand") / "ckpt")


def test_multitask_sets_candidates(toy_random):
    import interplab
    from interplab.probes.decodeshare import multitask_sets

    m = interplab.load_model(toy_random)
    sets = multitask_sets(m, ["copy", "sort", "mc"], 5, split="test", fmt="raw")
    v = m.tokenizer.get_vocab()
    for t, s in sets.items():
        assert len(s) == 5 and s.fc_equiv[np.arange(5), s.fc_gold].all()
        for p, a, cs, g in zip(s.prompts, s.answers, s.fc_cands, s.fc_gold):
            assert p[0] == v["<bos>"] and p[1] == v[t] and p[-1] == v["sep"]
            assert cs[g] == a + [v["<eos>"]]
    chat = multitask_sets(m, ["rev"], 2, fmt="chat")["rev"]
    assert chat.stop == v["<|im_end|>"] and chat.prompts[0][-1] == v["assistant"]


@pytest.mark.slow
def test_decodeshare_experiment_runs_end_to_end(toy_random, tmp_path):
    from interplab.experiments.registry import run_experiment
    from interplab.probes.decodeshare import SharedSubspace
    from interplab.core.io import read_json, read_table

    path = run_experiment("decodeshare", {
        "model": str(toy_random), "tasks": "copy,rev,inc,mc", "n_calib": 6, "n_eval": 4, "null_perm_B": 50,
        "null_rot_B": 2, "alphas": "0,1", "steer_scales": "1", "n_boot": 100, "calib_max_new_tokens": 5,
        "eval_max_new_tokens": 5, "tau_k": 1.0, "rho": 0.8}, root=tmp_path)
    info = read_json(path / "json" / "info.json")
    ss = SharedSubspace.load(path / "subspace_decode")
    assert info["k_s"] == ss.k_s > 0 and info["mode"] == "paper"
    table = read_table(path / "tables" / "ablation.csv")
    conds = set(table["condition"])
    assert {"baseline", "shared", "prefill-est", "haar"} <= conds
    # every edited condition spent a budget; the baseline none
    assert (table[table["condition"] == "baseline"]["n_edited"] == 0).all()
    assert (table[(table["condition"] != "baseline") & (table["task"] != "all")]["n_edited"] > 0).all()
    for c, note in info["conditions"].items():
        if note["k"] is not None and c != "k-match":
            assert note["k"] == ss.k_s
    # shared minus control = the difference of their accuracies, paired over the same examples
    svc = read_table(path / "tables" / "shared_vs_controls.csv")
    assert "shared" not in set(svc["control"]) and "haar" in set(svc["control"])
    acc = table.set_index(["condition", "task", "metric"])["acc"]
    for r in svc.itertuples():
        assert np.isclose(r.shared_minus_control, acc[("shared", r.task, r.metric)] - acc[(r.control, r.task, r.metric)])
        assert r.lo <= r.shared_minus_control + 1e-12 and r.shared_minus_control <= r.hi + 1e-12
    loto = read_table(path / "tables" / "loto.csv")
    assert {"loto-removed", "loto-haar", "loto-haar-energy"} <= set(loto["condition"])
    h3 = read_table(path / "tables" / "h3_grid.csv")
    assert len(h3) == 4 * 2 * 2  # decode / prefill / random / random-energy estimators x 2 loci x 2 metrics
    assert set(h3["estimator"]) == {"decode", "prefill", "random", "random-energy"}
    # the prefill locus edits one position per prompt; the decode locus many
    pre = h3[(h3["locus"] == "prefill") & (h3["metric"] == "gen")]["n_edited"]
    assert (pre == 4 * 4).all()
    sweep = read_table(path / "tables" / "alpha_sweep.csv")
    zero = sweep[sweep["alpha"] == 0]
    assert (zero["n_edited"] == 0).all() and np.allclose(zero["delta"], 0)
    assert (path / "figures" / "ablation_gen.html").exists() and (path / "figures" / "h3_fc.html").exists()
    st = read_table(path / "tables" / "steering.csv")
    assert set(st["vector"]) == {"v", "repaired"}
    assert 0 <= info["steering"]["sh_v"] <= 1
    # the run reopens as its typed result, and the saved tables are views of it
    from interplab.core.result import Result
    from interplab.probes.decodeshare import DecodeShareStudy

    study = Result.load_any(path / "study")
    assert isinstance(study, DecodeShareStudy) and study.subspaces.decode.k_s == ss.k_s
    pd.testing.assert_frame_equal(study.table.reset_index(drop=True), table, check_dtype=False)


@pytest.mark.slow
def test_decodeshare_layers_experiment(toy_random, tmp_path):
    from interplab.experiments.registry import run_experiment
    from interplab.core.io import read_table

    path = run_experiment("decodeshare-layers", {
        "model": str(toy_random), "tasks": "copy,rev,mc", "n_calib": 5, "null_perm_B": 30, "null_rot_B": 2,
        "calib_max_new_tokens": 4}, root=tmp_path)
    df = read_table(path / "tables" / "layers.csv")
    assert sorted(set(df["layer"])) == [0, 1] and set(df["mode"]) == {"paper", "repo"}
    assert (df["k_s"] <= df["bound"]).all() and (df["p_perm"] >= 1 / 31 - 1e-12).all()
    assert set(df["threshold"]) == {"tau=0.001", "tau_k=1"}
    sw = read_table(path / "tables" / "sensitivity.csv")
    assert {"tau", "rho", "k", "k_s", "tau_k"} <= set(sw.columns)
    from interplab.core.result import Result
    from interplab.probes.decodeshare import LayerScan

    scan = Result.load_any(path / "scan")
    assert isinstance(scan, LayerScan) and len(scan.entries()) == len(df)
    for r in df.itertuples():
        assert scan.subspace(r.layer, r.mode, r.threshold).k_s == r.k_s
        assert scan.subspace(r.layer, r.mode, r.threshold, prefill=True).k_s == r.k_s_prefill
    with pytest.raises(Exception, match="has no subspace"):
        scan.subspace(99, "paper", "tau=0.001")


def test_decodeshare_patchback_part_runs(toy_random, tmp_path):
    """parts=patchback alone: the tables are written (a random model flips nothing it got right, so the rescue table
    may be empty; the rates themselves are tested on a random Llama in test_patchback.py)."""
    from interplab.experiments.registry import run_experiment
    from interplab.core.io import read_json

    path = run_experiment("decodeshare", {
        "model": str(toy_random), "tasks": "copy,rev", "n_calib": 6, "n_eval": 4, "null_perm_B": 20,
        "null_rot_B": 0, "n_boot": 50, "calib_max_new_tokens": 5, "eval_max_new_tokens": 5, "tau_k": 1.0,
        "rho": 0.8, "parts": "patchback", "patch_windows": ["0", "all"]}, root=tmp_path)
    info = read_json(path / "json" / "info.json")
    # seeded: tau_k = 1 finds shared directions on this model; the |S| = 0 path has its own test below
    assert info["k_s"] > 0 and "error" not in info, info
    pb = info["patchback"]
    assert pb["windows"] == ["{0}", "all"] and pb["variant"] == "plain" and pb["n_examples"] == 8
    assert set(pb["controls"]) <= {"non-shared", "haar"} and "haar" in pb["controls"]
    assert (path / "tables" / "patchback.csv").exists()
    assert not (path / "tables" / "ablation.csv").exists()


def test_decodeshare_empty_shared_set_stops_with_a_reason(toy_random, tmp_path):
    """|S| = 0 (forced with an unreachable threshold): the study records why it ran no intervention and writes
    no intervention tables, instead of failing or silently writing empty ones."""
    from interplab.experiments.registry import run_experiment
    from interplab.core.io import read_json

    path = run_experiment("decodeshare", {
        "model": str(toy_random), "tasks": "copy,rev", "n_calib": 4, "n_eval": 2, "null_perm_B": 20,
        "null_rot_B": 0, "calib_max_new_tokens": 4, "tau_k": 0.0, "tau": 0.99, "parts": "patchback"}, root=tmp_path)
    info = read_json(path / "json" / "info.json")
    assert info["k_s"] == 0 and "no shared direction" in info["error"]
    assert info["p_perm"] == 1.0  # by definition when |S| = 0
    assert not (path / "tables" / "patchback.csv").exists() and "patchback" not in info
