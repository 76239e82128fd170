"""docs/crh.md "On a real model" equals the committed SmolLM2-135M-Instruct runs
(results/crh-concepts-smollm2/, results/crh-spiral-smollm2/): the claim table is the runs' saved
validity reports, every other table row and quoted number is rebuilt here from the outputs (the docs
were written from these functions), so docs and outputs cannot drift, and a drifted output fails."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.real_model_docs import ROOT, assert_claim_table, doc_section, run_dir, validity_report

MAIN = ("crh-concepts", "held-out-20concepts")
SPIRAL = ("crh-spiral", "temperature-wetland")
LAYERS = (0, 5, 10, 15, 20, 25, 29)
METHODS = ("unsteered", "diffmean", "control", "pca", "probe", "penalty p=0", "sector")
READS = {"last": "last token", "mean": "mean over tokens"}


def section() -> str:
    return doc_section("crh.md")


def ci(m, lo, hi, fmt: str = ".2f") -> str:
    return f"{m:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def table(run, name: str) -> pd.DataFrame:
    return pd.read_csv(run_dir(*run) / "tables" / f"{name}.csv")


def summary(run) -> dict:
    return json.loads((run_dir(*run) / "json" / "summary.json").read_text())


def config(run) -> dict:
    return json.loads((run_dir(*run) / "config.json").read_text())["config"]


def choice() -> dict:
    return summary(MAIN)["read_choice"]


# ---- the settings, chosen on 5 held-out concepts -------------------------------------------------------
def selection_rows() -> list[str]:
    t = table(MAIN, "read_selection")
    rows = []
    for (pos, layer), g in t[t["step"] > 0].groupby(["position", "layer"], sort=False):
        g = g.sort_values("step")
        rows.append(f"| {READS[pos]} | {layer} | " + " | ".join(
            f"{a:.2f} / {b:.2f}" for a, b in zip(g["concept_rate"], g["fluent_concept_rate"])) + " |")
    return rows


# ---- steering at the chosen block and step -------------------------------------------------------------
def elicitation_rows() -> list[str]:
    es = table(MAIN, "elicitation_summary")
    k = choice()["step"]
    rows = []
    for m in METHODS:
        r = es[(es["method"] == m) & (es["step"] == (0 if m == "unsteered" else k))].iloc[0]
        rows.append(f"| {m} | {ci(r['concept_rate'], r['concept_rate_lo'], r['concept_rate_hi'])} | "
                    f"{ci(r['fluent_concept_rate'], r['fluent_concept_rate_lo'], r['fluent_concept_rate_hi'])}"
                    f" | {ci(r['gibberish_rate'], r['gibberish_rate_lo'], r['gibberish_rate_hi'])} | "
                    f"{int(r['concepts_with_fluent_hit'])}/{int(r['n_concepts'])} | {r['nll_median']:.2f} |")
    return rows


def step_rows() -> list[str]:
    es = table(MAIN, "elicitation_summary")
    rows = []
    for m in ("diffmean", "control", "sector"):
        g = es[es["method"] == m].sort_values("step")
        rows.append(f"| {m} | " + " | ".join(f"{a:.2f} / {b:.2f}" for a, b in zip(
            g["concept_rate"], g["fluent_concept_rate"])) + " |")
    return rows


# ---- geometry: concepts against their paired pseudo-concepts -------------------------------------------
def geometry_rows() -> list[str]:
    from interplab.probes.stats import holm_adjust, paired_signflip_test

    st, ctl = table(MAIN, "cylinder_stats"), table(MAIN, "control_stats")
    m = st.merge(ctl, on=["concept", "layer"], suffixes=("", "_control"))
    layers = sorted(m["layer"].unique())
    p = [paired_signflip_test(g["plane_explained"], g["plane_explained_control"], seed=0)
         for _, g in (m[m["layer"] == L].sort_values("concept") for L in layers)]
    adj = dict(zip(layers, holm_adjust(np.array(p))))
    rows = []
    for L in LAYERS:
        g = m[m["layer"] == L]
        ev, cev = g["plane_explained"], g["plane_explained_control"]
        rows.append(f"| {L} | {ev.median():.3f} ({ev.min():.3f}–{ev.max():.3f}) | {cev.median():.3f} "
                    f"({cev.min():.3f}–{cev.max():.3f}) | {(ev - cev).mean():+.3f} | {adj[L]:.3g} | "
                    f"{g['mean_cos_theta'].median():.2f} | {g['mean_cos_theta_control'].median():.2f} |")
    return rows


def penalty_rows() -> list[str]:
    """Implication 1: the pooled penalty map's concept / gibberish rate per (p, step)."""
    from interplab.results import load_run

    pp = load_run(run_dir(*MAIN)).result("study").pooled_penalty
    r2, r3 = pp.rates(2), pp.rates(3)
    return [f"| {p:.1f} | " + " | ".join(f"{a:.2f} / {b:.2f}" for a, b in zip(r2[:, j], r3[:, j])) + " |"
            for j, p in enumerate(pp.ps)]


def numbers() -> dict[str, str]:
    from interplab.data.concept_pairs import concept_lexicon, split_words

    s, ch = summary(MAIN), choice()
    units = [u for u in s["strength_unit"].values()]
    sp = split_words(concept_lexicon()["temperature"].words)
    out = {"threshold": f"{s['fluency_threshold_nll']:.2f} nats",
           "rho": f"ρ ≈ {np.median(units):.0f}",
           "minutes": f"{s['seconds'] / 60:.0f} min",
           "selection": ", ".join(ch["selection"]),
           "chosen": f"the {READS[ch['position']]} read at block {ch['layer']}, step {ch['step']}",
           "split": f"builds with {', '.join(sp.build)}; judges with {', '.join(sp.judge)}",
           "selection_threshold": f"{json.loads((run_dir(*MAIN) / 'read_choice' / 'result.json').read_text())['fields']['threshold']:.2f}"}
    sv = summary(SPIRAL)
    fx, pl, ln = sv["helix"]["fixed"], sv["planar_helix"]["fixed"], sv["reference_helix"]["fixed"]
    out["spiral"] = (f"helix mean R²(cos, sin) {fx['mean_r2_cs']:.3f} (n = {fx['n_rot']:.2f}) vs flattened "
                     f"control {pl['mean_r2_cs']:.3f} vs LRH line {ln['mean_r2_cs']:.3f}")
    out["spiral_tokens"] = f"{sv['src'][0].lstrip('Ġ')!r} → {sv['dst'][0].lstrip('Ġ')!r}"
    return out


# ---- the tests ---------------------------------------------------------------------------------------
def test_the_claim_table_is_the_runs_validity_reports():
    assert_claim_table(section(), run_dir(*MAIN), run_dir(*SPIRAL))


def test_the_saved_verdicts_follow_from_the_saved_outputs():
    """The committed reports are what `crh_verdicts` / `spiral_verdicts` make of the committed study, read
    choice and spiral result with this code (a pure function of the run)."""
    from interplab.probes.crh.verdicts import crh_verdicts, spiral_verdicts
    from interplab.probes.validity import ValidityReport
    from interplab.results import load_run

    run = load_run(run_dir(*MAIN))
    got = ValidityReport.of(crh_verdicts(run.result("study"), run.result("read_choice"), seed=0))
    assert got.markdown() == validity_report(run_dir(*MAIN)).markdown()
    sp = ValidityReport.of(spiral_verdicts(load_run(run_dir(*SPIRAL)).result("spiral")))
    assert sp.markdown() == validity_report(run_dir(*SPIRAL)).markdown()


@pytest.mark.parametrize("rows", [selection_rows, elicitation_rows, step_rows, geometry_rows, penalty_rows],
                         ids=lambda f: f.__name__)
def test_tables_equal_the_outputs(rows):
    text = section()
    missing = [r for r in rows() if r not in text]
    assert not missing, "docs/crh.md rows that differ from the committed outputs:\n" + "\n".join(missing)


def test_quoted_numbers_equal_the_outputs():
    text = " ".join(section().split())
    missing = {k: v for k, v in numbers().items() if v not in text}
    assert not missing, f"docs/crh.md numbers that differ from the committed outputs: {missing}"


def test_runs_were_made_with_the_documented_settings():
    cfg = config(MAIN)
    assert cfg["model"] == "real:smollm2-135m-instruct" and cfg["data"] == "offline" and cfg["concepts"] == []
    assert (cfg["select_concepts"], cfg["select_positions"], cfg["select_layers"]) == (5, ["last", "mean"],
                                                                                       [5, 10, 15])
    assert cfg["control_arm"] and cfg["held_out_judge"] and cfg["strength_unit"] == "resid"
    assert (cfg["n_strengths"], cfg["baseline_lmax"], cfg["penalty_lmax"]) == (4, 1.0, 1.0)
    ch = choice()
    assert ch["held_out"] and ch["n_scored"] == 20 and len(ch["selection"]) == 5
    assert table(MAIN, "control_stats")["control"].nunique() == 20


def readme_quotes() -> dict[str, str]:
    rep = validity_report(run_dir(*MAIN))
    return {c: o for c, o in rep.outcomes.items()}


def test_readme_quotes_the_verdicts():
    flat = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "results/crh-concepts-smollm2/" in flat
    elicit = validity_report(run_dir(*MAIN)).verdicts.iloc[0]
    assert elicit["claim"].startswith("Steering along") and f"{elicit['outcome']}" in flat
    assert elicit["measured"].split("; difference ")[1].split(" (")[0] in flat
