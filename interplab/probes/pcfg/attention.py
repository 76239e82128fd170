"""Attention mass at relative offset 2^(k-1) per layer and head (construction mirror, spec §5.4)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch

from interplab.core.errors import InputError
from interplab.core.result import Result
from interplab.grammar import PCFG, grammar_vocab, sample_eval_set, to_model_ids
from interplab.models.lab_model import LabModel
from interplab.probes.pcfg.capture import forward, require_lab_model
from interplab.train.grammar_eval import max_len_for

__all__ = ["attention_offset_mass", "AttentionOffsets"]


@torch.no_grad()
def attention_offset_mass(model: LabModel, g: PCFG, n_sequences: int = 128, seed: int = 0, *, max_k: int | None = None,
                          max_len: int | None = None) -> pd.DataFrame:
    """Mean attention mass a query puts on the key at relative offset 2^(k-1) (k = 1..max_k), per layer and head
    (construction mirror, spec §5.4), over real query positions q >= offset. Also ``mass_aligned``: the same
    restricted to queries at the end of an aligned dyadic block of size 2^k (q ≡ 0 mod 2^k in grammar positions,
    i.e. model index q). Columns layer, head, k, offset, mass, mass_aligned, uniform (the mass a uniform causal
    pattern would give)."""
    model = require_lab_model(model)
    gv = grammar_vocab(g, model.tokenizer)
    toks, lengths, _ = sample_eval_set(g, n_sequences, seed + 4242, max_len_for(model, max_len))
    ids, att = to_model_ids(g, toks, lengths, gv)
    n_layers = model.n_layers
    _, _, pats = forward(model, ids, att, (), logits=True, patterns=list(range(n_layers)))
    T = ids.shape[1]
    max_k = max_k or max(1, int(math.floor(math.log2(max(1, int(lengths.max()))))))
    real = att.bool()
    rows = []
    q = torch.arange(T)
    for l in range(n_layers):
        P = pats[l]  # [B, H, T, T]
        H = P.shape[1]
        for k in range(1, max_k + 1):
            off = 2 ** (k - 1)
            qs = q[off:]
            vals = P[:, :, qs, qs - off]  # [B, H, nq]
            m = real[:, off:]  # query real
            mass = (vals * m[:, None]).sum((0, 2)) / m.sum().clamp_min(1)
            al = m & ((qs % (2 ** k)) == 0)[None]
            mass_al = (vals * al[:, None]).sum((0, 2)) / al.sum().clamp_min(1)
            uni = float(((1.0 / (qs + 1).double())[None] * m).sum() / m.sum().clamp_min(1))
            for h in range(H):
                rows.append({"layer": l, "head": h, "k": k, "offset": off, "mass": float(mass[h]),
                             "mass_aligned": float(mass_al[h]), "uniform": uni})
    return pd.DataFrame(rows)


@dataclass
class AttentionOffsets(Result):
    """`attention_offset_mass` of one or more models: ``table`` stacks their frames with a leading ``model``
    column (construction mirror, spec §5.4)."""

    table: pd.DataFrame

    def __post_init__(self):
        need = {"model", "layer", "head", "k", "offset", "mass", "mass_aligned", "uniform"}
        if not need <= set(self.table.columns):
            raise InputError(f"AttentionOffsets.table needs columns {sorted(need)}, got {list(self.table.columns)}")

    @classmethod
    def stack(cls, frames: dict[str, pd.DataFrame]) -> "AttentionOffsets":
        """{model name: its `attention_offset_mass` frame} -> one result, in the given order."""
        return cls(pd.concat([df.assign(model=m)[["model", *df.columns]] for m, df in frames.items()],
                             ignore_index=True))

    def frames(self) -> dict[str, pd.DataFrame]:
        t = self.table
        return {m: t[t["model"] == m].drop(columns="model").reset_index(drop=True) for m in t["model"].unique()}

    def to_frame(self) -> pd.DataFrame:
        return self.table
