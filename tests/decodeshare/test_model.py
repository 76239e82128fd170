"""DecodeShare on a random Llama checkpoint (float64): decode-only edits, cached vs uncached, state collection,
padding, forced-choice scoring (spec tests 2, 3, 8, 9, 10)."""
import numpy as np
import pytest
import torch

from interplab.core.errors import ConfigError, InputError
from interplab.core.edit import PHASES
from interplab.interventions.projection import SubspaceProjection, teacher_forced
from interplab.probes.decodeshare import (
    collect_decode_states, collect_prefill_states, generate_exact_match, haar_basis, score_forced_choice,
)
from interplab.testing import assert_same_across_shapes

# Prompts of different lengths: every batched check below runs on a left-padded batch.
PROMPTS = ["w1 w2 w3 w4", "w5 w6", "w7 w8 w9 w10 w11 w12", "w3"]
PADDED = PROMPTS
LAYER = 0


@pytest.fixture(scope="module")
def model(model_factory):
    torch.set_num_threads(1)
    return model_factory("llama", dtype="float64")


@pytest.fixture(scope="module")
def basis():
    return haar_basis(64, 16, seed=0)


class Recorder(SubspaceProjection):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.calls = []

    def apply(self, site, x, ctx):
        self.calls.append((ctx.phase, ctx.step))
        return super().apply(site, x, ctx)


def test_decode_only_edit_leaves_prefill_bitwise_and_fires_once_per_step(model, basis):
    K = 6
    base = model.generate(PROMPTS, max_new_tokens=K, capture=["logits"])
    rec = Recorder(LAYER, basis, alpha=1.0)
    ed = model.generate(PROMPTS, max_new_tokens=K, capture=["logits"], edits=[rec])
    assert torch.equal(base.prefill_cache["logits"], ed.prefill_cache["logits"])  # all prompt positions
    assert torch.equal(base.step_logits[:, 0], ed.step_logits[:, 0])  # g1 is decided by the prefill
    assert torch.equal(base.tokens[:, base.batch.input_ids.shape[1]], ed.tokens[:, ed.batch.input_ids.shape[1]])
    assert all(phase == "decode" for phase, _ in rec.calls)
    n_steps = ed.decode_active.shape[1]
    assert [s for _, s in rec.calls] == list(range(n_steps))  # once per decode step, never in prefill
    assert rec.n_edited == int(ed.decode_active.sum())
    # and the edit does something downstream
    assert not torch.allclose(base.step_logits[:, 1:], ed.step_logits[:, 1:])


def test_boundary_variant_edits_last_prompt_token_in_prefill(model, basis):
    rec = Recorder(LAYER, basis, boundary=True)
    base = model.generate(PROMPTS, max_new_tokens=3, capture=["logits"])
    ed = model.generate(PROMPTS, max_new_tokens=3, capture=["logits"], edits=[rec])
    assert rec.calls[0] == ("prefill", -1)
    lb, le = base.prefill_cache["logits"], ed.prefill_cache["logits"]
    assert torch.equal(lb[:, :-1], le[:, :-1])  # earlier prompt positions untouched (causal)
    assert not torch.allclose(lb[:, -1], le[:, -1])  # g1 is now decided under the edit
    assert rec.n_edited == len(PROMPTS) + int(ed.decode_active.sum())
    with pytest.raises(InputError):
        SubspaceProjection(LAYER, basis, phases=("prefill",), boundary=True)


def _manual_uncached(model, prompt, edit_from, K, basis, alpha):
    """Independent reference: re-run the whole sequence each step; the edit hits positions >= edit_from."""
    ids = model.tokenizer(prompt)["input_ids"]
    T = len(ids)
    start = T - edit_from
    edit = SubspaceProjection(LAYER, basis, alpha, phases=PHASES,
                              positions=lambda ctx: ctx.positions >= start)
    logits = []
    for _ in range(K):
        out = model.run([ids], edits=[edit])
        last = out.logits[0, -1]
        logits.append(last)
        ids = ids + [int(last.argmax())]
    return ids[T:], torch.stack(logits)


@pytest.mark.parametrize("boundary", [False, True])
def test_cached_decode_only_equals_uncached_full_recompute(model, basis, boundary):
    K = 5
    edit = SubspaceProjection(LAYER, basis, alpha=1.0, boundary=boundary)
    gen = model.generate(PROMPTS, max_new_tokens=K, edits=[edit], stop_at_eos=False)
    for i, p in enumerate(PROMPTS):
        toks, logits = _manual_uncached(model, p, 1 if boundary else 0, K, basis, 1.0)
        assert gen.new_tokens[i] == toks
        assert_same_across_shapes(gen.step_logits[i], logits)
    # also with no hook, and through the hook layer's own uncached loop
    a = model.generate(PROMPTS, max_new_tokens=K, stop_at_eos=False)
    b = model.generate(PROMPTS, max_new_tokens=K, stop_at_eos=False, use_cache=False)
    assert torch.equal(a.tokens, b.tokens)
    assert_same_across_shapes(a.step_logits, b.step_logits)
    c = model.generate(PROMPTS, max_new_tokens=K, stop_at_eos=False, use_cache=False, edits=[edit])
    assert torch.equal(gen.tokens, c.tokens)
    assert_same_across_shapes(gen.step_logits, c.step_logits)


def test_alpha_zero_and_empty_basis_are_bitwise_noops_and_basis_invariance(model, basis):
    a = model.generate(PROMPTS, max_new_tokens=4)
    for e in (SubspaceProjection(LAYER, basis, alpha=0.0), SubspaceProjection(LAYER, np.zeros((64, 0)))):
        b = model.generate(PROMPTS, max_new_tokens=4, edits=[e])
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.step_logits, b.step_logits)
    R = np.random.default_rng(0).standard_normal((16, 16)) + 4 * np.eye(16)
    x = model.generate(PROMPTS, max_new_tokens=4, edits=[SubspaceProjection(LAYER, basis, 0.7)])
    y = model.generate(PROMPTS, max_new_tokens=4, edits=[SubspaceProjection(LAYER, basis @ R, 0.7)])
    assert torch.equal(x.tokens, y.tokens) and torch.allclose(x.step_logits, y.step_logits, atol=1e-10)
    assert "SubspaceProjection(layer=0, basis=[64, 16], alpha=0.7" in repr(SubspaceProjection(LAYER, basis, 0.7))


def _set_stop(model, tok):
    """Make `tok` the model's only stop token (the hook layer stops rows at `stop_token_ids`)."""
    model.eos_token_id = tok
    model.stop_token_ids = torch.tensor([tok])


def test_state_counts_and_finished_rows_neither_collected_nor_edited(model, basis):
    K = 6
    probe = model.generate(PROMPTS, max_new_tokens=K + 1, stop_at_eos=False)
    fake_eos = probe.new_tokens[0][2]  # row 0 will "finish" at its 3rd generated token
    old = (model.eos_token_id, model.stop_token_ids)
    _set_stop(model, fake_eos)
    try:
        gen = model.generate(PROMPTS, max_new_tokens=K + 1, capture=[f"resid_post.{LAYER}"])
        expected = 0
        for row in gen.new_tokens:
            first_k = row[:K]
            expected += next((i for i, t in enumerate(first_k) if t == fake_eos), len(first_k))
        assert any(len(r) < K + 1 for r in gen.new_tokens)  # some row did finish early
        states = collect_decode_states(model, {"t": PROMPTS}, layer=LAYER, max_new_tokens=K)
        assert states["t"].shape == (expected, 64)
        ref = gen.decode_cache[f"resid_post.{LAYER}"][gen.decode_active].numpy()
        assert ref.shape[0] == expected and np.array_equal(states["t"], ref)
        b = collect_decode_states(model, {"t": PROMPTS}, layer=LAYER, max_new_tokens=K, variant="boundary")
        assert b["t"].shape == (expected + len(PROMPTS), 64)
        # the edit touches exactly the (row, step) pairs that are still generating
        model.eos_token_id, model.stop_token_ids = old
        probe = model.generate(PROMPTS, max_new_tokens=K + 1, stop_at_eos=False,
                               edits=[SubspaceProjection(LAYER, basis)])
        _set_stop(model, probe.new_tokens[1][1])
        rec = Recorder(LAYER, basis)
        ed = model.generate(PROMPTS, max_new_tokens=K + 1, edits=[rec])
        assert not bool(ed.decode_active.all()) and rec.n_edited == int(ed.decode_active.sum())
    finally:
        model.eos_token_id, model.stop_token_ids = old


@pytest.mark.parametrize("arch", ["llama", "gpt2"])  # gpt2: absolute position embeddings need correct ids
def test_left_padded_batch_states_equal_single_example_states(model_factory, basis, arch):
    m = model_factory(arch, dtype="float64")
    kw = dict(layer=1, max_new_tokens=4)
    batched = collect_decode_states(m, {"t": PADDED}, batch_size=4, **kw)["t"]
    single = collect_decode_states(m, {"t": PADDED}, batch_size=1, **kw)["t"]
    assert batched.shape == single.shape
    assert_same_across_shapes(batched, single)
    pb = collect_prefill_states(m, {"t": PADDED}, layer=1, batch_size=4)["t"]
    ps = collect_prefill_states(m, {"t": PADDED}, layer=1, batch_size=1)["t"]
    assert pb.shape == (4, 64)
    assert_same_across_shapes(pb, ps)
    # with the decode-only edit, batched generation matches one-at-a-time generation
    e = SubspaceProjection(0, basis)
    gb = m.generate(PADDED, max_new_tokens=4, edits=[e], stop_at_eos=False)
    for i, p in enumerate(PADDED):
        gs = m.generate([p], max_new_tokens=4, edits=[e], stop_at_eos=False)
        assert gb.new_tokens[i] == gs.new_tokens[0]
        assert_same_across_shapes(gb.step_logits[i], gs.step_logits[0])


def test_state_cap_subsamples_reproducibly(model):
    a = collect_decode_states(model, {"t": PROMPTS}, layer=0, max_new_tokens=4, max_states_per_task=5, seed=1)
    b = collect_decode_states(model, {"t": PROMPTS}, layer=0, max_new_tokens=4, max_states_per_task=5, seed=1)
    assert a["t"].shape == (5, 64) and np.array_equal(a["t"], b["t"])
    with pytest.raises(ConfigError):
        collect_decode_states(model, {"t": PROMPTS}, layer=7, max_new_tokens=2)


@pytest.mark.parametrize("with_edit", [False, True])
def test_forced_choice_equals_cached_sum_of_logprobs(model, basis, with_edit):
    K = 4
    edits = [SubspaceProjection(LAYER, basis, 1.0)] if with_edit else []
    gen = model.generate(PROMPTS, max_new_tokens=K, edits=edits, stop_at_eos=False)
    lp = torch.log_softmax(gen.step_logits, -1)
    ref = torch.stack([lp[i, torch.arange(K), torch.as_tensor(gen.new_tokens[i])].sum()
                       for i in range(len(PROMPTS))]).numpy()
    ref_tail = torch.stack([lp[i, torch.arange(1, K), torch.as_tensor(gen.new_tokens[i][1:])].sum()
                            for i in range(len(PROMPTS))]).numpy()
    cands = [[g, [5, 6]] for g in gen.new_tokens]  # the greedy continuation and an arbitrary one
    fc = score_forced_choice(model, PROMPTS, cands, gold=[0] * 4, edits=edits, batch_size=3)
    assert np.allclose(fc.logprobs[:, 0], ref, atol=1e-9)
    assert fc.accuracy == 1.0 or (fc.logprobs[:, 1] > fc.logprobs[:, 0]).any()
    # with the first generated token as a teacher-forced, unscored answer prefix
    for i, p in enumerate(PROMPTS):
        f1 = score_forced_choice(model, [p], [gen.new_tokens[i][1:]], answer_prefix=[gen.new_tokens[i][0]],
                                 edits=edits)
        assert np.isclose(f1.logprobs[0, 0], ref_tail[i], atol=1e-9)
    if with_edit:
        assert fc.n_edited == sum(len(c) for cc in cands for c in cc)


def test_teacher_forced_wrapper_never_touches_prompt_tokens_and_counts_energy(model, basis):
    e = SubspaceProjection(LAYER, basis, alpha=0.8)
    out0 = model.run(["w1 w2 w3 w4 w5"], capture=[f"resid_post.{LAYER}"])
    out1 = model.run(["w1 w2 w3 w4 w5"], edits=[teacher_forced(e, [4])])
    assert torch.equal(out0.logits[:, :4], out1.logits[:, :4])
    assert not torch.allclose(out0.logits[:, 4], out1.logits[:, 4])
    # <bos> + 5 words: positions 4 and 5 are "decode"; block LAYER's input is unedited, so the removed energy is
    # alpha^2 ||Q^T h||^2 of the unedited states there
    h = out0.cache[f"resid_post.{LAYER}"][0, 4:].numpy()
    assert e.n_edited == 2 and e.n_calls == 1
    assert np.isclose(e.energy_removed, 0.64 * np.sum((h @ basis) ** 2), rtol=1e-10)


def test_generate_exact_match(model):
    gen = model.generate(PROMPTS, max_new_tokens=3, stop_at_eos=False)
    answers = [" ".join(model.tokenizer.convert_ids_to_tokens(r[:2])) for r in gen.new_tokens]
    stop = [r[2] for r in gen.new_tokens]
    res = generate_exact_match(model, PROMPTS[:1], answers[:1], max_new_tokens=3, stop_tokens=[stop[0]])
    assert res.correct.tolist() == [True] and res.stopped.tolist() == [True] and res.lengths.tolist() == [2]
    res = generate_exact_match(model, PROMPTS[:1], ["w1"], max_new_tokens=3, stop_tokens=[stop[0]])
    assert res.correct.tolist() == [False]


def test_staged_edit_only_while_step_below_stage(model, basis):
    K, stage = 6, 2
    rec = Recorder(LAYER, basis, stage=stage)
    ed = model.generate(PROMPTS, max_new_tokens=K, edits=[rec], stop_at_eos=False)
    assert [s for _, s in rec.calls] == list(range(stage))
    assert rec.n_edited == int(ed.decode_active[:, :stage].sum())
    full = model.generate(PROMPTS, max_new_tokens=K, edits=[SubspaceProjection(LAYER, basis)], stop_at_eos=False)
    # identical to the full edit while it is active
    assert torch.equal(ed.step_logits[:, :stage + 1], full.step_logits[:, :stage + 1])


def test_non_eos_stop_token_ends_collection(model):
    K = 5
    probe = model.generate(PROMPTS, max_new_tokens=K + 1, stop_at_eos=False)
    stop = probe.new_tokens[0][2]
    full = collect_decode_states(model, {"t": PROMPTS}, layer=LAYER, max_new_tokens=K, stop_tokens=[])
    cut = collect_decode_states(model, {"t": PROMPTS}, layer=LAYER, max_new_tokens=K, stop_tokens=[stop])
    expected = sum(next((i for i, t in enumerate(r[:K]) if t == stop), K) for r in probe.new_tokens)
    assert full["t"].shape[0] == len(PROMPTS) * K and cut["t"].shape[0] == expected < len(PROMPTS) * K
    # the kept states are exactly the leading states of each row
    rows = full["t"].reshape(len(PROMPTS), K, -1)
    ref = np.concatenate([rows[i, :next((j for j, t in enumerate(r[:K]) if t == stop), K)]
                          for i, r in enumerate(probe.new_tokens)])
    assert np.array_equal(cut["t"], ref)


def test_backend_parity_of_the_boundary_edit(model, model_factory, basis):
    nn = model_factory("llama", backend="nnsight", dtype="float64")
    outs = []
    for m in (model, nn):
        e = SubspaceProjection(LAYER, basis, boundary=True)
        g = m.generate(PROMPTS, max_new_tokens=4, edits=[e], stop_at_eos=False, capture=["resid_post.1"])
        outs.append((g, e.n_edited))
    (a, na), (b, nb) = outs
    assert a.new_tokens == b.new_tokens and na == nb == len(PROMPTS) * 4
    assert torch.allclose(a.step_logits, b.step_logits, atol=1e-9, rtol=0)
    assert torch.allclose(a.decode_cache["resid_post.1"], b.decode_cache["resid_post.1"], atol=1e-9, rtol=0)
