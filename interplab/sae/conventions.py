"""Which positions an SAE evaluation counts: three conventions, side by side, named for what they
are (issue 46).

An SAE's MSE, CE-loss score and Delta Loss depend on which positions are spliced and scored, and
libraries differ:

* ``interplab_positions`` — every real token except the massive positions (the attention sink: norm
  above `exclude_massive` × the sequence's median norm, `core.scale.massive_mask`), which an SAE
  trained without them cannot reconstruct. The splice keeps the clean activation there; the CE
  counts every next-token prediction, averaged per dialogue and then over dialogues (Delta Loss as
  the FAST paper defines it). These are the unsuffixed keys of `evaluate_sae`.
* ``saelens_positions`` — every token that is not one of SAELens's special tokens
  (`sae_lens.util.get_special_token_ids`: BOS, EOS, PAD, SEP, decoder-start; on SmolLM2-Instruct
  these are the chat markers <|im_start|> and <|im_end|>), as
  `sae_lens.evals.run_evals(exclude_special_tokens=True)` counts them: the splice keeps the clean
  activation at special tokens, a prediction counts when the token it is made *from* is not special,
  and MSE / CE / KL are pooled over tokens (each token counts once, not each dialogue).
* ``all_tokens`` — no position dropped: the SAE spliced in at every position (the sink included),
  every prediction counted, pooled per dialogue as in ``interplab_positions``.

`position_masks` is the rule for one sequence (pure; tested on a constructed sequence);
`evaluate_conventions` evaluates an SAE under all three from the same forwards; `saelens_run_evals`
runs SAELens's own `run_evals` on the same tokens (one dialogue per batch) so the
``saelens_positions`` numbers can be checked against it."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from interplab.core.errors import InputError, ShapeError
from interplab.core.record import Record

__all__ = [
    "CONVENTIONS",
    "saelens_ignore_ids",
    "position_masks",
    "ConventionEval",
    "evaluate_conventions",
    "saelens_run_evals",
    "SAELensReference",
]

CONVENTIONS = {
    "interplab_positions": "every real token except the attention-sink / massive positions "
    "(norm > factor x the sequence's median); per-dialogue means",
    "saelens_positions": "every token that is not a SAELens special token (BOS/EOS/PAD/SEP ids), "
    "as sae_lens.evals.run_evals counts them; pooled over tokens",
    "all_tokens": "every real token, none dropped, the SAE spliced in at every position; "
    "per-dialogue means",
}
_PER_DIALOGUE = {"interplab_positions": True, "saelens_positions": False, "all_tokens": True}


def saelens_ignore_ids(tokenizer: Any) -> list[int]:
    """The token ids SAELens's `run_evals` leaves out by default (its `get_special_token_ids`)."""
    from sae_lens.util import get_special_token_ids

    return sorted(int(i) for i in get_special_token_ids(tokenizer))


def position_masks(
    token_ids: torch.Tensor,
    acts: torch.Tensor,
    *,
    ignore_ids: Sequence[int],
    exclude_massive: float,
) -> dict[str, dict[str, torch.Tensor]]:
    """For one sequence ([L] ids, [L, d] site activations): per convention, two [L] bool masks:
    ``spliced`` (the positions whose activation the SAE replaces and whose reconstruction error
    counts) and ``scored`` (the positions whose next-token prediction and KL count).
    exclude_massive: the SAE's factor (0 = no position is massive, so ``interplab_positions`` equals
    ``all_tokens``).

    interplab: spliced = not massive, scored = every position (the prediction made at the kept sink
    counts); SAELens: spliced = scored = not a special token; all tokens: both every position."""
    from interplab.core.scale import massive_mask

    ids = torch.as_tensor(token_ids).long().reshape(-1)
    if acts.ndim != 2 or acts.shape[0] != ids.numel():
        raise ShapeError(
            f"position_masks needs [L] token ids and [L, d] activations, got "
            f"{tuple(ids.shape)} and {tuple(acts.shape)}"
        )
    every = torch.ones(ids.numel(), dtype=torch.bool)
    massive = massive_mask(acts, float(exclude_massive)).cpu() if exclude_massive else ~every
    ignore = torch.tensor(sorted(set(int(i) for i in ignore_ids)) or [-1], dtype=torch.long)
    plain = ~torch.isin(ids, ignore)
    return {
        "interplab_positions": {"spliced": ~massive, "scored": every},
        "saelens_positions": {"spliced": plain, "scored": plain.clone()},
        "all_tokens": {"spliced": every, "scored": every.clone()},
    }


class ConventionEval(Record):
    """`evaluate_conventions`: per convention c (suffix ``_<c>``): n_positions (positions spliced,
    whose reconstruction error counts), mse_sum_d (per-token squared error summed over the hidden
    dimension, averaged over those positions: SAELens's `mse` formula), explained_variance,
    n_predictions (next-token predictions scored), ce_clean, ce_sae, ce_zero_ablation,
    delta_loss_pct, ce_loss_score, kl_sae; plus n_sequences, site, exclude_massive and ignore_ids
    (SAELens's special ids used)."""

    KEYS = ("n_sequences", "site", "exclude_massive", "ignore_ids") + tuple(
        f"{k}_{c}"
        for c in CONVENTIONS
        for k in (
            "n_positions",
            "mse_sum_d",
            "explained_variance",
            "n_predictions",
            "ce_clean",
            "ce_sae",
            "ce_zero_ablation",
            "delta_loss_pct",
            "ce_loss_score",
            "kl_sae",
        )
    )

    def table(self):
        """One row per convention (what it keeps, then its metrics): the run's `conventions` table.
        """
        import pandas as pd

        rows = []
        for c, what in CONVENTIONS.items():
            row = {"convention": c, "positions": what}
            row.update({k[: -len(c) - 1]: v for k, v in self.items() if k.endswith("_" + c)})
            rows.append(row)
        return pd.DataFrame(rows)


def _padded(masks: Sequence[torch.Tensor]) -> torch.Tensor:
    T = max(int(m.numel()) for m in masks)
    out = torch.zeros(len(masks), T, dtype=torch.bool)
    for i, m in enumerate(masks):
        out[i, : m.numel()] = m
    return out


def _row_ce(logits: torch.Tensor, ids: Sequence[int], real: torch.Tensor) -> torch.Tensor:
    """[L-1] next-token CE of one row's real positions (logits of the row's real columns, in order).
    """
    lg = logits[real][:-1].float()
    tgt = torch.tensor(list(ids[1:]), dtype=torch.long, device=lg.device)
    return (torch.logsumexp(lg, -1) - lg.gather(-1, tgt[:, None]).squeeze(-1)).double().cpu()


def _row_kl(clean: torch.Tensor, other: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    lp = torch.log_softmax(clean[real].float(), -1)
    lq = torch.log_softmax(other[real].float(), -1)
    return (lp.exp() * (lp - lq)).sum(-1).double().cpu()


def evaluate_conventions(
    model: Any,
    sae: Any,
    dialogues: Sequence[Any],
    *,
    site: str | None = None,
    ignore_ids: Sequence[int] | None = None,
    truncate: int | None = 8192,
    micro_batch: int = 8,
    exclude_massive: float | None = None,
) -> ConventionEval:
    """`sae` (an SAELens SAE or directory) on `dialogues` (dialogues, texts or token-id lists; one
    per forward row) under every convention of `CONVENTIONS`, from one clean and one zero-ablated
    forward per micro-batch plus one spliced forward per convention. ignore_ids: SAELens's special
    ids (default: `saelens_ignore_ids`). exclude_massive: None = the SAE's own factor (its
    metadata)."""
    from sae_lens.evals import ExplainedVarianceCalculator

    from interplab.interventions import Ablate
    from interplab.sae.providers import _tokenize_samples
    from interplab.sae.sites import load_sae, sae_exclude_massive, sae_site
    from interplab.sae.steering import SAESplice

    sae = load_sae(sae)
    site = sae_site(sae, site)
    massive = sae_exclude_massive(sae) if exclude_massive is None else float(exclude_massive)
    ignore = (
        saelens_ignore_ids(model.tokenizer)
        if ignore_ids is None
        else sorted(set(map(int, ignore_ids)))
    )
    seqs, _ = _tokenize_samples(model, dialogues, truncate)
    if int(micro_batch) < 1:
        raise InputError(f"micro_batch must be >= 1, got {micro_batch}")
    acc = {
        c: {
            "sq": 0.0,
            "n": 0,
            "ev": ExplainedVarianceCalculator(),
            "ce": {"clean": [], "sae": [], "zero": []},
            "kl": [],
            "npred": 0,
        }
        for c in CONVENTIONS
    }
    sae.eval()
    for k in range(0, len(seqs), int(micro_batch)):
        batch = seqs[k : k + int(micro_batch)]
        with torch.no_grad():
            clean = model.run(batch, capture=[site], logits=True)
            real = clean.batch.attention_mask.bool()
            acts = clean.cache[site]
            rows = [acts[i][real[i].to(acts.device)].float().cpu() for i in range(len(batch))]
            masks = [
                position_masks(torch.tensor(s), a, ignore_ids=ignore, exclude_massive=massive)
                for s, a in zip(batch, rows)
            ]
            zero = model.run(batch, edits=[Ablate(site)], logits=True)
            spliced = {}
            for c in CONVENTIONS:
                keep = _padded([~m[c]["spliced"] for m in masks])
                spliced[c] = model.run(
                    batch,
                    edits=[SAESplice(sae, site, exclude_massive=0.0, keep_clean=keep)],
                    logits=True,
                )
            for i, s in enumerate(batch):
                r = real[i].to(clean.logits.device)
                x = rows[i]
                xh = sae.decode(sae.encode(x.to(sae.W_dec.device, sae.W_dec.dtype))).float().cpu()
                sq = (x.double() - xh.double()).pow(2).sum(-1)
                ce = {
                    "clean": _row_ce(clean.logits[i], s, r),
                    "zero": _row_ce(zero.logits[i], s, r),
                }
                for c in CONVENTIONS:
                    m, sc = masks[i][c]["spliced"], masks[i][c]["scored"]
                    a = acc[c]
                    a["sq"] += float(sq[m].sum())
                    a["n"] += int(m.sum())
                    if m.any():
                        a["ev"].add_batch(xh[m], x[m])
                    pm = sc[:-1]  # a prediction counts when the token it is made from is scored
                    ce_sae = _row_ce(spliced[c].logits[i], s, r)
                    kl = _row_kl(clean.logits[i], spliced[c].logits[i], r)
                    if not pm.any():
                        continue
                    a["npred"] += int(pm.sum())
                    for name, v in (("clean", ce["clean"]), ("zero", ce["zero"]), ("sae", ce_sae)):
                        a["ce"][name].append(v[pm])
                    a["kl"].append(kl[sc])
    out: dict = {
        "n_sequences": len(seqs),
        "site": site,
        "exclude_massive": massive,
        "ignore_ids": ignore,
    }
    for c, a in acc.items():
        per_dialogue = _PER_DIALOGUE[c]

        def mean(vs, pd=per_dialogue):
            if not vs:
                return float("nan")
            return (
                float(torch.stack([v.mean() for v in vs]).mean())
                if pd
                else float(torch.cat(vs).mean())
            )

        ce_c, ce_s, ce_z = (mean(a["ce"][n]) for n in ("clean", "sae", "zero"))
        den = ce_z - ce_c
        out.update(
            {
                f"n_positions_{c}": a["n"],
                f"mse_sum_d_{c}": a["sq"] / a["n"] if a["n"] else float("nan"),
                f"explained_variance_{c}": float(a["ev"].compute()) if a["n"] else float("nan"),
                f"n_predictions_{c}": a["npred"],
                f"ce_clean_{c}": ce_c,
                f"ce_sae_{c}": ce_s,
                f"ce_zero_ablation_{c}": ce_z,
                f"delta_loss_pct_{c}": (ce_s - ce_c) / ce_c * 100.0 if ce_c else float("nan"),
                f"ce_loss_score_{c}": (ce_z - ce_s) / den if abs(den) > 1e-12 else float("nan"),
                f"kl_sae_{c}": mean(a["kl"]),
            }
        )
    return ConventionEval(out)


class SAELensReference(Record):
    """`saelens_run_evals`: SAELens's own numbers on the same tokens (`run_evals`, one dialogue per
    batch): mse, explained_variance, ce_loss_score, ce_loss_with_sae, ce_loss_without_sae,
    ce_loss_with_ablation, kl_div_with_sae, n_sequences, ignore_ids, saelens_version."""

    KEYS = (
        "mse",
        "explained_variance",
        "ce_loss_score",
        "ce_loss_with_sae",
        "ce_loss_without_sae",
        "ce_loss_with_ablation",
        "kl_div_with_sae",
        "n_sequences",
        "ignore_ids",
        "saelens_version",
    )


class _OneDialogueStore:
    """The part of SAELens's `ActivationsStore` that `run_evals` reads: one sequence per batch, in
    order, so it sees exactly the tokens interplab evaluates (no packing into fixed-length blocks).
    """

    def __init__(self, seqs: Sequence[Sequence[int]]):
        self.seqs = [list(map(int, s)) for s in seqs]
        self.i = 0
        self.store_batch_size_prompts = 1
        self.context_size = max(len(s) for s in self.seqs)

    def get_batch_tokens(self, n: int) -> torch.Tensor:
        if n != 1:
            raise InputError(f"this store serves one dialogue per batch, asked for {n}")
        s = self.seqs[self.i % len(self.seqs)]
        self.i += 1
        return torch.tensor([s], dtype=torch.long)

    def reset_input_dataset(self) -> None:
        self.i = 0


def saelens_run_evals(
    model: Any,
    sae: Any,
    dialogues: Sequence[Any],
    *,
    ignore_ids: Sequence[int] | None = None,
    truncate: int | None = 8192,
) -> SAELensReference:
    """SAELens's `sae_lens.evals.run_evals` on `model.bridge` (the TransformerBridge) over the same
    dialogues, one per batch, leaving out `ignore_ids` (default: SAELens's own special tokens, as
    run_evals does by default). An empty `ignore_ids` is refused: SAELens 6.54 then concatenates
    per-sequence tensors of unequal lengths and crashes."""
    from importlib.metadata import version

    from sae_lens.evals import EvalConfig, run_evals
    from sae_lens.training.activation_scaler import ActivationScaler

    from interplab.sae.providers import _tokenize_samples
    from interplab.sae.sites import load_sae

    sae = load_sae(sae)
    ignore = (
        saelens_ignore_ids(model.tokenizer)
        if ignore_ids is None
        else sorted(set(map(int, ignore_ids)))
    )
    if not ignore:
        raise InputError(
            "saelens_run_evals needs at least one ignored id: run_evals with "
            "exclude_special_tokens=False crashes on sequences of unequal length (SAELens 6.54); "
            "pass the ids to leave out"
        )
    seqs, _ = _tokenize_samples(model, dialogues, truncate)
    n = len(seqs)
    cfg = EvalConfig(
        batch_size_prompts=1,
        n_eval_reconstruction_batches=n,
        n_eval_sparsity_variance_batches=n,
        compute_kl=True,
        compute_ce_loss=True,
        compute_variance_metrics=True,
    )
    out, _ = run_evals(
        sae,
        _OneDialogueStore(seqs),
        model.bridge,
        ActivationScaler(),
        cfg,
        exclude_special_tokens=ignore,
    )
    rq, pp, bp = (
        out["reconstruction_quality"],
        out["model_performance_preservation"],
        out["model_behavior_preservation"],
    )
    return SAELensReference(
        mse=float(rq["mse"]),
        explained_variance=float(rq["explained_variance"]),
        ce_loss_score=float(pp["ce_loss_score"]),
        ce_loss_with_sae=float(pp["ce_loss_with_sae"]),
        ce_loss_without_sae=float(pp["ce_loss_without_sae"]),
        ce_loss_with_ablation=float(pp["ce_loss_with_ablation"]),
        kl_div_with_sae=float(bp["kl_div_with_sae"]),
        n_sequences=n,
        ignore_ids=ignore,
        saelens_version=version("sae_lens"),
    )
