"""Reading a `LabModel` on grammar strings: right-padded grammar inputs in, activations by absolute position out.

Every activation comes from `LabModel.run` (left-padded internally); `forward` re-aligns the captures to the
right-padded layout of `interplab.grammar.to_model_ids`, so position p is BOS (p = 0) or w_p in every row."""
from __future__ import annotations

from typing import Sequence

import torch

from interplab.core.errors import InputError
from interplab.grammar import PCFG, grammar_vocab, to_model_ids
from interplab.models.lab_model import LabModel
from interplab.models.loading import wrap_hf_model
from interplab.train.grammar_eval import next_logprobs

__all__ = ["require_lab_model", "forward", "model_next_logprobs", "collect", "random_init_like", "resid_site"]


def require_lab_model(model) -> LabModel:
    if not isinstance(model, LabModel):
        raise InputError(f"PCFG probes read a LabModel, got {type(model).__name__}; load one with "
                         "interplab.load_model(...) or wrap an in-memory transformers model with "
                         "interplab.models.wrap_hf_model(hf_model, tokenizer).")
    return model


def resid_site(layer: int) -> str:
    """Layer -1 is the embedding (``resid_pre.0``); layer l is ``resid_post.l``."""
    return "resid_pre.0" if layer < 0 else f"resid_post.{layer}"


def _right_aligned_cols(out, T: int) -> torch.Tensor:
    """Column of the left-padded run that holds right-padded position t, per row: [B, T]."""
    W = out.batch.input_ids.shape[1]
    off = (W - out.batch.lengths.cpu())[:, None]
    return (off + torch.arange(T)[None]).clamp(max=W - 1)


def _realign(x: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    x = x.detach().float().cpu()
    return torch.gather(x, 1, cols.reshape(*cols.shape, 1).expand(*cols.shape, x.shape[2]))


def _realign_pattern(p: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    p = p.detach().float().cpu()  # [B, h, W, W]
    B, H, W = p.shape[:3]
    T = cols.shape[1]
    p = torch.gather(p, 2, cols[:, None, :, None].expand(B, H, T, W))
    return torch.gather(p, 3, cols[:, None, None, :].expand(B, H, T, T))


@torch.no_grad()
def forward(model: LabModel, ids: torch.Tensor, att: torch.Tensor, layers: Sequence[int] = (), *,
            logits: bool = True, patterns: Sequence[int] = ()):
    """Run a right-padded batch. Returns (logits [B,T,Vm] or None, {layer: resid [B,T,d]} with layer -1 the
    embedding (resid_pre.0), {layer: attention pattern [B,h,T,T]}), all indexed by absolute position."""
    lengths = att.sum(1)
    rows = [ids[b, :int(lengths[b])].tolist() for b in range(ids.shape[0])]
    sites = [resid_site(l) for l in layers] + [f"attn_pattern.{l}" for l in patterns]
    out = model.run(rows, capture=sites, logits=logits)
    cols = _right_aligned_cols(out, ids.shape[1])
    lg = _realign(out.logits, cols) if logits else None
    res = {l: _realign(out.cache[resid_site(l)], cols) for l in layers}
    pats = {l: _realign_pattern(out.cache[f"attn_pattern.{l}"], cols) for l in patterns}
    return lg, res, pats


@torch.no_grad()
def model_next_logprobs(model: LabModel, g: PCFG, tokens, lengths, *, batch_size: int = 64) -> torch.Tensor:
    """log q_θ(v | w≤p) at p = 0..n over the V terminals + EOS: [B, n+1, V+1] (float64, not renormalised)."""
    model = require_lab_model(model)
    return next_logprobs(lambda ids, att: forward(model, ids, att)[0], g, tokens, lengths, model.tokenizer,
                         batch_size=batch_size)


@torch.no_grad()
def collect(model: LabModel, g: PCFG, toks, lengths, layers, batch_size: int = 64) -> dict[int, torch.Tensor]:
    """{layer: residual [B, n+2, d]} at every position of the grammar inputs (layer -1 = embeddings)."""
    gv = grammar_vocab(g, model.tokenizer)
    acc = {l: [] for l in layers}
    for s in range(0, toks.shape[0], batch_size):
        ids, att = to_model_ids(g, toks[s:s + batch_size], lengths[s:s + batch_size], gv)
        _, res, _ = forward(model, ids, att, layers, logits=False)
        for l in layers:
            acc[l].append(res[l])
    return {l: torch.cat(v, 0) for l, v in acc.items()}


def random_init_like(model: LabModel) -> LabModel:
    """The control: the same architecture with freshly initialised weights (fixed seed), on the same backend."""
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(12345)
        rnd = AutoModelForCausalLM.from_config(model.hf_model.config)
    return wrap_hf_model(rnd, model.tokenizer, backend=model.backend, name=f"{model.name} (random init)")
