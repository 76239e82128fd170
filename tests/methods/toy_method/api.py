"""The toy method's API: mean residual norm per layer."""
from __future__ import annotations

import numpy as np

TEXTS = ("the cat and the dog", "we see a big red fox", "the old book is good", "rain and snow and wind")


def layer_norms(model, texts=TEXTS) -> np.ndarray:
    """[n_layers] mean norm of resid_post.L over every real token of `texts`."""
    import torch

    sites = [f"resid_post.{i}" for i in range(model.n_layers)]
    with torch.no_grad():
        out = model.run(list(texts), capture=sites, logits=False, chat=False)
    mask = out.batch.attention_mask.bool()
    return np.array([float(out.cache[s][mask].norm(dim=-1).double().mean()) for s in sites])
