"""Both backends compute the same thing: captures (every site kind), edited logits, generation, on five families."""
import pytest
import torch

from interplab.interventions import Ablate, Steer
from interplab.core.sites import LAYER_KINDS

ARCHS = ("gpt2", "llama", "qwen2", "mistral", "gemma3")
PROMPTS = ["w1 w2 w3 w4 w5", "w6 w7", "w8 w9 w10"]
ALL_SITES = [f"{k}.{L}" for L in (0, 1) for k in LAYER_KINDS] + ["final_norm", "logits"]


@pytest.mark.parametrize("arch", ARCHS)
def test_captures_agree_between_backends(model_factory, arch):
    mb, mn = model_factory(arch), model_factory(arch, backend="nnsight")
    ob, on = mb.run(PROMPTS, capture=ALL_SITES), mn.run(PROMPTS, capture=ALL_SITES)
    assert set(ob.cache) == set(on.cache) == set(ALL_SITES)
    for site in ALL_SITES:
        assert ob.cache[site].shape == on.cache[site].shape, site
        torch.testing.assert_close(ob.cache[site], on.cache[site], atol=1e-5, rtol=0, msg=site)
    torch.testing.assert_close(ob.logits, on.logits, atol=1e-5, rtol=0)
    # shapes are the documented ones
    b, p = ob.batch.input_ids.shape
    assert ob.cache["attn_z.1"].shape == (b, p, mb.n_heads, mb.d_head)
    assert ob.cache["attn_pattern.1"].shape == (b, mb.n_heads, p, p)
    assert ob.cache["resid_post.0"].shape == (b, p, mb.d_model)


@pytest.mark.parametrize("arch", ARCHS)
def test_edited_logits_agree_between_backends(model_factory, arch):
    mb, mn = model_factory(arch), model_factory(arch, backend="nnsight")
    g = torch.Generator().manual_seed(1)
    edits = [Steer("resid_post.0", torch.randn(mb.d_model, generator=g), scale=2.0),
             Ablate("attn_z.1", heads=[0, 2]),
             Steer("mlp_out.1", torch.randn(mb.d_model, generator=g), positions="last_prompt")]
    clean = mb.run(PROMPTS).logits
    ob = mb.run(PROMPTS, edits=edits)
    eb, en = ob.logits, mn.run(PROMPTS, edits=edits).logits
    assert (eb - clean).abs().max() > 1e-2  # the edits do something
    # Real tokens only: under SDPA (the default) a left-padding query row attends to nothing and its output is
    # kernel-defined garbage, which an edit then transforms differently in each backend.
    real = ob.batch.attention_mask.bool()
    torch.testing.assert_close(eb[real], en[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
def test_kv_cached_generation_equals_uncached(model_factory, arch, backend):
    m = model_factory(arch, backend=backend)
    g = torch.Generator().manual_seed(2)
    edits = [Steer("resid_post.1", torch.randn(m.d_model, generator=g), positions="decode", scale=3.0),
             Ablate("attn_z.0", heads=[1])]
    cached = m.generate(PROMPTS, max_new_tokens=6, edits=edits, stop_at_eos=False, capture=["resid_post.1"])
    full = m.generate(PROMPTS, max_new_tokens=6, edits=edits, stop_at_eos=False, use_cache=False,
                      capture=["resid_post.1"])
    assert cached.new_tokens == full.new_tokens
    torch.testing.assert_close(cached.step_logits, full.step_logits, atol=1e-4, rtol=0)
    torch.testing.assert_close(cached.decode_cache["resid_post.1"], full.decode_cache["resid_post.1"],
                               atol=1e-4, rtol=0)
    plain = m.generate(PROMPTS, max_new_tokens=6, stop_at_eos=False)
    assert (plain.step_logits - cached.step_logits).abs().max() > 1e-3


def test_generation_agrees_between_backends(model_factory):
    mb, mn = model_factory("llama"), model_factory("llama", backend="nnsight")
    edits = [Steer("resid_pre.1", torch.ones(mb.d_model), positions="decode", scale=0.5)]
    gb = mb.generate(PROMPTS, max_new_tokens=5, edits=edits, stop_at_eos=False)
    gn = mn.generate(PROMPTS, max_new_tokens=5, edits=edits, stop_at_eos=False)
    assert gb.new_tokens == gn.new_tokens
    torch.testing.assert_close(gb.step_logits, gn.step_logits, atol=1e-5, rtol=0)


def test_cached_generation_matches_transformers_generate(model_factory):
    """No edits: the KV-cached loop reproduces HF's own greedy generate (guards the TL 3.9 cache-kwarg bug)."""
    m = model_factory("llama")
    ids = m.tokenize("w1 w2 w3").input_ids
    ours = m.generate(ids, max_new_tokens=8, stop_at_eos=False).new_tokens[0]
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(m.path)
    ref = hf.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)[0, ids.shape[1]:]
    assert ours == ref.tolist()
