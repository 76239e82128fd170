"""Verdicts of a TruthProbe gating run on world facts (issue 46 §1–2): a pure function of a saved `FactsGating`.

Two claims, each with the checks of the run behind it (`interplab.probes.validity`):

1. **Gating raises context-following** (the paper's claim; with another model's map, its headline: a base map
   transferred to a descendant). Read-out: the share of held-out facts whose greedy reply names the context's
   value first (generated_context), gated − ungated, paired bootstrap over facts. Decision rule: *reproduced* when
   the 95% interval lies above 0; *not reproduced* when its upper end is below `MIN_GAIN` (no raise of 5 points or
   more is compatible with the data); otherwise the numbers decide nothing (inconclusive).
2. **The map's heads matter** (the paper's null, spec §2.3): the forced-choice context rate under the map beats
   within-layer shuffles of the same gate values. Decision rule: reproduced when p = (1 + #{shuffled ≥ gated}) /
   (n_maps + 1) ≤ `P_LEVEL`, else not reproduced.

Checks of both: degenerate generation of the gated replies (and, for 2, of the shuffled maps' replies) against the
ungated replies' NLL; the ungated replies themselves; the outcome off its floor and ceiling in the compared arms;
the setting chosen on tune facts and the map built on probe facts, both disjoint from the eval facts; the chosen α
inside its mode's range; enough facts, resampled as facts; for 2, enough shuffled maps for p to reach P_LEVEL.
Limits are validity.py's defaults; none is tuned to a run.
"""
from __future__ import annotations

import math
from pathlib import PurePath

import numpy as np
import pandas as pd

from interplab.probes.truth.facts_fluency import generation_checks
from interplab.probes.validity import Check, Verdict, floor_ceiling, held_out, sampling_units, setting_range

METHOD = "truth"
MIN_GAIN = 0.05   # the smallest raise of the context rate read as the paper's gain (5 points of held-out facts)
P_LEVEL = 0.05    # the level of the shuffled-map test
MIN_FACTS = 20    # validity.sampling_units' default: fewer facts give no usable interval


def short_name(name: str) -> str:
    """A model's name for a claim: "real:smollm2-135m-instruct" -> "smollm2-135m-instruct", a checkpoint path ->
    its folder name."""
    s = str(name)
    for prefix in ("real:", "zoo:"):
        s = s[len(prefix):] if s.startswith(prefix) else s
    return PurePath(s).name or s


def claims(res) -> tuple[str, str]:
    """The two claims of a run, naming the map's source and the gated model (so runs can share one table)."""
    target = short_name(res.model)
    source = "its own map" if res.score_source in ("self", res.model) else f"{short_name(res.score_source)}'s map"
    who = "its own" if res.score_source in ("self", res.model) else f"{short_name(res.score_source)}'s"
    return (f"gating {target} with {source} raises context-following on held-out facts",
            f"on {target}, {who} map beats within-layer shuffles of the same gates")


def _replies(res, split: str, condition: str) -> pd.DataFrame:
    r = res.replies
    return r[(r["split"] == split) & (r["condition"] == condition)]


def _common_checks(res) -> list[Check]:
    """Held-out selection, the α range and the sampling unit: the same for both claims."""
    ev = _replies(res, "eval", "ungated")
    n_rows, n_facts = len(ev), int(ev["index"].nunique())
    lo, hi = res.alpha_ranges[res.mode]
    return [held_out(res.facts["tune"], res.facts["eval"], subject="gate setting chosen on tune facts"),
            held_out(res.facts["probe"], res.facts["eval"], subject="map built on probe facts"),
            setting_range(res.alpha, lo, hi, subject=f"chosen {res.mode} α",
                          what=f"{res.mode} α" + (" (allowed outside the range on request)"
                                                  if res.allow_out_of_range else "")),
            sampling_units(n_facts, unit="fact", subject="eval interval",
                           resampled="fact" if n_rows == n_facts else "text", minimum=MIN_FACTS)]


def _rate(res, condition: str, readout: str) -> tuple[float, float, float]:
    r = res.eval.set_index(["condition", "readout"]).loc[(condition, readout)]
    return float(r["rate"]), float(r["lo"]), float(r["hi"])


def _tune_note(res) -> str:
    c = res.choice
    text = (f"tune split ({c['n']} facts): {res.mode} α {res.alpha:g} − ungated {c['diff']:+.3f} "
            f"[{c['lo']:+.3f}, {c['hi']:+.3f}]")
    return text + ("; within noise of no gate, so the choice is nominal" if c["within_noise"] else "")


def gating_verdicts(res) -> list[Verdict]:
    """The run's two verdicts (see the module docstring). res: a `FactsGating`."""
    raise_claim, null_claim = claims(res)
    ungated = _replies(res, "eval", "ungated")
    base = generation_checks(ungated, None, subject="ungated replies (eval)")
    if not res.gated:
        tried = res.tune[res.tune["mode"] != "ungated"]
        why = (f"no setting of the grid ({len(tried)} in the paper's α ranges) passed the degeneracy checks on the "
               f"tune split, so nothing was gated")
        held = [held_out(res.facts["probe"], res.facts["eval"], subject="map built on probe facts")]
        return [Verdict(METHOD, raise_claim, why, None, tuple(base + held), note=why),
                Verdict(METHOD, null_claim, why, None, tuple(base + held), note=why)]
    common = _common_checks(res)
    gated = generation_checks(_replies(res, "eval", "gated"), ungated, subject="gated replies (eval)")

    # 1. gated vs ungated, generated context rate
    u, _, _ = _rate(res, "ungated", "generated_context")
    g, _, _ = _rate(res, "gated", "generated_context")
    d = res.diff.set_index("readout").loc["generated_context"]
    dlo, dhi = float(d["lo"]), float(d["hi"])
    fc = res.diff.set_index("readout").loc["forced_choice"]
    supported = True if dlo > 0 else False if dhi < MIN_GAIN else None
    measured = (f"replies naming the context's value {u:.3f} → {g:.3f} ({res.mode} α {res.alpha:g}): "
                f"{float(d['gated_minus_ungated']):+.3f} [{dlo:+.3f}, {dhi:+.3f}] over {res.n_split['eval']} "
                f"facts; forced choice {float(fc['gated_minus_ungated']):+.3f} "
                f"[{float(fc['lo']):+.3f}, {float(fc['hi']):+.3f}]")
    v1 = Verdict(METHOD, raise_claim, measured, supported,
                 tuple(gated + base + [floor_ceiling({"ungated": u, "gated": g},
                                                     subject="generated context rate (eval)")] + common),
                 note=_tune_note(res) + (f"; the interval [{dlo:+.3f}, {dhi:+.3f}] neither excludes 0 nor a "
                                         f"{MIN_GAIN:+.2f} gain" if supported is None else ""))

    # 2. gated vs within-layer shuffled maps, forced choice
    null = np.asarray(res.null, dtype=float)
    fg, _, _ = _rate(res, "gated", "forced_choice")
    shuffled = sorted(c for c in res.replies["condition"].unique() if str(c).startswith("shuffled"))
    null_checks = [c for k in shuffled for c in generation_checks(_replies(res, "eval", k), ungated,
                                                                  subject=f"{k} map replies (eval)")]
    n_min = math.ceil(1 / P_LEVEL)   # p's floor 1 / (n + 1) must lie below P_LEVEL
    # the generated read-out of the shuffled maps that also generated: too few for a test (generation costs ~2.5
    # forced-choice passes), shown so a gain in generation that any gate of these values gives is visible
    gen = ", ".join(f"{_replies(res, 'eval', k)['context'].astype(float).mean():.3f}" for k in shuffled)
    measured = (f"forced-choice context rate {fg:.3f} against {len(null)} shuffled maps (mean "
                f"{null.mean():.3f}, 95th percentile {np.quantile(null, 0.95):.3f}): p = {res.p:.3f}"
                + (f"; replies naming the context's value: map {g:.3f}, the {len(shuffled)} shuffled maps that "
                   f"generated {gen}" if shuffled else ""))
    v2 = Verdict(METHOD, null_claim, measured, bool(res.p <= P_LEVEL),
                 tuple(gated + null_checks + [floor_ceiling({"gated": fg, "shuffled mean": float(null.mean())},
                                                            subject="forced-choice context rate (eval)"),
                                              sampling_units(len(null), unit="shuffled map", subject="null size",
                                                             minimum=n_min)] + common),
                 note=("no shuffled map generated replies, so their fluency is unchecked; " if not shuffled else "")
                 + _tune_note(res))
    return [v1, v2]
