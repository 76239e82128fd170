"""Model inspection shared by the Models page and the `next-token` experiment.

`model_summary(model)` gives the architecture numbers; `next_token_report(model, prompt, layer=..., top_k=...)`
runs one forward, capturing only `attn_pattern.<layer>`, and returns the top-k next tokens and that layer's
attention patterns (all heads) at the prompt's tokens."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from interplab.core.errors import InputError, ShapeError
from interplab.core.result import Result

__all__ = ["model_summary", "suggest_prompt", "next_token_report", "NextTokenResult"]


def model_summary(model) -> dict[str, Any]:
    """Architecture numbers of a LabModel (what the Models page shows)."""
    hf = getattr(model, "hf_model", None)
    n_params = int(sum(p.numel() for p in hf.parameters())) if hf is not None else None
    return {
        "name": str(getattr(model, "name", "")),
        "backend": str(getattr(model, "backend", "")),
        "architecture": type(hf).__name__ if hf is not None else "",
        "n_layers": int(model.n_layers),
        "n_heads": int(model.n_heads),
        "n_kv_heads": int(model.n_kv_heads),
        "d_model": int(model.d_model),
        "d_head": int(model.d_head),
        "d_vocab": int(model.d_vocab),
        "n_ctx": int(model.n_ctx),
        "n_params": n_params,
        "device": str(getattr(model, "device", "")),
        "dtype": str(getattr(model, "dtype", "")).replace("torch.", ""),
    }


DEFAULT_PROMPT = "the cat sat on the"


def suggest_prompt(model_or_tokenizer, default: str = DEFAULT_PROMPT, n_words: int = 5) -> str:
    """`default` when the tokenizer knows all its words, else a few ordinary words from the vocabulary
    (word-level organism tokenizers map unknown words to <unk>)."""
    tok = getattr(model_or_tokenizer, "tokenizer", model_or_tokenizer)
    try:
        ids = tok(default, add_special_tokens=False)["input_ids"]
        unk = getattr(tok, "unk_token_id", None)
        if ids and (unk is None or unk not in ids):
            return default
        special = set(getattr(tok, "all_special_tokens", []) or [])
        vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
        words = [w for w, _ in vocab if w not in special and w.isalnum() and not w.startswith(("<", "["))]
        roles = {"system", "user", "assistant"}
        words = [w for w in words if w not in roles] or words
        return " ".join(words[:n_words]) if words else default
    except Exception:  # noqa: BLE001 - a suggestion must never fail a page
        return default


@dataclass
class NextTokenResult(Result):
    """Top next tokens after a prompt plus one layer's attention patterns.

    prompt: the text; tokens: the prompt's tokens as run (BOS included when the tokenizer adds one);
    input_ids: their ids; top: DataFrame rank/token_id/token/prob/logit; pattern: [n_heads, q, k] post-softmax
    attention of `layer`; config: what produced it."""

    prompt: str
    tokens: list[str]
    input_ids: list[int]
    layer: int
    top: Any  # pandas DataFrame
    pattern: np.ndarray
    config: dict = field(default_factory=dict)

    def __post_init__(self):
        n = len(self.tokens)
        if len(self.input_ids) != n or np.ndim(self.pattern) != 3 or tuple(np.shape(self.pattern)[1:]) != (n, n):
            raise ShapeError(f"NextTokenResult: {n} tokens need input_ids [{n}] and pattern [n_heads, {n}, {n}]; got "
                             f"{len(self.input_ids)} ids and pattern {list(np.shape(self.pattern))}")

    def to_frame(self):
        return self.top.copy()


def suggest_chat(model) -> tuple[str, str]:
    """(system, user) turns for a chat model's first prompt: a task the toy organisms were tuned on when the
    tokenizer knows its words (instruction = system turn, docs/zoo.md), else no system turn and `suggest_prompt`."""
    try:
        vocab = model.tokenizer.get_vocab()
        if all(w in vocab for w in ("copy", "s1", "s2", "s3", "sep")):
            return "copy", "s1 s2 s3 sep"
    except Exception:  # noqa: BLE001 - a suggestion must never fail a page
        pass
    return "", suggest_prompt(model)


def prompt_input(model, prompt: str, system: str = "", chat: bool | None = None):
    """What `model.run` is given for a (system, user) prompt: a conversation when a system turn is set (chat
    models), else the user text, read by the model's prompt rule (docs/hook_layer.md, "Prompts: text and chat")."""
    if system.strip() and chat is not False and model.is_chat:
        return [{"role": "system", "content": system.strip()}, {"role": "user", "content": prompt}]
    return prompt


def next_token_report(model, prompt: str, *, layer: int = 0, top_k: int = 10, edits=(), system: str = "",
                      chat: bool | None = None) -> NextTokenResult:
    """One forward of `prompt` (under `edits`, if any): the `top_k` most likely next tokens and
    `attn_pattern.<layer>` for every head. `system` (chat models) adds a system turn; `chat` as in `LabModel.run`
    (None: the model's default)."""
    import pandas as pd
    import torch

    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("the prompt is empty; type some text")
    if not 1 <= int(top_k):
        raise InputError(f"top_k must be >= 1, got {top_k}")
    top_k = min(int(top_k), int(model.d_vocab))
    site = f"attn_pattern.{int(layer)}"
    with torch.no_grad():
        out = model.run(prompt_input(model, prompt, system, chat), capture=[site], edits=list(edits), chat=chat)
    ids = out.batch.input_ids[0]
    mask = out.batch.attention_mask[0].bool()
    ids = ids[mask].tolist()  # one prompt: no padding, but be exact
    logits = out.logits[0, -1].float()
    probs = torch.softmax(logits, -1)
    p, idx = torch.topk(probs, top_k)
    tok = model.tokenizer
    # tokens as the text they stand for (' Paris', not the vocabulary piece 'ĠParis'); `piece` keeps the entry
    tokens = [tok.decode([int(t)]) for t in ids]
    top = pd.DataFrame({
        "rank": np.arange(top_k),
        "token_id": idx.cpu().numpy().astype(np.int64),
        "token": [tok.decode([int(t)]) for t in idx.tolist()],
        "piece": [str(t) for t in tok.convert_ids_to_tokens(idx.tolist())],
        "prob": p.cpu().numpy().astype(np.float64),
        "logit": logits[idx].cpu().numpy().astype(np.float64),
    })
    pat = out.cache[site][0].float()  # [h, q, k]
    pat = pat[:, mask][:, :, mask].cpu().numpy()
    return NextTokenResult(prompt=prompt, tokens=tokens, input_ids=ids, layer=int(layer), top=top, pattern=pat,
                           config={"model": str(getattr(model, "name", "")), "layer": int(layer), "top_k": top_k,
                                   "edits": [repr(e) for e in edits], "system": system, "chat": chat})


def token_steer(model, token: str, layer: int, scale: float):
    """A `Steer` at `resid_post.<layer>` along the unembedding direction of `token` (unit norm × `scale`): the
    simplest edit whose effect one can predict (it pushes that token up)."""
    import torch

    from interplab.interventions import Steer

    ids = model.tokenizer.convert_tokens_to_ids([token])
    unk = getattr(model.tokenizer, "unk_token_id", None)
    if not ids or ids[0] is None or (unk is not None and ids[0] == unk and token != model.tokenizer.unk_token):
        # not a vocabulary piece: the text of one token (' Paris', as the top-token table shows it)
        try:
            ids = [model.token_id(token)]
        except InputError:
            raise InputError(f"{token!r} is not a token of {model.name}; pick one from the tokenizer's "
                             "vocabulary (a piece or the text of one token)") from None
    w = model.unembedding()[0][:, ids[0]]
    return Steer(f"resid_post.{int(layer)}", (w / w.norm()).to(torch.float32), scale=float(scale))
