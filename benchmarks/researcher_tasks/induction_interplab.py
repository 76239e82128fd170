import numpy as np

from interplab.interventions import Ablate
from interplab.metrics import token_loss


def task(model, tokens, T, top_k):
    out = model.run(tokens.tolist(), capture=[f"attn_pattern.{i}" for i in range(model.n_layers)])
    scores = np.stack([out.cache[f"attn_pattern.{i}"].diagonal(offset=-(T - 1), dim1=-2, dim2=-1)[..., 1:]
                       .mean((0, 2)).numpy() for i in range(model.n_layers)])
    top = [divmod(int(i), model.n_heads) for i in np.argsort(-scores.ravel())[:top_k]]
    ablate = [Ablate(f"attn_z.{layer}", heads=[head]) for layer, head in top]
    second_half = np.zeros(tokens.shape, dtype=bool)
    second_half[:, T + 1:] = True
    clean = float(token_loss(out, mask=second_half, reduce="mean"))
    ablated = float(token_loss(model.run(tokens.tolist(), edits=ablate), mask=second_half, reduce="mean"))
    return scores, top, clean, ablated
