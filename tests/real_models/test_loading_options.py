"""load_model's dtype, attention and output-device options, and edits that follow the activation's dtype/device."""
from __future__ import annotations

import pytest
import torch

import interplab
from interplab.core.errors import ConfigError
from interplab.interventions import Ablate, HeadGate, Patch, Steer, SubspaceProjection

PROMPTS = ["w1 w2 w3 w4 w5", "w6 w7"]


@pytest.mark.parametrize("bad", ["int8", "float8", "fp64x", torch.int32])
def test_unknown_dtype_is_a_config_error(checkpoint_factory, bad):
    with pytest.raises(ConfigError, match="dtype"):
        interplab.load_model(checkpoint_factory("llama"), dtype=bad)


@pytest.mark.parametrize("dtype, want", [("auto", torch.float32), ("bfloat16", torch.bfloat16),
                                         (torch.float16, torch.float16), ("float32", torch.float32)])
def test_dtype_names_and_auto(checkpoint_factory, dtype, want):
    m = interplab.load_model(checkpoint_factory("llama"), backend="nnsight", dtype=dtype)
    assert m.dtype == want  # random checkpoints are saved in float32, so "auto" is float32


def _edits(m, src):
    g = torch.Generator().manual_seed(0)
    return [Steer("resid_post.0", torch.randn(m.d_model, generator=g, dtype=torch.float64), scale=2.0),
            Ablate("attn_z.1", heads=[1], value=torch.ones(m.d_head, dtype=torch.float64)),
            HeadGate(torch.rand(m.n_layers, m.n_heads, generator=g).numpy() + 0.5),
            SubspaceProjection(1, torch.randn(m.d_model, 3, generator=g), phases=("prefill", "decode")),
            Patch.from_cache(src, "mlp_out.0")]


@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
def test_bf16_model_runs_every_builtin_edit_in_its_own_dtype(checkpoint_factory, backend):
    """float64 edit tensors meet bf16 activations: every edit casts to the activation's dtype, and the bf16 edited
    run stays within the bf16 band of the fp32 edited run."""
    path = checkpoint_factory("llama")
    m16 = interplab.load_model(path, backend=backend, dtype="bfloat16")
    m32 = interplab.load_model(path, backend=backend)
    src = m32.run(PROMPTS[::-1], capture=["mlp_out.0"]).cache
    o16 = m16.run(PROMPTS, edits=_edits(m16, src), capture=["resid_post.1"])
    o32 = m32.run(PROMPTS, edits=_edits(m32, src), capture=["resid_post.1"])
    assert o16.logits.dtype == torch.bfloat16 and o16.cache["resid_post.1"].dtype == torch.bfloat16
    real = o32.batch.attention_mask.bool()
    clean = m32.run(PROMPTS).logits
    effect = float((o32.logits - clean)[real].abs().max())
    err = float((o16.logits.float() - o32.logits)[real].abs().max())
    assert effect > 0.5 and err < 0.1 * effect, (effect, err)
    g16 = m16.generate(PROMPTS, max_new_tokens=3, edits=_edits(m16, src), stop_at_eos=False)
    assert all(len(t) == 3 for t in g16.new_tokens)


@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
def test_sdpa_by_default_eager_only_for_pattern_forwards(checkpoint_factory, backend):
    m = interplab.load_model(checkpoint_factory("llama"), backend=backend)
    assert m.attn_implementation == "sdpa"
    out = m.run(PROMPTS, capture=["attn_pattern.1", "attn_z.1"])
    assert m.attn_implementation == "sdpa"  # switched back after the forward
    pat = out.cache["attn_pattern.1"]
    real = out.batch.attention_mask.bool()
    torch.testing.assert_close(pat.sum(-1)[real[:, None, :].expand(-1, pat.shape[1], -1)],
                               torch.ones(int(real.sum()) * pat.shape[1]), atol=1e-5, rtol=0)
    # the pattern forward's other captures equal those of an SDPA forward (fp32 band)
    z = m.run(PROMPTS, capture=["attn_z.1"]).cache["attn_z.1"]
    torch.testing.assert_close(out.cache["attn_z.1"][real], z[real], atol=1e-5, rtol=1e-5)


def test_bridge_fires_hook_pattern_on_an_sdpa_model(checkpoint_factory):
    m = interplab.load_model(checkpoint_factory("gpt2"))
    e = interplab.load_model(checkpoint_factory("gpt2"), attn_implementation="eager")
    assert m.attn_implementation == "sdpa" and e.attn_implementation == "eager"
    a = m.run(PROMPTS, capture=["attn_pattern.0"]).cache["attn_pattern.0"]
    b = e.run(PROMPTS, capture=["attn_pattern.0"]).cache["attn_pattern.0"]
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_captures_come_back_on_the_output_device(checkpoint_factory):
    m = interplab.load_model(checkpoint_factory("llama"), backend="nnsight", output_device="meta")
    out = m.run(PROMPTS, capture=["resid_post.0"])
    assert out.cache["resid_post.0"].device.type == "meta"  # a device other than the model's (CPU here)
    m.output_device = None
    assert m.run(PROMPTS, capture=["resid_post.0"]).cache["resid_post.0"].device.type == "cpu"


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_bridge_loads_in_eval_mode(checkpoint_factory, arch):
    """No dropout anywhere: setting the wrappers' mode is left to TransformerBridge (no second walk)."""
    m = interplab.load_model(checkpoint_factory(arch))
    assert not any(x.training for x in m.bridge.modules())
    assert not any(x.training for x in m.hf_model.modules())
