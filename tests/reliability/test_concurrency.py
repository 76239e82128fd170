"""The concurrency contract (docs/reliability.md): one LabModel shared by several threads gives every caller exactly
the result it would get alone, on both backends, with and without edits.

The contamination experiment of issue 20: thread A runs an edit in a loop while thread B runs the same prompts
unedited (or with another edit) and compares with its single-threaded result. Before the per-model forward lock,
58 of 60 unedited bridge runs came back carrying the other thread's edit and nnsight raised greenlet errors."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import interplab
from interplab.interventions import Ablate, HeadGate, Steer, SubspaceProjection
from interplab.testing import make_random_checkpoint

PROMPTS = [[1, 5, 9, 3, 7], [2, 4, 6]]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_random_checkpoint("llama", tmp_path_factory.mktemp("conc") / "m", n_layers=2, d_model=32, n_heads=4,
                                  n_kv_heads=2, vocab=48, seed=0)


def _edits(d_model: int):
    g = torch.Generator().manual_seed(0)
    return {
        "none": [],
        "steer": [Steer("resid_post.0", 50 * torch.ones(d_model))],
        "ablate": [Ablate("attn_z.1", heads=[0, 2])],
        "gate": [HeadGate(np.full((2, 4), 0.25))],
        "project": [SubspaceProjection(0, torch.randn(d_model, 3, generator=g, dtype=torch.float64), alpha=1.0)],
    }


@pytest.mark.parametrize("backend", ["bridge", "nnsight"])
def test_shared_model_never_mixes_edits(ckpt, backend):
    m = interplab.load_model(ckpt, backend=backend)
    edits = _edits(m.d_model)
    alone = {k: m.run(PROMPTS, edits=e).logits.clone() for k, e in edits.items()}
    alone_gen = {k: m.generate(PROMPTS, max_new_tokens=4, edits=e).tokens.clone() for k, e in edits.items()}
    assert not torch.equal(alone["none"], alone["steer"])  # the edits do something, so mixing would show
    errors, diffs, done = [], [], []

    def worker(kind: str, n: int):
        try:
            for i in range(n):
                if i % 3 == 2:
                    got = m.generate(PROMPTS, max_new_tokens=4, edits=edits[kind]).tokens
                    ok = torch.equal(got, alone_gen[kind])
                else:
                    ok = torch.equal(m.run(PROMPTS, edits=edits[kind]).logits, alone[kind])
                if not ok:
                    diffs.append(kind)
                done.append(kind)
        except Exception as exc:  # noqa: BLE001 - every error is a failure of the contract
            errors.append(f"{kind}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(k, 9)) for k in edits for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors[:5]
    assert not diffs, f"{len(diffs)} of {len(done)} calls came back contaminated: {sorted(set(diffs))}"
    assert len(done) == len(threads) * 9
