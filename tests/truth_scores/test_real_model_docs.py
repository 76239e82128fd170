"""docs/truth_scores.md "On a real model" quotes the committed runs (results/truth-scores-smollm2/,
results/truth-scores-gemma3/, results/truth-lineage-smollm2/; the gating runs: test_gating_docs.py): every table row
is rebuilt here from the run's own files and every claim-table row from its saved validity report, so the docs
cannot drift from the runs. Run as a script (`python -m tests.truth_scores.test_real_model_docs`) to print the rows
for the docs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

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
    names = {"truth-scores-smollm2": "SmolLM2-135M-Instruct", "truth-scores-gemma3": "Gemma-3-270M"}
    found = {}
    for d in shipped_runs("truth-scores"):
        if (d / "facts_map").exists() and (d / "validity").exists() and d.parent.name in names:
            found[names[d.parent.name]] = d
    # the docs' tables list SmolLM2 first
    return {n: found[n] for n in names.values() if n in found}


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
    c_rows = []
    for name, d in map_runs().items():
        c = load_run(d).json("contrast")
        b = c["best_held_out"]
        n_heads = len(c["auroc_map"]) * len(c["auroc_map"][0])
        top = c["top"]
        c_rows.append(f"| {name} | {c['mean_auroc']:.3f} | {c['mean_auroc_memory']:.3f} | "
                      f"{c['null_max_threshold']:.3f} | {c['n_sig_maxt']} / {n_heads} | "
                      f"{c['n_sig_lo_margin']} | L{top['layer']}H{top['head']} {top['auroc']:.3f} "
                      f"[{top['lo']:.3f}, {top['hi']:.3f}] | L{b['layer']}H{b['head']} "
                      f"{b['value']:.3f} [{b['lo']:.3f}, {b['hi']:.3f}] | "
                      f"{_fmt_layers(c['sig_layers'])} |")
    return s_rows + b_rows + c_rows


def per_layer_rows(name: str = "SmolLM2-135M-Instruct") -> list[str]:
    """Significant heads per layer (maxT): on S, on the pooled AUROC and on the context answer
    against the in-context distractor."""
    run = load_run(map_runs()[name])
    fm = run.result("facts_map")
    return ["| S | " + " | ".join(str(int(v)) for v in fm.significant("maxt", "S").sum(1)) + " |",
            "| AUROC, pooled | "
            + " | ".join(str(int(v)) for v in fm.significant("maxt", "auroc").sum(1)) + " |",
            "| AUROC, context vs distractor | "
            + " | ".join(str(v) for v in run.json("contrast")["sig_per_layer"]) + " |"]


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
    sig_S = _sig_S(runs["SmolLM2-135M-Instruct"])
    es = smol["effects"]["S"]
    cons = {n: load_run(d).json("contrast") for n, d in runs.items()}
    sm = cons["SmolLM2-135M-Instruct"]
    quoted = [(f"Of the {smol['n_sig_maxt']} heads that beat the family-wise null on S, "
               f"{int((sig_S < 0.70).sum())} of them have S below 0.70 and only "
               f"{es['n_sig_S_margin']} clear"),
              (f"{es['n_sig_at_majority']} sit exactly at the majority rate (the maxT threshold, "
               f"{smol['null_max_threshold']:.3f}, lies above it)"),
              f"median S of the significant heads {np.median(sig_S):.3f}",
              (f"all but {es['n_sig'] - es['n_sig_auroc_lo_margin']} of them "
               f"({es['n_sig_auroc_lo_margin']}) have a fact-bootstrap lower bound ≥ 0.60"),
              f"(mean balanced accuracy {smol['mean_balanced_accuracy']:.3f})",
              (f"mean AUROC of {sm['mean_auroc_memory']:.3f} (SmolLM2) and "
               f"{cons['Gemma-3-270M']['mean_auroc_memory']:.3f} (Gemma)"),
              f"Layers 0–2 hold {sum(sm['sig_per_layer'][:3])} significant heads",
              f"scores {sm['best_held_out']['value']:.3f} on facts it was not chosen on"]
    for q in quoted:
        assert " ".join(q.split()) in flat, f"docs/truth_scores.md does not quote {q!r}"


def _sig_S(d: Path) -> np.ndarray:
    """S of the heads that beat the family-wise null on S."""
    fm = load_run(d).result("facts_map")
    return fm.scores.scores[fm.significant("maxt", "S")]


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
    # the prose: the descendant's drift report and the last layers' within-layer r
    drift = json.loads((lineage_run().parent / "descendant-drift" / "drift.json").read_text())
    pl = load_run(lineage_run()).result("lineage").per_layer["descendant"]
    kp, kf = drift["kl_pydoc_heldout"], drift["kl_world_facts"]
    flat = " ".join(doc.split())
    moved = f"{drift['weights']['global_rel_change']:.2%}".replace("%", " %")
    for q in (f"the weights moved by {moved}",
              (f"{kp['mean_kl']:.3f} nats on {kp['n_texts']} held-out pydoc windows "
               f"(cross-entropy {kp['ce_base']:.3f} → {kp['ce_desc']:.3f}"),
              f"{kf['mean_kl']:.3f} nats on the {kf['n_texts']:,} world-fact texts",
              f"({kf['ce_base']:.3f} → {kf['ce_desc']:.3f}",
              "it falls to " + ", ".join(f"L{i} {pl[i]:.2f}" for i in range(len(pl) - 3, len(pl)))):
        assert q in flat, f"docs/truth_scores.md does not quote {q!r}"


def test_readme_quotes_the_smollm2_maps_and_lineage():
    run = load_run(map_runs()["SmolLM2-135M-Instruct"])
    tri, c = run.json("summary"), run.json("contrast")
    b = c["best_held_out"]
    g = load_run(map_runs()["Gemma-3-270M"]).json("contrast")["best_held_out"]
    lin = load_run(lineage_run()).result("lineage")
    flat = " ".join((ROOT / "README.md").read_text().split())
    for q in (f"{tri['n_facts']} counterfactual world facts",
              f"{c['n_sig_maxt']} of {tri['n_heads']} heads",
              (f"best head L{b['layer']}H{b['head']}, chosen on half of the facts, AUROC "
               f"{b['value']:.3f} [{b['lo']:.3f}, {b['hi']:.3f}] on the other half"),
              f"(Gemma-3-270M: L{g['layer']}H{g['head']}, {g['value']:.3f})",
              f"mean balanced accuracy {tri['mean_balanced_accuracy']:.3f}",
              f"r {lin.lineage.iloc[0]['pearson']:.3f}",
              f"fold-seed reliability {lin.reliability['fold_seed_r_min']:.3f}",
              f"weights moved {lin.drift['global_rel_change']:.1%}".replace("%", " %")):
        assert q in flat, f"README.md does not quote {q!r}"


if __name__ == "__main__":
    from interplab.probes.validity import ValidityReport

    print("\n".join(map_rows() + per_layer_rows() + lineage_rows()), "\n")
    for d in [*map_runs().values(), lineage_run()]:
        print(d.name, "\n" + ValidityReport.load(d / "validity").markdown(), "\n")
