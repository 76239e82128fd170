"""Canonical activation site names: one name per activation, the same for every backend.

`resid_pre.L, resid_post.L, attn_z.L, attn_pattern.L, attn_out.L, mlp_out.L, final_norm, logits`.
Backends translate a `Site` into their own hook points (TransformerLens hook names, nnsight module paths)."""
from __future__ import annotations

from dataclasses import dataclass

from interplab.core.errors import SiteError

LAYER_KINDS = ("resid_pre", "attn_z", "attn_pattern", "attn_out", "mlp_out", "resid_post")
GLOBAL_KINDS = ("final_norm", "logits")
SITE_KINDS = LAYER_KINDS + GLOBAL_KINDS

# Where each kind fires inside a block, in execution order; used to stop a forward early and to order nnsight
# accesses (nnsight requires module accesses in execution order).
_ORDER_IN_BLOCK = {k: i for i, k in enumerate(LAYER_KINDS)}


@dataclass(frozen=True, order=False)
class Site:
    kind: str
    layer: int | None = None

    @property
    def name(self) -> str:
        return self.kind if self.layer is None else f"{self.kind}.{self.layer}"

    def order_key(self, n_layers: int) -> tuple[int, int]:
        """Execution order: all of block L before block L+1; final_norm then logits after the last block."""
        if self.layer is None:
            return (n_layers, GLOBAL_KINDS.index(self.kind))
        return (self.layer, _ORDER_IN_BLOCK[self.kind])

    def __str__(self) -> str:
        return self.name


def valid_sites(n_layers: int) -> list[str]:
    """Every valid site name for a model with `n_layers` blocks."""
    return [f"{k}.{layer}" for layer in range(n_layers) for k in LAYER_KINDS] + list(GLOBAL_KINDS)


def _describe(n_layers: int) -> str:
    return (f"valid sites are {', '.join(k + '.L' for k in LAYER_KINDS)} with L in 0..{n_layers - 1}, "
            f"and {', '.join(GLOBAL_KINDS)}")


def parse_site(name: "str | Site", n_layers: int) -> Site:
    """Parse and validate a site name against a model with `n_layers` blocks; `SiteError` says what is valid."""
    if isinstance(name, Site):
        name = name.name
    if not isinstance(name, str):
        raise SiteError(f"site must be a string like 'resid_post.3', got {type(name).__name__} {name!r}; "
                        + _describe(n_layers))
    if name in GLOBAL_KINDS:
        return Site(name)
    kind, dot, layer_s = name.rpartition(".")
    if not dot or kind not in LAYER_KINDS:
        hint = ""
        if name in LAYER_KINDS:
            hint = f" ('{name}' needs a layer index, e.g. '{name}.0')"
        elif name.startswith(("blocks.", "model.", "transformer.")):
            hint = " (this looks like a backend hook name; interplab uses canonical site names)"
        raise SiteError(f"unknown site {name!r}{hint}; " + _describe(n_layers))
    try:
        layer = int(layer_s)
    except ValueError:
        raise SiteError(f"site {name!r} has a non-integer layer {layer_s!r}; " + _describe(n_layers)) from None
    if layer < 0:
        layer += n_layers  # python-style negative layers: resid_post.-1 is the last block
    if not 0 <= layer < n_layers:
        raise SiteError(f"site {name!r}: layer {layer_s} is out of range for a model with {n_layers} layers; "
                        + _describe(n_layers))
    return Site(kind, layer)


def parse_sites(names, n_layers: int) -> list[Site]:
    if isinstance(names, (str, Site)):
        names = [names]
    out: list[Site] = []
    for n in names:
        s = parse_site(n, n_layers)
        if s not in out:
            out.append(s)
    return out
