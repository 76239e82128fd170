"""Per-head attention patterns of one layer (query heads; under GQA, head h reads KV group h // (H / H_kv)).

    >>> from interplab.probes.lenses import attention_patterns
    >>> att = attention_patterns(model, "ctx e1 v1 q e1 ans", layer=2)
    >>> att.patterns.shape        # [n_heads, n_pos, n_pos]
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from interplab.core.errors import ShapeError
from interplab.core.result import Result
from interplab.probes.lenses.common import grid_layers, prompt_ids, token_strings


@dataclass
class AttentionResult(Result):
    """patterns: [n_heads, q, k] post-softmax attention of `layer`; tokens: the prompt's tokens; n_kv_heads."""

    patterns: np.ndarray
    tokens: list[str]
    layer: int
    n_kv_heads: int
    model: str = ""

    def __post_init__(self):
        self.patterns = np.asarray(self.patterns, np.float64)
        P = len(self.tokens)
        if self.patterns.ndim != 3 or self.patterns.shape[1:] != (P, P):
            raise ShapeError(f"patterns must be [n_heads, {P}, {P}], got {self.patterns.shape}")

    @property
    def kv_group(self) -> np.ndarray:
        H = self.patterns.shape[0]
        return np.arange(H) // max(1, H // max(1, self.n_kv_heads))

    def entropy(self) -> np.ndarray:
        """[n_heads, q] attention entropy (nats) of each query row."""
        p = np.clip(self.patterns, 1e-30, 1.0)
        return -(self.patterns * np.log(p)).sum(-1)

    def to_frame(self):
        """One row per (head, query, key): kv_group, query/key tokens, weight."""
        import pandas as pd

        H, P, _ = self.patterns.shape
        h, q, k = np.indices(self.patterns.shape).reshape(3, -1)
        return pd.DataFrame({"layer": self.layer, "head": h, "kv_group": self.kv_group[h], "query": q, "key": k,
                             "query_token": [self.tokens[i] for i in q], "key_token": [self.tokens[i] for i in k],
                             "weight": self.patterns.ravel()})


def attention_patterns(model, prompt, layer: int, *, edits=None) -> AttentionResult:
    """Every query head's attention pattern at `layer` for one prompt (under `edits`)."""
    layer = grid_layers(model, [layer])[0]
    ids = prompt_ids(model, prompt)
    site = f"attn_pattern.{layer}"
    pat = model.run([ids], capture=[site], edits=list(edits or []), logits=False).cache[site][0]
    return AttentionResult(pat.double().cpu().numpy(), token_strings(model, ids), layer, model.n_kv_heads, model.name)
