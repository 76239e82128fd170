"""The escape hatch: `module:PATH` (a named module of the Hugging Face model) captured and edited on both backends,
against a plain PyTorch hook, with its hooks gone after every forward, also one that raised."""
import pytest
import torch

from interplab.core.errors import SiteError
from interplab.core.sites import ModuleSite
from interplab.interventions import Edit, Steer

PROMPTS = ["w1 w2 w3 w4 w5", "w6 w7", "w8 w9 w10"]
ACT = "module:model.layers.0.mlp.act_fn"


@pytest.fixture(scope="module")
def pair(model_factory):
    models = model_factory("llama"), model_factory("llama", backend="nnsight")
    for m in models:
        m.run("w1")
        _hooks(m)   # the baseline, before any module site ran
    return models


def _hooks(m):
    """PyTorch hooks on the model beyond its own permanent ones (the bridge keeps a KV-cache pre-hook per block,
    and TransformerLens adds one to each norm on its first forward)."""
    n = sum(len(mod._forward_hooks) + len(mod._forward_pre_hooks) for mod in m.hf_model.modules())
    return n - _BASE.setdefault(id(m), n)


_BASE: dict = {}


def test_module_outputs_and_inputs_agree_with_a_plain_hook(pair):
    from transformers import AutoModelForCausalLM

    mb, _ = pair
    batch = mb.tokenize(PROMPTS)
    hf = AutoModelForCausalLM.from_pretrained(mb.path, attn_implementation="eager").eval()
    seen = {}
    h = hf.model.layers[0].mlp.act_fn.register_forward_hook(lambda mod, a, o: seen.__setitem__("act", o.clone()))
    v = torch.linspace(-1, 1, mb.d_mlp)
    with torch.no_grad():
        hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids)
    h.remove()
    h = hf.model.layers[0].mlp.act_fn.register_forward_hook(lambda mod, a, o: o + v)
    with torch.no_grad():
        ref = hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                 position_ids=batch.position_ids).logits
    h.remove()
    mask = batch.attention_mask.bool()
    sites = [ACT, "module:model.layers.0.mlp.down_proj:input", "mlp_hidden.0",
             "module:model.layers.0.self_attn:input", "module:model.layers.0.input_layernorm"]
    for m in pair:
        c = m.run(PROMPTS, capture=sites).cache
        torch.testing.assert_close(c[ACT][mask], seen["act"][mask], atol=1e-5, rtol=0, msg=m.backend)
        assert torch.equal(c["module:model.layers.0.mlp.down_proj:input"], c["mlp_hidden.0"])
        # the attention is called with hidden_states as a keyword: the input is read there
        assert torch.equal(c["module:model.layers.0.self_attn:input"], c["module:model.layers.0.input_layernorm"])
        edited = m.run(PROMPTS, edits=[Steer(ACT, v)]).logits
        torch.testing.assert_close(edited[mask], ref[mask], atol=1e-5, rtol=0, msg=m.backend)
        assert _hooks(m) == 0
        zero = m.run(PROMPTS, edits=[Steer(ACT, torch.zeros(m.d_mlp))]).logits
        assert torch.equal(zero, m.run(PROMPTS).logits)


class _Boom(Edit):
    sites = (ACT,)

    def apply(self, site, x, ctx):
        raise RuntimeError("boom")


def test_hooks_are_removed_after_an_error_and_nothing_leaks(pair):
    for m in pair:
        clean = m.run(PROMPTS).logits
        with pytest.raises(RuntimeError, match="boom"):
            m.run(PROMPTS, edits=[_Boom()], capture=["module:model.layers.1.mlp"])
        assert _hooks(m) == 0
        assert torch.equal(m.run(PROMPTS).logits, clean)
        g = m.generate(PROMPTS, max_new_tokens=3, capture=[ACT], stop_at_eos=False)
        assert g.decode_cache[ACT].shape == (3, 2, m.d_mlp) and _hooks(m) == 0


def test_a_module_site_stops_the_forward_after_its_block(pair):
    for m in pair:
        out = m.run(PROMPTS, capture=[ModuleSite("model.layers.0.mlp.act_fn")], logits=False)
        assert out.logits is None and out.cache[ACT].shape[-1] == m.d_mlp


def test_module_site_errors_say_what_to_do(pair, model_factory):
    mb, mn = pair
    with pytest.raises(SiteError, match="did you mean model.layers.0.mlp.act_fn"):
        mb.run("w1", capture=["module:model.layers.0.mlp.act_fnn"])
    with pytest.raises(SiteError, match="dotted module path"):
        mn.run("w1", capture=["module:model..mlp"])
    assert "model.layers.1.self_attn.q_proj" in mn.module_paths() == mb.module_paths()
    # TransformerLens re-implements attention: a Hugging Face submodule it never calls is refused, not skipped
    gb, g3 = model_factory("gpt2"), model_factory("gemma3", backend="nnsight")
    for m in (gb, g3):
        m.run("w1")
        _hooks(m)
    with pytest.raises(SiteError, match="did not run"):
        gb.run("w1", capture=["module:transformer.h.0.attn.resid_dropout"])
    with pytest.raises(SiteError, match="ran 2 times"):   # global and local rotary tables
        g3.run("w1", capture=["module:model.rotary_emb"])
    assert _hooks(gb) == _hooks(g3) == 0
