"""docs/crh.md "On a real model" equals the committed SmolLM2-135M-Instruct runs (results/crh-concepts-smollm2/,
results/crh-spiral-smollm2/): every table row and quoted number is rebuilt here from the outputs (the docs were
written from these functions), so docs and outputs cannot drift, and a drifted output fails."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.real_model_docs import ROOT, doc_section, run_dir
MAIN = ("crh-concepts", "mean-read-layer10")
LAST = ("crh-concepts", "last-token-layer10-10concepts")
GEOM = {"mean": ("crh-concepts", "geometry-mean-read"), "last": ("crh-concepts", "geometry-last-token")}
SPIRAL = ("crh-spiral", "temperature-wetland")
LAYERS = (0, 5, 10, 15, 20, 25, 29)
METHODS = ("diffmean", "pca", "probe", "penalty p=0", "sector", "sector best")
READS = {"mean": "mean over tokens", "last": "last token"}




def section() -> str:
    return doc_section("crh.md")


def ci(m, lo, hi, fmt: str = ".2f") -> str:
    return f"{m:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def table(run, name: str) -> pd.DataFrame:
    return pd.read_csv(run_dir(*run) / "tables" / f"{name}.csv")


def summary(run) -> dict:
    return json.loads((run_dir(*run) / "json" / "summary.json").read_text())


# ---- geometry: concept diffs vs the isotropic LRH null and the nouns-vs-nouns control ------------------------------
def geometry_rows() -> list[str]:
    rows = []
    for read, run in GEOM.items():
        st, ctl = table(run, "cylinder_stats"), table(run, "control_stats")
        for L in LAYERS:
            s, c = st[st["layer"] == L], ctl[ctl["layer"] == L]
            ev, cev = s["plane_explained"], c["plane_explained"]
            p95 = float(np.quantile(cev, 0.95))
            rows.append(f"| {READS[read]} | {L} | {ev.median():.3f} ({ev.min():.3f}–{ev.max():.3f}) | "
                        f"{cev.median():.3f} ({p95:.3f}) | {s['null_plane_explained'].iloc[0]:.3f} | "
                        f"{s['mean_cos_theta'].median():.2f} | {c['mean_cos_theta'].median():.2f} | "
                        f"{int((ev > p95).sum())}/{len(s)} |")
    return rows


# ---- steering: does it elicit, and fluently ---------------------------------------------------------------------
def best_step(es: pd.DataFrame, method: str) -> pd.Series:
    g = es[es["method"] == method]
    return g.loc[g["fluent_concept_rate"].idxmax()]


def elicitation_row(es: pd.DataFrame, method: str, lmax: float, n_steps: int) -> str:
    r = best_step(es, method)
    step = int(r["step"])
    share = "0" if step == 0 else f"{step * lmax / n_steps:.2f}"
    return (f"| {method} | {step} ({share} ρ) | {ci(r['concept_rate'], r['concept_rate_lo'], r['concept_rate_hi'])} | "
            f"{ci(r['fluent_concept_rate'], r['fluent_concept_rate_lo'], r['fluent_concept_rate_hi'])} | "
            f"{ci(r['gibberish_rate'], r['gibberish_rate_lo'], r['gibberish_rate_hi'])} | "
            f"{int(r['concepts_with_fluent_hit'])}/{int(r['n_concepts'])} | {r['nll_median']:.2f} |")


def elicitation_rows(run=MAIN) -> list[str]:
    es = table(run, "elicitation_summary")
    cfg = json.loads((run_dir(*run) / "config.json").read_text())["config"]
    return [elicitation_row(es, m, cfg["baseline_lmax"] if m in ("diffmean", "pca", "probe") else cfg["penalty_lmax"],
                            cfg["n_strengths"]) for m in ("unsteered", *METHODS)]


def step_rows() -> list[str]:
    es = table(MAIN, "elicitation_summary")
    rows = []
    for m in ("diffmean", "sector"):
        g = es[es["method"] == m].sort_values("step")
        rows.append(f"| {m} | " + " | ".join(f"{a:.2f} / {b:.2f}" for a, b in zip(g["concept_rate"],
                                                                                  g["fluent_concept_rate"])) + " |")
    return rows


def penalty_rows() -> list[str]:
    """Implication 1: the pooled penalty map's concept / gibberish rate per (p, step), the repo's step-1 exclusion."""
    from interplab.results import load_run

    pp = load_run(run_dir(*MAIN)).result("study").pooled_penalty
    r2, r3 = pp.rates(2), pp.rates(3)
    return [f"| {p:.1f} | " + " | ".join(f"{a:.2f} / {b:.2f}" for a, b in zip(r2[:, j], r3[:, j])) + " |"
            for j, p in enumerate(pp.ps)]


def contrast_rows() -> list[str]:
    """The paper's last-token read against the mean read on the same 10 concepts (the mean-read run's per-concept
    table restricted to them, summarised by the same function)."""
    from interplab.probes.crh.elicitation import elicitation_summary

    last = table(LAST, "elicitation_summary")
    names = set(table(LAST, "elicitation")["concept"])
    mean = elicitation_summary(table(MAIN, "elicitation")[lambda d: d["concept"].isin(names)], seed=0)
    rows = []
    for m in ("unsteered", "diffmean", "pca", "probe", "sector"):
        a, b = best_step(mean, m), best_step(last, m)
        rows.append(f"| {m} | {ci(a['fluent_concept_rate'], a['fluent_concept_rate_lo'], a['fluent_concept_rate_hi'])}"
                    f" | {ci(b['fluent_concept_rate'], b['fluent_concept_rate_lo'], b['fluent_concept_rate_hi'])} |")
    return rows


def numbers() -> dict[str, str]:
    from interplab.probes.crh.elicitation import sector_holdout
    from interplab.results import load_run

    s = summary(MAIN)
    out = {"threshold": f"{s['fluency_threshold_nll']:.2f}",
           "rho": f"{np.median(list(s['strength_unit'].values())):.0f}",
           "seconds": f"{s['seconds'] / 60:.0f}",
           "impl3": f"r = {s['impl3']['r']:+.3f} (permutation p = {s['impl3']['p_perm']:.2f}, "
                    f"{s['impl3']['n_pairs']} pairs)",
           "impl2": f"max r = {s['impl2_concept']['max_r']:.2f} at a = {s['impl2_concept']['a']:.2f} "
                    f"(permutation p of the max = {s['impl2_concept']['perm_p']:.2f}, n = "
                    f"{s['impl2_concept']['n_used']})",
           "impl1": ", ".join(f"p = {p}: {v:.2f}" for p, v in s["penalty_label2_rate_by_p_at_top_step"].items())}
    st = table(MAIN, "cylinder_stats")
    out["axis_norm"] = f"‖a‖ = {st.loc[st['layer'] == 10, 'axis_norm'].median():.2f}"
    last = summary(LAST)
    out["last_token"] = (f"{last['n_activated_samples']} of {last['n_samples']} test samples ever named their concept "
                         f"under penalty steering; gibberish up to {last['penalty_max_label3_rate']:.2f}")
    study = load_run(run_dir(*MAIN)).result("study")
    _, h = sector_holdout(study, seed=0)
    out["holdout"] = (f"{ci(h['heldout_gain'], h['heldout_gain_lo'], h['heldout_gain_hi'], '+.3f')} "
                      f"({h['n_positive']} concepts up, {h['n_negative']} down)")
    sp = summary(SPIRAL)
    fx, pl, ln = sp["helix"]["fixed"], sp["planar_helix"]["fixed"], sp["reference_helix"]["fixed"]
    out["spiral"] = (f"helix mean R²(cos, sin) {fx['mean_r2_cs']:.3f} (n = {fx['n_rot']:.2f}) vs flattened "
                     f"control {pl['mean_r2_cs']:.3f} vs LRH line {ln['mean_r2_cs']:.3f}")
    out["spiral_tokens"] = f"{sp['src'][0].lstrip('Ġ')!r} → {sp['dst'][0].lstrip('Ġ')!r}"
    from interplab.probes.crh.shape_selection import select_trajectory_shape

    sel = select_trajectory_shape(load_run(run_dir(*SPIRAL)).result("spiral").vectors.vectors)
    r2 = dict(zip(sel.table["shape"], sel.table["cv_r2"]))
    g = sel.gains.set_index("comparison")
    out["shape"] = (f"chooses the {sel.chosen}: held-out R² line {r2['line']:.3f}, arc {r2['arc']:.3f}, helix "
                    f"{r2['helix']:.3f}; helix − arc {ci(*g.loc['helix-arc', ['gain', 'lo', 'hi']], '+.4f')}")
    return out


# ---- the tests ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rows", [geometry_rows, elicitation_rows, step_rows, penalty_rows, contrast_rows],
                         ids=lambda f: f.__name__)
def test_tables_equal_the_outputs(rows):
    text = section()
    missing = [r for r in rows() if r not in text]
    assert not missing, "docs/crh.md rows that differ from the committed outputs:\n" + "\n".join(missing)


def test_quoted_numbers_equal_the_outputs():
    text = section()
    missing = {k: v for k, v in numbers().items() if v not in text}
    assert not missing, f"docs/crh.md numbers that differ from the committed outputs: {missing}"


def test_runs_were_made_with_the_documented_settings():
    main = json.loads((run_dir(*MAIN) / "config.json").read_text())["config"]
    assert main["model"] == "real:smollm2-135m-instruct" and main["data"] == "offline"
    assert (main["position"], main["strength_unit"], main["steer_layer"]) == ("mean", "resid", 10)
    assert main["n_train"] >= 25 and main["concepts"] == []          # all 25 lexicon concepts
    last = json.loads((run_dir(*LAST) / "config.json").read_text())["config"]
    same = lambda c: {k: v for k, v in c.items() if k not in ("position", "concepts", "control")}  # noqa: E731
    assert last["position"] == "last" and same(last) == same(main)   # (main predates `control`; last has 0 / false)
    assert len(set(table(LAST, "elicitation")["concept"])) == 10
    for read, run in GEOM.items():
        g = json.loads((run_dir(*run) / "config.json").read_text())["config"]
        assert g["position"] == read and g["control"] == 25 and not g["steer"]
        assert table(run, "control_stats")["control"].nunique() == 25


def readme_quotes() -> dict[str, str]:
    es, last = table(MAIN, "elicitation_summary"), table(LAST, "elicitation_summary")
    r, u = best_step(es, "diffmean"), best_step(es, "unsteered")
    n = numbers()
    return {"diffmean": ci(r["fluent_concept_rate"], r["fluent_concept_rate_lo"], r["fluent_concept_rate_hi"]),
            "unsteered": f"{u['fluent_concept_rate']:.2f}",
            "holdout": n["holdout"].split(" (")[0],
            "last": f"{last.loc[last['method'] != 'unsteered', 'fluent_concept_rate'].max():.2f}"}


def test_readme_quotes_equal_the_outputs():
    flat = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "results/crh-concepts-smollm2/" in flat
    missing = {k: v for k, v in readme_quotes().items() if v not in flat}
    assert not missing, f"README.md does not quote {missing}"
