"""Issue 48: the lenses stream over layers. The tuned lens gives the same translators and losses as the batched
version it replaced (kept below as the reference), its peak memory does not grow with the number of layers, and the
logit lens reads one layer at a time with unchanged outputs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from interplab.probes.lenses import logit_lens, train_tuned_lens
from interplab.probes.lenses.logit_lens import _float_norm

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ["w1 w2 w3 w4 w5 w6", "w7 w8 w9", "w3 w3 w1 w10 w11 w12 w13", "w5"]


def batched_tuned_lens(model, prompts, *, steps, lr, seed=0):
    """The pre-issue-48 `train_tuned_lens`: every layer's logits over the vocabulary at once."""
    torch.manual_seed(seed)
    L, d = model.n_layers, model.d_model
    out = model.run(list(prompts), capture=[f"resid_post.{layer}" for layer in range(L)])
    real = out.batch.attention_mask.bool().to(out.logits.device)
    h = torch.stack([out.cache[f"resid_post.{layer}"][real] for layer in range(L)]).float().cpu()
    target = torch.log_softmax(out.logits[real].float().cpu(), -1)
    W_U, b_U = model.unembedding()
    W_U, b_U = W_U.float(), None if b_U is None else b_U.float()
    h = h[: L - 1]
    A = torch.zeros(L - 1, d, d, requires_grad=True)
    b = torch.zeros(L - 1, d, requires_grad=True)
    opt = torch.optim.Adam([A, b], lr=lr)
    norm_f, curve = _float_norm(model.final_norm_module), []
    for _ in range(steps):
        opt.zero_grad()
        z = norm_f(h + torch.einsum("lnd,lde->lne", h, A) + b[:, None])
        logp = torch.log_softmax(z @ W_U + (b_U if b_U is not None else 0), -1)
        loss = (target.exp() * (target - logp)).sum(-1).mean()
        loss.backward()
        opt.step()
        curve.append(float(loss.detach()))
    return A.detach().numpy(), b.detach().numpy(), np.array(curve)


@pytest.mark.parametrize("chunk", [None, 5])   # one chunk per layer, and chunks that split the prompts' tokens
def test_streamed_tuned_lens_equals_the_batched_one(model_factory, chunk):
    m = model_factory("llama")
    A, b, curve = batched_tuned_lens(m, PROMPTS, steps=25, lr=1e-2)
    tl = train_tuned_lens(m, PROMPTS, steps=25, lr=1e-2, chunk_tokens=chunk)
    np.testing.assert_allclose(tl.loss_curve, curve, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(tl.A[:-1], A, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(tl.b[:-1], b, rtol=1e-4, atol=1e-6)
    assert not tl.A[-1].any() and curve[-1] < curve[0]


def test_layer_by_layer_logit_lens_reads_as_before(model_factory):
    m = model_factory("llama")
    ll = logit_lens(m, PROMPTS[0], top_k=3, target="w4")
    out = m.run([PROMPTS[0]], capture=[f"resid_post.{layer}" for layer in range(m.n_layers)])
    h = torch.stack([out.cache[f"resid_post.{layer}"][0] for layer in range(m.n_layers)])
    logp = torch.log_softmax(m.unembed(m.final_norm_module(h)).double(), -1)           # all layers at once
    final = torch.log_softmax(out.logits[0].double(), -1)
    np.testing.assert_allclose(ll.kl, (final.exp() * (final - logp)).sum(-1).numpy(), rtol=1e-9, atol=1e-12)
    probs, top = logp.exp().topk(3, -1)
    np.testing.assert_array_equal(ll.top_ids, top.numpy())
    np.testing.assert_allclose(ll.top_probs, probs.numpy(), rtol=1e-9)
    t = m.token_id("w4")
    np.testing.assert_allclose(ll.target_prob, logp[..., t].exp().numpy(), rtol=1e-9)
    np.testing.assert_array_equal(ll.target_rank, (logp > logp[..., t, None]).sum(-1).numpy())


PEAK_SCRIPT = r"""
import json, sys
from interplab.testing import make_random_checkpoint
import interplab
from interplab.probes.lenses import train_tuned_lens
n_layers, path = int(sys.argv[1]), sys.argv[2]
make_random_checkpoint("llama", path, n_layers=n_layers, d_model=32, n_heads=2, n_kv_heads=1, vocab=4096,
                       n_ctx=512, seed=0)
m = interplab.load_model(path)
prompts = [" ".join(f"w{(7 * i + j) % 4000}" for j in range(250)) for i in range(4)]   # 1,000+ tokens
def rss_kb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])
train_tuned_lens(m, prompts[:1], steps=1)      # warm up torch's allocator and kernels
before = rss_kb("VmRSS:")
open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the current RSS
train_tuned_lens(m, prompts, steps=2)
print(json.dumps({"extra_mb": (rss_kb("VmHWM:") - before) / 1024}))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's resettable peak RSS")
def test_tuned_lens_peak_memory_does_not_grow_with_layers(tmp_path):
    """2 vs 10 layers of a random model with a 4,096-word vocabulary on ~1,000 tokens: one layer's logits are
    ~16 MB, so the batched version needed ~4 x 16 MB more per added layer (> 500 MB for 8 more layers); the
    streamed one must stay within one layer's worth."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    extra = {}
    for n_layers in (2, 10):
        res = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(n_layers), str(tmp_path / f"m{n_layers}")],
                             env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        extra[n_layers] = json.loads(res.stdout.strip().splitlines()[-1])["extra_mb"]
    one_layer_mb = 1000 * 4096 * 4 / 2**20
    assert extra[10] - extra[2] < one_layer_mb, extra
