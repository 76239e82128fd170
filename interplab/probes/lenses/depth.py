"""Agreement of two maps with depth partialled out (issue 46 §2): the atlas and the many-pair lens
study compare head maps [L, H] and layer profiles [L] whose values all move with depth, so a raw
rank correlation counts a shared depth trend as agreement and an i.i.d. permutation null is too
narrow for autocorrelated layers.

- head maps: the layer is partialled out as a category (ranks centred within each layer) and the
  null permutes the heads within their layer (heads of a layer are a priori exchangeable; the
  layer's level stays with the layer);
- layer profiles: the layer index is partialled out (a linear depth trend of the ranks) and the null
  replaces one profile's residual by phase-randomised surrogates (its autocorrelation kept).
  Circular shifts would keep it too, but give only L − 1 distinct draws: with 30 layers no p below
  1/30, which no correction over several pairs passes.
"""

from __future__ import annotations

import numpy as np

from interplab.probes import stats

DEPTH_NULLS = {
    "layer x head": "heads permuted within their layer (layer partialled out as a category)",
    "layer": (
        "phase-randomised surrogates of the depth-detrended profile (layer index partialled out)"
    ),
}


def depth_partialled(axis: str, a, b, *, n_perm: int, seed: int) -> stats.PartialSpearmanTest:
    """`stats.partial_spearman_test` of two maps on `axis` ("layer x head": [L, H] maps; "layer":
    [L] profiles) with depth partialled out, against the null that keeps the axis's structure
    (module docstring)."""
    if axis == "layer x head":
        L, H = np.shape(a)
        layer = np.repeat(np.arange(L), H)
        onehot = (layer[:, None] == np.arange(L)[None]).astype(np.float64)
        return stats.partial_spearman_test(
            a, b, onehot, null="groups", groups=layer, B=n_perm, seed=seed
        )
    if axis != "layer":
        raise ValueError(f"axis must be 'layer x head' or 'layer', got {axis!r}")
    return stats.partial_spearman_test(
        a, b, np.arange(np.size(a)), null="phase", B=n_perm, seed=seed
    )
