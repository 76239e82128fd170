"""Sharded and offloaded models (accelerate `device_map`): captures, every built-in edit and KV-cached generation
equal the undispatched model's (fp32, atol 1e-5). On this CPU-only machine the nnsight backend is tested with one
layer on "cpu" and one offloaded to "disk"; the bridge accepts CPU/GPU maps and refuses disk with a typed error.
Multi-GPU maps run in scripts/gpu_check.py."""
from __future__ import annotations

import pytest
import torch

import interplab
from interplab.core.errors import ConfigError
from interplab.interventions import Ablate, HeadGate, Patch, Steer, SubspaceProjection

IDS = [[5, 6, 7, 8, 9], [10, 11, 12]]
SITES = ["resid_pre.0", "attn_z.1", "attn_out.1", "mlp_out.1", "resid_post.1", "final_norm", "logits"]
DISK_MAP = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu",
            "model.layers.1": "disk", "model.norm": "cpu", "lm_head": "cpu"}


def _edits(m, src):
    g = torch.Generator().manual_seed(0)
    return [Steer("resid_post.1", torch.randn(m.d_model, generator=g), scale=2.0),
            Ablate("attn_z.1", heads=[1]),
            HeadGate(torch.rand(m.n_layers, m.n_heads, generator=g).numpy() + 0.5),
            SubspaceProjection(1, torch.randn(m.d_model, 3, generator=g), phases=("prefill", "decode")),
            Patch.from_cache(src, "mlp_out.1", positions="last_prompt")]


def _compare(ref, sharded):
    a, b = ref.run(IDS, capture=SITES), sharded.run(IDS, capture=SITES)
    for s in SITES:
        torch.testing.assert_close(a.cache[s], b.cache[s], atol=1e-5, rtol=0, msg=s)
    src = ref.run(IDS[::-1], capture=["mlp_out.1"]).cache
    ea = ref.run(IDS, edits=_edits(ref, src)).logits
    eb = sharded.run(IDS, edits=_edits(sharded, src)).logits
    assert float((ea - a.logits).abs().max()) > 1e-3
    torch.testing.assert_close(ea, eb, atol=1e-5, rtol=0)
    dec = [Steer("resid_post.0", torch.ones(ref.d_model), phases=("decode",), scale=2.0)]
    ga = ref.generate(IDS, max_new_tokens=4, edits=dec, stop_at_eos=False, capture=["resid_post.1"])
    gb = sharded.generate(IDS, max_new_tokens=4, edits=dec, stop_at_eos=False, capture=["resid_post.1"])
    assert ga.new_tokens == gb.new_tokens
    torch.testing.assert_close(ga.step_logits, gb.step_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(ga.decode_cache["resid_post.1"], gb.decode_cache["resid_post.1"], atol=1e-5, rtol=0)


def test_nnsight_with_a_layer_offloaded_to_disk_equals_the_plain_model(checkpoint_factory, tmp_path):
    path = checkpoint_factory("llama")
    ref = interplab.load_model(path, backend="nnsight")
    sharded = interplab.load_model(path, backend="nnsight", device_map=DISK_MAP, offload_folder=str(tmp_path))
    assert sharded.hf_model.hf_device_map["model.layers.1"] == "disk"
    # the offloaded layer's weights are not in memory (accelerate streams them from the safetensors file)
    assert next(sharded.hf_model.model.layers[1].parameters()).device.type == "meta"
    assert next(sharded.hf_model.model.layers[0].parameters()).device.type == "cpu"
    _compare(ref, sharded)


def test_bridge_with_a_cpu_device_map_equals_the_plain_model(checkpoint_factory):
    path = checkpoint_factory("llama")
    cpu_map = {k: "cpu" for k in DISK_MAP}
    _compare(interplab.load_model(path), interplab.load_model(path, device_map=cpu_map))


def test_bridge_refuses_disk_offload_and_names_the_nnsight_route(checkpoint_factory, tmp_path):
    with pytest.raises(ConfigError, match="backend='nnsight'"):
        interplab.load_model(checkpoint_factory("llama"), device_map=DISK_MAP, offload_folder=str(tmp_path))


def test_placement_options_need_a_device_map(checkpoint_factory, tmp_path):
    with pytest.raises(ConfigError, match="device_map"):
        interplab.load_model(checkpoint_factory("llama"), offload_folder=str(tmp_path))
