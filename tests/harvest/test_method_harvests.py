"""The methods' harvests go through interplab.harvest without changing their numbers: the Truth-Score capture equals
the former in-RAM loop (model.run + cache.last per batch) bit for bit, on disk and in RAM, with and without edits."""
from __future__ import annotations

import numpy as np
import torch

from interplab.interventions import Steer
from interplab.probes.truth.scores import capture_head_outputs, truth_scores

TEXTS = ["w1 w2 w3 w4", "w5 w6", "w7 w8 w9 w10 w11 w3", "w12", "w4 w4", "w9 w1 w2"]


def _former_capture(model, texts, batch_size, edits=None):
    """The capture loop as it was before harvest (commit f7255f0, scores.capture_head_outputs)."""
    sites = [f"attn_z.{layer}" for layer in range(model.n_layers)]
    out = torch.empty(len(texts), model.n_layers, model.n_heads, model.d_head)
    with torch.no_grad():
        for s in range(0, len(texts), batch_size):
            chunk = list(texts[s:s + batch_size])
            ed = edits(np.arange(s, s + len(chunk))) if callable(edits) else edits
            res = model.run(chunk, capture=sites, logits=False, edits=ed)
            out[s:s + len(chunk)] = torch.stack([res.cache.last(site) for site in sites], 1).float().cpu()
    return out


def test_truth_capture_is_unchanged(model_factory, tmp_path):
    m = model_factory("llama", n_layers=3)
    ref = _former_capture(m, TEXTS, 4)
    assert torch.equal(capture_head_outputs(m, TEXTS, batch_size=4), ref)
    assert torch.equal(capture_head_outputs(m, TEXTS, batch_size=4, out_dir=tmp_path / "z"), ref)
    steer = [Steer("resid_post.0", torch.ones(m.d_model), scale=0.5)]
    assert torch.equal(capture_head_outputs(m, TEXTS, batch_size=4, edits=steer), _former_capture(m, TEXTS, 4, steer))
    assert not torch.equal(_former_capture(m, TEXTS, 4, steer), ref)   # the edit matters, so the check can fail


def test_truth_scores_with_a_disk_harvest_equal_in_ram(model_factory, tmp_path):
    m = model_factory("llama", n_layers=3)
    data = [(t, i % 2) for i, t in enumerate(TEXTS * 2)]
    a = truth_scores(m, data, folds=3, epochs=5, solver="adamw")
    b = truth_scores(m, data, folds=3, epochs=5, solver="adamw", out_dir=tmp_path / "acts")
    np.testing.assert_array_equal(a.scores, b.scores)
    assert (tmp_path / "acts" / "manifest.json").exists()
