"""The lenses' mathematics on random checkpoints (llama with GQA: 4 query heads, 2 KV groups; gpt2 with LayerNorm)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interplab.interventions import Ablate, Patch
from interplab.probes.lenses import (activation_patching, attribution_grid, attribution_patching, compare_to_exact,
                                     direct_logit_attribution, logit_diff_metric, logit_lens, make_pair, patch_grid,
                                     train_tuned_lens)
from interplab.probes.lenses.patching import PatchingSweep

CLEAN, CORRUPT = "w1 w2 w3 w4 w5", "w1 w9 w3 w4 w5"
BACKENDS = ["bridge", "nnsight"]


@pytest.fixture(params=BACKENDS)
def llama64(request, model_factory):
    return model_factory("llama", backend=request.param, dtype="float64", n_layers=3)


def test_patching_a_run_with_its_own_activations_reproduces_its_metric(llama64):
    sw = activation_patching(llama64, CLEAN, CLEAN, sites=["resid_pre", "attn_z"], answer="w4",
                             wrong="w8", batch_size=16)
    for r in sw.results.values():
        assert np.abs(r.values - r.clean_metric).max() < 1e-9, r.site
    # the same grid with the corrupt prompt as the source moves the metric somewhere: the check can fail
    other = activation_patching(llama64, CLEAN, CORRUPT, sites=["resid_pre"], answer="w4", wrong="w8",
                                direction="noise")
    assert np.abs(other["resid_pre"].values - other["resid_pre"].clean_metric).max() > 1e-3


@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_patching_every_position_of_the_residual_stream_reproduces_the_other_run(llama64, direction):
    sw = activation_patching(llama64, CLEAN, CORRUPT, sites=["resid_pre"], positions="all", direction=direction)
    r = sw["resid_pre"]
    assert r.values.shape == (3,)
    assert abs(r.clean_metric - r.corrupt_metric) > 1e-2  # the pair differs, so this can fail
    np.testing.assert_allclose(r.values, r.target_metric, atol=1e-9)  # resid_pre.0 and every later layer
    np.testing.assert_allclose(r.normalized, 1.0, atol=1e-8)


def test_batched_grid_equals_one_public_patch_per_cell(model_factory):
    """Rows of one batched forward patch different layers, positions and heads; each equals a separate run with
    interventions.Patch (heads=[h]) at that single cell."""
    m = model_factory("llama", dtype="float64", n_layers=3)
    pair = make_pair(m, CLEAN, CORRUPT)
    metric = logit_diff_metric(pair.answer, pair.wrong)
    sites = [f"attn_z.{layer}" for layer in range(3)]
    src = m.run([pair.clean], capture=sites).cache
    grid = patch_grid(m, pair.corrupt, {s: src[s] for s in sites}, "attn_z", range(3), metric, batch_size=13)
    assert grid.shape == (3, pair.n_pos, m.n_heads)
    for layer, p, h in [(0, 2, 1), (1, 2, 3), (2, 5, 0), (1, 4, 2)]:
        e = Patch(f"attn_z.{layer}", src[f"attn_z.{layer}"][0], positions=[p], heads=[h])
        ref = float(metric(m.run([pair.corrupt], edits=[e]).logits[:, -1])[0])
        assert abs(grid[layer, p, h] - ref) < 1e-9


def test_lenses_compose_with_explicit_edits(model_factory):
    m = model_factory("llama", dtype="float64", n_layers=3)
    edit = Ablate("attn_z.1", heads=[0, 3])
    sw = activation_patching(m, CLEAN, CLEAN, sites=["resid_post"], answer="w4", wrong="w8", edits=[edit])
    metric = logit_diff_metric(*[make_pair(m, CLEAN, CORRUPT, "w4", "w8").__dict__[k] for k in ("answer", "wrong")])
    edited = float(metric(m.run(CLEAN, edits=[edit]).logits[:, -1])[0])
    plain = float(metric(m.run(CLEAN).logits[:, -1])[0])
    assert abs(edited - plain) > 1e-3
    np.testing.assert_allclose(sw["resid_post"].values, edited, atol=1e-9)
    d = direct_logit_attribution(m, CLEAN, "w4", "w8", edits=[edit])
    assert np.abs(d.heads[0, 1, [0, 3]]).max() == 0.0 and abs(d.total[0] - edited) < 1e-9


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_dla_contributions_sum_to_the_logit_difference_in_float32(model_factory, arch, backend):
    m = model_factory(arch, backend=backend, n_layers=3)
    assert m.dtype == torch.float32
    d = direct_logit_attribution(m, [CLEAN, "w7 w3 w9", CORRUPT], answer=["w4", "w10", "w4"], wrong="w8")
    assert d.heads.shape == (3, 3, m.n_heads)
    assert np.abs(d.component_sum - d.total).max() < 1e-4
    assert np.abs(d.total).min() > 1e-3 and np.abs(d.heads).max() > 1e-3
    assert set(d.to_frame().query("kind == 'head'").kv_group) == set(range(m.n_kv_heads))


@pytest.mark.parametrize("backend", BACKENDS)
def test_logit_lens_last_layer_is_the_models_logits(model_factory, backend):
    m = model_factory("gpt2", backend=backend, n_layers=3)
    ll = logit_lens(m, CLEAN, top_k=3, target="w4")
    probs = torch.softmax(m.run(CLEAN).logits[0].double(), -1)
    top_p, top_i = probs.topk(3, -1)
    assert np.array_equal(ll.top_ids[-1], top_i.numpy())
    np.testing.assert_allclose(ll.top_probs[-1], top_p.numpy(), atol=1e-6)
    assert ll.kl[-1].max() < 1e-9 and ll.kl[0].mean() > 1e-2  # earlier layers differ: the check can fail
    t = m.tokenizer.convert_tokens_to_ids("w4")
    assert ll.target_prob.shape == ll.kl.shape
    assert (ll.target_rank[-1] == (probs > probs[:, [t]]).sum(-1).numpy()).all()
    assert len(ll.to_frame()) == 3 * ll.n_pos


def test_tuned_lens_starts_as_the_logit_lens_and_lowers_kl(model_factory):
    m = model_factory("llama", n_layers=3)
    prompts = [CLEAN, CORRUPT, "w7 w3 w9 w10 w11", "w2 w2 w5 w6"]
    tl = train_tuned_lens(m, prompts, steps=60, lr=1e-2)
    assert tl.loss_curve[-1] < 0.5 * tl.loss_curve[0]
    plain, tuned = logit_lens(m, CLEAN), logit_lens(m, CLEAN, tuned=tl)
    assert tuned.kl[:-1].mean() < plain.kl[:-1].mean()
    np.testing.assert_allclose(tuned.kl[-1], plain.kl[-1], atol=1e-9)  # the last layer stays the model itself


def test_attribution_is_exact_patching_to_first_order(model_factory):
    """Scale the clean - corrupt difference by eps: (exact patch effect) / eps -> the attribution estimate / eps,
    with an error O(eps). gpt2 in float64 has no float32 RoPE, so the forward is exact enough for eps = 1e-4."""
    m = model_factory("gpt2", dtype="float64", n_layers=3)
    pair = make_pair(m, CLEAN, CORRUPT)
    metric = logit_diff_metric(pair.answer, pair.wrong)
    sites = [f"{k}.{layer}" for k in ("resid_pre", "attn_z") for layer in range(3)]
    c, k = (m.run([ids], capture=sites).cache for ids in (pair.clean, pair.corrupt))
    base = float(metric(m.run([pair.corrupt]).logits[:, -1])[0])
    for eps in (1e-4,):
        src = {s: k[s] + eps * (c[s] - k[s]) for s in sites}
        est = attribution_grid(m, pair.corrupt, {s: k[s] for s in sites}, src, sites, metric)
        for kind in ("resid_pre", "attn_z"):
            exact = patch_grid(m, pair.corrupt, src, kind, range(3), metric) - base
            approx = torch.stack([est[f"{kind}.{layer}"] for layer in range(3)]).numpy()
            scale = np.abs(exact).max()
            assert scale > 1e-6
            assert np.abs(exact - approx).max() < 1e-2 * scale, kind
    # at the full difference the two differ (the model is nonlinear), so the first-order check above can fail
    full = compare_to_exact(attribution_patching(m, CLEAN, CORRUPT, sites=["resid_pre"]),
                            activation_patching(m, CLEAN, CORRUPT, sites=["resid_pre"]))
    assert full.max_abs_error.iloc[0] > 1e-3


@pytest.mark.parametrize("backend", BACKENDS)
def test_attribution_grid_shapes_and_ig(model_factory, backend):
    m = model_factory("llama", backend=backend, n_layers=3)
    for method in ("gradient", "ig"):
        sw = attribution_patching(m, CLEAN, CORRUPT, sites=["resid_pre", "attn_z"], method=method, ig_steps=4)
        assert sw["attn_z"].values.shape == (3, 6, m.n_heads) and sw["attn_z"].method == method
        assert np.isfinite(sw["resid_pre"].values).all()
    # positions="all" is the position sum of the per-position estimate (first order)
    a = attribution_patching(m, CLEAN, CORRUPT, sites=["mlp_out"], positions="all")
    b = attribution_patching(m, CLEAN, CORRUPT, sites=["mlp_out"])
    np.testing.assert_allclose(a["mlp_out"].effect, b["mlp_out"].effect.sum(1), atol=1e-5)


def test_results_round_trip(model_factory, tmp_path):
    m = model_factory("llama", n_layers=3)
    sw = activation_patching(m, CLEAN, CORRUPT, sites=["resid_pre", "attn_z"])
    sw.save(tmp_path / "sw")
    back = PatchingSweep.load(tmp_path / "sw")
    np.testing.assert_array_equal(back["attn_z"].values, sw["attn_z"].values)
    assert back.to_frame().shape == sw.to_frame().shape
    df = sw["attn_z"].to_frame()
    assert {"layer", "position", "token", "head", "kv_group", "normalized"} <= set(df.columns)
    assert set(df.kv_group) == {0, 1}


def test_direction_dashboard_reads_projections_logits_and_neighbours(model_factory, tmp_path):
    m = model_factory("llama", n_layers=3)
    W_U, _ = m.unembedding()
    v = W_U[:, 10].numpy() * 3.0
    prompts = [CLEAN, "w7 w3 w9 w10 w11"]
    from interplab.probes.lenses import direction_dashboard

    d = direction_dashboard(m, v, "resid_post.2", prompts, others={"same": v, "minus": -v, "other": W_U[:, 11]},
                            steer_prompt=CLEAN, steer_scales=(0.0, 50.0))
    x = m.run(prompts, capture=["resid_post.2"]).cache.real_tokens("resid_post.2").double()
    np.testing.assert_allclose(d.activations, (x @ (torch.as_tensor(v) / np.linalg.norm(v))).numpy(), atol=1e-5)
    assert d.top_contexts.activation.is_monotonic_decreasing
    # v_hat @ W_U[:, 10] = |W_U[:, 10]|: the top promoted effect is at least that
    assert d.logit_effects.effect.iloc[0] >= float(W_U[:, 10].norm()) - 1e-9
    assert (d.logit_effects.kind == "promoted").sum() == 10
    assert list(d.neighbours.name[:2]) in (["same", "minus"], ["minus", "same"])
    np.testing.assert_allclose(sorted(d.neighbours.cosine[:2]), [-1.0, 1.0], atol=1e-9)
    assert d.steering["0.0"] == m.generate([CLEAN], max_new_tokens=8).text[0]
