"""What runs return: captured activations with last-real-token helpers, and generation outputs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import torch

from interplab.core.errors import InputError, SiteError
from interplab.core.sites import has_key_axis
from interplab.models.inputs import Batch


def _query_axis(site: str) -> int:
    """The axis of a capture that indexes token positions (query positions for [b, h, q, k] attention maps)."""
    return 2 if has_key_axis(site) else 1


class Cache(Mapping[str, torch.Tensor]):
    """Captured activations of one forward, keyed by canonical site name, plus the batch they came from.

    Padding first: batches are left-padded, and `cache[site]` holds 0 at every padding position (for attention
    maps, padding query rows): what a model computes there is meaningless and can be huge (a norm of 26,000 on
    SmolLM2), so it never enters a sum, norm or max by accident. A plain `.mean(1)` still counts the zeros: use
    `mean(site)` (over real tokens), `last`, `at`, `by_position` or `real_tokens`. `raw(site)` is the tensor as the
    forward produced it."""

    def __init__(self, tensors: dict[str, torch.Tensor], batch: Batch):
        self._t = tensors
        self.batch = batch
        self._masked: dict[str, torch.Tensor] = {}

    def raw(self, site: str) -> torch.Tensor:
        """The capture as computed, padding positions included (they are not meaningful)."""
        try:
            return self._t[site]
        except KeyError:
            raise SiteError(f"site {site!r} was not captured; captured sites: {sorted(self._t)}. "
                            "Pass it in capture=[...]") from None

    def __getitem__(self, site: str) -> torch.Tensor:
        x = self.raw(site)
        real = self.batch.attention_mask.bool()
        if bool(real.all()) or not x.is_floating_point():
            return x
        axis = _query_axis(site)
        if x.ndim <= axis or tuple(x.shape[i] for i in (0, axis)) != tuple(real.shape):
            return x          # a module site of another layout: no position axis to mask
        if site not in self._masked:
            shape = [1] * x.ndim
            shape[0], shape[axis] = real.shape
            keep = real.to(x.device).reshape(shape)
            self._masked[site] = torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))
        return self._masked[site]

    @property
    def real_mask(self) -> torch.Tensor:
        """[b, p] bool: True at real tokens, False at left padding."""
        return self.batch.attention_mask.bool()

    def real_positions(self, skip_first: int = 0) -> torch.Tensor:
        """[b, p] bool: each row's real tokens from its `skip_first`-th on (skip_first=1 leaves out the first
        token, where real models park a huge attention-sink activation)."""
        real = self.real_mask
        if skip_first:
            idx = torch.cumsum(real.long(), 1) - 1            # real-token index of each column
            real = real & (idx >= skip_first)
        return real

    def mean(self, site: str, skip_first: int = 0) -> torch.Tensor:
        """The mean over each row's real tokens (from its `skip_first`-th): [b, ...] (not for attention maps)."""
        if _query_axis(site) != 1:
            raise SiteError(f"mean({site!r}): average an attention map's rows yourself (query x key)")
        x = self[site]
        m = self.real_positions(skip_first).to(x.device)
        if bool((m.sum(1) == 0).any()):
            raise InputError(f"mean({site!r}, skip_first={skip_first}): some row has no token left to average")
        m = m.reshape(*m.shape, *([1] * (x.ndim - 2)))
        return torch.where(m, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum(1) / m.sum(1).to(x.dtype)

    def __iter__(self) -> Iterator[str]:
        return iter(self._t)

    def __len__(self) -> int:
        return len(self._t)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}: {tuple(v.shape)}" for k, v in self._t.items())
        return f"Cache({inner})"

    def last(self, site: str) -> torch.Tensor:
        """The activation at each row's last real token: [b, ...] (for attn_pattern / attn_scores, the last query
        row [b, h, k])."""
        x = self.raw(site)
        if has_key_axis(site):
            return x[:, :, -1]
        return x[:, -1]  # left padding: the last column is every row's last real token

    def at(self, site: str, positions) -> torch.Tensor:
        """Gather per-row absolute positions: positions [b] -> [b, ...]."""
        x = self.raw(site)
        pos = torch.as_tensor(positions, device=x.device).long()
        width = self.batch.input_ids.shape[1]
        cols = width - self.batch.lengths.to(x.device) + pos
        if has_key_axis(site):
            return x[torch.arange(x.shape[0]), :, cols]
        return x[torch.arange(x.shape[0]), cols]

    def by_position(self, site: str) -> torch.Tensor:
        """Re-index a left-padded capture by absolute position: [b, max_len, ...], zero beyond each row's length."""
        x = self.raw(site)
        if has_key_axis(site):
            raise SiteError(f"by_position is not defined for {site} (its key axis is padded too)")
        lengths = self.batch.lengths.to(x.device)
        width = x.shape[1]
        max_len = int(lengths.max())
        pos = torch.arange(max_len, device=x.device)
        cols = (width - lengths[:, None] + pos[None]).clamp(max=width - 1)
        out = torch.gather(x, 1, cols.reshape(*cols.shape, *([1] * (x.ndim - 2))).expand(*cols.shape, *x.shape[2:]))
        valid = (pos[None] < lengths[:, None]).reshape(*cols.shape, *([1] * (x.ndim - 2)))
        return torch.where(valid, out, torch.zeros((), dtype=x.dtype, device=x.device))

    def real_tokens(self, site: str) -> torch.Tensor:
        """All real (non-padding) token activations flattened: [n_real, ...]."""
        x = self.raw(site)
        return x[self.batch.attention_mask.bool().to(x.device)]


def _rendered(batch: Batch, tokenizer) -> list[str]:
    if tokenizer is None:
        raise InputError("this output was built without its tokenizer; decode out.batch.row_tokens(i) yourself")
    return [tokenizer.decode(batch.row_tokens(i)) for i in range(batch.shape[0])]


@dataclass
class RunOutput:
    logits: torch.Tensor | None
    cache: Cache
    batch: Batch
    tokenizer: Any = field(default=None, repr=False, compare=False)

    @property
    def prompts(self) -> list[str]:
        """What each row's tokens decode to: the prompt as the model read it (chat template included)."""
        return _rendered(self.batch, self.tokenizer)


@dataclass
class GenerateOutput:
    tokens: torch.Tensor  # [b, T + n] left-padded prompt followed by generated ids (pad after EOS)
    new_tokens: list[list[int]]
    text: list[str]
    batch: Batch  # the prompt batch
    prefill_cache: Cache
    decode_cache: dict[str, torch.Tensor] = field(default_factory=dict)  # site -> [b, n_steps, ...]
    decode_active: torch.Tensor | None = None  # [b, n_steps] bool
    step_logits: torch.Tensor | None = None  # [b, n_new, V]
    tokenizer: Any = field(default=None, repr=False, compare=False)

    @property
    def prompts(self) -> list[str]:
        """What each prompt row decodes to: the prompt as the model read it (chat template included)."""
        return _rendered(self.batch, self.tokenizer)

    def decode_states(self, site: str) -> torch.Tensor:
        """States of `site` at every decode step of rows still generating, flattened: [n_active_steps, ...]."""
        try:
            x = self.decode_cache[site]
        except KeyError:
            raise SiteError(f"site {site!r} was not captured during decoding; captured: {sorted(self.decode_cache)}")
        return x[self.decode_active.to(x.device)]
