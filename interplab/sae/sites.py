"""Where an SAE reads: interplab site <-> SAELens hook-name mapping, an SAE's site from its metadata, and loading an
SAE from a directory or passing an SAE object through."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from interplab.core.errors import ConfigError, InputError

__all__ = ["site_to_hook_name", "hook_name_to_site", "sae_site", "load_sae"]

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
