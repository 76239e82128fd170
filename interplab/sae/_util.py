"""Small helpers shared by the SAE modules: site <-> SAELens hook-name mapping, chat-template tokenisation,
template hashing, SAE loading from a directory or object."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Sequence

import torch

from interplab.core.errors import ConfigError, DataError, InputError

# interplab site kind -> TransformerLens (legacy) hook suffix used by SAELens metadata.
_SITE_TO_HOOK = {
    "resid_pre": "hook_resid_pre",
    "resid_post": "hook_resid_post",
    "attn_out": "hook_attn_out",
    "mlp_out": "hook_mlp_out",
}
_HOOK_TO_SITE = {v: k for k, v in _SITE_TO_HOOK.items()}
_HOOK_TO_SITE.update({"hook_out": "resid_post", "hook_in": "resid_pre"})


def site_to_hook_name(site: str) -> str:
    """`resid_post.2` -> `blocks.2.hook_resid_post` (the name SAELens, Neuronpedia and sae-dashboard expect)."""
    m = re.fullmatch(r"([a-z_]+)\.(\d+)", site)
    if not m or m.group(1) not in _SITE_TO_HOOK:
        raise ConfigError(
            f"SAE site {site!r} is not supported; use one of "
            f"{', '.join(k + '.L' for k in _SITE_TO_HOOK)} (residual-width sites)")
    return f"blocks.{m.group(2)}.{_SITE_TO_HOOK[m.group(1)]}"


def hook_name_to_site(hook_name: str) -> str:
    """`blocks.2.hook_resid_post` (or canonical `blocks.2.hook_out`) -> `resid_post.2`; interplab site names pass."""
    if re.fullmatch(r"(resid_pre|resid_post|attn_out|mlp_out)\.\d+", hook_name or ""):
        return hook_name
    m = re.fullmatch(r"blocks\.(\d+)\.(hook_[a-z_]+)", hook_name or "")
    if not m or m.group(2) not in _HOOK_TO_SITE:
        raise ConfigError(
            f"cannot map SAE hook name {hook_name!r} to an interplab site; pass site='resid_post.L' explicitly")
    return f"{_HOOK_TO_SITE[m.group(2)]}.{m.group(1)}"


def sae_site(sae: Any, site: str | None = None) -> str:
    """The interplab site an SAE reads from: explicit `site`, else its metadata."""
    if site is not None:
        return site
    md = sae.cfg.metadata
    s = md.get("interplab_site") if hasattr(md, "get") else None
    if s:
        return s
    return hook_name_to_site(md.hook_name)


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


def load_sae(sae_or_path: Any, device: str = "cpu"):
    """An SAE object passes through; a directory loads with `sae_lens.SAE.load_from_disk`."""
    if isinstance(sae_or_path, (str, Path)):
        from sae_lens import SAE

        p = Path(sae_or_path)
        if not (p / "cfg.json").exists():
            raise InputError(f"{p} is not an SAELens directory (no cfg.json); train one with interplab.sae.train_sae")
        return SAE.load_from_disk(str(p), device=device)
    return sae_or_path


def special_token_ids(tokenizer: Any) -> list[int]:
    """All special / added token ids of a tokenizer (bos, eos, pad, chat markers)."""
    ids = set(int(i) for i in (getattr(tokenizer, "all_special_ids", None) or []))
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    for i, tok in added.items():
        if getattr(tok, "special", True):
            ids.add(int(i))
    return sorted(ids)
