"""The read position, steering layer and strength, chosen on concepts that are then left out
(issue 46).

A steering study has settings that decide whether it works: where a pair text's activation is read
(its last token, as the paper, or the mean over its tokens), which block is steered, and how
strongly. Chosen on the concepts that are then scored, they make "steering elicits the concept" true
by selection. Here they are chosen on a seeded subset of the concepts (`split_concepts`) and the
study scores only the rest:

    selection, scored = split_concepts(concepts, n_select=5, seed=0)
    choice = choose_read(model, selection, positions=("last", "mean"), layers=(5, 10, 15))
    cfg = replace(cfg, position=choice.position, steer_layer=choice.layer)
    study = run_concept_study(model, scored, cfg)

`choose_read` steers every selection concept's test prompts with its diffmean direction (read at
each candidate position, at each candidate block, `prompt` positions as the baselines) at strengths
k·lmax/n_strengths times the residual norm there (k = 1..n_strengths), judges each reply with the
concept's judge words and scores it for fluency (its NLL on its own under the unsteered model at
most the 95th percentile of the selection concepts' unsteered replies'). The setting with the
highest mean fluent concept rate over the selection concepts wins; ties go to the earlier candidate
(positions and layers in the order given, then the weaker strength)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from interplab.core.errors import ConfigError, InputError
from interplab.core.result import Result
from interplab.probes.crh.toy import ConceptData

__all__ = ["ReadChoice", "split_concepts", "choose_read", "in_sample_choice"]

FLUENCY_QUANTILE = 0.95


@dataclass
class ReadChoice(Result):
    """The chosen read position, steering layer and strength step, and what they were chosen on.

    replies: one row per selection reply (concept, position, layer, step, strength, prompt, label,
    nll, fluent, text; step 0 = unsteered); selection: the concepts the setting was chosen on;
    scored: the concepts the study scores (none of `selection` when the choice is held out);
    threshold: the fluency threshold (NLL, nats)."""

    position: str
    layer: int
    step: int
    selection: list
    scored: list
    replies: pd.DataFrame
    threshold: float
    config: dict = field(default_factory=dict)

    @property
    def held_out(self) -> bool:
        return not set(self.selection) & set(self.scored)

    def table(self) -> pd.DataFrame:
        """Mean over the selection concepts of the concept, fluent concept and gibberish rates per
        (position, layer, step), the unsteered replies as step 0 (position '-', layer -1)."""
        r = self.replies.assign(
            concept_hit=self.replies["label"] == 2,
            gibberish=self.replies["label"] == 3,
            fluent_hit=(self.replies["label"] == 2) & self.replies["fluent"],
        )
        per = (
            r.groupby(["position", "layer", "step", "concept"], sort=False)[
                ["concept_hit", "fluent_hit", "gibberish"]
            ]
            .mean()
            .reset_index()
        )
        out = (
            per.groupby(["position", "layer", "step"], sort=False)
            .agg(
                concept_rate=("concept_hit", "mean"),
                fluent_concept_rate=("fluent_hit", "mean"),
                gibberish_rate=("gibberish", "mean"),
                n_concepts=("concept", "nunique"),
            )
            .reset_index()
        )
        return out

    def best(self) -> tuple[str, int, int]:
        """The decision rule on the selection replies: the (position, layer, step) with the highest
        mean fluent concept rate; ties go to the earlier candidate in the configured order."""
        t = self.table().set_index(["position", "layer", "step"])["fluent_concept_rate"]
        cands = _candidates(self.config["positions"], self.config["layers"], self.config["n_strengths"])
        # rates are means of k/n fractions, rounded so that a tie is a tie whatever order the sums
        # ran in
        return cands[max(range(len(cands)), key=lambda i: (round(float(t.loc[cands[i]]), 9), -i))]

    def summary(self) -> dict:
        t = self.table()
        row = t[
            (t["position"] == self.position) & (t["layer"] == self.layer) & (t["step"] == self.step)
        ]
        return {
            "position": self.position,
            "layer": self.layer,
            "step": self.step,
            "selection": list(self.selection),
            "n_scored": len(self.scored),
            "held_out": self.held_out,
            "threshold": self.threshold,
            "chosen_fluent_concept_rate": float(row["fluent_concept_rate"].iloc[0])
            if len(row)
            else None,
        }


def split_concepts(concepts: Sequence, n_select: int, *, seed: int = 0) -> tuple[list, list]:
    """(selection, scored): `n_select` concepts drawn by a seeded permutation (numpy
    default_rng(seed)), the rest scored; both keep the input order."""
    items = list(concepts)
    if not 1 <= n_select < len(items):
        raise ConfigError(
            f"n_select must be between 1 and {len(items) - 1} (some concepts must remain to "
            "score), "
            f"got {n_select}"
        )
    pick = set(np.random.default_rng(seed).permutation(len(items))[:n_select].tolist())
    return [c for i, c in enumerate(items) if i in pick], [
        c for i, c in enumerate(items) if i not in pick
    ]


def _candidates(positions, layers, n_strengths: int) -> list[tuple[str, int, int]]:
    return [(p, int(L), k) for p in positions for L in layers for k in range(1, n_strengths + 1)]


def choose_read(
    model,
    concepts: Sequence[ConceptData],
    *,
    positions: Sequence[str] = ("last", "mean"),
    layers: Sequence[int] = (10,),
    lmax: float = 1.0,
    n_strengths: int = 4,
    max_new_tokens: int = 20,
    max_rows: int = 512,
    scored: Sequence[str] = (),
    log=print,
) -> ReadChoice:
    """See the module docstring. `scored`: the names of the concepts the study will score (recorded
    so the verdicts can check that none of them chose the setting)."""
    from interplab.probes.crh.baselines import diffmean_direction
    from interplab.probes.crh.diffs import concept_diffs_by_layer
    from interplab.probes.crh.judges import TokenSetJudge
    from interplab.probes.crh.sectors import strength_grid
    from interplab.probes.crh.steering import reply_nll, steer_generate
    from interplab.probes.crh.study import residual_unit

    concepts = list(concepts)
    if not concepts:
        raise InputError("choose_read needs at least one selection concept")
    bad = [p for p in positions if p not in ("last", "mean")]
    if bad or not positions or not layers:
        raise ConfigError(
            f"positions must be a non-empty subset of ('last', 'mean') and layers non-empty; got "
            f"{list(positions)}, {list(layers)}"
        )
    layers = [int(L) for L in layers]
    rows = []
    null = steer_generate(
        model,
        [p for c in concepts for p in c.test_prompts],
        np.zeros((sum(len(c.test_prompts) for c in concepts), model.d_model)),
        site=f"resid_post.{layers[0]}",
        max_new_tokens=max_new_tokens,
        max_rows=max_rows,
    ).texts
    null_nll = reply_nll(model, null)
    fin = null_nll[np.isfinite(null_nll)]
    if fin.size == 0:
        raise InputError(
            "every unsteered selection reply was empty; no fluency threshold can be set"
        )
    thr = float(np.quantile(fin, FLUENCY_QUANTILE))
    i = 0
    for c in concepts:
        lab = TokenSetJudge(c.words)(null[i : i + len(c.test_prompts)])
        rows += [
            {
                "concept": c.name,
                "position": "-",
                "layer": -1,
                "step": 0,
                "strength": 0.0,
                "prompt": j,
                "label": int(lab[j]),
                "nll": float(null_nll[i + j]),
                "text": null[i + j],
            }
            for j in range(len(c.test_prompts))
        ]
        i += len(c.test_prompts)
    dirs = {}
    for pos in positions:
        for c in concepts:
            by = concept_diffs_by_layer(model, c.train_pairs, layers=layers, position=pos)
            for L in layers:
                dirs[(pos, c.name, L)] = diffmean_direction(by[L][0])
    for L in layers:  # one site per generate call: every position and concept of a layer
        meta, vecs, prompts = [], [], []
        for c in concepts:
            grid = strength_grid(lmax * residual_unit(model, c.test_prompts, L), n_strengths)
            for pos in positions:
                for k, s in enumerate(grid, start=1):
                    for j, p in enumerate(c.test_prompts):
                        meta.append((c, pos, k, float(s), j))
                        vecs.append(dirs[(pos, c.name, L)] * s)
                        prompts.append(p)
        texts = steer_generate(
            model,
            prompts,
            np.stack(vecs),
            site=f"resid_post.{L}",
            positions="prompt",
            max_new_tokens=max_new_tokens,
            max_rows=max_rows,
        ).texts
        nll = reply_nll(model, texts)
        labels = np.empty(len(texts), np.int64)
        for c in concepts:  # each concept's replies by its own judge
            idx = [r for r, m in enumerate(meta) if m[0] is c]
            labels[idx] = TokenSetJudge(c.words)([texts[r] for r in idx])
        for (c, pos, k, s, j), t, ll, lab in zip(meta, texts, nll, labels):
            rows.append(
                {
                    "concept": c.name,
                    "position": pos,
                    "layer": L,
                    "step": k,
                    "strength": s,
                    "prompt": j,
                    "label": int(lab),
                    "nll": float(ll),
                    "text": t,
                }
            )
        log(f"[crh] read selection: block {L} done ({len(texts)} replies)")
    replies = pd.DataFrame(rows)
    replies["fluent"] = np.isfinite(replies["nll"]) & (replies["nll"] <= thr)
    choice = ReadChoice(
        position="",
        layer=-1,
        step=0,
        selection=[c.name for c in concepts],
        scored=list(scored),
        replies=replies,
        threshold=thr,
        config={
            "positions": list(positions),
            "layers": layers,
            "lmax": lmax,
            "n_strengths": n_strengths,
            "max_new_tokens": max_new_tokens,
            "fluency_quantile": FLUENCY_QUANTILE,
            "steer_positions": "prompt",
        },
    )
    choice.position, choice.layer, choice.step = choice.best()
    return choice


def in_sample_choice(position: str, layer: int, step: int, concepts: Sequence[str]) -> ReadChoice:
    """The record of settings fixed on the scored concepts themselves (no held-out selection): every
    scored concept counts as a selection concept, so the verdicts' held-out check fails, as it
    should."""
    names = list(concepts)
    return ReadChoice(
        position=position,
        layer=int(layer),
        step=int(step),
        selection=names,
        scored=names,
        replies=pd.DataFrame(
            columns=[
                "concept",
                "position",
                "layer",
                "step",
                "strength",
                "prompt",
                "label",
                "nll",
                "text",
                "fluent",
            ]
        ),
        threshold=float("nan"),
        config={"in_sample": True},
    )
