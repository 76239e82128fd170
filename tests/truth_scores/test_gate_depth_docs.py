"""docs/real_models.md's HeadGate depth table equals the committed `scripts/gate_depth.py` output
(results/gate-depth/gate_depth.csv), so the docs cannot drift from the run."""
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]


def expected_rows(df: pd.DataFrame) -> list[str]:
    rows = []
    for (k, a), g in df.groupby(["gated_layers", "alpha"], sort=True):
        n, r = g[g.rebase == "none"].iloc[0], g[g.rebase == "layer_mean"].iloc[0]
        rows.append(f"  | {k} | {a:g} | {n.layer_gain:.2f} | {n.kl_mean:.2f} | {n.top1_kept}/{n.n_prompts} | "
                    f"{r.kl_mean:.2f} | {r.top1_kept}/{r.n_prompts} |")
    return rows


def test_docs_quote_the_gate_depth_run():
    df = pd.read_csv(ROOT / "results" / "gate-depth" / "gate_depth.csv")
    assert set(df.rebase) == {"none", "layer_mean"} and len(df) == 18
    docs = (ROOT / "docs" / "real_models.md").read_text()
    for line in expected_rows(df):
        assert line in docs, f"docs/real_models.md lacks the gate-depth row {line.strip()!r}"
    # the claims the docs make from the table
    at1 = df[df.alpha == 1.0]
    assert (at1[at1.rebase == "none"].top1_kept == 0).all()
    assert at1[at1.rebase == "layer_mean"].kl_mean.max() < 0.2
