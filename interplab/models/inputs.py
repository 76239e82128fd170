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


def to_batch(inputs: Any, tokenizer, *, add_special_tokens: bool = True) -> Batch:
    """Strings, lists of strings, token-id lists, tensors, dicts or Batches -> a left-padded Batch."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    if isinstance(inputs, Batch):
        return inputs
    if isinstance(inputs, dict) or hasattr(inputs, "keys") and "input_ids" in inputs:
        ids = torch.as_tensor(inputs["input_ids"])
        mask = inputs.get("attention_mask") if hasattr(inputs, "get") else None
        return _repad(_from_tensor(ids, None if mask is None else torch.as_tensor(mask), pad_id), pad_id)
    if isinstance(inputs, torch.Tensor):
        return _from_tensor(inputs, None, pad_id)
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, (list, tuple)) or len(inputs) == 0:
        raise InputError(f"empty or unsupported input {type(inputs).__name__}: pass a string, a list of strings, "
                         "a list of token-id lists, a [batch, seq] tensor or a dict with input_ids")
    if all(isinstance(x, str) for x in inputs):
        for i, s in enumerate(inputs):
            if not s.strip():
                raise InputError(f"prompt {i} is an empty string; pass non-empty text")
        enc = tokenizer(list(inputs), add_special_tokens=add_special_tokens)["input_ids"]
        return left_pad([list(r) for r in enc], pad_id)
    if all(isinstance(x, (list, tuple)) for x in inputs):
        return left_pad([[int(t) for t in r] for r in inputs], pad_id)
    if all(isinstance(x, int) for x in inputs):
        return left_pad([[int(t) for t in inputs]], pad_id)
    raise InputError("mixed input types: pass all strings or all token-id lists")


def _repad(b: Batch, pad_id: int) -> Batch:
    ids = b.input_ids.clone()
    ids[b.attention_mask == 0] = pad_id
    return Batch(ids, b.attention_mask, b.position_ids, b.lengths)
