"""PCFG construction mirror (spec §5.4, uniform-binary grammars): per layer, how decodable the inside vectors of
aligned 2^k blocks are, and how far the model (logit lens) is from the k-level truncated exact predictor."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from interplab.core.result import Result
from interplab.grammar import (PCFG, dyadic_inside, dyadic_sizes, grammar_vocab, next_token_logprobs, root_size,
                               sample_eval_set, truncated_next_token_logprobs)
from interplab.models.lab_model import LabModel
from interplab.probes.pcfg.capture import collect, model_next_logprobs, random_init_like, require_lab_model
from interplab.probes.pcfg.fit import fit_linear, split_sequences
from interplab.train.grammar_eval import kl_rows, max_len_for

__all__ = ["construction_mirror", "ConstructionMirror"]


@dataclass
class ConstructionMirror(Result):
    """``probe``: one row per layer × k (layer, k, block, r2, r2_std, r2_random_init, n_examples, matched);
    ``kl``: one row per layer × k (layer, k, kl_trunc_model, kl_exact_model, kl_exact_trunc, matched, final_layer,
    lens_err); ``n_sequences`` held-out samples; ``log2_n`` = Lg, log2 of the grammar's string length."""

    probe: pd.DataFrame
    kl: pd.DataFrame
    n_sequences: int
    log2_n: int

    def to_frame(self) -> pd.DataFrame:
        return self.kl

    def summary(self) -> dict:
        """final_kl_by_k / kl_exact_trunc_by_k (at the final layer) and the best k per layer."""
        last = self.kl[self.kl["final_layer"]]
        return {"log2_n": self.log2_n,
                "final_kl_by_k": {int(r.k): float(r.kl_trunc_model) for r in last.itertuples()},
                "kl_exact_trunc_by_k": {int(r.k): float(r.kl_exact_trunc) for r in last.itertuples()},
                "best_k_by_layer": {int(l): int(d.loc[d["kl_trunc_model"].idxmin(), "k"])
                                    for l, d in self.kl.groupby("layer")}}


def _logit_lens(model: LabModel, res: dict) -> dict:
    """Final norm + unembedding applied to each captured residual (the last layer reproduces the logits)."""
    norm = model.final_norm_module
    return {l: model.unembed(norm(h.to(model.device, model.dtype))).float().cpu() for l, h in res.items()}


@torch.no_grad()
def construction_mirror(model: LabModel, g: PCFG, n_sequences: int = 400, seed: int = 0, *, n_seeds: int = 3,
                        batch_size: int = 64) -> ConstructionMirror:
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
    merge one level; in ``kl`` capped at Lg − 1, where p_trunc,k is already exact)."""
    model = require_lab_model(model)
    Lg = root_size(g)
    toks, lengths, _ = sample_eval_set(g, n_sequences, seed + 777, max(2 ** Lg, max_len_for(model, None)))
    layers = list(range(-1, model.n_layers))
    res = collect(model, g, toks, lengths, layers, batch_size)
    res_rnd = collect(random_init_like(model), g, toks, lengths, layers, batch_size)
    probe = _dyadic_probe_table(g, toks, lengths, layers, res, res_rnd, Lg, seed, n_seeds)
    kl = _truncated_kl_table(model, g, toks, lengths, layers, res, Lg, batch_size)
    return ConstructionMirror(probe=probe, kl=kl, n_sequences=int(toks.shape[0]), log2_n=Lg)


def _dyadic_probe_table(g, toks, lengths, layers, res, res_rnd, Lg: int, seed: int, n_seeds: int) -> pd.DataFrame:
    sizes = dyadic_sizes(g)
    B = toks.shape[0]
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
            tr, va, te = split_sequences(b_idx.numpy(), B, seed + s)
            for name in sc:
                sc[name].append(fit_linear(feats[name], y, tr, va, te, "r2"))
        tr_sc = torch.stack(sc["trained"])
        rn_sc = torch.stack(sc["random"])
        for i, l in enumerate(layers):
            rows.append({"layer": l, "k": k, "block": 2 ** k, "r2": float(tr_sc[:, i].mean()),
                         "r2_std": float(tr_sc[:, i].std()) if n_seeds > 1 else 0.0,
                         "r2_random_init": float(rn_sc[:, i].mean()), "n_examples": int(len(b_idx)),
                         "matched": k == l + 1})
    return pd.DataFrame(rows)


def _truncated_kl_table(model, g, toks, lengths, layers, res, Lg: int, batch_size: int) -> pd.DataFrame:
    B = toks.shape[0]
    n_layers = model.n_layers
    gv = grammar_vocab(g, model.tokenizer)
    cols = torch.cat([gv["terminals"], torch.tensor([gv["eos"]])])
    lens_lp = {}
    for s in range(0, B, batch_size):
        sub = {l: r[s:s + batch_size] for l, r in res.items()}
        for l, lg in _logit_lens(model, sub).items():
            lens_lp.setdefault(l, []).append(torch.log_softmax(lg.double(), -1)[:, :toks.shape[1] + 1][..., cols])
    lens_lp = {l: torch.cat(v) for l, v in lens_lp.items()}
    exact = next_token_logprobs(g, toks, lengths)
    valid = torch.isfinite(exact).any(-1)
    model_lp = model_next_logprobs(model, g, toks, lengths, batch_size=batch_size)
    lens_err = float((lens_lp[n_layers - 1] - model_lp)[valid].abs().max())

    def mean_kl(p, q):
        return float(kl_rows(p, q)[valid].mean())

    krows = []
    for k in range(-1, Lg):
        tr_lp = truncated_next_token_logprobs(g, toks, lengths, k)
        kl_ex = mean_kl(exact, tr_lp)
        for l in layers:
            krows.append({"layer": l, "k": k, "kl_trunc_model": mean_kl(tr_lp, lens_lp[l]),
                          "kl_exact_model": mean_kl(exact, lens_lp[l]), "kl_exact_trunc": kl_ex,
                          "matched": k == min(l + 1, Lg - 1), "final_layer": l == n_layers - 1,
                          "lens_err": lens_err})
    return pd.DataFrame(krows)
