"""Turning user inputs into left-padded batches with correct position ids."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from interplab.core.errors import InputError


@dataclass
class Batch:
    """A left-padded batch. position_ids count real tokens only (0 at each row's first real token)."""

    input_ids: torch.Tensor  # [b, p] long
    attention_mask: torch.Tensor  # [b, p] long (1 real, 0 pad)
    position_ids: torch.Tensor  # [b, p] long
    lengths: torch.Tensor  # [b] number of real tokens

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.input_ids.shape)

    def to(self, device) -> "Batch":
        return Batch(*(t.to(device) for t in (self.input_ids, self.attention_mask, self.position_ids, self.lengths)))

    def row_tokens(self, i: int) -> list[int]:
        """The real (unpadded) token ids of row i."""
        return self.input_ids[i, self.attention_mask[i].bool()].tolist()


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def left_pad(rows: list[list[int]], pad_id: int) -> Batch:
    if not rows:
        raise InputError("empty input: pass at least one prompt")
    for i, r in enumerate(rows):
        if len(r) == 0:
            raise InputError(f"input row {i} is empty after tokenization; pass a non-empty prompt")
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.as_tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    return Batch(ids, mask, position_ids_from_mask(mask), mask.sum(-1))


def _from_tensor(ids: torch.Tensor, mask: torch.Tensor | None, pad_id: int) -> Batch:
    if ids.ndim == 1:
        ids = ids[None]
        mask = None if mask is None else mask[None]
    if ids.ndim != 2:
        raise InputError(f"token tensor must be [batch, seq] or [seq], got shape {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise InputError("empty input: the token tensor has no tokens")
    ids = ids.long()
    if mask is None:
        mask = torch.ones_like(ids)
    mask = mask.long()
    if mask.shape != ids.shape:
        raise InputError(f"attention_mask shape {tuple(mask.shape)} differs from input_ids {tuple(ids.shape)}")
    if bool((mask.sum(-1) == 0).any()):
        raise InputError("a row of the batch has no real tokens (attention_mask all zero)")
    # Right padding would put pads between prompt and generated tokens: re-pack every row to the left.
    if bool((mask[:, 1:] < mask[:, :-1]).any()):
        return left_pad([ids[i, mask[i].bool()].tolist() for i in range(ids.shape[0])], pad_id=pad_id)
    return Batch(ids, mask, position_ids_from_mask(mask), mask.sum(-1))


def is_messages(x: Any) -> bool:
    """True for one chat conversation: a non-empty list of {"role": ..., "content": ...} dicts."""
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(m, dict) and "role" in m for m in x)


def template_markers(tokenizer) -> tuple[str, ...]:
    """The tokenizer's special tokens that its chat template writes literally (e.g. `<|im_start|>`): a string that
    contains one is an already rendered chat."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str):
        return ()
    return tuple(t for t in getattr(tokenizer, "all_special_tokens", ()) if t and t in template)


def prompt_mode(text: str, tokenizer, chat: bool | None) -> str:
    """How one plain string is tokenized (docs/hook_layer.md, "Prompts: text and chat"):

    - "formatted": it already holds the chat template's markers -> tokenized as is, without added special tokens
      (the template decides about <bos>), so it gives exactly the ids of the messages form;
    - "template": chat=True, or chat=None on a model with a chat template -> rendered as one user turn;
    - "text": chat=False, or a model without a chat template -> `tokenizer(text)` with its special tokens (<bos>)."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat is False or chat == "text":
        return "text"
    if chat is True and not has_template:
        raise InputError("chat=True needs a chat template, but this tokenizer has none; pass chat=False (plain text)")
    if not has_template:
        return "text"
    markers = template_markers(tokenizer)
    if any(mk in text for mk in markers):
        return "formatted"
    return "template"


def render_messages(messages: list[dict], tokenizer) -> str:
    """One conversation rendered by the tokenizer's own chat template; a generation prompt is added unless the
    conversation ends with an assistant turn (then the model continues that turn)."""
    if not getattr(tokenizer, "chat_template", None):
        raise InputError("chat messages need a chat template, but this tokenizer has none; pass plain text instead")
    for m in messages:
        if "content" not in m:
            raise InputError(f"chat message {m!r} has no 'content'")
    gen_prompt = messages[-1]["role"] != "assistant"
    return tokenizer.apply_chat_template(list(messages), add_generation_prompt=gen_prompt, tokenize=False)


def encode_text(text: str, tokenizer, add_special_tokens: bool) -> tuple[list[int], list[str]]:
    """Token ids of `text` and the pieces of it that became the unknown token (empty when all are known)."""
    unk = getattr(tokenizer, "unk_token_id", None)
    try:
        enc = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=unk is not None)
    except NotImplementedError:  # slow tokenizers have no offsets: name the position instead
        enc = tokenizer(text, add_special_tokens=add_special_tokens)
    ids = list(enc["input_ids"])
    if unk is None or unk not in ids:
        return ids, []
    offsets = enc.get("offset_mapping") if hasattr(enc, "get") else None
    pieces = [text[o[0]:o[1]] if offsets else f"<token {i}>" for i, (t, o) in
              enumerate(zip(ids, offsets or [None] * len(ids))) if t == unk]
    return ids, pieces


def encode_prompts(inputs: list, tokenizer, *, chat: bool | None,
                   add_special_tokens: bool = True) -> tuple[list[list[int]], list[str]]:
    """Plain strings and/or chat conversations -> (token-id rows, unknown pieces over all rows). chat="text" (the
    default of a model not trained on chats) reads strings as text and still renders explicit conversations."""
    rows, unknown = [], []
    for i, x in enumerate(inputs):
        if isinstance(x, str):
            if not x.strip():
                raise InputError(f"prompt {i} is an empty string; pass non-empty text")
            mode = prompt_mode(x, tokenizer, chat)
            if mode == "template":
                text, special = render_messages([{"role": "user", "content": x}], tokenizer), False
            else:
                text, special = x, (add_special_tokens if mode == "text" else False)
        else:
            if chat is False:
                raise InputError("chat=False, but the input is a chat conversation; pass plain text or chat=None")
            text, special = render_messages(x, tokenizer), False
        ids, unk = encode_text(text, tokenizer, special)
        rows.append(ids)
        unknown += unk
    return rows, unknown


def to_batch(inputs: Any, tokenizer, *, add_special_tokens: bool = True, chat: bool | None = False) -> Batch:
    """Strings, lists of strings, chat conversations (lists of message dicts), token-id lists, tensors, dicts or
    Batches -> a left-padded Batch. `chat` as in `prompt_mode` (False here: plain tokenization; `LabModel.tokenize`
    passes its own default, None)."""
    batch, _ = to_batch_checked(inputs, tokenizer, add_special_tokens=add_special_tokens, chat=chat)
    return batch


def to_batch_checked(inputs: Any, tokenizer, *, add_special_tokens: bool = True,
                     chat: bool | None = False) -> tuple[Batch, list[str]]:
    """`to_batch` plus the text pieces that became the unknown token."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    if is_messages(inputs):
        inputs = [inputs]
    if isinstance(inputs, Batch):
        return inputs, []
    if isinstance(inputs, dict) or hasattr(inputs, "keys") and "input_ids" in inputs:
        ids = torch.as_tensor(inputs["input_ids"])
        mask = inputs.get("attention_mask") if hasattr(inputs, "get") else None
        return _repad(_from_tensor(ids, None if mask is None else torch.as_tensor(mask), pad_id), pad_id), []
    if isinstance(inputs, torch.Tensor):
        return _from_tensor(inputs, None, pad_id), []
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, (list, tuple)) or len(inputs) == 0:
        raise InputError(f"empty or unsupported input {type(inputs).__name__}: pass a string, a list of strings, "
                         "a chat (list of {'role', 'content'} dicts), a list of chats, a list of token-id lists, "
                         "a [batch, seq] tensor or a dict with input_ids")
    if all(isinstance(x, str) or is_messages(x) for x in inputs):
        rows, unknown = encode_prompts(list(inputs), tokenizer, chat=chat, add_special_tokens=add_special_tokens)
        return left_pad(rows, pad_id), unknown
    if all(isinstance(x, (list, tuple)) for x in inputs):
        return left_pad([[int(t) for t in r] for r in inputs], pad_id), []
    if all(isinstance(x, int) for x in inputs):
        return left_pad([[int(t) for t in inputs]], pad_id), []
    raise InputError("mixed input types: pass all strings/chats or all token-id lists")


def _repad(b: Batch, pad_id: int) -> Batch:
    ids = b.input_ids.clone()
    ids[b.attention_mask == 0] = pad_id
    return Batch(ids, b.attention_mask, b.position_ids, b.lengths)
