"""docs/truth_scores.md "On a real model" quotes the committed runs (results/truth-scores-smollm2/,
results/truth-scores-gemma3/, results/truth-lineage-smollm2/, results/truth-gating-sweep-smollm2/): every table row
is rebuilt here from the run's own files and every claim-table row from its saved validity report, so the docs
cannot drift from the runs. Run as a script (`python -m tests.truth_scores.test_real_model_docs`) to print the rows
for the docs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from interplab.results import load_run
from interplab.results.runs import shipped_runs
from tests.real_model_docs import assert_claim_table, doc_section

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "truth_scores.md"


def _fmt_layers(layers: list[int]) -> str:
    if not layers:
        return "none"
    return f"{min(layers)}–{max(layers)} ({len(layers)} layers)"


def map_runs() -> dict[str, Path]:
    """{"SmolLM2-135M-Instruct" | "Gemma-3-270M": run folder} of the shipped world-facts maps with distractors."""
    out = {}
    for d in shipped_runs("truth-scores"):
        if not (d / "facts_map").exists() or not (d / "validity").exists():
            continue
        name = {"truth-scores-smollm2": "SmolLM2-135M-Instruct", "truth-scores-gemma3": "Gemma-3-270M"}.get(
            d.parent.name)
        if name:
            out[name] = d
    return out


def _summary(d: Path) -> dict:
    return load_run(d).json("summary")


def map_rows() -> list[str]:
    """Table 1 (S, the faithful map, with its effect sizes) and table 2 (the balanced metric) of each model."""
    s_rows, b_rows = [], []
    for name, d in map_runs().items():
        s = _summary(d)
        t, es, ea = s["top_head"], s["effects"]["S"], s["effects"]["auroc"]
        s_rows.append(f"| {name} | {s['n_facts']} / {s['n_texts']} | {s['majority_rate']:.3f} | {s['mean_S']:.3f} | "
                      f"{s['null_mean_S']:.3f} | {s['null_max_threshold']:.3f} | "
                      f"L{t['layer']}H{t['head']} {t['S']:.3f} [{t['lo']:.3f}, {t['hi']:.3f}] | "
                      f"{s['n_sig_maxt']} / {s['n_heads']} | {es['n_sig_S_margin']} | {es['n_sig_at_majority']} | "
                      f"{es['n_sig_auroc_lo_margin']} | {s['n_sig_bh']} | {_fmt_layers(s['sig_layers'])} |")
        b, sh = s["best_held_out"], s["split_half"]
        b_rows.append(f"| {name} | {s['mean_auroc']:.3f} | {s['mean_balanced_accuracy']:.3f} | "
                      f"{s['null_mean_auroc']:.3f} | {s['null_max_threshold_auroc']:.3f} | "
                      f"{s['n_sig_maxt_auroc']} / {s['n_heads']} | {ea['n_sig_auroc_lo_margin']} | "
                      f"L{b['layer']}H{b['head']} {b['value']:.3f} [{b['lo']:.3f}, {b['hi']:.3f}] | "
                      f"{_fmt_layers(s['sig_layers_auroc'])} | {s['rho_auroc_evidence']:.2f} | "
                      f"{s['stability']['r_min']:.3f} / {s['stability_auroc']['r_min']:.3f} | "
                      f"{sh['S']['r_full']:.3f} / {sh['auroc']['r_full']:.3f} |")
    return s_rows + b_rows


def per_layer_rows(name: str = "SmolLM2-135M-Instruct") -> list[str]:
    """Significant heads per layer, maxT on S and on AUROC."""
    fm = load_run(map_runs()[name]).result("facts_map")
    return ["| S | " + " | ".join(str(int(v)) for v in fm.significant("maxt", "S").sum(1)) + " |",
            "| AUROC | " + " | ".join(str(int(v)) for v in fm.significant("maxt", "auroc").sum(1)) + " |"]


def gating_run() -> Path | None:
    found = [d for d in shipped_runs("truth-gating-sweep") if d.parent.name == "truth-gating-sweep-smollm2"]
    return found[-1] if found else None


def gating_rows() -> list[str]:
    res = load_run(gating_run()).result("facts_gating")
    rows = []
    ev = res.eval.set_index(["readout", "condition"])
    diff = res.diff.set_index("readout")
    for readout in ("generated_context", "generated_memory", "generated_distractor", "forced_choice"):
        u, g, d = ev.loc[(readout, "ungated")], ev.loc[(readout, "gated")], diff.loc[readout]
        rows.append(f"| {readout} | {u['rate']:.3f} [{u['lo']:.3f}, {u['hi']:.3f}] | "
                    f"{g['rate']:.3f} [{g['lo']:.3f}, {g['hi']:.3f}] | "
                    f"{d['gated_minus_ungated']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] |")
    s = res.summary()
    rows.append(f"chosen on the tune split: mode {res.mode}, α {res.alpha:g} (site {res.site}, rebase {res.rebase}); "
                f"null of {s['n_maps']} within-layer shuffled maps: mean {s['null_mean']:.3f}, 95th percentile "
                f"{s['null_q95']:.3f}, p = {s['p_gated_vs_null']:.3f}")
    return rows


def test_docs_quote_the_world_facts_maps():
    runs = map_runs()
    assert set(runs) == {"SmolLM2-135M-Instruct", "Gemma-3-270M"}, runs
    doc = DOC.read_text()
    for line in map_rows() + per_layer_rows():
        assert line in doc, f"docs/truth_scores.md lacks the row {line!r}"
    section = doc_section("truth_scores.md")
    assert_claim_table(section, *runs.values())
    # the numbers the prose quotes
    smol = _summary(runs["SmolLM2-135M-Instruct"])
    flat = " ".join(doc.split())      # prose is wrapped: compare with single spaces
    quoted = [f"{smol['n_sig_maxt']} heads that beat the family-wise null on S",
              f"{smol['effects']['S']['n_sig_at_majority']} sit exactly at the majority rate",
              f"median S of the significant heads {_median_sig_S(runs['SmolLM2-135M-Instruct']):.3f}"]
    for q in quoted:
        assert " ".join(q.split()) in flat, f"docs/truth_scores.md does not quote {q!r}"


def _median_sig_S(d: Path) -> float:
    fm = load_run(d).result("facts_map")
    return float(np.median(fm.scores.scores[fm.significant("maxt", "S")]))


def test_docs_quote_the_gating_run():
    assert gating_run() is not None
    doc = DOC.read_text()
    for line in gating_rows():
        assert line in doc, f"docs/truth_scores.md lacks {line!r}"


def lineage_run() -> Path:
    return [d for d in shipped_runs("truth-lineage") if d.parent.name == "truth-lineage-smollm2"][-1]


def lineage_rows() -> list[str]:
    res = load_run(lineage_run()).result("lineage")
    r = res.lineage.iloc[0]
    w = res.weight_summary.iloc[0]
    pl = res.per_layer["descendant"]
    rel, dr = res.reliability, res.drift
    return [(f"| base ↔ descendant | {r['pearson']:.3f} | {r['spearman']:.3f} | {r['pearson_centered']:.3f} | "
             f"{r['topk_jaccard']:.3f} (k = {int(r['k'])}) | {r['perm_p']:.3f} | {r['null_mean']:.3f} / "
             f"{r['null_q95']:.3f} | {np.nanmin(pl):.2f} (L{int(np.nanargmin(pl))}) – {np.nanmax(pl):.2f}"
             f"{_undefined(pl)} | "
             f"{w['mean_cos_OV']:.6f} | {w['rho_cos_OV']:.2f} |"),
            (f"| {rel['fold_seed_r_min']:.3f} | {rel['split_half_r']:.3f} ({rel['split_half_full']:.3f}) | "
             f"{rel['r_auroc']:.3f} | {rel['split_half_full_auroc']:.3f} | {dr['global_rel_change']:.2%} | "
             f"{dr['one_minus_cos_OV']:.2g} | {dr['kl_facts']:.3f} | {dr['ce_base']:.3f} → {dr['ce_desc']:.3f} |")]


def _undefined(per_layer) -> str:
    """The layers whose within-layer r is undefined (a map constant across that layer's heads)."""
    bad = [int(i) for i in np.flatnonzero(~np.isfinite(per_layer))]
    return f"; undefined at {', '.join(f'L{i}' for i in bad)}" if bad else ""


def test_docs_quote_the_lineage_run():
    doc = DOC.read_text()
    for line in lineage_rows():
        assert line in doc, line
    assert_claim_table(doc_section("truth_scores.md"), lineage_run())


def test_readme_quotes_the_smollm2_runs():
    tri = load_run(map_runs()["SmolLM2-135M-Instruct"]).json("summary")
    res = load_run(gating_run()).result("facts_gating")
    d = res.diff.set_index("readout").loc["forced_choice"]
    flat = " ".join((ROOT / "README.md").read_text().split())
    t = tri["top_head"]
    for q in (f"{tri['n_facts']} counterfactual world facts", f"{tri['n_sig_maxt']} of {tri['n_heads']} heads",
              f"best L{t['layer']}H{t['head']}, S {t['S']:.3f}",
              f"(forced choice {d['gated_minus_ungated']:+.3f}".replace("-", "−"),
              f"p = {res.summary()['p_gated_vs_null']:.3f} against {res.summary()['n_maps']} shuffled maps"):
        assert q in flat, f"README.md does not quote {q!r}"


if __name__ == "__main__":
    from interplab.probes.validity import ValidityReport

    print("\n".join(map_rows() + per_layer_rows() + lineage_rows()), "\n")
    for d in [*map_runs().values(), lineage_run()]:
        print(d.name, "\n" + ValidityReport.load(d / "validity").markdown(), "\n")
    if gating_run() is not None:
        print("\n".join(gating_rows()))
