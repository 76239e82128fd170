"""Fixtures for the SAE tests: chat dialogues over the random checkpoints' word vocabulary."""
from __future__ import annotations

import random

import pytest


def make_dialogues(n=12, seed=0, lo=2, hi=9, words=40):
    rng = random.Random(seed)
    w = lambda: " ".join(f"w{rng.randrange(words)}" for _ in range(rng.randint(lo, hi)))
    out = []
    for i in range(n):
        d = []
        if i % 3 == 0:
            d.append({"role": "system", "content": w()})
        d += [{"role": "user", "content": w()}, {"role": "assistant", "content": w()}]
        if i % 4 == 1:
            d += [{"role": "user", "content": w()}, {"role": "assistant", "content": w()}]
        out.append(d)
    return out


@pytest.fixture(scope="session")
def dialogues():
    return make_dialogues()


@pytest.fixture(scope="session")
def identity_sae():
    """A standard SAE with d_sae = 2 d, W_enc = [I, -I], W_dec = [I; -I]: relu(x) - relu(-x) = x exactly."""
    import torch
    from sae_lens import StandardSAE, StandardSAEConfig

    d = 64
    cfg = StandardSAEConfig(d_in=d, d_sae=2 * d, apply_b_dec_to_input=False)
    cfg.metadata.hook_name = "blocks.1.hook_resid_post"
    sae = StandardSAE(cfg)
    eye = torch.eye(d)
    with torch.no_grad():
        sae.W_enc.copy_(torch.cat([eye, -eye], 1))
        sae.W_dec.copy_(torch.cat([eye, -eye], 0))
        sae.b_enc.zero_()
        sae.b_dec.zero_()
    return sae


@pytest.fixture(autouse=True)
def _one_thread():
    """The CI box has 2 shared cores: 1 torch thread avoids oversubscription (restored afterwards)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
