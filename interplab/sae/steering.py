"""SAE steering (paper §6, App. F): the template-token positions, the alpha sweep and its result. The edits themselves
(`SAESplice`, `SAESteer`) are defined in `interplab.interventions.sae` and re-exported here."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from interplab.core.errors import InputError
from interplab.core.result import Result
from interplab.interventions.sae import SAESplice, SAESteer  # noqa: F401 - the SAE edits live with the others


def template_token_ids(tokenizer: Any) -> list[int]:
    """Chat-template tokens: special/added tokens plus single-token role names (system, user, assistant)."""
    from interplab.sae.chat import special_token_ids

    ids = set(special_token_ids(tokenizer))
    for role in ("system", "user", "assistant"):
        t = tokenizer(role, add_special_tokens=False)["input_ids"]
        if len(t) == 1:
            ids.add(int(t[0]))
    pad = getattr(tokenizer, "pad_token_id", None)
    ids.discard(pad)
    return sorted(ids)


# ---------------------------------------------------------------------------------------------------------------


@dataclass
class SteeringSweepConfig:
    """feature: SAE feature whose decoder row is added. alphas: strengths (paper: 0, 15, 25, 50, 100, 150, 200).
    positions: all | template | generated. max_new_tokens: greedy generation length. site: None -> the SAE's.
    normalize: use the unit-norm decoder direction instead of the raw row (paper-mode SAEs are unit norm anyway)."""

    feature: int = 0
    alphas: tuple[float, ...] = (0.0, 15.0, 25.0, 50.0, 100.0, 150.0, 200.0)
    positions: str = "all"
    max_new_tokens: int = 24
    site: str | None = None
    normalize: bool = False


@dataclass
class SteeringSweepResult(Result):
    """Generations of an alpha sweep. `rows`: one dict per (alpha, prompt) with the generated ids
    (`new_tokens`, as generated), the reply (`text`: decoded up to the first stop token — tokenizer
    EOS or a generation_config eos id such as <|im_end|>), the target feature's mean activation on
    the generated tokens (clean re-forward, no steering), the fraction of repeated 3-grams, the
    distinct-token ratio and the per-token NLL of the reply under the unedited model (`reply_nll`,
    NaN for an empty reply)."""

    config: SteeringSweepConfig
    rows: list[dict] = field(default_factory=list)
    sae_path: str | None = None
    model_name: str | None = None

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows)

    def summary(self):
        df = self.to_frame()
        cols = [c for c in ("target_activation", "repeated_3gram_frac", "distinct_ratio", "reply_len", "exact_match",
                            "answer_kept")
                if c in df.columns]
        return df.groupby("alpha")[cols].mean().reset_index()


def stop_token_ids(model: Any) -> set[int]:
    """Ids that end a turn: the tokenizer's EOS plus the checkpoint's generation_config eos ids (e.g. <|im_end|>)."""
    ids = set()
    tok = model.tokenizer
    if getattr(tok, "eos_token_id", None) is not None:
        ids.add(int(tok.eos_token_id))
    gc = getattr(getattr(model, "hf_model", None), "generation_config", None)
    e = getattr(gc, "eos_token_id", None) if gc is not None else None
    if e is not None:
        ids |= {int(x) for x in (e if isinstance(e, (list, tuple)) else [e])}
    return ids


def _cut(ids: list[int], stops: set[int]) -> list[int]:
    for i, t in enumerate(ids):
        if t in stops:
            return ids[:i]
    return ids


def _rep_stats(ids: list[int]) -> tuple[float, float]:
    if not ids:
        return 0.0, 0.0
    grams = [tuple(ids[i:i + 3]) for i in range(len(ids) - 2)]
    rep = 1 - len(set(grams)) / len(grams) if grams else 0.0
    return rep, len(set(ids)) / len(ids)


def _reply_nll(logp: torch.Tensor, reply: list[int], n_new: int, k: int) -> float:
    """Mean per-token NLL of `reply` (the first tokens of a row's `n_new` generated ones) from the
    row's last-k log-probabilities [k, V]: reply token j sits at window index k − n_new + j and is
    predicted one before it. NaN for an empty reply."""
    if not reply:
        return float("nan")
    idx = torch.arange(len(reply)) + (k - n_new - 1)
    tgt = torch.tensor(reply, dtype=torch.long)
    return float(-logp[idx.to(logp.device), tgt.to(logp.device)].double().mean())


def steering_sweep(model: Any, sae: Any, prompts: Sequence[Any], config: SteeringSweepConfig | None = None,
                   **kw: Any) -> SteeringSweepResult:
    """Greedy generations for every alpha in the sweep, adding alpha * W_dec[feature] at the SAE's site.

    prompts: dialogues (rendered with the chat template and a generation prompt) or plain strings."""
    from interplab.sae.chat import chat_ids, is_dialogue
    from interplab.sae.sites import load_sae, sae_site

    cfg = config or SteeringSweepConfig(**kw)
    sae_obj = load_sae(sae)
    site = sae_site(sae_obj, cfg.site)
    if not prompts:
        raise InputError("steering_sweep needs at least one prompt")
    tok = model.tokenizer
    pids = [chat_ids(tok, p, add_generation_prompt=True) if is_dialogue(p)
            else tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    tmpl = template_token_ids(tok)
    stops = stop_token_ids(model)
    res = SteeringSweepResult(cfg, [], str(sae) if isinstance(sae, (str, Path)) else None,
                              getattr(model, "name", None))
    for alpha in cfg.alphas:
        edit = SAESteer(sae_obj, cfg.feature, alpha, site=site, positions=cfg.positions, prompt_ids=pids,
                        template_ids=tmpl, normalize=cfg.normalize)
        gen = model.generate(pids, max_new_tokens=cfg.max_new_tokens, edits=[edit], greedy=True)
        full = [list(p) + list(n) for p, n in zip(pids, gen.new_tokens)]
        # the unedited model re-reads prompt + reply: the feature's activation on the reply, and
        # the reply's per-token NLL (a degenerate-generation check); only the last k positions are
        # unembedded
        k = max(len(n) for n in gen.new_tokens) + 1
        with torch.no_grad():
            clean = model.run(full, capture=[site], logits=True, logits_last=k)
            acts = clean.cache[site]
            mask = clean.batch.attention_mask.bool()
            f = sae_obj.encode(acts.to(sae_obj.W_dec.dtype))[..., cfg.feature]
            logp = torch.log_softmax(clean.logits.float(), -1)
        for i, (p, n) in enumerate(zip(pids, gen.new_tokens)):
            fi = f[i][mask[i]]
            gen_part = fi[len(p):]
            reply = _cut(list(map(int, n)), stops)
            rep, distinct = _rep_stats(reply)
            res.rows.append({"alpha": float(alpha), "prompt_idx": i, "prompt": tok.decode(p),
                             "text": tok.decode(reply).strip(), "new_tokens": list(map(int, n)),
                             "n_new": len(n), "reply_len": len(reply),
                             "target_activation": float(gen_part.mean()) if gen_part.numel() else 0.0,
                             "repeated_3gram_frac": rep, "distinct_ratio": distinct,
                             "reply_nll": _reply_nll(logp[i], reply, len(n), k)})
    return res
