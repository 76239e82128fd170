"""docs/truth_scores.md "On a real model" quotes the committed SmolLM2 runs (results/truth-scores-smollm2/; the
gating runs are checked in test_gating_docs.py): every table row is rebuilt here from the run's own files, so the
docs cannot drift from the runs. Run as a script to print the rows for the docs."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from interplab.results import load_run
from interplab.results.runs import shipped_runs

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "truth_scores.md"


def _fmt_layers(layers: list[int]) -> str:
    if not layers:
        return "none"
    return f"{min(layers)}–{max(layers)} ({len(layers)} layers)"


def map_runs() -> dict[str, Path]:
    """{"triplets" | "pairs": run folder} of the shipped SmolLM2 world-facts maps."""
    out = {}
    for d in shipped_runs("truth-scores"):
        if d.parent.name != "truth-scores-smollm2" or not (d / "facts_map").exists():
            continue
        summ = load_run(d).json("summary")
        out["triplets" if "distractor" in summ["candidates"] else "pairs"] = d
    return out


def map_rows() -> list[str]:
    rows = []
    for kind, d in sorted(map_runs().items(), reverse=True):   # triplets first
        s = load_run(d).json("summary")
        t = s["top_head"]
        rows.append(f"| {kind} ({', '.join(s['candidates'])}) | {s['n_facts']} / {s['n_texts']} | "
                    f"{s['mean_S']:.3f} | {s['null_mean_S']:.3f} | {s['null_max_threshold']:.3f} | "
                    f"L{t['layer']}H{t['head']} {t['S']:.3f} [{t['lo']:.3f}, {t['hi']:.3f}] | "
                    f"{s['n_sig_maxt']} / {s['n_heads']} | {s['n_sig_bh']} | {_fmt_layers(s['sig_layers'])} | "
                    f"{s['rho_S_evidence']:.2f} | {s['stability']['r_min']:.3f} |")
    return rows


def gemma_row() -> str:
    d = [d for d in shipped_runs("truth-scores") if d.parent.name == "truth-scores-gemma3"][-1]
    s = load_run(d).json("summary")
    t = s["top_head"]
    return (f"| Gemma-3-270M, triplets | {s['n_facts']} / {s['n_texts']} | {s['mean_S']:.3f} | {s['null_mean_S']:.3f} | "
            f"{s['null_max_threshold']:.3f} | L{t['layer']}H{t['head']} {t['S']:.3f} [{t['lo']:.3f}, {t['hi']:.3f}] | "
            f"{s['n_sig_maxt']} / {s['n_heads']} | {s['n_sig_bh']} | {_fmt_layers(s['sig_layers'])} | "
            f"{s['rho_S_evidence']:.2f} | {s['stability']['r_min']:.3f} |")


def per_layer_row(kind: str = "triplets") -> str:
    per = pd.read_csv(map_runs()[kind] / "tables" / "per_layer.csv")
    return "| " + " | ".join(str(int(v)) for v in per["n_sig_maxt"]) + " |"


def test_docs_quote_the_world_facts_maps():
    runs = map_runs()
    assert set(runs) == {"triplets", "pairs"}, runs
    doc = DOC.read_text()
    for line in map_rows() + [per_layer_row(), gemma_row()]:
        assert line in doc, f"docs/truth_scores.md lacks the row {line!r}"
    # the numbers the prose and the verdict table quote
    tri, pairs = (load_run(runs[k]).json("summary") for k in ("triplets", "pairs"))
    per_t = pd.read_csv(runs["triplets"] / "tables" / "per_layer.csv")
    per_p = pd.read_csv(runs["pairs"] / "tables" / "per_layer.csv")
    assert (per_t["n_sig_maxt"][:5] == 0).all() and per_t["n_sig_maxt"][5] > 0
    quoted = [f"{pairs['n_sig_maxt']} of {pairs['n_heads']} heads", f"layer 0 already has {per_p['n_sig_maxt'][0]}",
              f"(S up to {pairs['top_head']['S']:.3f})", f"null's mean S is {tri['null_mean_S']:.3f}",
              f"the {tri['n_sig_maxt']} that remain", f"best head at L{tri['top_head']['layer']}H"
              f"{tri['top_head']['head']} (S {tri['top_head']['S']:.3f})",
              f"best S {tri['top_head']['S']:.3f} against a null threshold of {tri['null_max_threshold']:.3f}",
              f"= {tri['rho_S_evidence']:.2f} over {tri['n_heads']} heads",
              f"r ≥ {tri['stability']['r_min']:.3f}, top-10 overlap ≥ {tri['stability']['top10_overlap_min']:g}",
              f"best head is L{pairs['top_head']['layer']}H{pairs['top_head']['head']} ({pairs['top_head']['S']:.3f})"]
    flat = " ".join(doc.split())      # prose is wrapped: compare with single spaces
    for q in quoted:
        assert " ".join(q.split()) in flat, f"docs/truth_scores.md does not quote {q!r}"


def lineage_row() -> str:
    d = [d for d in shipped_runs("truth-lineage") if d.parent.name == "truth-lineage-smollm2"][-1]
    res = load_run(d).result("lineage")
    r = res.lineage.iloc[0]
    w = res.weight_summary.iloc[0]
    pl = res.per_layer["descendant"]
    return (f"| base ↔ descendant | {r['pearson']:.3f} | {r['spearman']:.3f} | {r['pearson_centered']:.3f} | "
            f"{r['topk_jaccard']:.3f} (k = {int(r['k'])}) | {r['perm_p']:.3f} | {r['null_mean']:.3f} / "
            f"{r['null_q95']:.3f} | {pl.min():.2f} (L{int(pl.argmin())}) – {pl.max():.2f} | "
            f"{w['mean_cos_OV']:.6f} | {w['rho_cos_OV']:.2f} |")


def test_docs_quote_the_lineage_run():
    assert lineage_row() in DOC.read_text(), lineage_row()


def test_readme_quotes_the_smollm2_runs():
    tri = load_run(map_runs()["triplets"]).json("summary")
    flat = " ".join((ROOT / "README.md").read_text().split())
    t = tri["top_head"]
    for q in (f"{tri['n_facts']} counterfactual world facts", f"{tri['n_sig_maxt']} of {tri['n_heads']} heads",
              f"best L{t['layer']}H{t['head']}, S {t['S']:.3f}"):   # the gating sentences: test_gating_docs.py
        assert q in flat, f"README.md does not quote {q!r}"


if __name__ == "__main__":
    print("\n".join(map_rows()), "\n", per_layer_row(), "\n", gemma_row(), "\n")
