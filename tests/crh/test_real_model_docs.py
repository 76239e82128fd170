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


# ---- the settings, chosen on 5 held-out concepts -------------------------------------------------
def selection_rows() -> list[str]:
    t = table(MAIN, "read_selection")
    rows = []
    for (pos, layer), g in t[t["step"] > 0].groupby(["position", "layer"], sort=False):
        g = g.sort_values("step")
        rows.append(
            f"| {READS[pos]} | {layer} | "
            + " | ".join(
                f"{a:.2f} / {b:.2f}" for a, b in zip(g["concept_rate"], g["fluent_concept_rate"])
            )
            + " |"
        )
    return rows


# ---- steering at the chosen block and step -------------------------------------------------------
def elicitation_rows() -> list[str]:
    es = table(MAIN, "elicitation_summary")
    k = choice()["step"]
    rows = []
    for m in METHODS:
        r = es[(es["method"] == m) & (es["step"] == (0 if m == "unsteered" else k))].iloc[0]
        rows.append(
            f"| {m} | {ci(r['concept_rate'], r['concept_rate_lo'], r['concept_rate_hi'])} | "
            f"{ci(*r[['fluent_concept_rate', 'fluent_concept_rate_lo', 'fluent_concept_rate_hi']])}"
            f" | {ci(r['gibberish_rate'], r['gibberish_rate_lo'], r['gibberish_rate_hi'])} | "
            f"{int(r['concepts_with_fluent_hit'])}/{int(r['n_concepts'])} | {r['nll_median']:.2f} |"
        )
    return rows


def step_rows() -> list[str]:
    es = table(MAIN, "elicitation_summary")
    rows = []
    for m in ("diffmean", "control", "sector"):
        g = es[es["method"] == m].sort_values("step")
        rows.append(
            f"| {m} | "
            + " | ".join(
                f"{a:.2f} / {b:.2f}" for a, b in zip(g["concept_rate"], g["fluent_concept_rate"])
            )
            + " |"
        )
    return rows


# ---- geometry: concepts against their paired pseudo-concepts -------------------------------------
def geometry_rows() -> list[str]:
    from interplab.probes.stats import holm_adjust, paired_signflip_test

    st, ctl = table(MAIN, "cylinder_stats"), table(MAIN, "control_stats")
    m = st.merge(ctl, on=["concept", "layer"], suffixes=("", "_control"))
    layers = sorted(m["layer"].unique())
    p = [
        paired_signflip_test(g["plane_explained"], g["plane_explained_control"], seed=0)
        for g in (m[m["layer"] == L].sort_values("concept") for L in layers)
    ]
    adj = dict(zip(layers, holm_adjust(np.array(p))))
    rows = []
    for L in LAYERS:
        g = m[m["layer"] == L]
        ev, cev = g["plane_explained"], g["plane_explained_control"]
        rows.append(
            f"| {L} | {ev.median():.3f} ({ev.min():.3f}–{ev.max():.3f}) | {cev.median():.3f} "
            f"({cev.min():.3f}–{cev.max():.3f}) | {(ev - cev).mean():+.3f} | {adj[L]:.3g} | "
            f"{g['mean_cos_theta'].median():.2f} | {g['mean_cos_theta_control'].median():.2f} |"
        )
    return rows


def penalty_rows() -> list[str]:
    """Implication 1: the pooled penalty map's concept / gibberish rate per (p, step)."""
    from interplab.results import load_run

    pp = load_run(run_dir(*MAIN)).result("study").pooled_penalty
    r2, r3 = pp.rates(2), pp.rates(3)
    return [
        f"| {p:.1f} | "
        + " | ".join(f"{a:.2f} / {b:.2f}" for a, b in zip(r2[:, j], r3[:, j]))
        + " |"
        for j, p in enumerate(pp.ps)
    ]


def numbers() -> dict[str, str]:
    from interplab.data.concept_pairs import concept_lexicon, split_words

    s, ch = summary(MAIN), choice()
    units = [u for u in s["strength_unit"].values()]
    sp = split_words(concept_lexicon()["temperature"].words)
    out = {
        "threshold": f"{s['fluency_threshold_nll']:.2f} nats",
        "rho": f"ρ ≈ {np.median(units):.0f}",
        "minutes": f"{s['seconds'] / 60:.0f} min",
        "selection": ", ".join(ch["selection"]),
        "chosen": f"the {READS[ch['position']]} read at block {ch['layer']}, step {ch['step']}",
        "split": f"builds with {', '.join(sp.build)}; judges with {', '.join(sp.judge)}",
        "selection_threshold": f"{ch['threshold']:.2f} nats",
    }
    out.update(prose_numbers())
    sv = summary(SPIRAL)
    fx, pl, ln = sv["helix"]["fixed"], sv["planar_helix"]["fixed"], sv["reference_helix"]["fixed"]
    out["spiral"] = (
        f"helix mean R²(cos, sin) {fx['mean_r2_cs']:.3f} (n = {fx['n_rot']:.2f}) vs flattened "
        f"control {pl['mean_r2_cs']:.3f} vs LRH line {ln['mean_r2_cs']:.3f}"
    )
    out["spiral_tokens"] = f"{sv['src'][0].lstrip('Ġ')!r} → {sv['dst'][0].lstrip('Ġ')!r}"
    out["spiral_shape"] = spiral_shape()
    return out


def spiral_shape() -> str:
    """The held-out shape selection of the committed spiral trajectory, as the docs quote it."""
    from interplab.probes.crh.shape_selection import select_trajectory_shape
    from interplab.results import load_run

    trajectory = load_run(run_dir(*SPIRAL)).result("spiral").vectors.vectors
    sel = select_trajectory_shape(trajectory, seed=0)
    r2 = dict(zip(sel.table["shape"], sel.table["cv_r2"]))
    g = sel.gains.set_index("comparison").loc["helix-arc"]
    return (f"held-out R² {r2['helix']:.3f} against {r2['arc']:.3f} for the arc and "
            f"{r2['line']:.3f} for the line; the helix's gain over the arc {g['gain']:+.4f} "
            f"[{g['lo']:+.4f}, {g['hi']:+.4f}]")


def word_counts(method: str, step: int) -> tuple[int, int, int]:
    """(replies naming a build word, replies naming a judge word, replies) of one method at one
    step: the same replies judged with the words that built the vector and with the held-out
    ones."""
    from interplab.probes.crh import TokenSetJudge
    from interplab.results import load_run

    b = j = n = 0
    for c in load_run(run_dir(*MAIN)).result("study").concepts.values():
        bl = c.baselines
        m, (S, K) = bl.methods.index(method), bl.labels.shape[1:]
        texts = [bl.texts[(m * S + s) * K + step - 1] for s in range(S)]
        b += int((TokenSetJudge(c.build_words)(texts) == 2).sum())
        j += int((TokenSetJudge(c.judge_words)(texts) == 2).sum())
        n += len(texts)
    return b, j, n


def prose_numbers() -> dict[str, str]:
    from interplab.results import load_run

    ch, es = choice(), table(MAIN, "elicitation_summary")
    k = ch["step"]
    dm = es[es["method"] == "diffmean"].set_index("step")
    (b2, j2, n), (b3, j3, _) = word_counts("diffmean", k), word_counts("diffmean", k + 1)
    ctl = max(word_counts("control", s)[0] for s in range(1, 5))
    sel = load_run(run_dir(*MAIN)).result("read_choice").replies
    per = sel[sel["position"] == "last"].groupby(["layer", "step"])["label"].apply(
        lambda x: int((x == 2).sum()))
    r3 = load_run(run_dir(*MAIN)).result("study").pooled_penalty.rates(3)
    st, ctl_st = table(MAIN, "cylinder_stats"), table(MAIN, "control_stats")
    cos = [st[st["layer"] == L]["mean_cos_theta"].median() for L in LAYERS]
    ccos = [ctl_st[ctl_st["layer"] == L]["mean_cos_theta"].median() for L in LAYERS]
    best = dm["fluent_concept_rate"].idxmax()
    study = load_run(run_dir(*MAIN)).result("study")
    ratio = [c.baselines.norms[c.baselines.methods.index("control"), k - 1]
             / c.baselines.norms[c.baselines.methods.index("diffmean"), k - 1]
             for c in study.concepts.values()]
    pt = study.pairwise
    two = sum(np.count_nonzero(c.penalty.margins(0)) >= 2 for c in study.concepts.values())
    sel_t = table(MAIN, "read_selection")
    top = sel_t.loc[sel_t["step"] > 0, "fluent_concept_rate"].round(9)
    return {
        "tie": f"{int((top == top.max()).sum())} settings tie at {top.max():.2f}",
        "ratio": f"achieved / asked = {min(ratio):.2f} for every concept" if f"{min(ratio):.2f}"
        == f"{max(ratio):.2f}" else f"achieved / asked {min(ratio):.2f}–{max(ratio):.2f}",
        "grid": f"{study.trig_concept.config['n_grid']:,}-point grid",
        "impl3": f"{pt.n_samples} test samples have a non-zero margin M (a concept reply below the "
        f"top strength at p = 0), and only {two} concepts have two of them: {pt.x.size} "
        "within-concept pairs",
        "transfer": f"({ch['chosen_fluent_concept_rate']:.2f} there, "
        f"{dm.loc[k, 'fluent_concept_rate']:.2f} here)",
        "build": f"the diffmean replies name a build word in {b2} of {n} at step {k} (a judge word "
        f"in {j2}) and in {b3} at step {k + 1} ({j3}); the control replies in {ctl} at every step",
        "build_short": f"a build word in {b3} of {n} replies at step {k + 1}",
        "reach": f"at most {dm['fluent_concept_rate'].max():.2f} of replies, at step {best}",
        "last": f"at most {per.max()} of {len(sel[(sel['position'] == 'last')]) // len(per)} "
        "selection replies",
        "gibberish": f"{r3[-1, 0]:.2f} at step 4 against {r3[-1, -1]:.2f} on the axis",
        "diffmean_gibberish": "the diffmean replies turn to gibberish "
        f"({dm.loc[4, 'gibberish_rate']:.2f})",
        "cos": f"{min(cos):.2f}–{max(cos):.2f} against {min(ccos):.2f}–{max(ccos):.2f}",
    }


# ---- the tests -----------------------------------------------------------------------------------
def test_the_claim_table_is_the_runs_validity_reports():
    assert_claim_table(section(), run_dir(*MAIN), run_dir(*SPIRAL))


def test_the_saved_verdicts_follow_from_the_saved_outputs():
    """The committed reports are what `crh_verdicts` / `spiral_verdicts` make of the committed
    study, read choice and spiral result with this code (a pure function of the run)."""
    from interplab.probes.crh.verdicts import crh_verdicts, spiral_verdicts
    from interplab.probes.validity import ValidityReport
    from interplab.results import load_run

    run = load_run(run_dir(*MAIN))
    got = ValidityReport.of(crh_verdicts(run.result("study"), run.result("read_choice"), seed=0))
    assert got.markdown() == validity_report(run_dir(*MAIN)).markdown()
    sp = ValidityReport.of(spiral_verdicts(load_run(run_dir(*SPIRAL)).result("spiral")))
    assert sp.markdown() == validity_report(run_dir(*SPIRAL)).markdown()


@pytest.mark.parametrize(
    "rows",
    [selection_rows, elicitation_rows, step_rows, geometry_rows, penalty_rows],
    ids=lambda f: f.__name__,
)
def test_tables_equal_the_outputs(rows):
    text = section()
    missing = [r for r in rows() if r not in text]
    assert not missing, "docs/crh.md rows that differ from the committed outputs:\n" + "\n".join(
        missing
    )


def test_quoted_numbers_equal_the_outputs():
    text = " ".join(section().split())
    missing = {k: v for k, v in numbers().items() if v not in text}
    assert not missing, f"docs/crh.md numbers that differ from the committed outputs: {missing}"


def test_runs_were_made_with_the_documented_settings():
    cfg = config(MAIN)
    assert (
        cfg["model"] == "real:smollm2-135m-instruct"
        and cfg["data"] == "offline"
        and cfg["concepts"] == []
    )
    assert (cfg["select_concepts"], cfg["select_positions"], cfg["select_layers"]) == (
        5,
        ["last", "mean"],
        [5, 10, 15],
    )
    assert cfg["control_arm"] and cfg["held_out_judge"] and cfg["strength_unit"] == "resid"
    assert (cfg["n_strengths"], cfg["baseline_lmax"], cfg["penalty_lmax"]) == (4, 1.0, 1.0)
    ch = choice()
    assert ch["held_out"] and ch["n_scored"] == 20 and len(ch["selection"]) == 5
    from interplab.results import load_run

    rc = load_run(run_dir(*MAIN)).result("read_choice")  # the decision rule on the saved replies
    assert rc.best() == (ch["position"], ch["layer"], ch["step"])
    assert table(MAIN, "control_stats")["control"].nunique() == 20
    sp = config(SPIRAL)             # the spiral probe: "30 budgets w = 0.1…3.0, 20 Adam steps each"
    assert (sp["model"], sp["concept_ori"], sp["concept_tgt"], sp["layer"]) == (
        "real:smollm2-135m-instruct", "temperature", "wetland", 10)
    assert (sp["w_min"], sp["w_max"], sp["w_step"], sp["steps"]) == (0.1, 3.0, 0.1, 20)
    assert summary(SPIRAL)["n_w"] == 30


def test_readme_quotes_the_verdicts():
    """The README's CRH paragraph quotes the elicitation verdict (outcome and difference), the
    geometry's layer count and the spiral probe's outcome as the committed reports have them."""
    flat = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "results/crh-concepts-smollm2/" in flat
    rep = validity_report(run_dir(*MAIN)).verdicts.set_index("claim")
    from interplab.probes.crh.verdicts import CLAIMS

    elicit, geom = rep.loc[CLAIMS["elicit"]], rep.loc[CLAIMS["geometry"]]
    diff = elicit["measured"].split("; difference ")[1].split(" (")[0]
    assert f'"steering elicits the concept" is **{elicit["outcome"]}**' in flat
    assert diff in flat and geom["outcome"] == "reproduced"
    assert geom["measured"].split("pseudo-concept at ")[1].split(" (")[0] in flat
    (spiral,) = validity_report(run_dir(*SPIRAL)).verdict_list()   # one prompt pair: inconclusive
    assert "results/crh-spiral-smollm2/" in flat and spiral.outcome == "inconclusive"
    assert f"by a small held-out margin, which is **{spiral.outcome}**" in flat
