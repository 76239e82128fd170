"""Real architectures at real size, with seeded random weights built from committed configs (never downloaded,
cached between runs): bridge = nnsight = plain transformers on every site in fp32, and bf16 smoke runs.
The 1B+ configs build only in `slow` tests (memory and time on the 2-core CI machine)."""
from __future__ import annotations

import pytest
import torch

import interplab
from interplab.core.sites import LAYER_KINDS
from interplab.interventions import Ablate, Steer
from interplab.testing import real_configs, real_size_checkpoint

SMALL = ("gpt2-small", "qwen2.5-0.5b")
IDS = [[11, 42, 7, 301, 5, 99, 12], [8, 1000, 77]]


def test_committed_configs_cover_the_issue_list():
    assert {"gpt2-small", "qwen2.5-0.5b", "llama-3.2-1b", "gemma-2-2b", "mistral-7b", "phi-3-mini"} <= set(
        real_configs())


@pytest.fixture(scope="module", params=SMALL)
def small(request):
    return request.param, real_size_checkpoint(request.param)


def _hf_reference(path, ids):
    """Every residual stream of plain transformers (hidden_states) and its logits, on the same left-padded batch."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    width = max(map(len, ids))
    inp = torch.tensor([[0] * (width - len(r)) + r for r in ids])
    att = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in ids])
    pos = (att.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        out = hf(input_ids=inp, attention_mask=att, position_ids=pos, output_hidden_states=True)
    return out, att.bool()


def test_bridge_nnsight_transformers_agree_on_every_site(small):
    name, path = small
    mb = interplab.load_model(path)
    n = mb.n_layers
    sites = [f"{k}.{L}" for L in (0, n // 2, n - 1) for k in LAYER_KINDS] + ["final_norm", "logits"]
    ob = mb.run(IDS, capture=sites)
    del mb
    mn = interplab.load_model(path, backend="nnsight")
    on = mn.run(IDS, capture=sites)
    del mn
    real = ob.batch.attention_mask.bool()
    for s in sites:
        a, b = ob.cache[s], on.cache[s]
        if s.startswith(("attn_pattern", "attn_scores")):   # real query rows and keys; scores unmasked only
            keep = real[:, None, :, None].expand_as(a) & real[:, None, None, :].expand_as(a) & (a > -1e30)
            a, b = a[keep], b[keep]
        else:
            a, b = a[real], b[real]
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4, msg=f"{name} {s}")
    ref, att = _hf_reference(path, IDS)
    # hidden_states[L + 1] is the output of block L (before the final norm, except the last entry in HF models)
    for L in (0, n // 2):
        torch.testing.assert_close(ob.cache[f"resid_post.{L}"][real], ref.hidden_states[L + 1][att],
                                   atol=1e-4, rtol=1e-4, msg=f"{name} resid_post.{L}")
    torch.testing.assert_close(ob.logits[real], ref.logits[att], atol=1e-4, rtol=1e-4)


def test_edits_agree_between_backends_at_real_size(small):
    name, path = small
    outs = {}
    for backend in ("bridge", "nnsight"):
        m = interplab.load_model(path, backend=backend)
        g = torch.Generator().manual_seed(0)
        edits = [Steer("resid_post.1", torch.randn(m.d_model, generator=g), scale=4.0),
                 Ablate("attn_z.2", heads=[0, 3])]
        outs[backend] = (m.run(IDS, edits=edits).logits, m.run(IDS).logits,
                         m.generate(IDS, max_new_tokens=4, edits=edits, stop_at_eos=False).new_tokens)
        del m
    (eb, cb, gb), (en, _, gn) = outs["bridge"], outs["nnsight"]
    assert (eb - cb).abs().max() > 1e-3
    # real tokens only: under SDPA (the default) left-padding rows are kernel-defined garbage
    width = max(map(len, IDS))
    real = torch.tensor([[False] * (width - len(r)) + [True] * len(r) for r in IDS])
    torch.testing.assert_close(eb[real], en[real], atol=1e-4, rtol=1e-4)
    assert gb == gn


@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
def test_bf16_smoke(backend):
    path = real_size_checkpoint("gpt2-small")
    m = interplab.load_model(path, backend=backend, dtype=torch.bfloat16)
    assert m.dtype == torch.bfloat16
    out = m.run(IDS, capture=["resid_post.5", "attn_z.3"])
    assert out.logits.dtype == torch.bfloat16 and torch.isfinite(out.logits.float()).all()
    ref = interplab.load_model(path, backend=backend).run(IDS).logits
    # bf16 holds ~3 significant digits; the logits agree with fp32 to that band
    real = out.batch.attention_mask.bool()
    assert (out.logits.float()[real] - ref[real]).abs().max() < 0.1 * ref[real].abs().max()
    g = m.generate(IDS, max_new_tokens=3, edits=[Steer("resid_post.2", torch.ones(m.d_model), positions="decode")])
    assert len(g.new_tokens) == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama-3.2-1b"])
def test_larger_configs_run(name, tmp_path):
    # The committed config at full width (d 2048, vocab 128k, GQA 32/8, llama3 rope scaling, tied embeddings) with
    # 2 of its 16 identical blocks: every distinct part of the architecture is loaded and run, at a third of the
    # weights (0.38B; the full depth took 36 s of the suite on 2 cores; scripts/gpu_check.py runs full-size models).
    # Built in bf16 (the dtype it runs in) in this test's own folder, removed when it ends: a 1B checkpoint kept in
    # the session cache beside the others filled a CI disk (issue 24).
    import shutil

    free = shutil.disk_usage(tmp_path).free
    if free < 2 * 2**30:
        pytest.skip(f"needs 2 GiB free under {tmp_path} for a 0.8 GB bf16 checkpoint; {free / 2**30:.1f} GiB free")
    path = real_size_checkpoint(name, dtype="bfloat16", cache_dir=tmp_path, num_hidden_layers=2)
    try:
        m = interplab.load_model(path, dtype=torch.bfloat16)
        out = m.run(IDS, capture=[f"resid_post.{m.n_layers - 1}"])
        assert torch.isfinite(out.logits.float()).all()
        assert out.cache[f"resid_post.{m.n_layers - 1}"].shape[-1] == m.d_model == 2048
    finally:
        shutil.rmtree(path, ignore_errors=True)
