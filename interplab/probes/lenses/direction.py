"""A dashboard for any direction: given a vector at a residual site (an SAE decoder row, a probe weight, a subspace
basis vector, a CRH axis, a steering vector, a user array), its top-activating contexts, activation histogram,
direct logit effects through the unembedding, cosine neighbours among other named directions, and a steering
preview.

    >>> from interplab.probes.lenses import direction_dashboard
    >>> dash = direction_dashboard(model, v, "resid_post.2", prompts, others={"probe": w})
    >>> dash.top_contexts, dash.logit_effects, dash.neighbours
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from interplab.core.errors import InputError, ShapeError
from interplab.core.result import Result
from interplab.interventions import Steer
from interplab.probes.lenses.common import token_strings

RESID_KINDS = ("resid_pre", "resid_post", "attn_out", "mlp_out")


@dataclass
class DirectionDashboard(Result):
    """Everything the direction page shows, for one unit direction at `site`.

    activations: [n_tokens] projection x . v_hat of every real token of the prompts (the histogram's data).
    top_contexts: the top-k tokens by projection with their prompt, position and a context window.
    logit_effects: the tokens most promoted / suppressed by v_hat read directly through the unembedding
        (v_hat @ W_U, no final norm: the direction's direct effect per unit of norm).
    neighbours: cosine similarity with each other named direction (same d_model), largest |cos| first.
    steering: scale -> greedy continuation of `steer_prompt` with scale * steer_unit * v_hat added at `site`
        (scale 0 = none).
    steer_unit: the norm one steering scale stands for: 1 (absolute scales) or the typical norm of the site's
        activations over the prompts (`interplab.core.scale`, sink positions left out), so "scale 1" adds as much
        as an ordinary token's whole residual stream carries.
    """

    site: str
    norm: float
    activations: np.ndarray
    top_contexts: "pd.DataFrame"  # noqa: F821
    logit_effects: "pd.DataFrame"  # noqa: F821
    neighbours: "pd.DataFrame"  # noqa: F821
    steering: dict = field(default_factory=dict)
    model: str = ""
    steer_unit: float = 1.0

    def __post_init__(self):
        self.activations = np.asarray(self.activations, np.float64).reshape(-1)

    def to_frame(self):
        return self.top_contexts


def direction_dashboard(model, vector, site: str, prompts: Sequence[str], *, others: dict | None = None,
                        top_k: int = 20, n_logits: int = 10, steer_prompt: str | None = None,
                        steer_scales: Sequence[float] = (0.0, 4.0, 8.0), max_new_tokens: int = 8,
                        window: int = 6, edits=None, relative_scales: bool = False) -> DirectionDashboard:
    """Build the dashboard of `vector` ([d_model]) at residual-stream site `site` over `prompts`.
    relative_scales: the steering scales are multiples of the site's typical activation norm over `prompts`
    (a real model's residual stream is tens to hundreds of units long, so an absolute 8 moves nothing)."""
    import pandas as pd

    s = model.site(site)
    if s.kind not in RESID_KINDS:
        raise InputError(f"a direction lives in a d_model-sized site ({', '.join(RESID_KINDS)}), got {site!r}")
    v = torch.as_tensor(np.asarray(vector), dtype=torch.float64).reshape(-1)
    if v.numel() != model.d_model:
        raise ShapeError(f"the direction has {v.numel()} entries; {model.name} has d_model = {model.d_model}")
    norm = float(v.norm())
    if norm == 0:
        raise InputError("the direction is all zeros")
    u = v / norm
    out = model.run(list(prompts), capture=[site], edits=list(edits or []), logits=False)
    x = out.cache[site].double().cpu()  # [b, p, d]
    proj = x @ u  # [b, p]
    real = out.batch.attention_mask.bool().cpu()
    rows = []
    ids = out.batch.input_ids.cpu()
    for b in range(x.shape[0]):
        toks = token_strings(model, ids[b][real[b]].tolist())
        vals = proj[b][real[b]].tolist()
        for p, (t, a) in enumerate(zip(toks, vals)):
            rows.append(dict(prompt=b, position=p, token=t, activation=a,
                             context="".join(toks[max(0, p - window):p]) + f" [[{t}]]"))
    frame = pd.DataFrame(rows)
    top = frame.sort_values("activation", ascending=False).head(top_k).reset_index(drop=True)
    W_U, _ = model.unembedding()
    eff = (u @ W_U).numpy()
    order = np.argsort(-eff)
    pick = np.r_[order[:n_logits], order[::-1][:n_logits]]
    logit_effects = pd.DataFrame({"token": token_strings(model, pick.tolist()), "token_id": pick,
                                  "effect": eff[pick], "kind": ["promoted"] * n_logits + ["suppressed"] * n_logits})
    neigh = []
    for name, w in (others or {}).items():
        w = torch.as_tensor(np.asarray(w), dtype=torch.float64).reshape(-1)
        if w.numel() != model.d_model or float(w.norm()) == 0:
            raise ShapeError(f"direction {name!r} must be a non-zero [{model.d_model}] vector, got {w.numel()} entries")
        neigh.append(dict(name=name, cosine=float(u @ (w / w.norm()))))
    neighbours = pd.DataFrame(neigh, columns=["name", "cosine"])
    if len(neighbours):
        order = neighbours.cosine.abs().sort_values(ascending=False).index
        neighbours = neighbours.reindex(order).reset_index(drop=True)
    steering = {}
    unit = 1.0
    if relative_scales:
        from interplab.core.scale import activation_scale

        unit = activation_scale(x[real]).typical
    if steer_prompt:
        for sc in steer_scales:
            e = Steer(site, u.to(model.dtype), scale=float(sc) * unit)
            steering[str(float(sc))] = model.generate([steer_prompt], max_new_tokens=max_new_tokens,
                                                      edits=list(edits or []) + [e]).text[0]
    return DirectionDashboard(site, norm, proj[real].numpy(), top, logit_effects, neighbours, steering, model.name,
                              unit)


@dataclass(frozen=True)
class DirectionDefaults:
    """What the Direction page opens on: the unembedding direction of `token` (the clean answer of the model's
    default fact pair, " Paris" on a real model) at `site` (the last layer's resid_post), read over the clean
    prompts of 16 different default pairs, and steered on the corrupt prompt (whose answer is " Rome"), with
    `scales` in units of the site's typical norm: the steering turns the corrupt prompt's answer into the token (on
    SmolLM2 at resid_post.29, typical norm ~800: 0.1 leaves " Rome", 0.2 and 0.3 say " Paris", 0.5 and more
    give garbage; tests/real_models/test_real_defaults.py)."""

    site: str
    token: str
    token_id: int
    vector: np.ndarray
    prompts: tuple
    steer_prompt: str
    scales: tuple = (0.0, 0.1, 0.2, 0.3)


def default_direction(model) -> DirectionDefaults:
    """The Direction page's defaults for `model` (see DirectionDefaults); on a toy organism the token is the clean
    prompt's own greedy answer."""
    from interplab.probes.lenses.common import default_fact_pair

    pair = default_fact_pair(model)
    if pair.answer:
        tid = model.token_id(pair.answer)
    else:
        tid = int(model.generate([pair.clean], max_new_tokens=1).new_tokens[0][0])
    W_U, _ = model.unembedding()
    prompts = tuple(dict.fromkeys(default_fact_pair(model, seed=s).clean for s in range(16)))
    return DirectionDefaults(f"resid_post.{model.n_layers - 1}", model.tokenizer.decode([tid]), tid,
                             W_U[:, tid].numpy(), prompts, pair.corrupt)
