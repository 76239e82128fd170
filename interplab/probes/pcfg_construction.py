"""PCFG construction mirror (spec §5.4, uniform-binary grammars): per layer, how decodable the inside vectors of
aligned 2^k blocks are, and how far the model (logit lens) is from the k-level truncated exact predictor."""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from interplab.core.errors import InputError
from interplab.grammar import PCFG, next_token_logprobs
from interplab.probes.pcfg_parse import (
    _collect, _fit_linear, _hf_layers, _is_labmodel, _kl_rows, _max_len_for, _n_layers, _random_init_like, _split,
    _tokenizer, grammar_vocab, model_next_logprobs, sample_eval_set,
)

__all__ = ["construction_mirror"]


def _logit_lens(model, res: dict) -> dict:
    """Final norm + unembedding applied to each captured residual (the last layer reproduces the logits)."""
    hf = model.hf_model if _is_labmodel(model) else model
    base, _ = _hf_layers(hf)
    norm = getattr(base, "norm", None) or getattr(base, "ln_f", None)
    head = hf.get_output_embeddings()
    if norm is None or head is None:
        raise InputError("logit lens needs a final norm (model.norm / transformer.ln_f) and an output embedding.")
    p = next(hf.parameters())
    return {l: head(norm(h.to(p.device, p.dtype))).float().cpu() for l, h in res.items()}


@torch.no_grad()
def construction_mirror(model, g: PCFG, n_sequences: int = 400, seed: int = 0, *, n_seeds: int = 3,
                        tokenizer=None, batch_size: int = 64) -> dict:
    """The construction mirror of spec §5.4 for a uniform-binary (dyadic) grammar, per layer l = −1 (embeddings)
    .. L−1 (``resid_post.l``):

    * ``probe`` (one row per layer × k): held-out R² of a ridge probe (70/15/15 split by sequence, ``n_seeds``
      split seeds) that reads the size-2^k dyadic inside vector — softmax over the NTs of yield length 2^k of
      log β of block [j·2^k, (j+1)·2^k) (`interplab.grammar.dyadic_inside`) — from the residual at the block's last
      token (model position (j+1)·2^k, BOS = 0), next to the same probe on a random-init copy
      (``r2_random_init``). Constant targets (the root level) are skipped.
    * ``kl`` (one row per layer × k, k = −1..Lg−1): mean per-position KL(p_trunc,k ‖ q_l) over p = 0..n, where
      p_trunc,k is `truncated_next_token_logprobs` and q_l the logit lens at layer l (final norm + unembedding;
      the last layer is the model's own output), read at the V terminals + EOS without renormalising (as in
      `pcfg_kl`). ``kl_exact_trunc`` = KL(p_G ‖ p_trunc,k), what the truncation itself loses. This direction is
      used because p_trunc,k has zeros where the model keeps some mass, so KL(q ‖ p_trunc,k) is +∞.
    ``matched`` marks the layer-matched level k = l + 1 (the embeddings hold size-1 blocks; each layer could
    merge one level; in ``kl`` capped at Lg − 1, where p_trunc,k is already exact). Returns {"probe": DataFrame, "kl": DataFrame, "n_sequences", "log2_n"}."""
    from interplab.grammar.dyadic import _root_size, dyadic_inside, dyadic_sizes, truncated_next_token_logprobs

    Lg = _root_size(g)
    sizes = dyadic_sizes(g)
    tk = tokenizer or _tokenizer(model)
    toks, lengths, _ = sample_eval_set(g, n_sequences, seed + 777, max(2 ** Lg, _max_len_for(model, None)))
    B = toks.shape[0]
    n_layers = _n_layers(model)
    layers = list(range(-1, n_layers))
    res = _collect(model, g, toks, lengths, layers, tk, batch_size)
    rnd = _random_init_like(model)
    res_rnd = _collect(rnd, g, toks, lengths, layers, tk, batch_size)
    di = dyadic_inside(g, toks, lengths, k_max=Lg)
    rows = []
    for k in range(0, Lg + 1):
        nts = np.flatnonzero(sizes == k)
        if len(nts) < 2:
            continue
        lv = di.levels[k][:, :, nts]  # [B, nb, q]
        ends = di.ends(k)
        ok = torch.isfinite(lv).any(-1)
        b_idx, j_idx = ok.nonzero(as_tuple=True)
        y = torch.softmax(lv[b_idx, j_idx].double(), -1)
        pos = ends[j_idx]
        feats = {name: torch.stack([r[l][b_idx, pos] for l in layers]) for name, r in (("trained", res),
                                                                                       ("random", res_rnd))}
        sc = {"trained": [], "random": []}
        for s in range(n_seeds):
            tr, va, te = _split(b_idx.numpy(), B, seed + s)
            for name in sc:
                sc[name].append(_fit_linear(feats[name], y, tr, va, te, "r2"))
        tr_sc = torch.stack(sc["trained"])
        rn_sc = torch.stack(sc["random"])
        for i, l in enumerate(layers):
            rows.append({"layer": l, "k": k, "block": 2 ** k, "r2": float(tr_sc[:, i].mean()),
                         "r2_std": float(tr_sc[:, i].std()) if n_seeds > 1 else 0.0,
                         "r2_random_init": float(rn_sc[:, i].mean()), "n_examples": int(len(b_idx)),
                         "matched": k == l + 1})
    probe = pd.DataFrame(rows)

    gv = grammar_vocab(g, tk)
    cols = torch.cat([gv["terminals"], torch.tensor([gv["eos"]])])
    lens_lp = {}
    for s in range(0, B, batch_size):
        sub = {l: r[s:s + batch_size] for l, r in res.items()}
        for l, lg in _logit_lens(model, sub).items():
            lens_lp.setdefault(l, []).append(torch.log_softmax(lg.double(), -1)[:, :toks.shape[1] + 1][..., cols])
    lens_lp = {l: torch.cat(v) for l, v in lens_lp.items()}
    exact = next_token_logprobs(g, toks, lengths)
    valid = torch.isfinite(exact).any(-1)
    model_lp = model_next_logprobs(model, g, toks, lengths, tokenizer=tk, batch_size=batch_size)
    lens_err = float((lens_lp[n_layers - 1] - model_lp)[valid].abs().max())

    def mean_kl(p, q):
        return float(_kl_rows(p, q)[valid].mean())

    krows = []
    for k in range(-1, Lg):
        tr_lp = truncated_next_token_logprobs(g, toks, lengths, k)
        kl_ex = mean_kl(exact, tr_lp)
        for l in layers:
            krows.append({"layer": l, "k": k, "kl_trunc_model": mean_kl(tr_lp, lens_lp[l]),
                          "kl_exact_model": mean_kl(exact, lens_lp[l]), "kl_exact_trunc": kl_ex,
                          "matched": k == min(l + 1, Lg - 1), "final_layer": l == n_layers - 1,
                          "lens_err": lens_err})
    return {"probe": probe, "kl": pd.DataFrame(krows), "n_sequences": B, "log2_n": Lg}
