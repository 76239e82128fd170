"""LabModel.run/generate semantics: padding, early stop, StepContext phases, zero-strength edits, Patch."""
import pytest
import torch

from interplab.interventions import Ablate, Edit, Patch, Steer
from interplab.testing import CROSS_SHAPE_REL, assert_same_across_shapes

PROMPTS = ["w1 w2 w3 w4 w5", "w6 w7", "w8 w9 w10"]


@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
def test_padded_batch_equals_single_examples(model_factory, backend):
    m = model_factory("llama", backend=backend, dtype="float64")
    sites = ["resid_post.1", "attn_z.0", "final_norm"]
    batch = m.run(PROMPTS, capture=sites)
    for i, p in enumerate(PROMPTS):
        one = m.run(p, capture=sites)
        n = one.batch.input_ids.shape[1]
        for s in sites:
            assert_same_across_shapes(batch.cache[s][i, -n:], one.cache[s][0])
            assert_same_across_shapes(batch.cache.last(s)[i], one.cache.last(s)[0])
        assert_same_across_shapes(batch.logits[i, -n:], one.logits[0])


@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
def test_padded_generation_equals_single_examples(model_factory, backend):
    m = model_factory("llama", backend=backend, dtype="float64")
    steer = [Steer("resid_post.0", torch.linspace(-1, 1, m.d_model), positions="decode")]
    g = m.generate(PROMPTS, max_new_tokens=5, edits=steer, stop_at_eos=False, capture=["resid_post.1"])
    for i, p in enumerate(PROMPTS):
        one = m.generate(p, max_new_tokens=5, edits=steer, stop_at_eos=False, capture=["resid_post.1"])
        assert g.new_tokens[i] == one.new_tokens[0]
        assert_same_across_shapes(g.decode_cache["resid_post.1"][i], one.decode_cache["resid_post.1"][0])


@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
def test_logits_last_unembeds_the_last_positions_only(model_factory, backend):
    from interplab.core.errors import InputError

    m = model_factory("llama", backend=backend, dtype="float64")
    steer = [Steer("resid_post.1", torch.linspace(-1, 1, m.d_model))]
    full = m.run(PROMPTS, edits=steer).logits
    part = m.run(PROMPTS, edits=steer, logits_last=2).logits
    assert part.shape == (len(PROMPTS), 2, full.shape[-1])
    torch.testing.assert_close(part, full[:, -2:], rtol=0, atol=1e-9 * float(full.abs().max()))
    with pytest.raises(InputError, match="logits_last"):
        m.run(PROMPTS, capture=["logits"], logits_last=1)
    with pytest.raises(InputError, match="logits_last"):
        m.run(PROMPTS, logits_last=0)


@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
def test_a_forward_with_nothing_to_hook_equals_a_hooked_one(model_factory, backend):
    """With no capture and no edit a backend may run the plain forward (nnsight does: no trace); a capture-only
    forward must give bit-identical logits, in a run and in every KV-cached decode step."""
    m = model_factory("llama", backend=backend)
    plain, hooked = m.run(PROMPTS), m.run(PROMPTS, capture=["resid_post.1"])
    assert torch.equal(plain.logits, hooked.logits)
    g0 = m.generate(PROMPTS, max_new_tokens=4, stop_at_eos=False)
    g1 = m.generate(PROMPTS, max_new_tokens=4, stop_at_eos=False, capture=["resid_post.1"])
    assert g0.new_tokens == g1.new_tokens and torch.equal(g0.step_logits, g1.step_logits)


def test_input_forms_agree(llama):
    strings = llama.run(PROMPTS).logits
    ids = [llama.tokenizer(p)["input_ids"] for p in PROMPTS]
    assert torch.equal(llama.run(ids).logits, strings)
    enc = llama.tokenize(PROMPTS)
    assert torch.equal(llama.run(enc).logits, strings)
    assert torch.equal(llama.run({"input_ids": enc.input_ids, "attention_mask": enc.attention_mask}).logits, strings)
    # right-padded input is re-packed to the left
    right = torch.zeros_like(enc.input_ids)
    rmask = torch.zeros_like(enc.attention_mask)
    for i, r in enumerate(ids):
        right[i, :len(r)] = torch.tensor(r)
        rmask[i, :len(r)] = 1
    assert torch.equal(llama.run({"input_ids": right, "attention_mask": rmask}).logits, strings)


@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
def test_early_stop_captures_equal_full_run(model_factory, backend):
    m = model_factory("llama", backend=backend, n_layers=3)
    full = m.run(PROMPTS, capture=["attn_z.0", "resid_post.1"])
    stopped = m.run(PROMPTS, capture=["attn_z.0", "resid_post.1"], logits=False)
    assert stopped.logits is None
    for s in ("attn_z.0", "resid_post.1"):
        assert torch.equal(stopped.cache[s], full.cache[s])


class Recorder(Edit):
    """Identity edit that records every StepContext it sees."""

    def __init__(self, site, phases=("prefill", "decode")):
        self.sites, self.phases, self.seen = (site,), tuple(phases), []

    def apply(self, site, x, ctx):
        self.seen.append((ctx.phase, ctx.step, ctx.positions.clone(), ctx.real.clone(), tuple(x.shape)))
        return x


@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
def test_step_context_is_explicit(model_factory, backend):
    m = model_factory("llama", backend=backend)
    rec = Recorder("resid_post.0")
    m.generate(PROMPTS, max_new_tokens=4, edits=[rec], stop_at_eos=False)
    phases = [s[0] for s in rec.seen]
    assert phases == ["prefill", "decode", "decode", "decode"]
    assert [s[1] for s in rec.seen] == [-1, 0, 1, 2]
    lengths = m.tokenize(PROMPTS).lengths
    for step, (_, _, pos, real, shape) in enumerate(rec.seen[1:]):
        assert shape[1] == 1
        assert torch.equal(pos[:, 0], lengths + step)  # absolute positions continue each row's real tokens
        assert bool(real.all())
    prefill_pos = rec.seen[0][2]
    assert torch.equal(prefill_pos[:, -1], lengths - 1)


@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
def test_zero_strength_edits_are_bit_identical(model_factory, backend):
    m = model_factory("qwen2", backend=backend)
    clean = m.run(PROMPTS, capture=["resid_post.1"])
    zero = [Steer("resid_post.0", torch.randn(m.d_model), scale=0.0), Steer("attn_z.1", torch.zeros(m.n_heads, m.d_head))]
    edited = m.run(PROMPTS, edits=zero, capture=["resid_post.1"])
    assert torch.equal(clean.logits, edited.logits)
    assert torch.equal(clean.cache["resid_post.1"], edited.cache["resid_post.1"])
    g0 = m.generate(PROMPTS, max_new_tokens=4, stop_at_eos=False)
    g1 = m.generate(PROMPTS, max_new_tokens=4, edits=zero, stop_at_eos=False)
    assert torch.equal(g0.step_logits, g1.step_logits)


def test_decode_only_steer_leaves_prefill_untouched(llama):
    v = torch.randn(llama.d_model) * 3
    rec = Recorder("resid_post.0", phases=("decode",))
    plain = llama.generate(PROMPTS, max_new_tokens=4, stop_at_eos=False, capture=["resid_post.2"])
    steered = llama.generate(PROMPTS, max_new_tokens=4, stop_at_eos=False, capture=["resid_post.2"],
                             edits=[Steer("resid_post.0", v, positions="decode"), rec])
    assert torch.equal(plain.prefill_cache["resid_post.2"], steered.prefill_cache["resid_post.2"])
    assert torch.equal(plain.step_logits[:, 0], steered.step_logits[:, 0])  # the first token comes from prefill
    assert (plain.step_logits[:, 1:] - steered.step_logits[:, 1:]).abs().max() > 1e-3
    assert [s[0] for s in rec.seen] == ["decode"] * 3
    # in a plain run (all prompt) a decode-only edit never fires
    assert torch.equal(llama.run(PROMPTS).logits, llama.run(PROMPTS, edits=[Steer("resid_post.0", v, positions="decode")]).logits)


def test_steer_positions(llama):
    v = torch.randn(llama.d_model)
    base = llama.run(PROMPTS, capture=["resid_post.0"]).cache["resid_post.0"]
    out = llama.run(PROMPTS, capture=["resid_post.0"], edits=[Steer("resid_post.0", v, positions="last_prompt")])
    diff = (out.cache["resid_post.0"] - base).norm(dim=-1) > 1e-6
    assert diff[:, -1].all() and not diff[:, :-1].any()
    out = llama.run(PROMPTS, capture=["resid_post.0"], edits=[Steer("resid_post.0", v, positions=[0])])
    diff = (out.cache["resid_post.0"] - base).norm(dim=-1) > 1e-6
    mask = llama.tokenize(PROMPTS).attention_mask.bool()
    first_real = mask & (mask.cumsum(1) == 1)
    assert torch.equal(diff, first_real)  # absolute position 0 only, never padding
    # per-row vectors
    per_row = torch.randn(len(PROMPTS), llama.d_model)
    out = llama.run(PROMPTS, capture=["resid_post.0"], edits=[Steer("resid_post.0", per_row, positions="last_prompt")])
    torch.testing.assert_close(out.cache["resid_post.0"][:, -1] - base[:, -1], per_row, atol=1e-5, rtol=0)


def test_ablate_and_patch(llama):
    out = llama.run(PROMPTS, capture=["attn_z.1"], edits=[Ablate("attn_z.1", heads=1)])
    z = out.cache["attn_z.1"]
    real = out.batch.attention_mask.bool()
    assert torch.equal(z[:, :, 1][real], torch.zeros_like(z[:, :, 1][real]))  # padding is never edited
    assert z[:, :, 0][real].abs().sum() > 0
    # patching a run with its own activations is the identity
    clean = llama.run(PROMPTS, capture=["resid_pre.1"])
    patched = llama.run(PROMPTS, edits=[Patch.from_cache(clean.cache, "resid_pre.1")])
    torch.testing.assert_close(patched.logits, clean.logits, atol=1e-6, rtol=0)
    # patching the whole residual stream from another prompt of the same length reproduces that prompt's logits
    a, b = "w1 w2 w3", "w4 w5 w6"
    src = llama.run(b, capture=["resid_pre.1"])
    out = llama.run(a, edits=[Patch.from_cache(src.cache, "resid_pre.1")])
    torch.testing.assert_close(out.logits, src.logits, atol=1e-5, rtol=0)


def test_finished_rows_are_neither_edited_nor_continued(llama):
    # make EOS the argmax of row 0 right away by steering the logits
    eos = llama.eos_token_id
    bump = torch.zeros(llama.d_vocab)
    bump[eos] = 1e4
    rec = Recorder("resid_post.0", phases=("decode",))
    row0_only = lambda ctx: torch.arange(ctx.positions.shape[0])[:, None].expand_as(ctx.positions) == 0  # noqa: E731
    g = llama.generate(PROMPTS, max_new_tokens=4, edits=[Steer("logits", bump, positions=row0_only), rec])
    assert g.new_tokens[0] == [eos]
    assert g.text[0] == ""
    assert not g.decode_active[0].any() and g.decode_active[1:].all()
    assert all(not bool(real[0].any()) for (_, _, _, real, _) in rec.seen)
    assert (g.tokens[0, -3:] == llama.pad_token_id).all()


def test_decode_states_equal_full_recompute_states(model_factory):
    llama = model_factory("llama", dtype="float64")
    g = llama.generate(PROMPTS, max_new_tokens=5, stop_at_eos=False, capture=["resid_post.1"])
    mask = torch.cat([g.batch.attention_mask, torch.ones(len(PROMPTS), 4, dtype=torch.long)], 1)
    full = llama.run({"input_ids": g.tokens[:, :-1], "attention_mask": mask}, capture=["resid_post.1"])
    # decode step s fed the token at column T+s of g.tokens
    T = g.batch.input_ids.shape[1]
    assert_same_across_shapes(g.decode_cache["resid_post.1"], full.cache["resid_post.1"][:, T:])
    # the band is far below a wrong position: the state of the next token differs at O(1)
    off = (g.decode_cache["resid_post.1"][:, :-1] - full.cache["resid_post.1"][:, T + 1:]).abs().max()
    assert off > 1e3 * CROSS_SHAPE_REL * full.cache["resid_post.1"].abs().max()
    assert g.decode_states("resid_post.1").shape == (len(PROMPTS) * 4, llama.d_model)


def test_edit_reprs_are_informative():
    s = Steer("resid_post.2", torch.ones(4), positions="decode", scale=2.0)
    assert "resid_post.2" in repr(s) and "decode" in repr(s) and "scale=2.0" in repr(s)
    assert "heads=(1,)" in repr(Ablate("attn_z.0", heads=1))


def test_generation_stops_at_generation_config_eos_ids(checkpoint_factory, tmp_path):
    """Chat checkpoints end turns with e.g. <|im_end|>: every eos id of generation_config stops a row."""
    import json
    import shutil

    import interplab

    src = checkpoint_factory("llama", n_layers=3)
    ckpt = tmp_path / "chat"
    shutil.copytree(src, ckpt)
    cfg = json.loads((ckpt / "generation_config.json").read_text())
    cfg["eos_token_id"] = [2, 5]
    (ckpt / "generation_config.json").write_text(json.dumps(cfg))
    m = interplab.load_model(str(ckpt))
    assert m.stop_token_ids.tolist() == [2, 5]
    bump = torch.zeros(m.d_vocab)
    bump[5] = 1e4
    g = m.generate(PROMPTS, max_new_tokens=4, edits=[Steer("logits", bump, positions="decode")])
    # the first token comes from prefill (unsteered); the second is the stop token <|im_end|> for every row
    assert all(len(r) == 2 and r[1] == 5 for r in g.new_tokens)
    assert all("<|im_end|>" not in t for t in g.text)


SAME_LENGTH = ["w1 w2 w3 w4", "w5 w6 w7 w8", "w9 w10 w11 w12"]


@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
def test_gradients_flow_into_edit_parameters(model_factory, backend):
    """run(grad=True) keeps the graph: the gradient w.r.t. a steering vector matches finite differences."""
    m = model_factory("llama", backend=backend, dtype="float64")
    torch.manual_seed(0)
    v = (0.01 * torch.randn(m.d_model, dtype=torch.float64)).requires_grad_(True)

    def loss_of(vec, grad):
        o = m.run(SAME_LENGTH, edits=[Steer("resid_post.0", vec, positions="last_prompt")],
                  capture=["resid_post.1"], grad=grad)
        return o.logits[:, -1].log_softmax(-1)[:, 7].sum() + o.cache["resid_post.1"][:, -1].pow(2).sum() * 1e-3

    loss_of(v, True).backward()
    assert v.grad is not None and torch.isfinite(v.grad).all() and v.grad.abs().sum() > 0
    u = torch.randn(m.d_model, dtype=torch.float64)
    # HF computes RoPE cos/sin in float32 even for float64 models, so the forward is only ~1e-7 precise:
    # a central difference with eps 1e-3 (truncation error ~1e-6) is the informative check.
    eps = 1e-3
    fd = float(loss_of(v.detach() + eps * u, False) - loss_of(v.detach() - eps * u, False)) / (2 * eps)
    assert abs(fd - float(v.grad @ u)) < 1e-3 * max(1.0, abs(fd))
    # by default nothing is tracked
    assert m.run(SAME_LENGTH, edits=[Steer("resid_post.0", v)]).logits.requires_grad is False


@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
def test_gradients_are_finite_on_left_padded_float32_batches(model_factory, backend):
    m = model_factory("llama", backend=backend)
    v = (0.01 * torch.randn(m.d_model)).requires_grad_(True)
    out = m.run(PROMPTS, edits=[Steer("resid_post.0", v, positions="last_prompt")], grad=True)
    out.logits[:, -1, 7].sum().backward()
    assert torch.isfinite(v.grad).all() and v.grad.abs().sum() > 0
