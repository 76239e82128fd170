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


def run_dir() -> Path:
    if not RUNS:
        pytest.fail("no committed sae-pareto run under results/sae-pareto/")
    return RUNS[-1]


def test_docs_tables_equal_the_committed_run():
    matched = pd.read_csv(run_dir() / "tables" / "matched_l0.csv")
    text = DOCS.read_text()
    for metric, fmt in (("log2_mse", ".3f"), ("delta_ce_response", ".4f")):
        rows = doc_rows(matched, metric, fmt)
        assert len(rows) >= 6
        missing = [r for r in rows if r not in text]
        assert not missing, f"docs/sae.md lacks these {metric} rows of the committed run:\n" + "\n".join(missing)


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
