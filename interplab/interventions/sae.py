"""SAE edits, with where an SAE reads: splice the reconstruction in (evaluation) and steer with a decoder direction
(FAST SAE paper §6, App. F); interplab site <-> SAELens hook-name mapping, an SAE's site from its metadata, and
loading an SAE from a directory or passing an SAE object through. Defined here with every other edit; the SAE
method (`interplab.sae`) re-exports them.

Steering is additive, not clamping: x' = x + alpha * W_dec[k] at the SAE's site. Because SAE decoding is linear,
this equals adding alpha on feature k at the SAE's post-activation with the error term kept (tested). Positions:
"all" (prompt and generated tokens), "template" (prompt positions holding chat-template tokens), "generated"
(generated tokens only)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import torch

from interplab.core.edit import PHASES, Edit
from interplab.core.errors import ConfigError, InputError, ShapeError

__all__ = ["SAESplice", "SAESteer", "site_to_hook_name", "hook_name_to_site", "sae_site", "load_sae",
           "sae_exclude_massive"]

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


def load_sae(sae_or_path: Any, device: str = "cpu"):
    """An SAE object passes through; a directory loads with `sae_lens.SAE.load_from_disk`."""
    if isinstance(sae_or_path, (str, Path)):
        from sae_lens import SAE

        p = Path(sae_or_path)
        if not (p / "cfg.json").exists():
            raise InputError(f"{p} is not an SAELens directory (no cfg.json); train one with interplab.sae.train_sae")
        return SAE.load_from_disk(str(p), device=device)
    return sae_or_path


def sae_exclude_massive(sae: Any) -> float:
    """The massive-position factor an SAE was trained with (its metadata's `exclude_massive`; 0 = none, also for SAEs
    trained elsewhere): those positions were never in its training data, so evaluation and splicing leave them out."""
    md = sae.cfg.metadata
    v = md.get("exclude_massive") if hasattr(md, "get") else getattr(md, "exclude_massive", None)
    return float(v or 0.0)


class SAESplice(Edit):
    """Replace the site activation by the SAE reconstruction decode(encode(x)) at every real
    position, except the massive positions of an SAE trained without them (`exclude_massive`,
    default from the SAE's metadata): there the activation is kept, as an SAE trained without a
    model's attention sink cannot reconstruct it.

    keep_clean: optional [b, T] bool, one row per batch row, indexed by absolute position (0 = the
    row's first real token): True keeps the clean activation there too. SAELens's `run_evals`
    splices only at tokens that are not special tokens; `interplab.sae.conventions` passes those
    tokens here to reproduce it."""

    def __init__(self, sae: Any, site: str | None = None, phases: Sequence[str] = PHASES,
                 exclude_massive: float | None = None, keep_clean: torch.Tensor | None = None):
        self.sae = load_sae(sae)
        self.sites = (sae_site(self.sae, site),)
        self.phases = tuple(phases)
        self._validate_phases()
        self.exclude_massive = sae_exclude_massive(self.sae) if exclude_massive is None else float(exclude_massive)
        if keep_clean is not None and (keep_clean.ndim != 2 or keep_clean.dtype != torch.bool):
            raise ShapeError(f"keep_clean must be a [batch, positions] bool tensor, got "
                             f"{keep_clean.dtype} {tuple(keep_clean.shape)}")
        self.keep_clean = keep_clean

    def _kept(self, ctx, shape) -> torch.Tensor | None:
        """[b, p] True where `keep_clean` keeps the clean activation (absolute positions)."""
        if self.keep_clean is None:
            return None
        if ctx is None or len(shape) != 3 or self.keep_clean.shape[0] != shape[0]:
            raise ShapeError(f"keep_clean has {self.keep_clean.shape[0]} rows; the activation is "
                             f"{tuple(shape)} (keep_clean needs a [batch, positions, d] site and "
                             "one row per batch row)")
        km = self.keep_clean.to(ctx.positions.device)
        pos = ctx.positions.clamp(min=0)
        inside = pos < km.shape[1]
        return torch.gather(km, 1, pos.clamp(max=km.shape[1] - 1)) & inside

    def apply(self, site, x, ctx):
        if x.shape[-1] != self.sae.cfg.d_in:
            raise ShapeError(f"SAE d_in {self.sae.cfg.d_in} does not match {site} width {x.shape[-1]}")
        dev = self.sae.W_dec.device
        with torch.no_grad():
            xh = self.sae.decode(self.sae.encode(x.to(dev, self.sae.W_dec.dtype))).to(device=x.device, dtype=x.dtype)
            if self.exclude_massive and x.ndim >= 2:
                from interplab.core.scale import massive_mask

                real = ctx.real if ctx is not None and getattr(ctx, "real", None) is not None else None
                if real is not None and real.shape != x.shape[:-1]:
                    real = None
                keep = massive_mask(x, self.exclude_massive, real=real)
                xh = torch.where(keep[..., None], x, xh)
            kept = self._kept(ctx, x.shape)
            if kept is not None:
                xh = torch.where(kept.to(x.device)[..., None], x, xh)
        return xh

    def __repr__(self):
        extra = f", exclude_massive={self.exclude_massive:g}" if self.exclude_massive else ""
        return (f"SAESplice(site={self.sites[0]!r}, d_sae={self.sae.cfg.d_sae}, "
                f"arch={self.sae.cfg.architecture()!r}{extra})")


class SAESteer(Edit):
    """x <- x + alpha * W_dec[feature] at the SAE's site.

    positions: "all" | "generated" | "template". "template" needs `prompt_ids` (the token ids of each batch row's
    prompt, in batch order) and `template_ids`; it edits prompt positions whose token is a template token (tokens
    generated later are not inspected). alpha = 0 is skipped entirely (bit-identical to no edit)."""

    def __init__(self, sae: Any, feature: int, alpha: float, *, site: str | None = None, positions: str = "all",
                 prompt_ids: Sequence[Sequence[int]] | None = None, template_ids: Sequence[int] | None = None,
                 normalize: bool = False):
        self.sae = load_sae(sae)
        d_sae = int(self.sae.cfg.d_sae)
        if not 0 <= int(feature) < d_sae:
            raise InputError(f"feature {feature} out of range for an SAE with {d_sae} features")
        self.feature, self.alpha, self.mode = int(feature), float(alpha), positions
        v = self.sae.W_dec[self.feature].detach().float().cpu()
        self.vector = v / v.norm().clamp_min(1e-12) if normalize else v
        self.sites = (sae_site(self.sae, site),)
        if positions == "all":
            self.positions = "all"
        elif positions == "generated":
            self.positions = "decode"
        elif positions == "template":
            if prompt_ids is None or template_ids is None:
                raise InputError("positions='template' needs prompt_ids and template_ids")
            self._tmask = _template_masks(prompt_ids, template_ids)
            self.positions = self._template_positions
        else:
            raise ConfigError(f"positions must be 'all', 'template' or 'generated', got {positions!r}")

    def _template_positions(self, ctx) -> torch.Tensor:
        tm = self._tmask.to(ctx.positions.device)
        if tm.shape[0] != ctx.positions.shape[0]:
            raise ShapeError(f"prompt_ids has {tm.shape[0]} rows, the batch has {ctx.positions.shape[0]}")
        pos = ctx.positions.clamp(min=0)
        inside = pos < tm.shape[1]
        vals = torch.gather(tm, 1, pos.clamp(max=tm.shape[1] - 1))
        return vals & inside & (ctx.positions < ctx.prompt_lengths[:, None]) & (ctx.positions >= 0)

    def is_noop(self) -> bool:
        return self.alpha == 0.0

    def apply(self, site, x, ctx):
        if x.shape[-1] != self.vector.shape[0]:
            raise ShapeError(f"W_dec row width {self.vector.shape[0]} does not match {site} width {x.shape[-1]}")
        return x + self.alpha * self.vector.to(device=x.device, dtype=x.dtype)

    def __repr__(self):
        return (f"SAESteer(site={self.sites[0]!r}, feature={self.feature}, alpha={self.alpha}, "
                f"positions={self.mode!r})")


def _template_masks(prompt_ids: Sequence[Sequence[int]], template_ids: Sequence[int]) -> torch.Tensor:
    T = max(len(p) for p in prompt_ids)
    m = torch.zeros(len(prompt_ids), T, dtype=torch.bool)
    tset = torch.tensor(sorted(set(int(t) for t in template_ids)) or [-1])
    for i, p in enumerate(prompt_ids):
        if len(p):
            m[i, :len(p)] = torch.isin(torch.tensor(list(p)), tset)
    return m
