"""Spiral probe through a model (spec methods/crh.md §2.4 steps 1-5): `optimise_steering_vectors` + `spiral_probe`
on a tiny random checkpoint."""
import numpy as np
import pytest
import torch

from interplab.core.errors import InputError
from interplab.probes.crh import (SpiralProbe, SteeringVectors, first_difference, optimise_steering_vectors,
                                         spiral_probe)

ORI = [1, 5, 6, 7, 8, 9, 10]
TGT = [1, 5, 6, 12, 8, 9, 10]             # differs at t* = 3
WS = [0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0]


@pytest.fixture(scope="module")
def tiny(model_factory):
    return model_factory("llama", n_layers=2)


@pytest.fixture(scope="module")
def result(tiny):
    return optimise_steering_vectors(tiny, ORI, TGT, 1, ws=WS, src_tokens=[20, 21], dst_tokens=[30])


def test_loss_decreases_for_every_nonzero_budget(result):
    L = result.losses
    assert L.shape == (len(WS), 21)
    nz = np.asarray(WS) > 0
    assert np.all(L[nz, -1] < L[nz, 0] - 1e-3), L[:, [0, -1]]
    assert np.all(result.p_dst[nz] > result.p_dst0)                 # pushed towards dst


def test_norm_constraint_and_zero_budget(result, tiny):
    budgets = np.asarray(WS) * result.dist
    assert np.all(result.norms <= budgets * (1 + 1e-5) + 1e-9)
    assert result.t_star == 3
    np.testing.assert_array_equal(result.vectors[0], 0.0)            # w = 0: the zero vector
    assert result.p_src[0] == result.p_src0 and result.p_dst[0] == result.p_dst0      # and no change at all
    assert np.all(result.losses[0] == result.losses[0, 0])
    # the LRH reference is the initialisation w·dist·Δ̂
    u = result.delta / np.linalg.norm(result.delta)
    np.testing.assert_allclose(result.reference, budgets[:, None] * u[None], rtol=1e-5, atol=1e-5)
    assert np.all(np.abs(result.vectors[1:] - result.reference[1:]).max(1) > 1e-3)   # the vectors did move


def test_delta_is_resid_pre_difference_at_t_star(result, tiny):
    with torch.no_grad():
        c = tiny.run([ORI, TGT], capture=["resid_pre.1"], logits=False).cache["resid_pre.1"]
    np.testing.assert_allclose(result.delta, (c[1, 3] - c[0, 3]).double().numpy(), atol=1e-6)
    assert result.dist == pytest.approx(float(np.linalg.norm(result.delta)))


def test_gradients_only_reach_the_vector(tiny):
    before = {n: p.detach().clone() for n, p in tiny.hf_model.named_parameters()}
    grads_before = [p.grad for p in tiny.hf_model.parameters()]
    optimise_steering_vectors(tiny, ORI, TGT, 0, ws=[0.5, 1.0], steps=3, src_tokens=20, dst_tokens=30)
    for n, p in tiny.hf_model.named_parameters():
        assert torch.equal(p.detach(), before[n]), n
    assert all(p.grad is None for p in tiny.hf_model.parameters()) and all(g is None for g in grads_before)


def test_batched_budgets_equal_separate_runs(tiny, result):
    alone = optimise_steering_vectors(tiny, ORI, TGT, 1, ws=[1.0], src_tokens=[20, 21], dst_tokens=[30])
    i = WS.index(1.0)
    np.testing.assert_allclose(alone.vectors[0], result.vectors[i], rtol=1e-4, atol=1e-4)


def test_typed_errors(tiny):
    with pytest.raises(InputError, match="identically"):
        optimise_steering_vectors(tiny, ORI, list(ORI), 1, ws=[1.0], src_tokens=20, dst_tokens=30)
    with pytest.raises(InputError, match="equal token length"):
        optimise_steering_vectors(tiny, ORI, TGT + [3], 1, ws=[1.0], src_tokens=20, dst_tokens=30)
    with pytest.raises(InputError, match="overlap"):
        optimise_steering_vectors(tiny, ORI, TGT, 1, ws=[1.0], src_tokens=20, dst_tokens=[20, 30])
    with pytest.raises(InputError):
        optimise_steering_vectors(tiny, ORI, TGT, 1, ws=[1.0], src_tokens=20)
    assert first_difference([1, 2, 3], [1, 2, 4]) == 2


def test_default_tokens_from_greedy_divergence(tiny):
    try:
        sv = optimise_steering_vectors(tiny, ORI, TGT, 1, ws=[1.0], steps=2)
    except InputError as e:                           # a random model may continue identically: that is typed too
        assert "continue identically" in str(e)
        return
    assert sv.src_tokens != sv.dst_tokens
    assert sv.loss_ids[: len(ORI)] == ORI
    g = tiny.generate([ORI, TGT], max_new_tokens=len(sv.loss_ids) - len(ORI) + 1, stop_at_eos=False)
    k = len(sv.loss_ids) - len(ORI)
    assert g.new_tokens[0][:k] == g.new_tokens[1][:k] == sv.loss_ids[len(ORI):]
    assert [g.new_tokens[0][k]] == sv.src_tokens and [g.new_tokens[1][k]] == sv.dst_tokens


def test_spiral_probe_fits_and_roundtrip(tiny, tmp_path):
    sp = spiral_probe(tiny, ORI, TGT, 1, ws=WS, steps=5, src_tokens=20, dst_tokens=30)
    assert set(sp.fits) == {"fixed", "faithful"} and sp.fits["fixed"].K == len(WS) - 1      # w = 0 dropped
    assert sp.fits["faithful"].mse >= 1 / 12 - 1e-3                 # B6 floor of the faithful mode
    sp.save(tmp_path / "sp")
    back = SpiralProbe.load(tmp_path / "sp")
    np.testing.assert_array_equal(back.vectors.vectors, sp.vectors.vectors)
    assert back.fits["fixed"].n_rot == sp.fits["fixed"].n_rot and set(back.reference_fits) == {"fixed", "faithful"}
    assert back.planar_fits["fixed"].mean_r2_cs == sp.planar_fits["fixed"].mean_r2_cs
    assert sp.planar_fits["fixed"].explained.size <= 2              # the planar control has rank ≤ 2
    assert SteeringVectors.load(tmp_path / "sp" / "vectors").t_star == 3
    assert len(sp.to_frame()) == len(WS)


def test_crh_spiral_is_registered_and_prompts_differ_in_one_token():
    from interplab.core.errors import ConfigError
    from interplab.probes.crh import toy_spiral_prompts
    from interplab.experiments.registry import get_experiment

    assert get_experiment("crh-spiral").config.__name__ == "CRHSpiralConfig"
    a, b = toy_spiral_prompts("animal", "color")
    assert a[1] == b[1] and a[0]["content"].split()[:-1] == b[0]["content"].split()[:-1] != []
    with pytest.raises(ConfigError):
        toy_spiral_prompts("animal", "animal")
