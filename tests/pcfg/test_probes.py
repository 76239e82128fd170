"""grammar_kl / pcfg_kl / parse_probes: metric identities with the exact grammar as the model, planted probe signals, l*."""
import math

import numpy as np
import pandas as pd
import pytest
import torch

from interplab.grammar import random_cnf, uniform_binary
from interplab.grammar.oracle import GrammarOracleLM
from interplab.models import wrap_hf_model
from interplab.probes.pcfg import attention_offset_mass, local_to_global, lstar_slope, parse_probes, pcfg_kl
from interplab.probes.pcfg.fit import fit_linear, fit_mlp, shuffle_within_token, split_sequences
from interplab.train.grammar_eval import KLSummary, grammar_kl, kl_summary
from interplab.zoo.recipes.pcfg import pcfg_tokenizer

torch.set_num_threads(1)


def test_kl_of_grammar_with_itself_is_zero_and_excess_nll_matches_kl():
    g = random_cnf(N=4, V=4, p_bin=0.4, seed=0)
    tok = pcfg_tokenizer(g)
    df = grammar_kl(GrammarOracleLM(g, tok), g, 200, 0, tokenizer=tok, max_len=30, n_baseline=2000)
    s = kl_summary(df)
    assert isinstance(s, KLSummary) and kl_summary(pd.DataFrame()) == {}   # a frame without a summary: as before
    assert abs(s["kl"]) < 1e-6 and abs(s["tv"]) < 1e-6 and abs(s["excess_nll"]) < 1e-6
    assert s["kl_bigram"] > 0 and s["kl_unigram"] >= s["kl_bigram"] - 0.02
    assert np.allclose(df["entropy"], df["nll_model"], atol=1e-5)
    # a planted miscalibration: q = 0.8 p_G + 0.2 uniform. KL > 0 and the excess NLL estimates it
    df = grammar_kl(GrammarOracleLM(g, tok, mix=0.2), g, 400, 1, tokenizer=tok, max_len=30, baselines=False)
    s = kl_summary(df)
    assert s["kl"] > 0.01
    assert abs(s["excess_nll"] - s["kl_token"]) < 4 * s["excess_nll_se"]
    # exact KL of the mixture at the empty prefix, by hand
    from interplab.grammar import next_token_logprobs
    p0 = next_token_logprobs(g, torch.zeros(1, 1, dtype=torch.long), torch.tensor([1]))[0, 0].exp()
    q0 = 0.8 * p0 + 0.2 / (g.V + 1)
    ref = float(torch.where(p0 > 0, p0 * torch.log(p0 / q0), torch.zeros_like(p0)).sum())
    assert abs(float(df.loc[df.position == 0, "kl"].iloc[0]) - ref) < 1e-6


def test_linear_probe_recovers_planted_signal_and_controls_fall():
    rng = np.random.default_rng(0)
    n, d = 1200, 16
    X = torch.tensor(rng.normal(size=(3, n, d)))
    w = rng.normal(size=(d, 2))
    Y = torch.tensor(X[1].numpy() @ w)  # layer 1 holds a linear signal; layers 0, 2 are noise
    X[2] = torch.tensor(rng.normal(size=(n, d)))
    seqs = np.arange(n) // 4
    tr, va, te = split_sequences(seqs, n // 4, 0)
    sc = fit_linear(X, Y, tr, va, te, "r2")
    assert sc[1] > 0.99 and sc[0] < 0.05 and sc[2] < 0.05
    tokids = rng.integers(0, 3, size=n)
    Ysh = torch.tensor(shuffle_within_token(Y.numpy(), tokids, 0))
    assert fit_linear(X, Ysh, tr, va, te, "r2")[1] < 0.05
    # classification
    lab = (Y[:, 0] > 0).long()
    onehot = torch.nn.functional.one_hot(lab, 2).double()
    acc = fit_linear(X, onehot, tr, va, te, "acc")
    assert acc[1] > 0.9 and acc[0] < 0.7
    sc_mlp = fit_mlp(X, Y, tr, va, te, "r2", epochs=150)
    assert sc_mlp[1] > 0.8 and sc_mlp[0] < 0.2


def test_local_to_global_statistic():
    rows = []
    for bk, lo, curve in (("1", 1, [0.2, 0.95, 1.0, 1.0]), ("2-3", 2, [0.1, 0.5, 0.95, 1.0]),
                          ("4-7", 4, [0.0, 0.2, 0.5, 0.8])):
        for l, s in zip(range(-1, 3), curve):
            rows.append({"layer": l, "target": "x", "bucket": bk, "span_len_lo": lo, "score": s})
    ls = local_to_global(pd.DataFrame(rows))
    assert dict(zip(ls.bucket, ls.l_star)) == {"1": 0, "2-3": 1, "4-7": 2}
    sl = lstar_slope(ls, "x")
    assert math.isclose(sl["slope"], 1.0, abs_tol=1e-9)


@pytest.fixture(scope="module")
def tiny_model():
    from interplab.train.arch import ArchConfig, build_model
    g = uniform_binary(L=3, K=2, q=3, V=6, k_lex=2, alpha=0.5, alpha_lex=0.5, seed=0)
    tok = pcfg_tokenizer(g)
    arch = ArchConfig(family="llama", n_layers=2, d_model=32, d_mlp=64, n_heads=4, n_kv_heads=2, d_head=8, n_ctx=16)
    return g, tok, wrap_hf_model(build_model(arch, tok, seed=0), tok)


def test_parse_probes_frame_on_tiny_model(tiny_model):
    g, tok, m = tiny_model
    df = parse_probes(m, g, n_sequences=80, seed=0,
                      targets=("span_posterior", "inside", "gold_label", "pending", "next_token", "marginal"))
    assert set(df.layer) == {-1, 0, 1}
    assert {"score", "score_random_init", "score_shuffled", "selectivity", "l_star", "bucket"} <= set(df.columns)
    assert set(df.target) >= {"span_posterior", "gold_label", "pending", "next_token"}
    assert df.score.notna().all() and (df.score <= 1 + 1e-9).all()
    # the level-1 label of a single token is (nearly) determined by the token: high accuracy already at layer -1
    acc1 = df[(df.target == "gold_label") & (df.bucket == "1")].score
    assert acc1.max() > 0.5


def test_attention_offset_mass_frame(tiny_model):
    g, tok, m = tiny_model
    am = attention_offset_mass(m, g, 16)
    assert set(am.k) == {1, 2, 3} and set(am.layer) == {0, 1} and (am.mass >= 0).all() and (am.mass <= 1).all()


def _planted_offset_gpt2(tok, offset: int, n_ctx: int = 16, head: int = 1):
    """A GPT-2 whose layer-0 head `head` attends exactly `offset` tokens back, set by hand: token embeddings are
    zero and position p's embedding is the one-hot e_p, so after ln_1 the residual is a(e_p - 1/d); on that head
    W_K is the identity and W_Q the shift e_p -> e_{p-offset}, scaled so the softmax is one-hot to 1e-6."""
    from transformers import GPT2Config, GPT2LMHeadModel

    d = 2 * n_ctx
    cfg = GPT2Config(vocab_size=len(tok), n_positions=n_ctx, n_embd=d, n_layer=2, n_head=2, attn_pdrop=0,
                     resid_pdrop=0, embd_pdrop=0, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        hf.transformer.wte.weight.zero_()
        hf.transformer.wpe.weight.zero_()
        hf.transformer.wpe.weight[:, :n_ctx] = torch.eye(n_ctx)
        attn = hf.transformer.h[0].attn
        W = attn.c_attn.weight  # Conv1D [d_in, 3d]: q | k | v
        attn.c_attn.bias.zero_()
        q_cols = slice(head * n_ctx, (head + 1) * n_ctx)
        k_cols = slice(d + head * n_ctx, d + (head + 1) * n_ctx)
        W[:, q_cols] = 0
        W[:, k_cols] = 0
        for p in range(offset, n_ctx):
            W[p, head * n_ctx + p - offset] = 200.0  # q_p = 200 e_{p - offset}
        W[:n_ctx, k_cols] = torch.eye(n_ctx)       # k_j = e_j
    return hf.double()


@pytest.mark.parametrize("k", [1, 2, 3])
def test_attention_offset_mass_finds_planted_offset_head(k):
    """A head planted to attend 2^(k-1) back must show mass ~1 at that k and ~0 at the others; the other
    (random) head and layer 1 must not look like it."""
    g = uniform_binary(L=3, K=2, q=3, V=6, k_lex=2, alpha=0.5, alpha_lex=0.5, seed=0)
    tok = pcfg_tokenizer(g)
    m = wrap_hf_model(_planted_offset_gpt2(tok, 2 ** (k - 1)), tok)
    am = attention_offset_mass(m, g, 16).set_index(["layer", "head", "k"])
    assert am.loc[(0, 1, k), "mass"] > 0.999
    assert am.loc[(0, 1, k), "mass_aligned"] > 0.999
    others = [j for j in (1, 2, 3) if j != k]
    assert all(am.loc[(0, 1, j), "mass"] < 0.2 for j in others)
    planted = (am.index.get_level_values(0) == 0) & (am.index.get_level_values(1) == 1)
    assert am[~planted]["mass"].max() < 0.5


def test_results_round_trip(tiny_model, tmp_path):
    from interplab.core.result import Result
    from interplab.probes.pcfg import ConstructionMirror, ProbeStudy, construction_mirror, depth_sweep, probe_study

    g, tok, m = tiny_model
    cm = construction_mirror(m, g, 24, 0, n_seeds=1)
    back = Result.load_any(cm.save(tmp_path / "cm"))
    assert isinstance(back, ConstructionMirror) and back.log2_n == cm.log2_n == 3
    pd.testing.assert_frame_equal(back.kl, cm.kl)
    assert back.summary() == cm.summary()
    st = probe_study(m, g, ["next_token"], n_sequences=60, n_seeds=1)
    back = ProbeStudy.load(st.save(tmp_path / "study"))
    pd.testing.assert_frame_equal(back.probes, st.probes)
    assert back.slopes.keys() == st.slopes.keys()
    ds = depth_sweep([m], ["tiny"], g, 16, 0)
    assert list(ds.frames()) == ["tiny"] and ds.headline()["log2_n"] == 3.0
    assert "model" not in ds.frames()["tiny"].columns


def test_probes_take_a_lab_model_and_wrap_matches_plain_forward(tiny_model):
    from interplab.core.errors import InputError
    from interplab.models import wrap_hf_model

    g, tok, m = tiny_model
    with pytest.raises(InputError, match="wrap_hf_model"):
        pcfg_kl(m.hf_model, g, 8)
    # no tokenizer: id inputs only, special ids from the config
    bare = wrap_hf_model(m.hf_model, backend="nnsight")
    rows = [[1, 7, 8, 9, 10], [1, 8]]
    ref = m.hf_model(input_ids=torch.tensor(rows[:1])).logits
    assert torch.allclose(bare.run(rows).logits[0], ref[0], atol=1e-6)
    assert torch.allclose(m.run(rows).logits[0], ref[0], atol=1e-6)
