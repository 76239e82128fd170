"""Truth Scores and head gating on random checkpoints (float64): gate identities, capture invariances, planted
signals through the model, weight preservation and evidence attention against hand computations."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import interplab
from interplab.interventions import Ablate, Steer
from interplab.interventions.head_gate import HeadGate, truth_gates
from interplab.probes.truth.scores import capture_head_outputs, evidence_attention, truth_scores
from interplab.probes.truth.weights import weight_preservation
from interplab.testing import assert_same_across_shapes

N_LAYERS = 3  # random llama: 3 layers x 4 query heads (2 KV heads), d_model 64 = 4 x 16: L != H
TEXTS = ["w1 w2 w3 w4", "w5 w6", "w7 w8 w9 w10 w11 w3", "w12"]


@pytest.fixture(scope="module")
def ckpt(checkpoint_factory):
    return checkpoint_factory("llama", n_layers=N_LAYERS)


@pytest.fixture(scope="module")
def m(model_factory):
    return model_factory("llama", dtype="float64", n_layers=N_LAYERS)


def _variant(ckpt, tmp_path, fn):
    """Copy of the checkpoint with fn(hf_model) applied to its weights, loaded in float64."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float64)
    with torch.no_grad():
        fn(hf)
    hf.save_pretrained(str(tmp_path))
    AutoTokenizer.from_pretrained(str(ckpt)).save_pretrained(str(tmp_path))
    return interplab.load_model(tmp_path, device="cpu", dtype="float64")


def _gates(seed=0, alpha=3.0, mode="contrast"):
    s = np.random.default_rng(seed).uniform(0.4, 1.0, (N_LAYERS, 4))
    return truth_gates(s, mode, alpha, n_layers=N_LAYERS, n_heads=4)


@pytest.mark.parametrize("site", ["z", "attn_out_chunks"])
def test_alpha_zero_is_bit_identical_prefill_and_cached_decode(m, site):
    s = np.random.default_rng(0).uniform(0.4, 1.0, (N_LAYERS, 4))
    ref = m.run(TEXTS)
    ref_gen = m.generate(TEXTS, max_new_tokens=4, stop_at_eos=False)
    for mode in ("normalize", "contrast"):
        gate = HeadGate(truth_gates(s, mode, 0.0), site=site)
        assert torch.equal(m.run(TEXTS, edits=[gate]).logits, ref.logits)
        gen = m.generate(TEXTS, max_new_tokens=4, edits=[gate], stop_at_eos=False)
        assert torch.equal(gen.tokens, ref_gen.tokens) and torch.equal(gen.step_logits, ref_gen.step_logits)
    # constant scores within each layer also give gates of exactly 1
    const = np.repeat(np.array([[0.7], [0.9], [0.55]]), 4, axis=1)
    assert torch.equal(m.run(TEXTS, edits=[HeadGate(truth_gates(const, "contrast", 6.0), site=site)]).logits,
                       ref.logits)
    # and a non-trivial gate does change the logits (the test can fail)
    assert not torch.equal(m.run(TEXTS, edits=[HeadGate(_gates(alpha=1.0), site=site)]).logits, ref.logits)


def test_zero_gate_equals_zero_ablation(m):
    g = np.ones((N_LAYERS, 4))
    g[1, 2] = 0.0
    a = m.run(TEXTS, edits=[HeadGate(g)]).logits
    b = m.run(TEXTS, edits=[Ablate("attn_z.1", heads=[2])]).logits
    assert torch.equal(a, b)


def test_z_gating_equals_scaling_W_O_rows(m, ckpt, tmp_path):
    g = _gates(1)
    dh = m.d_head

    def scale(hf):
        for layer in range(N_LAYERS):
            w = hf.model.layers[layer].self_attn.o_proj.weight  # [d_model, H*dh]: head h = columns h*dh:(h+1)*dh
            w.mul_(torch.as_tensor(np.repeat(g[layer], dh), dtype=w.dtype)[None, :])

    folded = _variant(ckpt, tmp_path, scale)
    a = m.run(TEXTS, edits=[HeadGate(g, site="z")]).logits
    b = folded.run(TEXTS).logits
    assert float((a - b).abs().max()) < 1e-9


def test_sites_agree_iff_W_O_is_identity(m, ckpt, tmp_path):
    g = _gates(2)
    ident = _variant(ckpt, tmp_path, lambda hf: [hf.model.layers[i].self_attn.o_proj.weight.copy_(
        torch.eye(m.d_model, dtype=torch.float64)) for i in range(N_LAYERS)])
    z = ident.run(TEXTS, edits=[HeadGate(g, site="z")]).logits
    c = ident.run(TEXTS, edits=[HeadGate(g, site="attn_out_chunks")]).logits
    assert float((z - c).abs().max()) < 1e-10
    z = m.run(TEXTS, edits=[HeadGate(g, site="z")]).logits
    c = m.run(TEXTS, edits=[HeadGate(g, site="attn_out_chunks")]).logits
    assert float((z - c).abs().max()) > 1e-3


def test_attn_out_is_the_pre_residual_attention_output(m):
    sites = [f"{k}.1" for k in ("resid_pre", "attn_out", "mlp_out", "resid_post")]
    c = m.run(TEXTS, capture=sites).cache
    r = {s.split(".")[0]: c.real_tokens(s) for s in sites}  # padding rows may hold NaN in float64
    assert torch.allclose(r["resid_pre"] + r["attn_out"] + r["mlp_out"], r["resid_post"], atol=1e-10)


@pytest.mark.parametrize("site", ["z", "attn_out_chunks"])
def test_cached_gated_generation_equals_uncached(m, site):
    g = _gates(3, alpha=6.0)
    assert (g < 0).any()  # negative contrast gates included
    with pytest.warns(UserWarning, match="negative gates"):  # stated to the user, not clipped
        gate = HeadGate(g, site=site)
    a = m.generate(TEXTS, max_new_tokens=5, edits=[gate], stop_at_eos=False)
    b = m.generate(TEXTS, max_new_tokens=5, edits=[gate], stop_at_eos=False, use_cache=False)
    assert a.new_tokens == b.new_tokens
    assert_same_across_shapes(a.step_logits, b.step_logits)


def test_gates_checked_against_model(m):
    with pytest.warns(UserWarning, match="negative gates"):
        HeadGate(_gates()).validate(m)
    with pytest.raises(interplab.ShapeError, match="transposed"), pytest.warns(UserWarning, match="negative"):
        HeadGate(_gates().T).validate(m)
    with pytest.raises(interplab.ShapeError):
        m.run(TEXTS, edits=[HeadGate(np.full((2, 3), 2.0))])


def test_captured_z_is_padding_and_batch_invariant(m):
    batched = capture_head_outputs(m, TEXTS, batch_size=4, dtype=torch.float64)
    single = torch.cat([capture_head_outputs(m, [t], batch_size=1, dtype=torch.float64) for t in TEXTS])
    assert batched.shape == (len(TEXTS), N_LAYERS, 4, m.d_head)
    assert float((batched - single).abs().max()) < 1e-5
    # the captured vector is attn_z at the last real token of each row
    direct = m.run(TEXTS[1], capture=["attn_z.2"]).cache["attn_z.2"][0, -1]
    assert torch.allclose(batched[1, 2], direct, atol=1e-10)


def _dataset(n, seed=0):
    rng = np.random.default_rng(seed)
    texts = [" ".join(f"w{i}" for i in rng.integers(0, 50, rng.integers(3, 9))) for _ in range(n)]
    return texts, rng.integers(0, 2, n)


def test_planted_head_through_the_model(m):
    """Spec §8 test 1: add 3*y*u to z of head (l*, h*) inside the model; (l*, h*) ranks first with S >= 0.95 and
    the other heads stay at chance. l* is the last layer, so no later head reads the planted signal."""
    texts, y = _dataset(292)
    star = (N_LAYERS - 1, 1)
    u = torch.randn(m.d_head, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u /= u.norm()

    def plant(rows):
        v = torch.zeros(len(rows), 4, m.d_head, dtype=torch.float64)
        v[:, star[1]] = 3.0 * torch.as_tensor(y[rows], dtype=torch.float64)[:, None] * u
        return [Steer(f"attn_z.{star[0]}", v)]

    ts = truth_scores(m, list(zip(texts, y)), edits=plant, dtype="float64", capture_batch_size=64)
    assert ts.scores.shape == (N_LAYERS, 4)
    assert ts.top_heads(1)[0][:2] == star and ts.scores[star] >= 0.95
    others = np.delete(ts.scores.ravel(), star[0] * 4 + star[1])
    assert abs(others.mean() - 0.5) <= 3 * 0.5 / np.sqrt(len(y)), others.mean()
    # batch-size invariance of the whole pipeline (padding differs between the two)
    ts2 = truth_scores(m, list(zip(texts, y)), edits=plant, dtype="float64", capture_batch_size=37)
    np.testing.assert_array_equal(ts.scores, ts2.scores)


def test_weight_preservation_identities(m, ckpt, tmp_path, model_factory):
    same = weight_preservation(m, m)
    cos_cols = [c for c in same if c.startswith("cos_")]
    assert len(same) == N_LAYERS * 4
    np.testing.assert_allclose(same[cos_cols].to_numpy(), 1.0, atol=1e-12)
    np.testing.assert_allclose(same[[c for c in same if c.startswith("rel_")]].to_numpy(), 0.0, atol=1e-12)

    def perturb(hf):
        hf.model.layers[1].self_attn.q_proj.weight[16:32] *= 2.0    # W_Q of query head 1 doubled
        hf.model.layers[0].self_attn.k_proj.weight[0:16] *= -1.0    # W_K of KV head 0 flipped (query heads 0, 1)

    pert = weight_preservation(m, _variant(ckpt, tmp_path, perturb))
    row = pert.set_index(["layer", "head"])
    assert row.loc[(1, 1), "cos_W_Q"] == pytest.approx(1.0) and row.loc[(1, 1), "rel_W_Q"] == pytest.approx(1.0)
    assert row.loc[(1, 1), "rel_QK"] == pytest.approx(1.0) and row.loc[(1, 1), "cos_OV"] == pytest.approx(1.0)
    for h in (0, 1):
        assert row.loc[(0, h), "cos_W_K"] == pytest.approx(-1.0) and row.loc[(0, h), "cos_QK"] == pytest.approx(-1.0)
    for h in (2, 3):
        assert row.loc[(0, h), "cos_W_K"] == pytest.approx(1.0)
    assert row.loc[(0, 0), "kv_head"] == 0 and row.loc[(0, 3), "kv_head"] == 1

    other = weight_preservation(m, model_factory("llama", dtype="float64", n_layers=N_LAYERS, seed=5))
    assert other["cos_OV"].abs().mean() < 0.3 and other["cos_W_Q"].abs().mean() < 0.3
    # factored circuit cosine == dense computation for one head
    wa = m.attention_weights()
    wb = model_factory("llama", dtype="float64", n_layers=N_LAYERS, seed=5).attention_weights()
    qa, qb = wa["W_Q"][2, 3] @ wa["W_K"][2, 1].T, wb["W_Q"][2, 3] @ wb["W_K"][2, 1].T
    dense = float((qa * qb).sum() / (qa.norm() * qb.norm()))
    assert other.set_index(["layer", "head"]).loc[(2, 3), "cos_QK"] == pytest.approx(dense, abs=1e-12)


def test_evidence_attention_hand_computed(m):
    items = [{"text": t, "evidence": [0, 1] if i % 2 else [0]} for i, t in enumerate(TEXTS)]
    em = evidence_attention(m, items, reduce="none")
    assert em.shape == (len(TEXTS), N_LAYERS, 4)
    for i, it in enumerate(items):
        pat = m.run(it["text"], capture=["attn_pattern.2"]).cache["attn_pattern.2"][0, :, -1]  # [H, k]
        np.testing.assert_allclose(em[i, 2], pat[:, it["evidence"]].sum(-1).numpy(), atol=1e-10)
    full = evidence_attention(m, [{"text": t, "evidence": list(range(len(m.tokenize(t).input_ids[0])))}
                                  for t in TEXTS])
    np.testing.assert_allclose(full, 1.0, atol=1e-10)  # all keys: softmax rows sum to 1
    with pytest.raises(interplab.DataError):
        evidence_attention(m, [{"text": "w1 w2", "evidence": [7]}])


@pytest.mark.parametrize("site", ["z", "attn_out_chunks"])
def test_gating_same_on_both_backends(m, model_factory, site):
    nn = model_factory("llama", backend="nnsight", dtype="float64", n_layers=N_LAYERS)
    gate = HeadGate(_gates(4, alpha=1.0), site=site)
    a, b = m.run(TEXTS, edits=[gate]).logits, nn.run(TEXTS, edits=[gate]).logits
    real = m.tokenize(TEXTS).attention_mask.bool()
    assert float((a[real] - b[real]).abs().max()) < 1e-9


def test_gpt2_padding_invariance_and_weight_layout(model_factory):
    """GPT-2 (absolute positions, fused c_attn): captured z is padding/batch invariant, and the Conv1D weight
    layout is read per head (self-comparison gives cosine 1; a dense check of one head's W_Q slice)."""
    g = model_factory("gpt2", dtype="float64", n_layers=N_LAYERS)
    batched = capture_head_outputs(g, TEXTS, batch_size=4, dtype=torch.float64)
    single = torch.cat([capture_head_outputs(g, [t], batch_size=1, dtype=torch.float64) for t in TEXTS])
    assert float((batched - single).abs().max()) < 1e-5
    wp = weight_preservation(g, g)
    np.testing.assert_allclose(wp[[c for c in wp if c.startswith("cos_")]].to_numpy(), 1.0, atol=1e-12)
    w = g.attention_weights()
    c_attn = g.hf_model.transformer.h[1].attn.c_attn.weight.detach().double()
    dh = g.d_head
    assert torch.equal(w["W_Q"][1, 2], c_attn[:, 2 * dh:3 * dh])
    assert torch.equal(w["W_V"][1, 0], c_attn[:, 2 * g.d_model:2 * g.d_model + dh])
