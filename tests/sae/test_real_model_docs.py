"""docs/sae.md "On a real model" equals the committed SmolLM2-135M-Instruct runs (results/sae-*-smollm2/): every
table row and quoted number is rebuilt here from the outputs (the docs were written from these functions), so docs
and outputs cannot drift, and a drifted output fails."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
DOCS = ROOT / "docs" / "sae.md"
SECTION = "## On a real model: SmolLM2-135M-Instruct"
PARETO = ("sae-pareto", "topk32-2seeds")
STEER = ("sae-steer-sweep", "fast-seed0-im_start")
METHODS = ("FAST", "BT(F)", "BT(P)")
EVALS = {"fast": "FAST (per dialogue)", "packed": "packed blocks"}
SHIPPED_SAE = "topk_k=32_fast_seed0"


def run_dir(kind: str, label: str) -> Path:
    d = RESULTS / f"{kind}-smollm2" / label
    assert (d / "config.json").is_file(), f"missing committed run {d}"
    return d


def section() -> str:
    text = DOCS.read_text(encoding="utf-8")
    assert SECTION in text, f"docs/sae.md lacks {SECTION!r}"
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def ci(mean, lo, hi, fmt: str = ".3f") -> str:
    return f"{mean:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


# ---- the comparison at matched L0 -------------------------------------------------------------------------------
SUMMARY_COLS = (("log2_mse", ".3f"), ("log2_mse_special", ".3f"), ("explained_variance", ".3f"),
                ("delta_ce_response", ".3f"), ("kl_sae_response", ".3f"), ("dead_features", ".0f"),
                ("dense_features", ".0f"))


def summary_rows() -> list[str]:
    s = pd.read_csv(run_dir(*PARETO) / "tables" / "summary.csv")
    rows = []
    for ev in EVALS:
        for m in METHODS:
            r = s[(s["eval"] == ev) & (s["method"] == m)].iloc[0]
            cells = [EVALS[ev], m] + [ci(r[f"{c}_mean"], r[f"{c}_lo"], r[f"{c}_hi"], f) for c, f in SUMMARY_COLS]
            rows.append("| " + " | ".join(cells) + " |")
    return rows


DIFF_COLS = (("log2_mse", "+.3f"), ("explained_variance", "+.3f"), ("delta_ce_response", "+.3f"),
             ("kl_sae_response", "+.3f"))


def diff_rows() -> list[str]:
    m = pd.read_csv(run_dir(*PARETO) / "tables" / "matched_l0.csv")
    rows = []
    for ev in EVALS:
        for arm in METHODS[1:]:
            r = m[(m["eval"] == ev) & (m["method"] == arm)].iloc[0]
            cells = [EVALS[ev], f"FAST − {arm}"] + [ci(r[f"fast_minus_{c}_mean"], r[f"fast_minus_{c}_lo"],
                                                      r[f"fast_minus_{c}_hi"], f) for c, f in DIFF_COLS]
            rows.append("| " + " | ".join(cells) + " |")
    return rows


def clean_numbers() -> dict[str, str]:
    runs = pd.read_csv(run_dir(*PARETO) / "tables" / "runs.csv")
    out = {}
    for ev in EVALS:
        r = runs[runs["eval"] == ev].iloc[0]
        out[f"ce_clean_response {ev}"] = f"{r['ce_clean_response']:.3f}"
        out[f"ce_zero {ev}"] = f"{r['ce_zero_ablation_response']:.2f}"
        out[f"tokens {ev}"] = f"{int(r['n_tokens']):,}"
        out[f"massive {ev}"] = f"{int(r['n_massive_excluded'])}"
        dl = runs[runs["eval"] == ev]["delta_loss_pct_response"]
        out[f"delta_loss range {ev}"] = f"{dl.min():.1f} % to {dl.max():.1f} %"
    out["blocks"] = str(int(runs[runs["eval"] == "packed"]["n_blocks"].iloc[0]))
    out["d_sae"] = f"{int(runs['d_sae'].iloc[0]):,}"
    for m in METHODS:
        h = runs[runs["method"] == m]["harvest_seconds"].iloc[0]
        out[f"harvest {m}"] = f"{h:.0f} s"
    t = runs.drop_duplicates(["method", "seed"])["train_seconds"]
    out["train seconds"] = f"{t.min():.0f}–{t.max():.0f} s"
    return out


# ---- convergence --------------------------------------------------------------------------------------------------
def tokens_to_converge(log: pd.DataFrame, tol: float = 0.01, window: int = 10) -> int:
    """Training tokens after which the rolling mean (over `window` log rows) of the training-batch explained variance
    stays within `tol` of its final value."""
    ev = log["explained_variance"].rolling(window, min_periods=1).mean()
    final = float(ev.iloc[-1])
    off = (ev - final).abs() > tol
    last_off = int(off[off].index.max()) if off.any() else -1
    return int(log["tokens"].iloc[min(last_off + 1, len(log) - 1)])


def convergence_rows() -> list[str]:
    d = run_dir(*PARETO)
    rows = []
    for sae in sorted((d / "saes").iterdir()):
        log = pd.read_csv(sae / "training_log.csv")
        ev = log["explained_variance"].rolling(10, min_periods=1).mean()
        rows.append(f"| `{sae.name}` | {int(log['tokens'].iloc[-1]):,} | {tokens_to_converge(log):,} | "
                    f"{ev.iloc[-1]:.3f} |")
    return rows


# ---- special-token steering ---------------------------------------------------------------------------------------
STEER_COLS = (("target_activation", ".2f"), ("answer_kept", ".2f"), ("distinct_ratio", ".2f"),
              ("repeated_3gram_frac", ".2f"))


def steer_rows() -> list[str]:
    s = pd.read_csv(run_dir(*STEER) / "tables" / "steering_summary.csv")
    rows = []
    for _, r in s.iterrows():
        cells = [f"{r['alpha_rel']:g}"] + [ci(r[c], r[f"{c}_lo"], r[f"{c}_hi"], f) for c, f in STEER_COLS]
        cells.append(f"{int(r['n_answer_kept'])} / {int(r['n'])}")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def steer_numbers() -> dict[str, str]:
    summ = json.loads((run_dir(*STEER) / "json" / "summary.json").read_text())
    sc = summ["steering_unit"]
    return {"feature": f"#{summ['feature']}", "unit": f"{sc['typical_norm']:.1f}",
            "mean_all": f"{sc['mean_norm_all']:.1f}", "median": f"{sc['median_norm']:.1f}"}


# ---- tests -------------------------------------------------------------------------------------------------------
def _missing(rows: list[str]) -> list[str]:
    text = section()
    return [r for r in rows if r not in text]


def test_comparison_tables_equal_the_committed_run():
    rows = summary_rows() + diff_rows()
    assert len(rows) == 10
    assert not _missing(rows), "\n".join(_missing(rows))


def test_convergence_rows_equal_the_committed_training_logs():
    rows = convergence_rows()
    assert len(rows) == 6
    assert not _missing(rows), "\n".join(_missing(rows))


def test_steering_rows_equal_the_committed_sweep():
    rows = steer_rows()
    assert len(rows) >= 4
    assert not _missing(rows), "\n".join(_missing(rows))


@pytest.mark.parametrize("numbers", [clean_numbers, steer_numbers])
def test_quoted_numbers_equal_the_outputs(numbers):
    text = section()
    missing = {k: v for k, v in numbers().items() if v not in text}
    assert not missing, f"docs/sae.md 'On a real model' lacks {missing}"


def test_committed_runs_are_complete_and_ship_one_sae():
    from interplab.results.runs import run_problems
    from interplab.zoo import shipped_saes

    for kind, label in (PARETO, STEER):
        d = run_dir(kind, label)
        assert run_problems(d) == [], (d, run_problems(d))
        assert (d / "README.md").is_file()
    weights = list(run_dir(*PARETO).rglob("*.safetensors"))
    assert {p.parent.name for p in weights} == {SHIPPED_SAE}
    saes = shipped_saes("real:smollm2-135m-instruct")
    assert [p.name for p in saes] == [SHIPPED_SAE]
    cfg = json.loads((saes[0] / "cfg.json").read_text())
    assert cfg["d_in"] == 576 and cfg["metadata"]["exclude_massive"] == 10.0
    assert cfg["metadata"]["hook_name"] == "blocks.15.hook_resid_post"


def test_shipped_sae_loads_and_opens_in_the_feature_browser_defaults():
    from interplab.sae import load_sae
    from interplab.zoo import shipped_saes

    sae = load_sae(shipped_saes("real:smollm2-135m-instruct")[0])
    assert sae.cfg.d_sae == 4608 and sae.W_dec.dtype == sae.W_enc.dtype
    assert "offline chat" in sae.cfg.metadata.dataset_path   # the browser scans the offline chat set for it
