"""Issue 49: every activation a TransformerLens user expects (resid_mid, attn_q/k/v, attn_rot_q/k, attn_scores,
mlp_hidden, the norm scales) on both backends and five families, checked against plain transformers + PyTorch hooks
(tests/hook_layer/reference.py); an edit at each changes the output identically on both backends, and a
zero-strength one changes nothing, bit for bit."""
import pytest
import torch

from interplab.core.edit import site_trailing
from interplab.core.sites import GLOBAL_KINDS, LAYER_KINDS
from interplab.interventions import Ablate, HeadScale, Patch, Steer
from tests.hook_layer.reference import reference_sites

FAMILIES = ("gpt2", "llama", "qwen2", "mistral", "gemma3")
PROMPTS = ["w1 w2 w3 w4 w5", "w6 w7", "w8 w9 w10"]
NEW = ("ln1_scale", "attn_q", "attn_k", "attn_v", "attn_rot_q", "attn_rot_k", "attn_scores", "resid_mid",
       "ln2_scale", "mlp_hidden")
SITES = [f"{k}.{L}" for L in (0, 1) for k in NEW] + ["final_norm_scale"]
ATOL = 1e-5   # the GPT-2 bridge re-implements LayerNorm (4e-6 measured); every other family is bit-exact


def _real(x, site, mask):
    """Real-token entries (and, for attn_scores, unmasked keys: masked ones are finfo.min on both sides)."""
    if site.startswith("attn_scores"):
        x = x[mask[:, None, :, None].expand_as(x) & mask[:, None, None, :].expand_as(x)]
        return x
    return x[mask]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, model_factory):
    arch = request.param
    return arch, model_factory(arch), model_factory(arch, backend="nnsight")


def test_every_site_agrees_with_plain_transformers_on_both_backends(family):
    from transformers import AutoModelForCausalLM

    arch, mb, mn = family
    ob, on = mb.run(PROMPTS, capture=SITES), mn.run(PROMPTS, capture=SITES)
    batch = ob.batch
    hf = AutoModelForCausalLM.from_pretrained(mb.path, attn_implementation="eager").eval()
    ref = reference_sites(hf, batch.input_ids, batch.attention_mask, batch.position_ids, (0, 1))
    mask = batch.attention_mask.bool()
    shapes = {"attn_q": (mb.n_heads, mb.d_head), "attn_rot_q": (mb.n_heads, mb.d_head),
              "attn_k": (mb.n_kv_heads, mb.d_head), "attn_rot_k": (mb.n_kv_heads, mb.d_head),
              "attn_v": (mb.n_kv_heads, mb.d_head), "mlp_hidden": (mb.d_mlp,), "resid_mid": (mb.d_model,)}
    b, p = batch.input_ids.shape
    for site in SITES:
        kind = site.split(".")[0]
        want = (b, mb.n_heads, p, p) if kind == "attn_scores" else (b, p, *shapes.get(kind, (1,)))
        assert ob.cache[site].shape == on.cache[site].shape == want, (arch, site)
        r = _real(ref[site], site, mask)
        for backend, got in (("bridge", ob), ("nnsight", on)):
            torch.testing.assert_close(_real(got.cache[site], site, mask), r, atol=ATOL, rtol=0,
                                       msg=f"{arch} {backend} {site}")
    # masked scores hold the additive mask's finfo.min (future keys), on both backends
    s = ob.cache["attn_scores.1"]
    assert float(s[0, 0, 0, 1]) == float(on.cache["attn_scores.1"][0, 0, 0, 1]) == torch.finfo(s.dtype).min
    assert mb.n_kv_heads < mb.n_heads or arch == "gpt2"   # the KV sites are per KV head (GQA) where it has one


def _edit_for(m, site, g):
    kind = site.split(".")[0]
    if kind == "attn_scores":
        return HeadScale({(int(site.split(".")[1]), 1): 0.0}, site="attn_scores"), None
    v = torch.randn(*site_trailing(m.shape, site), generator=g)
    if kind.endswith("_scale"):
        return Steer(site, v.abs() + 0.5), Steer(site, torch.zeros_like(v))
    # last_prompt: a constant added to every key of a row cancels in the softmax
    return Steer(site, 3 * v, positions="last_prompt"), Steer(site, torch.zeros_like(v))


def test_an_edit_at_every_new_site_moves_both_backends_alike(family):
    arch, mb, mn = family
    g = torch.Generator().manual_seed(0)
    clean = {m.backend: m.run(PROMPTS).logits for m in (mb, mn)}
    mask = mb.tokenize(PROMPTS).attention_mask.bool()
    for site in [f"{k}.0" for k in NEW] + ["final_norm_scale"]:
        edit, zero = _edit_for(mb, site, g)
        lb, ln = mb.run(PROMPTS, edits=[edit]).logits, mn.run(PROMPTS, edits=[edit]).logits
        assert float((lb - clean["bridge"])[mask].abs().max()) > 1e-3, (arch, site, "edit had no effect")
        torch.testing.assert_close(lb[mask], ln[mask], atol=ATOL, rtol=0, msg=f"{arch} {site}")
        if zero is not None:
            for m in (mb, mn):
                assert torch.equal(m.run(PROMPTS, edits=[zero]).logits, clean[m.backend]), (arch, m.backend, site)


def test_resid_mid_edits_the_residual_stream_not_only_the_mlp_input(model_factory):
    """TransformerLens's bridge hook_resid_mid returns a tensor that only the MLP's norm reads; interplab's
    resid_mid is the residual stream (as HookedTransformer's), so an edit reaches resid_post directly too."""
    from transformers import AutoModelForCausalLM

    for arch in ("llama", "gpt2", "gemma3"):
        mb, mn = model_factory(arch), model_factory(arch, backend="nnsight")
        v = torch.linspace(-2, 2, mb.d_model)
        batch = mb.tokenize(PROMPTS)
        hf = AutoModelForCausalLM.from_pretrained(mb.path, attn_implementation="eager").eval()
        blocks = hf.transformer.h if arch == "gpt2" else hf.model.layers
        norm = {"gpt2": "ln_2", "gemma3": "pre_feedforward_layernorm"}.get(arch, "post_attention_layernorm")
        handle = getattr(blocks[0], norm).register_forward_pre_hook(lambda mod, args, v=v: args[0].add_(v))
        try:
            with torch.no_grad():
                ref = hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                         position_ids=batch.position_ids).logits
        finally:
            handle.remove()
        mask = batch.attention_mask.bool()
        for m in (mb, mn):
            out = m.run(PROMPTS, edits=[Steer("resid_mid.0", v)], capture=["resid_mid.0", "mlp_out.0",
                                                                              "resid_post.0"])
            torch.testing.assert_close(out.logits[mask], ref[mask], atol=ATOL, rtol=0, msg=f"{arch} {m.backend}")
            c = out.cache   # the captured resid_mid is the edited one, and it is what resid_post adds to
            torch.testing.assert_close((c["resid_mid.0"] + c["mlp_out.0"])[mask], c["resid_post.0"][mask],
                                       atol=ATOL, rtol=0)


def test_a_scale_patched_from_its_own_run_changes_nothing(model_factory):
    """Freezing a norm's scale (Patch from a clean run, the usual attribution-patching move) re-computes the norm
    with that scale: patched with its own values, the output is the clean one (RMSNorm, LayerNorm with bias and
    centring, Gemma's (1 + w) weights)."""
    for arch in ("gpt2", "llama", "gemma3"):
        for m in (model_factory(arch), model_factory(arch, backend="nnsight")):
            sites = ["ln1_scale.1", "ln2_scale.0", "final_norm_scale"]
            clean = m.run(PROMPTS, capture=sites)
            patched = m.run(PROMPTS, edits=[Patch.from_cache(clean.cache, s) for s in sites]).logits
            mask = clean.batch.attention_mask.bool()
            torch.testing.assert_close(patched[mask], clean.logits[mask], atol=ATOL, rtol=0,
                                       msg=f"{arch} {m.backend}")


def test_masked_scores_stay_masked_under_an_edit(model_factory):
    """Zeroing every score of a layer gives uniform attention over the keys a query may see, never over future or
    padding keys."""
    for m in (model_factory("llama"), model_factory("llama", backend="nnsight")):
        out = m.run(PROMPTS, edits=[Ablate("attn_scores.0")], capture=["attn_pattern.0"])
        pat, mask = out.cache["attn_pattern.0"], out.batch.attention_mask.bool()
        visible = torch.tril(torch.ones(pat.shape[-1], pat.shape[-1], dtype=torch.bool)) & mask[:, None, None, :]
        want = visible / visible.sum(-1, keepdim=True)
        rows = mask[:, None, :, None].expand_as(pat)
        torch.testing.assert_close(pat[rows], want.expand_as(pat)[rows].to(pat.dtype), atol=1e-6, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_new_site_edits_in_kv_cached_generation_equal_recomputation(model_factory, arch):
    """Edits of the rotated keys enter the KV cache (they are made before the cache update), so a cached decode
    equals a full recomputation; decode captures of attn_scores are per-step lists like attn_pattern's."""
    cap = ["attn_scores.1", "attn_rot_k.1", "resid_mid.0", "ln1_scale.1", "mlp_hidden.0"]
    for backend in ("bridge", "nnsight"):
        m = model_factory(arch, backend=backend)
        g = torch.Generator().manual_seed(3)
        edits = [Steer("attn_rot_k.0", torch.randn(m.n_kv_heads, m.d_head, generator=g), positions="decode"),
                 Steer("resid_mid.1", torch.randn(m.d_model, generator=g), positions="decode"),
                 HeadScale({(1, 1): 0.0, (0, 0): 2.0}, site="attn_scores"), Steer("ln2_scale.0", [0.5])]
        c = m.generate(PROMPTS, max_new_tokens=4, edits=edits, stop_at_eos=False, capture=cap)
        f = m.generate(PROMPTS, max_new_tokens=4, edits=edits, stop_at_eos=False, capture=cap, use_cache=False)
        assert c.new_tokens == f.new_tokens, (arch, backend)
        torch.testing.assert_close(c.step_logits, f.step_logits, atol=1e-4, rtol=0)
        for s in cap[1:]:
            torch.testing.assert_close(c.decode_cache[s], f.decode_cache[s], atol=1e-4, rtol=0, msg=s)
        steps = c.decode_cache["attn_scores.1"]
        assert isinstance(steps, list) and steps[1].shape[-1] == steps[0].shape[-1] + 1


def test_source_instrumentation_does_not_outlive_the_forward(model_factory):
    """The nnsight backend reads attn_rot_q/k and attn_scores through nnsight's `.source`, which instruments a
    module's forward for good; the backend takes it off again, so later forwards run the plain module."""
    m = model_factory("llama", backend="nnsight")
    m.run(PROMPTS, capture=["attn_scores.0", "attn_rot_q.1"])
    for layer in m.hf_model.model.layers:
        state = layer.self_attn.__dict__.get("__nnsight__")
        assert state is None or not state.sourced


def test_the_site_list_and_its_errors_name_the_new_sites(llama):
    from interplab.core.errors import SiteError

    assert set(LAYER_KINDS) >= set(NEW) and "final_norm_scale" in GLOBAL_KINDS
    assert {"resid_mid.2", "attn_scores.0", "ln2_scale.1", "final_norm_scale"} <= set(llama.sites())
    with pytest.raises(SiteError) as e:
        llama.run("w1", capture=["attn_score.0"])
    assert "attn_scores.L" in str(e.value) and "module:PATH" in str(e.value)
    with pytest.raises(SiteError, match="module:model.layers.0"):
        llama.run("w1", capture=["model.layers.0"])


def test_a_forward_stopped_after_any_site_captures_what_the_full_one_does(family):
    """Order keys follow execution: a forward that stops after the deepest requested site (logits=False) has run
    everything each capture needs, on both backends (nnsight reads its locations in firing order)."""
    arch, mb, mn = family
    every = [f"{k}.0" for k in reversed(LAYER_KINDS)] + ["final_norm_scale"]
    for m in (mb, mn):
        for sites in [[s] for s in every if s.startswith(NEW)] + [every]:
            short, full = m.run(PROMPTS, capture=sites, logits=False), m.run(PROMPTS, capture=sites)
            assert short.logits is None
            for s in sites:
                assert torch.equal(short.cache[s], full.cache[s]), (arch, m.backend, s)
