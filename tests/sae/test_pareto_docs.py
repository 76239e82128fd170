"""docs/sae.md's matched-L0 numbers equal the committed `sae-pareto` run (results/sae-pareto/): every table row the
docs quote is regenerated here from the run's matched_l0.csv and must appear verbatim, and the prose numbers
are read from the same outputs, so docs and outputs cannot drift."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNS = sorted((ROOT / "results" / "sae-pareto").glob("2*"))
DOCS = ROOT / "docs" / "sae.md"
METHODS = ("FAST", "BT(F)", "BT(P)")
EVAL_NAMES = {"fast": "FAST", "packed": "packed"}
ARCH_NAMES = {"topk": "TopK", "standard": "Standard"}
DOC_TABLES = (("log2_mse", ".3f"), ("delta_ce_response", ".4f"), ("kl_sae_response", ".3f"))


def _ci(mean: float, lo: float, hi: float, fmt: str) -> str:
    if not math.isfinite(lo):
        return f"{mean:{fmt}}"
    return f"{mean:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def doc_rows(matched: pd.DataFrame, metric: str, fmt: str = ".3f") -> list[str]:
    """The markdown rows of the docs table for `metric`: one per (eval, architecture, L0 target), columns FAST,
    BT(F), BT(P) (mean [95% t interval]) and FAST - BT(F), FAST - BT(P) (paired by seed)."""
    rows = []
    for (ev, arch, tg), g in matched.groupby(["eval", "architecture", "l0_target"], sort=False):
        by = {r["method"]: r for _, r in g.iterrows()}
        cells = [EVAL_NAMES[ev], ARCH_NAMES[arch], f"{tg:.0f}" if arch == "topk" else f"{tg:.1f}"]
        cells += [_ci(by[m][f"{metric}_mean"], by[m][f"{metric}_lo"], by[m][f"{metric}_hi"], fmt) for m in METHODS]
        cells += [_ci(by[m][f"fast_minus_{metric}_mean"], by[m][f"fast_minus_{metric}_lo"],
                      by[m][f"fast_minus_{metric}_hi"], "+" + fmt) for m in METHODS[1:]]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _range(values, fmt: str) -> str:
    """'a to b' from the value closest to zero to the farthest (the way the prose quotes a range of differences)."""
    v = sorted(values, key=abs)
    return f"{v[0]:{fmt}} to {v[-1]:{fmt}}"


def prose_numbers(d: Path) -> dict[str, str]:
    """Every number the prose of the docs section quotes, formatted as the docs write it, from the run's tables."""
    m = pd.read_csv(d / "tables" / "matched_l0.csv")
    runs = pd.read_csv(d / "tables" / "runs.csv")
    out = {}
    for ev in ("fast", "packed"):
        for arm in ("BT(F)", "BT(P)"):
            g = m[(m["eval"] == ev) & (m["method"] == arm)]
            sign = "+" if ev == "packed" else ""
            out[f"log2_mse {ev} {arm}"] = _range(g["fast_minus_log2_mse_mean"], sign + ".3f")
            out[f"ev {ev} {arm}"] = _range(g["fast_minus_explained_variance_mean"], "+.3f")
            if ev == "packed":
                out[f"kl {ev} {arm}"] = _range(g["fast_minus_kl_sae_response_mean"], "+.3f")
    small = m[(m["eval"] == "fast") & (m["architecture"] == "topk") & (m["l0_target"] > 8)]
    out["lossless dce"] = f"ΔCE ≤ {small['delta_ce_response_mean'].max():.3f} nats"
    std = m[(m["eval"] == "packed") & (m["architecture"] == "standard")].sort_values("l0_target")
    mid = std["l0_target"].unique()[1]
    for arm in METHODS:
        r = std[(std["l0_target"] == mid) & (std["method"] == arm)].iloc[0]
        out[f"packed ev {arm}"] = f"{r['explained_variance_mean']:.2f}"
    out["packed mid L0"] = f"{mid:.1f}"
    for ev in ("fast", "packed"):
        r = runs[runs["eval"] == ev].iloc[0]
        out[f"ce_clean_response {ev}"] = f"{r['ce_clean_response']:.2g}"
        out[f"ce_zero_response {ev}"] = f"{r['ce_zero_ablation_response']:.2f}"
        out[f"tokens {ev}"] = f"{int(r['n_tokens']):,}"
    out["blocks"] = str(int(runs[runs["eval"] == "packed"]["n_blocks"].iloc[0]))
    return out


def run_dir() -> Path:
    if not RUNS:
        pytest.fail("no committed sae-pareto run under results/sae-pareto/")
    return RUNS[-1]


def test_docs_tables_equal_the_committed_run():
    matched = pd.read_csv(run_dir() / "tables" / "matched_l0.csv")
    text = DOCS.read_text()
    for metric, fmt in DOC_TABLES:
        rows = doc_rows(matched, metric, fmt)
        assert len(rows) >= 6
        missing = [r for r in rows if r not in text]
        assert not missing, f"docs/sae.md lacks these {metric} rows of the committed run:\n" + "\n".join(missing)


def test_docs_prose_numbers_equal_the_committed_run():
    section = DOCS.read_text()
    section = section[section.index("## Matched L0 on toy-chat"):section.index("## Decisions where")]
    missing = {k: v for k, v in prose_numbers(run_dir()).items() if v not in section}
    assert not missing, f"docs/sae.md's matched-L0 prose lacks these numbers of the committed run: {missing}"


def test_docs_name_the_run_config():
    cfg = json.loads((run_dir() / "config.json").read_text())
    c = cfg.get("config", cfg)
    text = DOCS.read_text()
    section = text[text.index("## Matched L0 on toy-chat"):]
    assert "interplab run sae-pareto" in section
    assert f"{c['steps']:,} steps" in section and f"ks={c['ks']}".replace(" ", "") in section.replace(" ", "")
    assert f"{len(c['seeds'])} SAE seeds" in section


def test_committed_run_is_complete():
    d = run_dir()
    runs = pd.read_csv(d / "tables" / "runs.csv")
    cfg = json.loads((d / "config.json").read_text())
    c = cfg.get("config", cfg)
    n_points = len(c["ks"]) + len(c["l1_coefficients"])
    assert len(runs) == n_points * len(c["methods"]) * len(c["seeds"]) * len(c["evals"])
    assert not list(d.rglob("*.safetensors")), "SAE weights must not be committed"
    from interplab.results.runs import run_problems

    assert run_problems(d) == []   # the app's saved-run pickers list it as a complete run


def test_readme_quotes_the_committed_topk_k8_row():
    """The README's matched-L0 sentence (TopK k = 8, log2 MSE, FAST vs BT(F) on both distributions) equals the run."""
    m = pd.read_csv(RUNS[-1] / "tables" / "matched_l0.csv")
    readme = " ".join((ROOT / "README.md").read_text().split())
    for ev in ("fast", "packed"):
        g = m[(m["eval"] == ev) & (m["architecture"] == "topk") & (m["l0_target"] == 8)]
        for arm in ("FAST", "BT(F)"):
            r = g[g["method"] == arm].iloc[0]
            quoted = _ci(r["log2_mse_mean"], r["log2_mse_lo"], r["log2_mse_hi"], ".3f")
            assert quoted in readme, f"README lacks {arm} on {ev}: {quoted}"
