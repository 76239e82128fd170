"""docs/lenses.md "On a real model" quotes the committed lenses-facts runs (results/lenses-facts-smollm2/,
results/lenses-facts-gemma3/) and the SmolLM2 atlas (results/atlas-smollm2/): every row is rebuilt here from the runs'
own files, so the docs cannot drift from the runs. Run as a script to print the rows for the docs."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from interplab.results.runs import shipped_runs
from tests.real_model_docs import assert_claim_table, doc_section

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "lenses.md"
MODELS = {"smollm2": "SmolLM2-135M-Instruct", "gemma3": "Gemma-3-270M"}
SECTION = "## On a real model: SmolLM2-135M-Instruct and Gemma-3-270M over 50 fact pairs"


def fact_runs() -> dict[str, Path]:
    return {d.parent.name.removeprefix("lenses-facts-"): d for d in shipped_runs("lenses-facts")
            if d.parent.name.startswith("lenses-facts-")}


def _summary(d: Path) -> dict:
    return json.loads((d / "json" / "summary.json").read_text())


def pair_rows() -> list[str]:
    rows = []
    for key, d in sorted(fact_runs().items(), reverse=True):
        s = _summary(d)
        rows.append(f"| {MODELS[key]} | {s['n_pairs']} ({len(s['relations'])} relations) | {s['n_included']} | "
                    f"{s['median_clean_metric']:.2f} / {s['median_corrupt_metric']:.2f} | {s['final_top1']:.2f} |")
    return rows


def _rank(v: float) -> str:
    return f"{v:.1f}" if v < 10 else f"{v:.0f}"


def rank_rows(layers_every: int = 1) -> list[str]:
    """The answer's logit-lens rank at the last token: median [IQR] and top-10 fraction, at chosen layers."""
    rows = []
    for key, d in sorted(fact_runs().items(), reverse=True):
        r = pd.read_csv(d / "tables" / "rank_per_layer.csv")
        L = len(r)
        pick = sorted({0, L // 2, L - 7, L - 6, L - 5, L - 3, L - 1})
        cells = [f"L{int(x.layer)} {_rank(x.median)} [{_rank(x.q25)}, {_rank(x.q75)}] ({x.top10:.2f})"
                 for x in r.iloc[pick].itertuples()]
        rows.append(f"| {MODELS[key]} | " + " | ".join(cells) + " |")
    return rows


def role_rows() -> list[str]:
    """resid_pre patching by role: the last layer where the subject's last token restores most, and the first where
    the last token does."""
    rows = []
    for key, d in sorted(fact_runs().items(), reverse=True):
        t = pd.read_csv(d / "tables" / "resid_roles.csv")
        sub = t[t["role"] == "subject_last"].set_index("layer")
        last = t[t["role"] == "last"].set_index("layer")
        cross = int(last.index[(last["mean"] > sub["mean"]).to_numpy()][0])
        rows.append(f"| {MODELS[key]} | {sub.loc[0, 'mean']:.2f} [{sub.loc[0, 'lo']:.2f}, {sub.loc[0, 'hi']:.2f}] | "
                    f"L{cross - 1}: {sub.loc[cross - 1, 'mean']:.2f} / {last.loc[cross - 1, 'mean']:.2f} | "
                    f"L{cross}: {sub.loc[cross, 'mean']:.2f} / {last.loc[cross, 'mean']:.2f} | "
                    f"{last['mean'].iloc[-1]:.2f} [{last['lo'].iloc[-1]:.2f}, {last['hi'].iloc[-1]:.2f}] |")
    return rows


def head_rows(n: int = 5) -> list[str]:
    rows = []
    for key, d in sorted(fact_runs().items(), reverse=True):
        t = pd.read_csv(d / "tables" / "top_heads.csv")
        for kind in ("patching", "dla"):
            top = t[t["map"] == kind].head(n)
            cells = [f"L{r.layer}H{r.head} {r.mean:+.2f} [{r.lo:+.2f}, {r.hi:+.2f}] ({r.boot_freq:.2f})"
                     for r in top.itertuples()]
            rows.append(f"| {MODELS[key]} | {kind} | " + " | ".join(cells) + " |")
    return rows


def stability_rows() -> list[str]:
    rows = []
    for key, d in sorted(fact_runs().items(), reverse=True):
        a = pd.read_csv(d / "tables" / "agreement.csv").set_index("map")
        for kind in ("patching", "dla"):
            r = a.loc[kind]
            rows.append(f"| {MODELS[key]} | {kind} | {r['overlap_mean']:.2f} [{r['overlap_lo']:.2f}, "
                        f"{r['overlap_hi']:.2f}] | {r['rho_mean']:.2f} [{r['rho_lo']:.2f}, {r['rho_hi']:.2f}] |")
    return rows


def agreement_rows() -> list[str]:
    """Head-map agreement: raw ρ (interval over pairs), the layer-partialled ρ with its
    within-layer p and Holm p."""
    rows = []
    for key, d in sorted(fact_runs().items(), reverse=True):
        m = pd.read_csv(d / "tables" / "map_agreement.csv")
        for r in m.itertuples():
            rows.append(f"| {MODELS[key]} | {r.map_a} vs {r.map_b} | {r.rho:+.2f} "
                        f"[{r.rho_lo:+.2f}, {r.rho_hi:+.2f}] | {r.rho_partial:+.2f} | "
                        f"{r.p_partial:.2g} | {r.p_holm:.2g} | {r.overlap:.1f} "
                        f"[{r.overlap_lo:.1f}, {r.overlap_hi:.1f}] | {r.chance_overlap:.3f} |")
    return rows


def attribution_rows() -> list[str]:
    rows = []
    for key, d in sorted(fact_runs().items(), reverse=True):
        a = pd.read_csv(d / "tables" / "attribution_summary.csv")
        for r in a.itertuples():
            rows.append(f"| {MODELS[key]} | {r.site} | {r.method} | {r.median:.2f} [{r.lo:.2f}, {r.hi:.2f}] | "
                        f"{r.pearson_median:.2f} | {r.n_pairs} |")
    return rows


def atlas_run() -> Path:
    return [d for d in shipped_runs("atlas") if d.parent.name == "atlas-smollm2"][-1]


def atlas_rows() -> list[str]:
    """The SmolLM2 atlas (`interplab run atlas --set models=real:smollm2-135m-instruct`): its
    agreement table, raw ρ beside the depth-partialled ρ, its p against the layer-structure null,
    the Holm p and the effective units."""
    a = pd.read_csv(atlas_run() / "tables" / "agreement.csv")
    rows = []
    for r in a.itertuples():
        top = "–" if pd.isna(r.topk_overlap) else f"{r.topk_overlap:.1f}"
        rows.append(f"| {r.axis} | {r.map_a} vs {r.map_b} | {r.rho:+.2f} | {r.rho_partial:+.2f} | "
                    f"{r.p_partial:.2g} | {r.p_holm:.2g} | {r.n} ({r.n_eff:.1f}) | {top} |")
    return rows


def all_rows() -> list[str]:
    return (pair_rows() + rank_rows() + role_rows() + head_rows() + stability_rows() + agreement_rows()
            + attribution_rows() + atlas_rows())


def test_runs_are_shipped():
    assert set(fact_runs()) == {"smollm2", "gemma3"}


def test_docs_quote_the_runs():
    doc = DOC.read_text()
    for line in all_rows():
        assert line in doc, f"docs/lenses.md lacks the row {line!r}"


def test_claim_tables_are_the_runs_validity_reports():
    """The claim tables (claim | measured | validity checks | verdict) are the saved reports of
    the three runs."""
    section = doc_section("lenses.md", SECTION)
    runs = [fact_runs()["smollm2"], fact_runs()["gemma3"], atlas_run()]
    assert_claim_table(section, *runs)


def test_saved_reports_are_what_the_verdict_functions_give():
    """Each committed report equals its verdict function applied to the run's own saved results, so a
    change to the decision rules or checks shows here until the runs are redone."""
    from interplab.probes.lenses.atlas_validity import atlas_verdicts
    from interplab.probes.lenses.facts_validity import fact_verdicts
    from interplab.probes.validity import ValidityReport
    from interplab.results import load_run

    for d in fact_runs().values():
        run = load_run(d)
        got = ValidityReport.of(fact_verdicts(run.result("study"), run.table("map_agreement")))
        assert got.render() == run.validity().render(), d
    run = load_run(atlas_run())
    got = ValidityReport.of(atlas_verdicts(run.result("atlas_smollm2-135m-instruct")))
    assert got.render() == run.validity().render()


def smollm2_quotes() -> list[str]:
    """The numbers the SmolLM2 prose quotes, rebuilt from the run."""
    d = fact_runs()["smollm2"]
    s = _summary(d)
    r = pd.read_csv(d / "tables" / "rank_per_layer.csv").iloc[-1]
    t = pd.read_csv(d / "tables" / "resid_roles.csv")
    sub = t[t["role"] == "subject_last"].set_index("layer")["mean"]
    last = t[t["role"] == "last"].set_index("layer")["mean"]
    top = pd.read_csv(d / "tables" / "top_heads.csv")
    p0 = top[top["map"] == "patching"].iloc[0]
    d0 = top[top["map"] == "dla"].iloc[0]
    ag = pd.read_csv(d / "tables" / "map_agreement.csv").set_index(["map_a", "map_b"])
    pd_, pt = ag.loc[("patching", "dla")], ag.loc[("patching", "truth")]
    at = pd.read_csv(d / "tables" / "attribution_summary.csv").set_index(["site", "method"])["median"]
    m = lambda v: f"{v:.2f}".replace("-", "−")                                       # noqa: E731
    return [f"to {r['median']:.1f} after the last", f"top 10 for {r['top10'] * 100:.0f} % of the pairs, top-1 for "
            f"{s['final_top1'] * 100:.0f} %", f"subject's last token ({sub[23]:.2f})", f"last token ({last[24]:.2f})",
            f"L{p0['layer']}H{p0['head']} alone restores {p0['mean']:.2f} [{p0['lo']:.2f}, {p0['hi']:.2f}]",
            f"(+{d0['mean']:.2f} logits)", f"share {round(pd_['overlap'] * pd_['k'])} heads (chance "
            f"{pd_['chance_overlap'] * pd_['k']:.1f} of a head)", f"(ρ {pd_['rho']:.2f})",
            f"ρ(|patching|, S) with the layer partialled out is {m(pt['rho_partial'])} "
            f"(p {pt['p_partial']:.2g} with heads permuted within layers, Holm p "
            f"{pt['p_holm']:.2g})",
            f"the raw ρ is {m(pt['rho'])} [{m(pt['rho_lo'])}, {m(pt['rho_hi'])}]",
            f"(ρ {pd_['rho_partial']:+.2f} with the layer partialled out, Holm p "
            f"{pd_['p_holm']:.2g})",
            *held_out_quotes(d, "L23H4 +{m:.2f} [{lo:+.2f}, {hi:+.2f}] on {n} pairs"),
            f"Spearman {at[('attn_z', 'gradient')]:.2f}; resid_pre {at[('resid_pre', 'gradient')]:.2f})",
            f"({at[('attn_z', 'ig')]:.2f}; resid_pre {at[('resid_pre', 'ig')]:.2f})"]


def gemma_quotes() -> list[str]:
    d = fact_runs()["gemma3"]
    r = pd.read_csv(d / "tables" / "rank_per_layer.csv").set_index("layer")
    t = pd.read_csv(d / "tables" / "resid_roles.csv")
    sub = t[t["role"] == "subject_last"].set_index("layer")["mean"]
    last = t[t["role"] == "last"].set_index("layer")["mean"]
    top = pd.read_csv(d / "tables" / "top_heads.csv")
    p = top[top["map"] == "patching"]
    dla = top[top["map"] == "dla"]
    stab = pd.read_csv(d / "tables" / "agreement.csv").set_index("map").loc["dla"]
    ag = pd.read_csv(d / "tables" / "map_agreement.csv").set_index(["map_a", "map_b"])
    pt, pdl = ag.loc[("patching", "truth")], ag.loc[("patching", "dla")]
    return [f"(median rank {r.loc[12, 'median']:.1f}; {r.loc[11, 'median']:.0f} after layer 11)",
            f"token ({sub[12]:.2f} at L12) to the last token ({last[13]:.2f} at L13)",
            f"carried by L{p.iloc[0]['layer']}H{p.iloc[0]['head']} ({p.iloc[0]['mean']:.2f} [{p.iloc[0]['lo']:.2f}, "
            f"{p.iloc[0]['hi']:.2f}] alone), with L{p.iloc[1]['layer']}H{p.iloc[1]['head']} and "
            f"L{p.iloc[2]['layer']}H{p.iloc[2]['head']} next",
            "(" + ", ".join(f"L{h['layer']}H{h['head']} {h['mean']:+.2f}" for _, h in dla.iloc[:3].iterrows())
            .replace("-", "−") + ")",
            f"(split-half overlap {stab['overlap_mean']:.2f})",
            f"share {pdl['overlap'] * pdl['k']:.0f} of their top-10 heads (chance {pdl['chance_overlap'] * 10:.2f})",
            f"their ρ is {pdl['rho']:+.2f} raw and {pdl['rho_partial']:+.2f} within layers "
            f"(p {pdl['p_partial']:.2g}, Holm p {pdl['p_holm']:.2g})",
            f"(raw ρ {pt['rho']:.2f} with patching; {pt['rho_partial']:+.2f} within layers, "
            f"Holm p {pt['p_holm']:.2g}, on 72 heads)".replace("-", "−"),
            *held_out_quotes(d, "Gemma's L12H2 +{m:.2f}")]


def held_out_quotes(d: Path, fmt: str) -> list[str]:
    """The recall head's held-out effect as the prose quotes it, from the run's validity report."""
    import re

    from tests.real_model_docs import validity_report

    v = next(v for v in validity_report(d).verdict_list() if "top recall head" in v.claim)
    num = r"([+-][\d.]+)"
    got = re.search(rf"on (\d+) held-out pairs it restores {num} \[{num}, {num}\]", v.measured)
    n, m, lo, hi = int(got[1]), float(got[2]), float(got[3]), float(got[4])
    return [fmt.format(n=n, m=m, lo=lo, hi=hi)]


def atlas_quotes() -> list[str]:
    """The SmolLM2 atlas prose: the pair's span, the raw profiles' effective n and the
    depth-partialled layer row."""
    import json

    from interplab.core.result import Result
    from interplab.probes import stats

    d = atlas_run()
    a = Result.load_any(d / "atlas_smollm2-135m-instruct")
    lay = a.agreement.set_index(["map_a", "map_b"]).loc[("pr", "patching_resid")]
    pr, patching = (stats.rankdata(a.layer_maps[k]) for k in ("pr", "patching_resid"))
    raw = stats.effective_n(pr, patching)
    dur = json.loads((d / "run.json").read_text())["duration_s"]
    return [f"`results/atlas-smollm2/defaults`, {dur:.0f} s)",
            f"(clean − corrupt logit difference "
            f"{a.lens_metrics['clean'] - a.lens_metrics['corrupt']:.2f})",
            f"(the raw profiles are worth {raw:.1f} independent points)",
            f"With the depth partialled out ρ is {lay.rho_partial:+.2f}, p {lay.p_partial:.2g} "
            f"against phase surrogates, Holm p {lay.p_holm:.2g}",
            f"The detrended profiles are worth {lay.n_eff:.1f} layers"]


def test_docs_prose_quotes_the_runs():
    flat = " ".join(DOC.read_text().split())
    for q in smollm2_quotes() + gemma_quotes() + atlas_quotes():
        assert q in flat, f"docs/lenses.md does not quote {q!r}"


if __name__ == "__main__":
    for f in (pair_rows, rank_rows, role_rows, head_rows, stability_rows, agreement_rows, attribution_rows,
              atlas_rows):
        print(f.__name__, *f(), sep="\n")
        print()
