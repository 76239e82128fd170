"""FAST evaluation of an SAE on per-sample (one dialogue per forward) activations (method spec §2.3, §6A d).

Reconstruction metrics (streaming, no stored activations):
* MSE (paper Eq. 7): (1 / (N H)) sum_i (1 / L_i) sum_j sum_k (y_ijk - yhat_ijk)^2 — *sequence*-weighted (every
  dialogue counts equally whatever its length), divided by the hidden size H; reported with its log2 (the paper's
  tables are log2).
* MSE_st: the same restricted to special-token positions (ids configurable), averaged over dialogues that contain
  at least one; log2 too.
* token-weighted MSE per element and `mse_sum_d` (per-token sum over d, token-weighted:
  SAELens's `mse` formula, here at interplab's positions; SAELens's own positions give
  another number: `interplab.sae.conventions`).
* explained variance (SAELens's `ExplainedVarianceCalculator`: 1 - E||x - xhat||^2 / (E||x||^2 - ||E x||^2)).
* L0 (mean active features per token), dead features (never active on the evaluation set), dense features
  (active on more than `dense_threshold` of tokens).
Downstream metrics (per dialogue, the SAE spliced in by an interplab Edit that replaces the site activation by
the SAE reconstruction at every real position):
* Delta Loss % = (CE_sae - CE_clean) / CE_clean * 100, CE = mean next-token cross-entropy per dialogue averaged
  over dialogues;
* SAELens-style ce_loss_score = (CE_zero - CE_sae) / (CE_zero - CE_clean) (zero ablation of the site);
* KL(clean || sae) of the next-token distributions, mean over predicted tokens.
Which positions the CE-based metrics average over is `positions` (spec: "whether all tokens or only assistant tokens
count is a switch"): "all" = every real position (the unsuffixed keys), "response" = only positions whose next
token is an assistant-answer token (keys suffixed `_response`); see `evaluate_sae`.
All of these are at *interplab's positions*: an SAE trained without the massive positions
(the attention sink) keeps them out of the reconstruction metrics and the splice. SAELens's
positions (special tokens dropped) and all tokens (nothing dropped) are
`interplab.sae.conventions.evaluate_conventions`.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from interplab.core.errors import ConfigError, DataError, InputError, ShapeError
from interplab.core.record import Record


class ReconstructionAccumulator:
    """Streaming reconstruction / sparsity statistics; call `update` once per sequence (dialogue)."""

    def __init__(self, d_sae: int | None = None, special_token_ids: Sequence[int] | None = None,
                 dense_threshold: float = 0.1):
        from sae_lens.evals import ExplainedVarianceCalculator

        self.special = torch.tensor(sorted(set(int(i) for i in (special_token_ids or []))), dtype=torch.long)
        self.dense_threshold = float(dense_threshold)
        self.ev = ExplainedVarianceCalculator()
        self.n_seq = 0
        self.H: int | None = None
        self.seq_mse_sum = 0.0          # sum_i (1/L_i) sum_j ||e_ij||^2
        self.st_seq_mse_sum = 0.0       # same over special positions, for sequences with >= 1 special token
        self.n_seq_st = 0
        self.tok_sq_sum = 0.0           # sum over all tokens of ||e||^2
        self.n_tok = 0
        self.n_tok_st = 0
        self.l0_sum = 0.0
        self.fire_counts: torch.Tensor | None = torch.zeros(d_sae, dtype=torch.float64) if d_sae else None
        self.max_act: torch.Tensor | None = None

    def update(self, x: torch.Tensor, x_hat: torch.Tensor, token_ids: torch.Tensor | None = None,
               feature_acts: torch.Tensor | None = None) -> None:
        if x.ndim != 2 or x.shape != x_hat.shape:
            raise ShapeError(f"x and x_hat must both be [L, d]; got {tuple(x.shape)} and {tuple(x_hat.shape)}")
        L, H = x.shape
        if L == 0:
            return
        if self.H is None:
            self.H = H
        elif H != self.H:
            raise ShapeError(f"hidden size changed from {self.H} to {H}")
        x64, xh64 = x.detach().double().cpu(), x_hat.detach().double().cpu()
        sq = (x64 - xh64).pow(2).sum(-1)  # [L]
        self.n_seq += 1
        self.seq_mse_sum += float(sq.sum()) / L
        self.tok_sq_sum += float(sq.sum())
        self.n_tok += L
        self.ev.add_batch(xh64, x64)
        if token_ids is not None and self.special.numel():
            if token_ids.shape[0] != L:
                raise ShapeError(f"token_ids has {token_ids.shape[0]} entries for {L} activation rows")
            m = torch.isin(token_ids.cpu().long(), self.special)
            if m.any():
                self.st_seq_mse_sum += float(sq[m].sum()) / int(m.sum())
                self.n_seq_st += 1
                self.n_tok_st += int(m.sum())
        if feature_acts is not None:
            f = feature_acts.detach().cpu()
            if f.shape[0] != L:
                raise ShapeError(f"feature_acts has {f.shape[0]} rows for {L} activation rows")
            active = (f != 0)
            self.l0_sum += float(active.sum())
            if self.fire_counts is None:
                self.fire_counts = torch.zeros(f.shape[1], dtype=torch.float64)
            self.fire_counts += active.sum(0).double()
            mx = f.float().max(0).values
            self.max_act = mx if self.max_act is None else torch.maximum(self.max_act, mx)

    def result(self) -> dict:
        if self.n_seq == 0:
            raise InputError("no sequences were evaluated")
        H = self.H
        mse = self.seq_mse_sum / (self.n_seq * H)
        out = {
            "n_sequences": self.n_seq, "n_tokens": self.n_tok,
            "mse": mse, "log2_mse": math.log2(mse) if mse > 0 else -math.inf,
            "mse_token_weighted": self.tok_sq_sum / (self.n_tok * H),
            "mse_sum_d": self.tok_sq_sum / self.n_tok,
            "explained_variance": float(self.ev.compute()),
            "n_sequences_special": self.n_seq_st, "n_tokens_special": self.n_tok_st,
        }
        if self.n_seq_st:
            mst = self.st_seq_mse_sum / (self.n_seq_st * H)
            out.update(mse_special=mst, log2_mse_special=math.log2(mst) if mst > 0 else -math.inf)
        else:
            out.update(mse_special=float("nan"), log2_mse_special=float("nan"))
        if self.fire_counts is not None and self.n_tok:
            freq = self.fire_counts / self.n_tok
            out.update(l0=self.l0_sum / self.n_tok, dead_features=int((self.fire_counts == 0).sum()),
                       dense_features=int((freq > self.dense_threshold).sum()), d_sae=int(freq.numel()),
                       dense_threshold=self.dense_threshold)
        return out


def next_token_ce(logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor,
                  target_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row mean next-token CE over real positions (logits[:, t] predicts tokens[:, t+1]) and the per-position
    CE [b, p-1] (0 at masked positions). mask: [b, p] real tokens. target_mask: optional [b, p] bool, True at the
    tokens whose prediction counts (e.g. assistant-answer tokens); a row without any gives CE 0 (callers drop it)."""
    if logits.ndim != 3 or logits.shape[:2] != tokens.shape or tokens.shape != mask.shape:
        raise ShapeError(f"logits [b,p,V], tokens [b,p], mask [b,p] expected; got {tuple(logits.shape)}, "
                         f"{tuple(tokens.shape)}, {tuple(mask.shape)}")
    if target_mask is not None and target_mask.shape != mask.shape:
        raise ShapeError(f"target_mask {tuple(target_mask.shape)} must match mask {tuple(mask.shape)}")
    # float32 logsumexp, promoted to float64 per position: a float64 log-softmax over a real vocabulary (49k) costs
    # seconds and gigabytes per micro-batch and changes nothing at the precision reported
    lg = logits[:, :-1].float()
    ce = (torch.logsumexp(lg, -1) - lg.gather(-1, tokens[:, 1:, None].long().to(lg.device)).squeeze(-1)).double()
    tgt = mask[:, 1:] if target_mask is None else mask[:, 1:] & target_mask[:, 1:].to(mask.device).bool()
    m = (mask[:, :-1] & tgt).to(ce.dtype)
    ce = ce * m
    return ce.sum(1) / m.sum(1).clamp_min(1), ce


def kl_per_row(logits_p: torch.Tensor, logits_q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over real positions of KL(p || q) (p = clean) per row (float32 per row, summed in float64: the memory of
    one row's [p, V] log-probabilities, not the batch's)."""
    kl = torch.zeros(mask.shape, dtype=torch.float64, device=logits_p.device)
    for b in range(logits_p.shape[0]):
        lp = torch.log_softmax(logits_p[b].float(), -1)
        lq = torch.log_softmax(logits_q[b].float(), -1)
        kl[b] = (lp.exp() * (lp - lq)).sum(-1).double()
    m = mask.to(kl.dtype)
    return (kl * m).sum(1) / m.sum(1).clamp_min(1)


def sae_recon(sae: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(feature_acts, reconstruction) for [..., d] activations (no error term)."""
    dev = getattr(sae, "device", torch.device("cpu"))
    xin = x.to(dev, sae.dtype)
    f = sae.encode(xin)
    return f, sae.decode(f).to(x.dtype).to(x.device)


POSITIONS = ("all", "response")


def _positions(positions: Any) -> tuple[str, ...]:
    """Normalise `positions` ("all" | "response" | "both" | a list of those) to a tuple of POSITIONS."""
    valid = "'all', 'response', 'both' or a list of 'all'/'response'"
    if isinstance(positions, str):
        items = list(POSITIONS) if positions == "both" else [positions]
    elif isinstance(positions, (list, tuple)) and positions:
        items = list(positions)
    else:
        raise ConfigError(f"positions must be {valid}; got {positions!r}")
    bad = [p for p in items if p not in POSITIONS]
    if bad:
        raise ConfigError(f"positions {bad[0]!r} is not valid; use {valid}")
    return tuple(p for p in POSITIONS if p in items)


def response_masks(model: Any, dialogues: Sequence[Any], truncate: int | None = 8192) -> list[torch.Tensor]:
    """One bool tensor per dialogue, aligned with the FAST provider's token ids (`chat_ids`, truncated like it):
    True at assistant-answer tokens (`interplab.sae.chat.assistant_token_mask`: every assistant turn's content and
    its closing `<|im_end|>`; not the `<|im_start|> assistant` header). Needs dialogues, not texts or token ids."""
    from interplab.sae.chat import assistant_token_mask, is_dialogue

    out = []
    for i, d in enumerate(dialogues):
        if not is_dialogue(d):
            raise InputError(f"positions='response' needs chat dialogues (lists of {{'role','content'}} dicts); sample "
                             f"{i} is a {type(d).__name__}")
        m = assistant_token_mask(model.tokenizer, d)
        out.append(torch.tensor(m[:truncate] if truncate is not None else m, dtype=torch.bool))
    return out


def _reconstruction(sae, prov, special_token_ids, dense_threshold) -> dict:
    """Reconstruction metrics of `sae` over every chunk of a provider (the FAST or the packed distribution)."""
    acc = ReconstructionAccumulator(int(sae.cfg.d_sae), special_token_ids, dense_threshold)
    sae.eval()
    with torch.no_grad():
        for ch in prov.iter_chunks():
            f, xh = sae_recon(sae, ch.acts)
            acc.update(ch.acts, xh.float(), ch.token_ids, f)
    return acc.result()


_DOWNSTREAM = ("ce_clean", "ce_sae", "ce_zero_ablation", "delta_loss_pct", "ce_loss_score", "kl_sae",
               "kl_zero_ablation")


class SAEEval(Record):
    """`evaluate_sae`: the reconstruction metrics n_sequences, n_tokens, mse, log2_mse, mse_token_weighted,
    mse_sum_d, explained_variance, n_sequences_special, n_tokens_special, mse_special,
    log2_mse_special, l0,
    dead_features, dense_features, d_sae, dense_threshold, then site and special_token_ids; with `downstream` the
    CE-based metrics ce_clean, ce_sae, ce_zero_ablation, delta_loss_pct, ce_loss_score, kl_sae, kl_zero_ablation
    (positions "all") and the same keys suffixed `_response` plus n_sequences_response, n_tokens_response
    (positions "response")."""

    KEYS = ("n_sequences", "n_tokens", "mse", "log2_mse", "mse_token_weighted", "mse_sum_d",
            "explained_variance",
            "n_sequences_special", "n_tokens_special", "mse_special", "log2_mse_special", "l0", "dead_features",
            "dense_features", "d_sae", "dense_threshold", "site", "special_token_ids", "exclude_massive",
            "n_massive_excluded")
    OPTIONAL = _DOWNSTREAM + tuple(k + "_response" for k in _DOWNSTREAM) + ("n_sequences_response",
                                                                             "n_tokens_response")


class PackedSAEEval(SAEEval):
    """`evaluate_sae_packed`: the `SAEEval` keys plus n_blocks and context_size (after special_token_ids)."""

    KEYS = SAEEval.KEYS + ("n_blocks", "context_size")


def evaluate_sae(model: Any, sae: Any, dialogues: Sequence[Any], *, site: str | None = None,
                 special_token_ids: Sequence[int] | None = None, truncate: int | None = 8192, micro_batch: int = 16,
                 downstream: bool = True, dense_threshold: float = 0.1, positions: Any = "all",
                 exclude_massive: float | None = None, reference: dict | None = None) -> SAEEval:
    """FAST evaluation of `sae` (an SAELens SAE or a directory) on `dialogues` (one per forward).

    special_token_ids: ids counted for MSE_st (default: the tokenizer's special/added tokens, i.e. the chat
    markers and BOS/EOS). Returns a flat dict: mse, log2_mse, mse_special, log2_mse_special, mse_token_weighted,
    mse_sum_d, explained_variance, l0, dead_features, dense_features, and with `downstream` the
    CE-based metrics
    ce_clean, ce_sae, ce_zero_ablation, delta_loss_pct, ce_loss_score, kl_sae, kl_zero_ablation.

    positions: which positions the CE-based metrics count (reconstruction metrics always use every token):
    * "all" (default): every real position that predicts a real next token (KL: every real position). Unsuffixed
      keys, the numbers this function always returned.
    * "response": only positions whose NEXT token is an assistant-answer token, i.e. the tokens a chat model is
      trained to predict: the content of every assistant turn plus its closing `<|im_end|>` (the toy organisms'
      SFT loss mask), located from the chat template by `assistant_token_mask` (not the `<|im_start|> assistant`
      header, no prompt token). KL is taken at the same positions. Keys get the suffix `_response` (ce_clean_response,
      ..., kl_zero_ablation_response) plus n_sequences_response / n_tokens_response; per-dialogue means are
      averaged over dialogues with at least one answer token. Needs dialogues.
    * "both" or ["all", "response"]: both sets side by side (the same forwards; no extra cost).
    Anything else raises ConfigError naming the valid choices.

    exclude_massive: None = the SAE's own setting (its metadata; 0 for SAEs trained elsewhere). With a factor > 1,
    each dialogue's massive positions (`interplab.core.scale.massive_mask`) are left out of the reconstruction
    metrics and kept unreplaced by the splice (`SAESplice`); `n_massive_excluded` counts them. reference: see
    `downstream_metrics` (a sweep passes one dict per evaluation set to run the clean forward once)."""
    from interplab.sae.chat import special_token_ids as _special
    from interplab.sae.sites import load_sae, sae_exclude_massive, sae_site
    from interplab.sae.providers import fast_provider

    pos = _positions(positions)
    sae = load_sae(sae)
    site = sae_site(sae, site)
    massive = sae_exclude_massive(sae) if exclude_massive is None else float(exclude_massive)
    if special_token_ids is None:
        special_token_ids = _special(model.tokenizer)
    prov = fast_provider(model, dialogues, site=site, truncate=truncate, micro_batch=micro_batch, shuffle=False,
                         bucket=True, exclude_massive=massive)
    resp = None
    if downstream and "response" in pos:
        resp = response_masks(model, dialogues, truncate)
        for i, (m, ids) in enumerate(zip(resp, prov.samples)):
            if m.numel() != len(ids):  # pragma: no cover - both come from chat_ids
                raise DataError(f"response mask of dialogue {i} has {m.numel()} entries for {len(ids)} tokens")
    res = _reconstruction(sae, prov, special_token_ids, dense_threshold)
    res["site"] = site
    res["special_token_ids"] = list(map(int, special_token_ids))
    res.update(exclude_massive=massive, n_massive_excluded=prov.n_tokens - res["n_tokens"])
    if downstream:
        res.update(downstream_metrics(model, sae, prov, site=site, positions=pos, response_masks=resp,
                                      exclude_massive=massive, reference=reference))
    return SAEEval(res)


def _place(batch_mask: torch.Tensor, per_sample: Sequence[torch.Tensor]) -> torch.Tensor:
    """Scatter per-sample token masks into a padded batch (either padding side): row b's real positions, in order,
    get per_sample[b]."""
    out = torch.zeros_like(batch_mask, dtype=torch.bool)
    for b, m in enumerate(per_sample):
        real = batch_mask[b].nonzero().squeeze(-1)
        if real.numel() != m.numel():
            raise ShapeError(f"row {b} has {real.numel()} real tokens but its mask has {m.numel()}")
        out[b, real] = m.to(out.device)
    return out


def _summary(ce: dict, kl: dict, suffix: str = "") -> dict:
    c = {k: torch.cat(v).mean().item() if v and torch.cat(v).numel() else float("nan") for k, v in ce.items()}
    denom = c["zero"] - c["clean"]
    klm = {k: torch.cat(v).mean().item() if v and torch.cat(v).numel() else float("nan") for k, v in kl.items()}
    out = {"ce_clean": c["clean"], "ce_sae": c["sae"], "ce_zero_ablation": c["zero"],
           "delta_loss_pct": (c["sae"] - c["clean"]) / c["clean"] * 100.0 if c["clean"] != 0 else float("nan"),
           "ce_loss_score": (c["zero"] - c["sae"]) / denom if abs(denom) > 1e-12 else float("nan"),
           "kl_sae": klm["sae"], "kl_zero_ablation": klm["zero"]}
    return {k + suffix: v for k, v in out.items()}


def downstream_metrics(model: Any, sae: Any, provider: Any, *, site: str, positions: Any = "all",
                       response_masks: Sequence[torch.Tensor] | None = None,
                       exclude_massive: float | None = None, reference: dict | None = None) -> dict:
    """CE clean / with SAE / with zero ablation per dialogue, Delta Loss %, ce_loss_score and KL, over the
    `positions` of `evaluate_sae` ("response" needs `response_masks`, one per provider sample).

    reference: a dict kept by the caller across SAEs evaluated on the same sequences and site. The clean forward
    (its logits and statistics) and the zero-ablation statistics do not depend on the SAE, so the first call fills it
    and later calls run only the spliced forward: one forward per SAE instead of three (on a 135M model with a 49k
    vocabulary, the evaluation's cost). It holds the clean logits, so it costs their memory."""
    from interplab.interventions import Ablate
    from interplab.sae.steering import SAESplice

    pos = _positions(positions)
    if "response" in pos and (response_masks is None or len(response_masks) != len(provider.samples)):
        raise InputError("positions='response' needs one response mask per sample (see response_masks())")
    splice = SAESplice(sae, site, exclude_massive=exclude_massive)
    ablate = Ablate(site)
    ce = {"clean": [], "sae": [], "zero": []}
    kl = {"sae": [], "zero": []}
    ce_r = {"clean": [], "sae": [], "zero": []}
    kl_r = {"sae": [], "zero": []}
    n_tok_r = 0

    def stats(logits, clean_logits, toks, mask, tgt, pm, keep) -> dict:
        """Per-row CE / KL of one forward's logits for each position set."""
        out = {}
        if "all" in pos:
            out["ce"] = next_token_ce(logits, toks, mask)[0]
            if clean_logits is not None:
                out["kl"] = kl_per_row(clean_logits, logits, mask)
        if "response" in pos:
            k = keep.to(logits.device)
            out["ce_r"] = next_token_ce(logits, toks, mask, tgt)[0][k]
            if clean_logits is not None:
                out["kl_r"] = kl_per_row(clean_logits, logits, pm)[k]
        return out

    with torch.no_grad():
        for b, idx in enumerate(provider._batches(0)):
            seqs = [provider.samples[i] for i in idx]
            key = (b, site, tuple(map(tuple, seqs)))
            ref = reference.get(key) if reference is not None else None
            if ref is None:
                clean = model.run(seqs, logits=True)
                toks, mask = clean.batch.input_ids, clean.batch.attention_mask.bool()
                tgt = pm = keep = None
                if "response" in pos:
                    tgt = _place(mask, [response_masks[i] for i in idx])
                    pm = torch.zeros_like(mask)           # positions whose next token is an answer token
                    pm[:, :-1] = mask[:, :-1] & mask[:, 1:] & tgt[:, 1:]
                    keep = pm.any(1)
                zero = model.run(seqs, edits=[ablate], logits=True)
                ref = {"logits": clean.logits, "toks": toks, "mask": mask, "tgt": tgt, "pm": pm, "keep": keep,
                       "clean": stats(clean.logits, None, toks, mask, tgt, pm, keep)}
                ref["zero"] = stats(zero.logits, clean.logits, toks, mask, tgt, pm, keep)
                if reference is not None:
                    reference[key] = ref
            spliced = model.run(seqs, edits=[splice], logits=True)
            got = {"clean": ref["clean"], "zero": ref["zero"],
                   "sae": stats(spliced.logits, ref["logits"], ref["toks"], ref["mask"], ref["tgt"], ref["pm"],
                                ref["keep"])}
            for name, st in got.items():
                if "all" in pos:
                    ce[name].append(st["ce"])
                    if name != "clean":
                        kl[name].append(st["kl"])
                if "response" in pos:
                    ce_r[name].append(st["ce_r"])
                    if name != "clean":
                        kl_r[name].append(st["kl_r"])
            if "response" in pos:
                n_tok_r += int(ref["pm"].sum())
    res = {}
    if "all" in pos:
        res.update(_summary(ce, kl))
    if "response" in pos:
        res.update(_summary(ce_r, kl_r, "_response"))
        res["n_sequences_response"] = int(sum(v.numel() for v in ce_r["clean"]))
        res["n_tokens_response"] = n_tok_r
    return res


class _Blocks:
    """Packed blocks as the sequence source `downstream_metrics` reads (`samples` and `_batches`): every block has
    `context_size` tokens, so a micro-batch needs no padding."""

    def __init__(self, blocks: torch.Tensor, micro_batch: int):
        self.samples = blocks.tolist()
        self.micro_batch = int(micro_batch)

    def _batches(self, epoch: int) -> list[list[int]]:
        n = len(self.samples)
        return [list(range(k, min(n, k + self.micro_batch))) for k in range(0, n, self.micro_batch)]


def evaluate_sae_packed(model: Any, sae: Any, dialogues: Sequence[Any], *, context_size: int = 128,
                        separator: str = "bos", site: str | None = None,
                        special_token_ids: Sequence[int] | None = None, truncate: int | None = 8192,
                        micro_batch: int = 8, downstream: bool = True, dense_threshold: float = 0.1,
                        positions: Any = "all", exclude_massive: float | None = None,
                        reference: dict | None = None) -> PackedSAEEval:
    """`evaluate_sae` on the **packed** (block-training) distribution instead of FAST's: `dialogues` (or texts) are
    packed exactly as BT(F)/BT(P) training packs them (`block_provider`, in the given order, SAELens packing: BOS at
    every block start, `separator` between samples, trailing partial block dropped) and every block is one forward.

    Same keys as `evaluate_sae`. Reconstruction metrics count each *block* as one sequence of Eq. 7 (the sequence
    the model saw; inserted BOS/separators included), so log2_mse is the block-weighted analogue of the FAST number.
    The CE-based metrics splice the SAE into every block position; positions="response" keeps the positions whose
    next token is an assistant-answer token of the dialogue it came from (block provenance: sample and position),
    so text samples (BT(P)) allow positions="all" only. Adds n_blocks and context_size. exclude_massive: as in
    `evaluate_sae`, per block (a block's first position is the sink there)."""
    from interplab.sae.chat import special_token_ids as _special
    from interplab.sae.providers import block_provider
    from interplab.sae.sites import load_sae, sae_exclude_massive, sae_site

    pos = _positions(positions)
    sae = load_sae(sae)
    site = sae_site(sae, site)
    massive = sae_exclude_massive(sae) if exclude_massive is None else float(exclude_massive)
    if special_token_ids is None:
        special_token_ids = _special(model.tokenizer)
    prov = block_provider(model, dialogues, site=site, context_size=context_size, separator=separator,
                          micro_batch=micro_batch, shuffle=False, truncate=truncate, exclude_massive=massive)
    blocks, src_sample, src_pos = prov.packed(0)
    res = _reconstruction(sae, prov, special_token_ids, dense_threshold)
    res.update(site=site, special_token_ids=list(map(int, special_token_ids)), exclude_massive=massive,
               n_massive_excluded=int(blocks.numel()) - res["n_tokens"], n_blocks=int(blocks.shape[0]),
               context_size=int(context_size))
    if downstream:
        resp = None
        if "response" in pos:
            per_sample = response_masks(model, dialogues, truncate)
            resp = []
            for s_row, p_row in zip(src_sample, src_pos):   # inserted BOS / separators (-1) are never answers
                resp.append(torch.tensor([bool(per_sample[s][p]) if s >= 0 else False
                                          for s, p in zip(s_row.tolist(), p_row.tolist())]))
        res.update(downstream_metrics(model, sae, _Blocks(blocks, micro_batch), site=site, positions=pos,
                                      response_masks=resp, exclude_massive=massive, reference=reference))
    return PackedSAEEval(res)
