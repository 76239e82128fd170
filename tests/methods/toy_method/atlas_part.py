"""The toy method in the atlas: its per-layer norm as a layer map."""
from interplab.probes.atlas_contract import AtlasPart


def _compute(model, data, ctx):
    from tests.methods.toy_method.api import layer_norms

    return {"toy_norm": ctx.step("toy_method", lambda: layer_norms(model))}


PART = AtlasPart(method="toy_method", compute=_compute, layer_maps={"toy_norm": "mean residual norm"})
