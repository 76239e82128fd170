"""Chat-template tokenisation for SAE data: one dialogue's ids, its assistant-answer mask, plain-text ids, the
template's hash (recorded with every SAE) and a tokenizer's special token ids."""
from __future__ import annotations

import hashlib
from typing import Any, Sequence

import torch

from interplab.core.errors import DataError, InputError

__all__ = ["chat_template_hash", "chat_ids", "assistant_token_mask", "text_ids", "is_dialogue", "special_token_ids"]


def chat_template_hash(tokenizer: Any) -> str | None:
    tmpl = getattr(tokenizer, "chat_template", None)
    if not tmpl:
        return None
    if isinstance(tmpl, dict):
        tmpl = repr(sorted(tmpl.items()))
    return hashlib.sha256(str(tmpl).encode("utf-8")).hexdigest()[:16]


def chat_ids(tokenizer: Any, messages: Sequence[dict], add_generation_prompt: bool = False) -> list[int]:
    """Token ids of one dialogue rendered with the tokenizer's own chat template (no generation prompt by default).

    Handles every return type transformers 5.x uses (list, [1, L] tensor, BatchEncoding)."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InputError(f"a dialogue must be a non-empty list of {{'role', 'content'}} messages, got {messages!r:.80}")
    if not getattr(tokenizer, "chat_template", None):
        raise InputError("the model's tokenizer has no chat_template; pass plain texts to block_provider or use a chat model")
    out = tokenizer.apply_chat_template(list(messages), tokenize=True, add_generation_prompt=add_generation_prompt)
    if hasattr(out, "keys") and "input_ids" in out:
        out = out["input_ids"]
    if isinstance(out, torch.Tensor):
        out = out.tolist()
    if out and isinstance(out[0], (list, tuple)):
        if len(out) != 1:
            raise InputError("apply_chat_template returned a batch for one dialogue")
        out = out[0]
    return [int(t) for t in out]


def assistant_token_mask(tokenizer: Any, messages: Sequence[dict]) -> list[bool]:
    """Per-token mask of `chat_ids(tokenizer, messages)`: True on the tokens of every assistant turn's *answer*, i.e.
    the tokens a chat model is trained to predict (the toy organisms' loss mask, `interplab.data.examples`).

    Derived from the chat template itself, with no per-template rules: for each assistant message k, the answer starts
    where `chat_ids(messages[:k], add_generation_prompt=True)` ends (after the template's `<|im_start|> assistant`
    header) and ends where `chat_ids(messages[:k+1])` ends, so it includes the turn's closing marker (`<|im_end|>`,
    plus whatever the template appends after it, e.g. Qwen's newline). Raises DataError when a template does not
    render dialogue prefixes as token prefixes (then answer spans cannot be located this way)."""
    full = chat_ids(tokenizer, messages)
    mask = [False] * len(full)
    for k, msg in enumerate(messages):
        if msg.get("role") != "assistant":
            continue
        if k == 0:
            raise DataError("a dialogue that opens with an assistant turn has no prompt to locate the answer after; "
                            "start it with a system or user turn, or use positions='all'")
        head = chat_ids(tokenizer, messages[:k], add_generation_prompt=True)
        upto = chat_ids(tokenizer, messages[:k + 1])
        if full[:len(head)] != head or full[:len(upto)] != upto or len(upto) < len(head):
            raise DataError(
                f"the chat template does not render assistant turn {k} as a token prefix of the full dialogue, so "
                "its answer tokens cannot be located; use positions='all' for this model")
        for j in range(len(head), len(upto)):
            mask[j] = True
    return mask


def text_ids(tokenizer: Any, text: str) -> list[int]:
    """Plain-text ids without special tokens (block training inserts BOS / separators itself)."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"texts must be non-empty strings, got {text!r:.80}")
    return [int(t) for t in tokenizer(text, add_special_tokens=False)["input_ids"]]


def is_dialogue(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(m, dict) and "role" in m for m in x)


def special_token_ids(tokenizer: Any) -> list[int]:
    """All special / added token ids of a tokenizer (bos, eos, pad, chat markers)."""
    ids = set(int(i) for i in (getattr(tokenizer, "all_special_ids", None) or []))
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    for i, tok in added.items():
        if getattr(tok, "special", True):
            ids.add(int(i))
    return sorted(ids)
