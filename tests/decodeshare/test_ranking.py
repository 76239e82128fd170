"""Stage-aligned steering ranking (probes.decodeshare.ranking): where TRAD / DECODE steering acts, zero vectors
score exactly 0, and the proxy metrics equal hand-computed values."""
import numpy as np
import pandas as pd
import pytest
import torch


@pytest.fixture(scope="module")
def toy_random(tmp_path_factory):
    import interplab
    from interplab.data.toy_vocab import build_toy_tokenizer
    from interplab.train.arch import ArchConfig, build_model
    from interplab.train.checkpoint import save_checkpoint

    torch.set_num_threads(1)
    tok = build_toy_tokenizer()
    m = build_model(ArchConfig(n_layers=2, d_model=32, d_mlp=64, n_heads=2, n_kv_heads=1, d_head=16, n_ctx=128),
                    tok, seed=0)
    return interplab.load_model(save_checkpoint(m, tok, tmp_path_factory.mktemp("toyrank") / "ckpt"),
                                dtype=torch.float64)


def _resid(model, seq, layer, edit=None, plen=None):
    from interplab.interventions.projection import teacher_forced

    edits = [] if edit is None else [teacher_forced(edit, [plen])]
    return model.run([seq], capture=[f"resid_post.{layer}"], edits=edits, logits=False) \
        .cache[f"resid_post.{layer}"][0].detach().double().cpu().numpy()


def test_trad_and_decode_edit_only_their_positions(toy_random):
    from interplab.probes.decodeshare import multitask_sets
    from interplab.probes.decodeshare.ranking import decode_edit, trad_edit

    m, L, stage, scale = toy_random, 0, 2, 3.0
    s = multitask_sets(m, ["copy"], 1, seed=3)["copy"]
    prompt = s.prompts[0]
    T = len(prompt)
    v = np.random.default_rng(0).standard_normal(m.d_model)
    v /= np.linalg.norm(v)
    seq = prompt + [int(t) for t in m.generate([prompt], max_new_tokens=6).new_tokens[0]]
    base = _resid(m, seq, L)
    # TRAD: only the last prompt token moves (by exactly scale * v); no generated token is touched
    d_tr = _resid(m, seq, L, trad_edit(L, v, scale), T) - base
    np.testing.assert_allclose(d_tr[T - 1], scale * v, atol=1e-12)
    assert np.abs(np.delete(d_tr, T - 1, 0)).max() == 0.0
    # DECODE (staged): only generated tokens T .. T+stage-1 move; the prompt is untouched
    d_de = _resid(m, seq, L, decode_edit(L, v, scale, stage), T) - base
    np.testing.assert_allclose(d_de[T:T + stage], np.tile(scale * v, (stage, 1)), atol=1e-12)
    assert np.abs(d_de[:T]).max() == 0.0 and np.abs(d_de[T + stage:]).max() == 0.0
    # in a KV-cached generation, DECODE never changes the prefill (bitwise), TRAD never edits a decode step at L
    site = f"resid_post.{L}"
    g0 = m.generate([prompt], max_new_tokens=4, capture=[site])
    gd = m.generate([prompt], max_new_tokens=4, capture=[site], edits=[decode_edit(L, v, scale, stage)])
    assert torch.equal(g0.prefill_cache[site], gd.prefill_cache[site])
    gt = m.generate([prompt], max_new_tokens=4, capture=[site], edits=[trad_edit(L, v, scale)])
    assert not torch.equal(g0.prefill_cache[site], gt.prefill_cache[site])
    if gt.new_tokens[0][:1] == g0.new_tokens[0][:1]:  # same first fed token: the layer-L decode state is unchanged
        assert torch.equal(g0.decode_cache[site][:, 0], gt.decode_cache[site][:, 0])


def test_zero_vector_scores_exactly_zero_and_result_roundtrip(toy_random, tmp_path):
    from interplab.probes.decodeshare import multitask_sets
    from interplab.probes.decodeshare import RankingResult, steering_ranking

    m = toy_random
    tasks = ["copy", "mc"]
    rank = multitask_sets(m, tasks, 3, seed=1)
    real = [multitask_sets(m, tasks, 3, seed=2)]
    big = np.zeros((2, m.d_model))
    big[1, 0] = 1.0
    res = steering_ranking(m, 1, {"zero": np.zeros((1, m.d_model)), "axis": big}, rank, real, scale=50.0,
                           stage=2, max_new_tokens=5)
    z = res.scores[res.scores["family"] == "zero"].iloc[0]
    assert z["trad"] == 0.0 and z["decode"] == 0.0 and z["real"] == 0.0
    assert len(res.scores) == 3 and set(res.metrics["proxy"]) == {"trad", "decode"}
    assert {f"trad:{t}" for t in tasks} <= set(res.scores.columns)
    back = RankingResult.load(res.save(tmp_path / "rk"))
    pd.testing.assert_frame_equal(back.scores, res.scores)
    assert back.info["n_real_sets"] == 1 and back.info["stage"] == 2


def test_ranking_metrics_hand_computed():
    from interplab.probes.decodeshare import ranking_metrics

    real = np.arange(12, dtype=float)            # vector i has REAL = i; best = 11
    trad = real[::-1].copy()                      # reversed ranking: rho = -1, picks vector 0
    decode = real.copy()
    decode[[10, 11]] = decode[[11, 10]]           # swaps the top two: picks vector 10
    df = pd.DataFrame({"family": ["a"] * 6 + ["b"] * 6, "name": [f"v{i}" for i in range(12)],
                       "trad": trad, "decode": decode, "real": real})
    m = ranking_metrics(df, top_k=10).set_index(["group", "proxy"])
    assert m.loc[("all", "trad"), "rho"] == pytest.approx(-1.0)
    assert m.loc[("all", "trad"), "regret1"] == pytest.approx(11.0)
    assert m.loc[("all", "trad"), "top_pick"] == "v0"
    # top-10 of REAL = v2..v11; top-10 of TRAD = v0..v9 -> overlap {v2..v9} = 8 / 10
    assert m.loc[("all", "trad"), "overlap"] == pytest.approx(0.8)
    # Spearman with one adjacent swap: 1 - 6*(1+1)/(12*(144-1)) = 1 - 12/1716
    assert m.loc[("all", "decode"), "rho"] == pytest.approx(1 - 12 / 1716)
    assert m.loc[("all", "decode"), "regret1"] == pytest.approx(1.0)
    assert m.loc[("all", "decode"), "overlap"] == pytest.approx(1.0)
    # per family, k = min(10, 6) = 6: every family member is in both top-6 sets
    assert m.loc[("b", "trad"), "top_k"] == 6 and m.loc[("b", "trad"), "overlap"] == pytest.approx(1.0)
    assert m.loc[("b", "trad"), "regret1"] == pytest.approx(5.0)   # picks v6 (REAL 6), best v11
    assert m.loc[("a", "decode"), "regret1"] == pytest.approx(0.0)  # family a: decode order == real order


def test_ranking_part_runs_end_to_end(toy_random, tmp_path):
    from interplab.probes.decodeshare import DecodeShareConfig, run_study
    from interplab.probes.decodeshare.ranking import unit_rows

    cfg = DecodeShareConfig(model="unused", tasks=["copy", "rev", "mc"], n_calib=6, n_eval=3, null_perm_B=20, null_rot_B=0,
                            calib_max_new_tokens=4, eval_max_new_tokens=5, tau_k=1.0, rho=0.8, parts=["ranking"],
                            rank_n_eval=3, rank_real_sets=2, rank_n_caa=2, rank_n_instr=2, rank_n_random=2,
                            rank_caa_subset=4, rank_top_k=3)
    out = run_study(toy_random, cfg)
    rk = out.ranking
    assert list(rk.scores["family"]) == ["caa"] * 2 + ["instruction"] * 2 + ["random"] * 2
    assert np.allclose(rk.scores["norm"], rk.info["alpha"] * rk.info["mean_resid_norm"])
    assert np.allclose(rk.scores["real"], rk.scores[["real_0", "real_1"]].mean(1))
    assert set(rk.metrics["group"]) == {"all", "caa", "instruction", "random"}
    assert out.table is None and out.steering is None
    v = unit_rows([[3.0, 4.0], [0.0, 0.0]])
    assert np.allclose(v, [[0.6, 0.8], [0.0, 0.0]])
