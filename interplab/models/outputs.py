"""What runs return: captured activations with last-real-token helpers, and generation outputs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Mapping

import torch

from interplab.core.errors import SiteError
from interplab.core.sites import has_key_axis
from interplab.models.inputs import Batch


class Cache(Mapping[str, torch.Tensor]):
    """Captured activations of one forward, keyed by canonical site name, plus the batch they came from."""

    def __init__(self, tensors: dict[str, torch.Tensor], batch: Batch):
        self._t = tensors
        self.batch = batch

    def __getitem__(self, site: str) -> torch.Tensor:
        try:
            return self._t[site]
        except KeyError:
            raise SiteError(f"site {site!r} was not captured; captured sites: {sorted(self._t)}. "
                            "Pass it in capture=[...]") from None

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
        x = self[site]
        if has_key_axis(site):
            return x[:, :, -1]
        return x[:, -1]  # left padding: the last column is every row's last real token

    def at(self, site: str, positions) -> torch.Tensor:
        """Gather per-row absolute positions: positions [b] -> [b, ...]."""
        x = self[site]
        pos = torch.as_tensor(positions, device=x.device).long()
        width = self.batch.input_ids.shape[1]
        cols = width - self.batch.lengths.to(x.device) + pos
        if has_key_axis(site):
            return x[torch.arange(x.shape[0]), :, cols]
        return x[torch.arange(x.shape[0]), cols]

    def by_position(self, site: str) -> torch.Tensor:
        """Re-index a left-padded capture by absolute position: [b, max_len, ...], zero beyond each row's length."""
        x = self[site]
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
        x = self[site]
        return x[self.batch.attention_mask.bool().to(x.device)]


@dataclass
class RunOutput:
    logits: torch.Tensor | None
    cache: Cache
    batch: Batch


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

    def decode_states(self, site: str) -> torch.Tensor:
        """States of `site` at every decode step of rows still generating, flattened: [n_active_steps, ...]."""
        try:
            x = self.decode_cache[site]
        except KeyError:
            raise SiteError(f"site {site!r} was not captured during decoding; captured: {sorted(self.decode_cache)}")
        return x[self.decode_active.to(x.device)]
