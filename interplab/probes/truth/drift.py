"""How far a descendant moved from its base: per-matrix weight drift and next-token behaviour drift
(issue 46 §2, "a descendant that actually moved"; spec truth_scores.md §2.4).

A lineage test ("the descendant inherits the base's map") can fail only if the descendant moved: a
fine-tune that leaves every weight where it was reproduces the base's map by construction. These two
measures say how far it moved, next to the base map's own reliability (`lineage_verdicts`):

* `weight_drift`: for every parameter matrix of the two HF modules (same names and shapes), the
  relative change ||W_desc - W_base||_F / ||W_base||_F and the cosine of the flattened matrices;
  `drift_summary` averages them per matrix kind (q_proj, ..., down_proj) over blocks and gives the
  whole-model relative change.
* `next_token_kl`: the mean over real next-token positions of KL(base || descendant) and each
  model's cross-entropy on given token sequences (e.g. held-out windows of the fine-tuning corpus,
  or the probe texts).

    >>> wd = weight_drift(base.hf_model, desc.hf_model); drift_summary(wd)
    >>> next_token_kl(base.hf_model, desc.hf_model, windows)      # windows: lists of token ids
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from interplab.core.errors import InputError, ShapeError

_BLOCK = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")


def _clean(name: str) -> str:
    """A parameter name without the bridge's wrapper levels (`._original_component`)."""
    return name.replace("._original_component", "").replace("_original_component.", "")


def _block_and_kind(name: str) -> tuple[int, str]:
    """(block index or -1 outside the blocks, the matrix kind: the parameter name without its block
    prefix)."""
    name = _clean(name)
    m = _BLOCK.search(name)
    if not m:
        return -1, name
    return int(m.group(1)), name[m.end() :]


def weight_drift(
    base: torch.nn.Module, descendant: torch.nn.Module, *, matrices_only: bool = True
) -> pd.DataFrame:
    """One row per parameter of `base` (2-D matrices only unless `matrices_only=False`): name, block
    (-1 outside the transformer blocks), kind, n (elements), norm_base, rel_change = ||Δ||_F /
    ||W_base||_F, cos (flattened), all in float64. The two modules must hold the same parameter
    names and shapes (a descendant of `base`)."""
    pa = dict(base.named_parameters())
    pb = dict(descendant.named_parameters())
    missing = sorted(set(pa) ^ set(pb))
    if missing:
        raise ShapeError(
            f"the two models differ in their parameters ({missing[:5]}...); weight drift "
            "compares a descendant with the base it was fine-tuned from"
        )
    rows = []
    with torch.no_grad():
        for name, a in pa.items():
            b = pb[name]
            if a.shape != b.shape:
                raise ShapeError(f"{name}: base {tuple(a.shape)} vs descendant {tuple(b.shape)}")
            if matrices_only and a.ndim != 2:
                continue
            a64, b64 = a.detach().double().reshape(-1).cpu(), b.detach().double().reshape(-1).cpu()
            na, nb = float(a64.norm()), float(b64.norm())
            block, kind = _block_and_kind(name)
            rows.append(
                {
                    "name": _clean(name),
                    "block": block,
                    "kind": kind,
                    "n": int(a64.numel()),
                    "norm_base": na,
                    "rel_change": float((b64 - a64).norm()) / na if na else float("nan"),
                    "cos": float(a64 @ b64) / (na * nb) if na and nb else float("nan"),
                }
            )
    if not rows:
        raise InputError(
            "no parameters to compare (matrices_only=True and the model has no 2-D parameter)"
        )
    return pd.DataFrame(rows)


def drift_summary(wd: pd.DataFrame) -> dict:
    """Whole-model relative change (sqrt(Σ||Δ||²) / sqrt(Σ||W||²) over the rows), and per matrix
    kind the mean, min and max relative change and the mean cosine over blocks."""
    d2 = (wd["rel_change"] * wd["norm_base"]) ** 2
    per_kind = {}
    for kind, g in wd.groupby("kind", sort=False):
        per_kind[kind] = {
            "mean_rel_change": float(g["rel_change"].mean()),
            "min_rel_change": float(g["rel_change"].min()),
            "max_rel_change": float(g["rel_change"].max()),
            "mean_cos": float(g["cos"].mean()),
            "n_blocks": int(len(g)),
        }
    return {
        "global_rel_change": float(np.sqrt(d2.sum() / (wd["norm_base"] ** 2).sum())),
        "mean_rel_change": float(wd["rel_change"].mean()),
        "per_kind": per_kind,
    }


def next_token_kl(
    base: torch.nn.Module,
    descendant: torch.nn.Module,
    sequences: Sequence[Sequence[int]],
    *,
    batch_size: int = 8,
    pad_id: int = 0,
) -> pd.DataFrame:
    """One row per sequence (token ids, BOS included as given): kl = mean over its next-token
    positions of KL(p_base || p_desc), ce_base / ce_desc = each model's mean cross-entropy of the
    sequence's own next tokens (nats). Sequences are right-padded into batches (causal attention:
    padding after a row never reaches it)."""
    seqs = [list(map(int, s)) for s in sequences]
    if not seqs or any(len(s) < 2 for s in seqs):
        raise InputError("next_token_kl needs sequences of at least 2 tokens")
    out = []
    dev_a, dev_b = next(base.parameters()).device, next(descendant.parameters()).device
    with torch.no_grad():
        for s in range(0, len(seqs), batch_size):
            chunk = seqs[s : s + batch_size]
            T = max(map(len, chunk))
            ids = torch.full((len(chunk), T), int(pad_id), dtype=torch.long)
            mask = torch.zeros(len(chunk), T, dtype=torch.long)
            for r, q in enumerate(chunk):
                ids[r, : len(q)] = torch.as_tensor(q)
                mask[r, : len(q)] = 1
            la = base(input_ids=ids.to(dev_a), attention_mask=mask.to(dev_a)).logits.float().cpu()
            lb = (
                descendant(input_ids=ids.to(dev_b), attention_mask=mask.to(dev_b))
                .logits.float()
                .cpu()
            )
            for r, q in enumerate(chunk):
                n = len(q) - 1  # positions 0..n-1 predict tokens 1..n
                pa, pb = torch.log_softmax(la[r, :n], -1), torch.log_softmax(lb[r, :n], -1)
                kl = (pa.exp() * (pa - pb)).sum(-1).double()
                tgt = torch.as_tensor(q[1:])[:, None]
                out.append(
                    {
                        "kl": float(kl.mean()),
                        "ce_base": float(-pa.gather(-1, tgt).double().mean()),
                        "ce_desc": float(-pb.gather(-1, tgt).double().mean()),
                        "n_tokens": n,
                    }
                )
    return pd.DataFrame(out)
