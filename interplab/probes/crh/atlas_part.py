"""CRH in the atlas (`interplab.probes.atlas_contract`): the concept axis and normal plane of the fitted cylinder
(crh.md §2.3) at resid_post.L from toy concept pairs (or a CRH validation organism's pairs, or the user's file), and
their angles to the organism's planted axis and plane. Found through `interplab.methods`."""
from __future__ import annotations

import numpy as np

from interplab.probes.atlas_contract import AtlasPart

__all__ = ["PART"]


def _inputs(model, ctx) -> dict:
    from interplab.core.errors import ConfigError

    if ctx.planted is not None and ctx.planted[0] == "crh":
        from interplab.zoo.validation.crh import planted_crh_pairs

        spec = ctx.planted[1]["spec"]
        pairs, _ = planted_crh_pairs(int(spec["n_samples"]), seed=int(spec["seed"]))
        return {"concept_pairs": pairs}
    if not ctx.concept:
        raise ConfigError("no concept chosen")
    from interplab.probes.crh import model_format, toy_concept_data

    data = toy_concept_data(model, ctx.concept, n_train=ctx.n_pairs, seed=ctx.seed, fmt=model_format(model))
    return {"concept_pairs": data.train_pairs}


def _user_data(model, path: str, ctx) -> dict:
    """The user's pair file; of its concepts `ctx.concept`, else the first (the default concept is a toy one)."""
    from interplab.data.user import user_records
    from interplab.probes.crh.real_data import user_concept_data

    data = user_concept_data(user_records("crh", path), seed=ctx.seed, max_train=ctx.n_pairs, model=model)
    chosen = [d for d in data if d.name == ctx.concept] or data[:1]
    return {"concept_pairs": chosen[0].train_pairs}


def _planted_setup(data: dict, t: dict) -> dict:
    pairs = data["concept_pairs"]
    return {"pair": (pairs[0][1], pairs[0][0]),          # with the concept (clean) vs without
            "texts": [p for pr in pairs for p in pr],
            "direction_layer": int(str(t.get("site", "resid_post.0")).split(".")[1])}


def _compute(model, data: dict, ctx) -> dict:
    def run():
        from interplab.probes.crh import concept_diffs, fit_cylinder

        cyl = fit_cylinder(concept_diffs(model, data["concept_pairs"], layer=ctx.layer), seed=ctx.seed)
        return {"crh_axis": cyl.axis[:, None], "crh_plane": cyl.plane}

    return ctx.step("crh", run) or {}


def _planted(truth: dict, strengths: dict, dirs: dict) -> list[dict]:
    from interplab.probes.linalg import principal_angles

    if "crh_axis" not in dirs:
        return [{"check": "CRH cylinder fitted", "method": "crh", "value": float("nan"), "target": "an axis",
                 "passed": False}]
    cos = float(dirs["crh_axis"][:, 0] @ truth["axis"])
    ax = float(np.degrees(np.arccos(np.clip(cos, -1, 1))))
    pl = float(principal_angles(dirs["crh_plane"], np.stack([truth["e1"], truth["e2"]], 1)).max())
    return [{"check": "angle axis to planted axis (deg)", "method": "crh", "value": ax, "target": "<= 10",
             "passed": ax <= 10.0},
            {"check": "largest principal angle plane to planted plane (deg)", "method": "crh", "value": pl,
             "target": "<= 15", "passed": pl <= 15.0}]


PART = AtlasPart(
    method="crh",
    compute=_compute,
    directions=("crh_axis", "crh_plane"),    # orthogonal by construction: the atlas does not compare them
    fields={"concept_pairs": None},
    inputs=_inputs,
    user_setting="crh_data",
    user_data=_user_data,
    absent="this validation organism has no concept pairs",
    planted_kinds={"crh": "crh"},
    planted_arrays=("axis", "e1", "e2"),
    planted_setup=_planted_setup,
    planted=_planted,
)
