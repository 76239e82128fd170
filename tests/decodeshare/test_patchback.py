"""DecodeShare patchback on a random Llama checkpoint (float64): spec test 11 ("Patchback identity") and the
checks that make it able to fail (a wrong donor, a partial window, another subspace do not reproduce the baseline),
per-position step indexing (cached == uncached), and the rescue-rate function."""
import numpy as np
import pytest
import torch

from interplab.core.errors import InputError, ShapeError
from interplab.interventions.patchback import SubspacePatchback, parse_window, window_label
from interplab.interventions.projection import SubspaceProjection
from interplab.probes.decodeshare import PatchbackResult, haar_basis, patchback_rescue
from interplab.probes.decodeshare.patchback import pick_transfer_donors
from interplab.testing import assert_same_across_shapes

PROMPTS = ["w1 w2 w3 w4", "w5 w6", "w7 w8 w9 w10 w11 w12", "w3"]  # left-padded batch
LAYER = 1
SITE = f"resid_post.{LAYER}"
K = 8


@pytest.fixture(scope="module")
def model(model_factory):
    torch.set_num_threads(1)
    return model_factory("llama", dtype="float64")


@pytest.fixture(scope="module")
def basis():
    return haar_basis(64, 24, seed=0)


@pytest.fixture(scope="module")
def baseline(model):
    return model.generate(PROMPTS, max_new_tokens=K, capture=[SITE])


def _run(model, edits, use_cache=True):
    return model.generate(PROMPTS, max_new_tokens=K, capture=[SITE, "logits"], edits=edits, use_cache=use_cache)


def _donor(baseline):
    return baseline.decode_cache[SITE], baseline.decode_active


def test_ablation_alone_changes_the_generation(model, basis, baseline):
    ab = _run(model, [SubspaceProjection(LAYER, basis)])
    assert not torch.allclose(baseline.step_logits[:, 1:], ab.step_logits[:, 1:], atol=1e-3)


def test_patchback_identity_same_example_every_step(model, basis, baseline):
    """Spec test 11: patching the example's own baseline states back at every decode step reproduces the baseline
    exactly (tokens identical, logits allclose), because h_abl + Pi (h_base - h_abl) = h_base at every step."""
    states, valid = _donor(baseline)
    pb = SubspacePatchback(LAYER, basis, states, valid, window="all")
    out = _run(model, [SubspaceProjection(LAYER, basis), pb])
    assert torch.equal(out.tokens, baseline.tokens)
    assert out.new_tokens == baseline.new_tokens
    torch.testing.assert_close(out.step_logits, baseline.step_logits, atol=1e-9, rtol=0)
    torch.testing.assert_close(out.decode_cache[SITE][valid], states[valid], atol=1e-9, rtol=0)
    assert pb.n_edited == int(valid.sum())
    # prefill is untouched: the prompt forward's logits are bitwise those of the unedited run
    plain = model.generate(PROMPTS, max_new_tokens=K, capture=["logits"])
    assert torch.equal(out.prefill_cache["logits"], plain.prefill_cache["logits"])


def test_wrong_donor_does_not_reproduce_baseline(model, basis, baseline):
    """The identity check can fail: another row's states (a transfer donor) give different logits."""
    states, valid = _donor(baseline)
    perm = [1, 2, 3, 0]
    pb = SubspacePatchback(LAYER, basis, states[perm], valid[perm], window="all")
    out = _run(model, [SubspaceProjection(LAYER, basis), pb])
    n = min(out.step_logits.shape[1], baseline.step_logits.shape[1])
    assert not torch.allclose(out.step_logits[:, 1:n], baseline.step_logits[:, 1:n], atol=1e-3)
    assert pb.energy_patched > 0


@pytest.mark.parametrize("which", ["window0", "other_subspace"])
def test_partial_patchback_is_not_an_identity(model, basis, baseline, which):
    states, valid = _donor(baseline)
    if which == "window0":  # steps >= 1 stay ablated
        pb = SubspacePatchback(LAYER, basis, states, valid, window="0")
    else:  # the same-example donor through a different subspace of the same size
        pb = SubspacePatchback(LAYER, haar_basis(64, 24, seed=5), states, valid)
    out = _run(model, [SubspaceProjection(LAYER, basis), pb])
    n = min(out.step_logits.shape[1], baseline.step_logits.shape[1])
    assert not torch.allclose(out.step_logits[:, 1:n], baseline.step_logits[:, 1:n], atol=1e-3)


def test_window0_restores_exactly_the_first_decode_step(model, basis, baseline):
    """W = {0}: the state fed at decode step 0 equals the baseline's, so g2 equals the baseline's g2; the edit fires
    once per row."""
    states, valid = _donor(baseline)
    pb = SubspacePatchback(LAYER, basis, states, valid, window="0")
    out = _run(model, [SubspaceProjection(LAYER, basis), pb])
    torch.testing.assert_close(out.step_logits[:, :2], baseline.step_logits[:, :2], atol=1e-9, rtol=0)
    assert pb.n_edited == len(PROMPTS) and pb.n_calls == 1


def test_cached_equals_uncached(model, basis, baseline):
    """Steps are indexed per position (position - prompt length), so a full recompute patches the same tokens."""
    states, valid = _donor(baseline)
    for w in ("0,1", "all"):
        mk = lambda: [SubspaceProjection(LAYER, basis), SubspacePatchback(LAYER, basis, states[[3, 2, 1, 0]],
                                                                          valid[[3, 2, 1, 0]], window=w)]
        a, b = _run(model, mk()), _run(model, mk(), use_cache=False)
        assert torch.equal(a.tokens, b.tokens)
        assert_same_across_shapes(a.step_logits, b.step_logits)


def test_shared_donor_and_invalid_steps(model, basis, baseline):
    states, valid = _donor(baseline)
    # a [K, d] donor is broadcast to every row; steps marked invalid are left alone (here: all of them)
    none = SubspacePatchback(LAYER, basis, states[0], torch.zeros(states.shape[1], dtype=torch.bool))
    assert none.is_noop()
    abl_only = _run(model, [SubspaceProjection(LAYER, basis)])
    out = _run(model, [SubspaceProjection(LAYER, basis), none])
    assert torch.equal(out.tokens, abl_only.tokens)
    shared = SubspacePatchback(LAYER, basis, states[0], window="all")
    _run(model, [shared])
    assert shared.n_edited > 0


def test_errors_and_repr(model, basis, baseline):
    states, valid = _donor(baseline)
    with pytest.raises(ShapeError):
        SubspacePatchback(LAYER, basis, states[:, :, :10])
    with pytest.raises(ShapeError):
        SubspacePatchback(LAYER, basis, states, valid[:, :2])
    with pytest.raises(ShapeError):  # donors for 2 rows, batch of 4
        _run(model, [SubspacePatchback(LAYER, basis, states[:2], valid[:2])])
    with pytest.raises(InputError):
        parse_window("first")
    with pytest.raises(InputError):
        parse_window([])
    assert parse_window("all") is None and parse_window("{0,1}") == (0, 1) and parse_window(0) == (0,)
    assert window_label("1,0") == "{0,1}" and window_label(None) == "all"
    r = repr(SubspacePatchback(LAYER, basis, states, valid, window="0,1"))
    assert "SubspacePatchback(layer=1" in r and "window='{0,1}'" in r


def test_pick_transfer_donors():
    tasks = ["a", "a", "a", "b", "b", "c"]
    ok = np.array([1, 1, 0, 1, 1, 1], bool)
    d = pick_transfer_donors(tasks, ok, [0, 2, 3, 5], seed=0)
    assert d[0] == 1 and d[1] in (0, 1) and d[2] == 4 and d[3] == -1


def test_patchback_rescue_on_random_model(model, basis, baseline, tmp_path):
    """Answers are chosen so the baseline is correct everywhere (each row's answer = its own baseline tokens up to a
    per-row stop token): the flip set is what the ablation breaks, and same-example patchback at every step rescues
    all of it with identical tokens."""
    new = baseline.new_tokens
    stops = sorted({r[3] for r in new})
    answers = []
    for r in new:
        cut = next(i for i, t in enumerate(r) if t in stops)
        answers.append(r[:cut])
    res = patchback_rescue(model, {"x": PROMPTS[:2], "y": PROMPTS[2:]}, {"x": answers[:2], "y": answers[2:]},
                           layer=LAYER, ablation_basis=basis, controls={"haar": haar_basis(64, 24, seed=5)},
                           max_new_tokens=K, batch_size=3, stop_tokens=stops, n_boot=50)
    assert res.info["baseline_acc"] == 1.0 and res.info["n_flip"] >= 1
    t = res.table
    assert set(t["source"]) == {"same-example", "transfer", "transfer (same length)", "haar (same-example)",
                                "random in span (norm-matched)"}
    assert set(t["window"]) == {"{0}", "{0,1}", "all"}
    assert res.rate("same-example", "all") == 1.0
    same_all = t[(t["source"] == "same-example") & (t["window"] == "all") & (t["task"] == "all")].iloc[0]
    assert same_all["identical_rate"] == 1.0 and same_all["n_rescued"] == res.info["n_flip"]
    back = PatchbackResult.load(res.save(tmp_path / "pb"))
    assert back.info["n_flip"] == res.info["n_flip"] and len(back.table) == len(t)


def test_pick_transfer_donors_with_keys():
    tasks = ["a"] * 4
    ok = np.ones(4, bool)
    d = pick_transfer_donors(tasks, ok, [0, 1, 2], seed=0, keys=[3, 5, 3, 4])
    assert d[0] == 2 and d[1] == -1 and d[2] == 0


def test_random_span_control_has_the_donors_shared_energy_and_nothing_else():
    import numpy as np

    from interplab.probes.decodeshare.patchback import random_span_states

    rng = np.random.default_rng(0)
    Q = np.linalg.qr(rng.standard_normal((16, 3)))[0]
    states = rng.standard_normal((5, 4, 16))
    r = random_span_states(Q, states, seed=1)
    assert r.shape == states.shape
    np.testing.assert_allclose(r - r @ Q @ Q.T, 0, atol=1e-12)  # inside span(Q)
    np.testing.assert_allclose(np.linalg.norm(r, axis=-1), np.linalg.norm(states @ Q, axis=-1), rtol=1e-12)
    cos = np.sum((r @ Q) * (states @ Q), -1) / (np.linalg.norm(r, axis=-1) * np.linalg.norm(states @ Q, axis=-1))
    assert np.abs(cos).mean() < 0.9  # a random direction, not the donor's own
    assert not np.allclose(random_span_states(Q, states, seed=2), r)
