"""Truth-Score probe directions in the residual stream (issue 18's direction dashboard; truth_scores.md §2.2).

A Truth-Score probe of head (l, h) is a logistic weight w on the head's output z (attn_z, d_head, before W_O). What
the head writes into the residual stream when z points along w is w @ W_O[l, h], a d_model vector: that is the
probe's residual direction, comparable with SAE decoder rows, steering vectors and subspace bases at resid_post.l
and later. The probes are fitted exactly as `truth_scores` fits them (`fit_head_probes`, same folds and solver), so
each direction's held-out accuracy is that head's Truth Score.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from interplab.core.errors import InputError, ShapeError
from interplab.core.result import Result

__all__ = ["TruthProbeDirections", "truth_probe_directions"]


@dataclass
class TruthProbeDirections(Result):
    """heads: [k, 2] (layer, head); weights: [k, d_head] fold-mean probe weights on z; directions: [k, d_model]
    = weights @ W_O of each head; accuracy: [k] mean held-out accuracy (the head's Truth Score); solver: as fitted."""

    heads: np.ndarray
    weights: np.ndarray
    directions: np.ndarray
    accuracy: np.ndarray
    solver: str = "lbfgs"

    def __post_init__(self):
        k = len(self.heads)
        if np.asarray(self.heads).shape != (k, 2) or len(self.weights) != k or len(self.directions) != k \
                or np.asarray(self.accuracy).shape != (k,):
            raise ShapeError(f"TruthProbeDirections: heads {np.shape(self.heads)}, weights {np.shape(self.weights)}, "
                             f"directions {np.shape(self.directions)}, accuracy {np.shape(self.accuracy)} disagree")

    def name(self, i: int) -> str:
        layer, head = (int(v) for v in self.heads[i])
        return f"truth probe L{layer}H{head}"

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"layer": self.heads[:, 0], "head": self.heads[:, 1], "accuracy": self.accuracy,
                             "direction_norm": np.linalg.norm(self.directions, axis=1)})


def truth_probe_directions(model, dataset, heads: Sequence[tuple[int, int]], *, folds: int = 5, seed: int = 42,
                           solver: str = "lbfgs", C: float = 1.0, capture_batch_size: int = 32,
                           **fit_kwargs) -> TruthProbeDirections:
    """Residual directions of the Truth-Score probes of `heads` ((layer, head) pairs) on `dataset` ((text, label)
    pairs or verification items, as `truth_scores`). fit_kwargs go to `fit_head_probes` (epochs, lr, ... for the
    "adamw" solver)."""
    from interplab.probes.truth.probe_core import fit_head_probes
    from interplab.probes.truth.scores import _as_pairs, capture_head_outputs

    hs = np.asarray([(int(layer), int(h)) for layer, h in heads], dtype=np.int64).reshape(-1, 2)
    if not len(hs):
        raise InputError("truth_probe_directions needs at least one (layer, head)")
    bad = [tuple(x) for x in hs if not (0 <= x[0] < model.n_layers and 0 <= x[1] < model.n_heads)]
    if bad:
        raise InputError(f"heads {bad} are outside this model's {model.n_layers} layers x {model.n_heads} heads")
    texts, y = _as_pairs(dataset)
    if len(texts) < folds:
        raise InputError(f"need at least folds={folds} examples, got {len(texts)}")
    layers = sorted(set(hs[:, 0].tolist()))
    X = capture_head_outputs(model, texts, batch_size=capture_batch_size, layers=layers)
    fit = fit_head_probes(X, y, folds=folds, seed=seed, solver=solver, C=C, return_weights=True, **fit_kwargs)
    W_O = model.attention_weights()["W_O"]                                       # [L, H, d_head, d_model]
    rows = [layers.index(int(layer)) for layer in hs[:, 0]]
    w = torch.stack([fit.weights[:, r, h].mean(0) for r, h in zip(rows, hs[:, 1])]).double()   # [k, d_head]
    dirs = torch.stack([w[i] @ W_O[layer, h].double() for i, (layer, h) in enumerate(hs)])
    acc = np.asarray([fit.accuracy[:, r, h].mean() for r, h in zip(rows, hs[:, 1])], dtype=np.float64)
    return TruthProbeDirections(heads=hs, weights=w.cpu().numpy(), directions=dirs.cpu().numpy(), accuracy=acc,
                                solver=solver)
