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
        cfg = self.config
        cands = _candidates(cfg["positions"], cfg["layers"], cfg["n_strengths"])
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


def _row(c, pos: str, layer: int, step: int, strength: float, j: int, label, nll, text) -> dict:
    return {"concept": c.name, "position": pos, "layer": layer, "step": step, "strength": strength,
            "prompt": j, "label": int(label), "nll": float(nll), "text": text}


def _judged(concepts, owners: list, texts: list[str]) -> np.ndarray:
    """Each reply labelled by the judge of the concept it belongs to (`owners[i]`)."""
    from interplab.probes.crh.judges import TokenSetJudge

    labels = np.empty(len(texts), np.int64)
    for c in concepts:
        idx = [i for i, o in enumerate(owners) if o is c]
        labels[idx] = TokenSetJudge(c.words)([texts[i] for i in idx])
    return labels


def _unsteered(model, concepts, gen: dict) -> tuple[list[dict], float]:
    """The selection concepts' unsteered replies (step 0) and the fluency threshold they set."""
    from interplab.probes.crh.steering import reply_nll, steer_generate

    owners = [c for c in concepts for _ in c.test_prompts]
    prompts = [p for c in concepts for p in c.test_prompts]
    texts = steer_generate(model, prompts, np.zeros((len(prompts), model.d_model)), **gen).texts
    nll = reply_nll(model, texts)
    if not np.isfinite(nll).any():
        raise InputError("every unsteered selection reply was empty; no fluency threshold can be "
                         "set")
    thr = float(np.quantile(nll[np.isfinite(nll)], FLUENCY_QUANTILE))
    js = [j for c in concepts for j in range(len(c.test_prompts))]
    labels = _judged(concepts, owners, texts)
    return [_row(o, "-", -1, 0, 0.0, j, lab, ll, t)
            for o, j, lab, ll, t in zip(owners, js, labels, nll, texts)], thr


def _steered(model, concepts, dirs: dict, positions, layer: int, lmax: float, n_strengths: int,
             gen: dict) -> list[dict]:
    """Every (concept, position, step, prompt) of one block, in one batched generation."""
    from interplab.probes.crh.sectors import strength_grid
    from interplab.probes.crh.steering import reply_nll, steer_generate
    from interplab.probes.crh.study import residual_unit

    meta, vecs, prompts = [], [], []
    for c in concepts:
        grid = strength_grid(lmax * residual_unit(model, c.test_prompts, layer), n_strengths)
        for pos in positions:
            for k, s in enumerate(grid, start=1):
                for j, p in enumerate(c.test_prompts):
                    meta.append((c, pos, k, float(s), j))
                    vecs.append(dirs[(pos, c.name, layer)] * s)
                    prompts.append(p)
    texts = steer_generate(model, prompts, np.stack(vecs), positions="prompt", **gen).texts
    labels = _judged(concepts, [m[0] for m in meta], texts)
    return [_row(c, pos, layer, k, s, j, lab, ll, t)
            for (c, pos, k, s, j), lab, ll, t in zip(meta, labels, reply_nll(model, texts), texts)]


def choose_read(model, concepts: Sequence[ConceptData], *,
                positions: Sequence[str] = ("last", "mean"), layers: Sequence[int] = (10,),
                lmax: float = 1.0, n_strengths: int = 4, max_new_tokens: int = 20,
                max_rows: int = 512, scored: Sequence[str] = (), log=print) -> ReadChoice:
    """See the module docstring. `scored`: the names of the concepts the study will score (recorded
    so the verdicts can check that none of them chose the setting)."""
    from interplab.probes.crh.baselines import diffmean_direction
    from interplab.probes.crh.diffs import concept_diffs_by_layer

    concepts = list(concepts)
    if not concepts:
        raise InputError("choose_read needs at least one selection concept")
    if not positions or not layers or any(p not in ("last", "mean") for p in positions):
        raise ConfigError(f"positions must be a non-empty subset of ('last', 'mean') and layers "
                          f"non-empty; got {list(positions)}, {list(layers)}")
    layers = [int(L) for L in layers]
    gen = {"max_new_tokens": max_new_tokens, "max_rows": max_rows}
    rows, thr = _unsteered(model, concepts, {**gen, "site": f"resid_post.{layers[0]}"})
    dirs = {}
    for pos in positions:
        for c in concepts:
            by = concept_diffs_by_layer(model, c.train_pairs, layers=layers, position=pos)
            dirs.update({(pos, c.name, L): diffmean_direction(by[L][0]) for L in layers})
    for L in layers:                    # one site per generate call: every position and concept
        rows += _steered(model, concepts, dirs, positions, L, lmax, n_strengths,
                         {**gen, "site": f"resid_post.{L}"})
        log(f"[crh] read selection: block {L} done")
    replies = pd.DataFrame(rows)
    replies["fluent"] = np.isfinite(replies["nll"]) & (replies["nll"] <= thr)
    choice = ReadChoice(position="", layer=-1, step=0, selection=[c.name for c in concepts],
                        scored=list(scored), replies=replies, threshold=thr,
                        config={"positions": list(positions), "layers": layers, "lmax": lmax,
                                "n_strengths": n_strengths, "max_new_tokens": max_new_tokens,
                                "fluency_quantile": FLUENCY_QUANTILE, "steer_positions": "prompt"})
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
