"""DecodeShare in the atlas (`interplab.probes.atlas_contract`): the decode-shared subspace (decodeshare.md
Algorithm 1) at resid_post.L from multitask decode prompts (a model whose vocabulary has no toy words, a real model,
reads the built-in chat tasks of `decodeshare --set data=real-tasks` instead; or a decodeshare validation organism's
tasks, or the user's file), and its largest principal angle to the organism's planted P. Found through `interplab.methods`."""
from __future__ import annotations

import numpy as np

from interplab.probes.atlas_contract import AtlasPart

__all__ = ["PART"]


def _inputs(model, ctx) -> dict:
    if ctx.planted is not None and ctx.planted[0] == "decodeshare":
        from interplab.zoo.validation.decodeshare import task_prompts

        tasks = task_prompts()
        return {"decode_prompts": {t: [r["prompt"] for r in rows] for t, rows in tasks.items()},
                "decode_max_new_tokens": 6}
    from interplab.data.toy_vocab import speaks_toy_vocab

    if not speaks_toy_vocab(model.tokenizer):
        from interplab.data.decode_tasks import DEFAULT_REAL_TASKS
        from interplab.probes.decodeshare.tasks import real_task_sets

        calib, _ = real_task_sets(model, DEFAULT_REAL_TASKS, n_calib=ctx.n_decode, n_eval=0, seed=ctx.seed)
        return {"decode_prompts": {name: s.prompts for name, s in calib.items()}, "decode_max_new_tokens": 12}
    from interplab.zoo.cards import model_format
    from interplab.probes.decodeshare import SEQ_TASKS, multitask_sets

    sets = multitask_sets(model, list(SEQ_TASKS), ctx.n_decode, seed=ctx.seed, fmt=model_format(model))
    return {"decode_prompts": {name: s.prompts for name, s in sets.items()} if sets else None}


def _user_data(model, path: str, ctx) -> dict:
    from interplab.data.user import user_records
    from interplab.probes.decodeshare.tasks import user_task_sets

    calib, _ = user_task_sets(model, list(user_records("decodeshare", path)), seed=ctx.seed)
    return {"decode_prompts": {name: s.prompts[:ctx.n_decode] for name, s in calib.items()}}


def _planted_setup(data: dict, t: dict) -> dict:
    return {"pair": ("T0 x1", "T1 x1"), "texts": [p for ps in data["decode_prompts"].values() for p in ps],
            "direction_layer": 0}


def _compute(model, data: dict, ctx) -> dict:
    def run():
        from interplab.core.errors import InputError
        from interplab.probes.decodeshare import collect_decode_states, shared_subspace

        dec = collect_decode_states(model, data["decode_prompts"], layer=ctx.layer,
                                    max_new_tokens=data["decode_max_new_tokens"], seed=ctx.seed)
        ss = shared_subspace(dec, seed=ctx.seed)
        if not ss.basis.shape[1]:
            raise InputError("the estimator found no component shared by every task at this layer")
        return {"decodeshare": ss.basis}

    return ctx.step("decodeshare", run) or {}


def _planted(truth: dict, strengths: dict, dirs: dict) -> list[dict]:
    from interplab.probes.decodeshare import principal_angles

    if "decodeshare" not in dirs:
        return [{"check": "decode-shared subspace estimated", "method": "decodeshare", "value": float("nan"),
                 "target": "a basis", "passed": False}]
    P = np.zeros((dirs["decodeshare"].shape[0], len(truth["planted_dims"])))
    for j, d in enumerate(truth["planted_dims"]):
        P[d, j] = 1.0
    ang = float(principal_angles(dirs["decodeshare"], P).max())
    return [{"check": "largest principal angle to planted P (deg)", "method": "decodeshare", "value": ang,
             "target": "<= 15", "passed": ang <= 15.0}]


PART = AtlasPart(
    method="decodeshare",
    compute=_compute,
    directions=("decodeshare",),
    fields={"decode_prompts": None, "decode_max_new_tokens": 8},
    inputs=_inputs,
    user_setting="decode_data",
    user_data=_user_data,
    absent="this validation organism has no decode tasks",
    planted_kinds={"decodeshare": "decodeshare"},
    planted_setup=_planted_setup,
    planted=_planted,
)
