"""docs/hyperfit.md's hyperfitting-controls numbers equal the committed `hyperfit-controls` run
(results/hyperfit-controls/), so docs and outputs cannot drift."""
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results" / "hyperfit-controls"
DOCS = ROOT / "docs" / "hyperfit.md"
SECTION = "## Hyperfitting controls"
ARMS = ("hyperfit", "finetune", "finetune-steps", "shuffled")


def run_dir() -> Path:
    runs = sorted(p for p in RESULTS.iterdir() if (p / "config.json").is_file())
    assert len(runs) == 1, f"expected one committed run folder in {RESULTS}, found {runs}"
    return runs[0]


def ci(row) -> str:
    return f"{row['mean']:+.1f} [{row['lo']:+.1f}, {row['hi']:+.1f}]"


def ci_plain(row, digits: int = 2) -> str:
    return f"{row['mean']:.{digits}f} [{row['lo']:.{digits}f}, {row['hi']:.{digits}f}]"


def expected_lines(summary: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    """The docs table rows, formatted from the committed outputs (the docs were written from this function)."""
    s = summary.fillna({"site": "", "group": ""})
    lines = []
    for arm in ARMS:
        d = s[(s["arm"] == arm) & (s["quantity"] == "delta_pr")]
        rp = d[d["site"] == "resid_post"].sort_values("layer")
        fn = d[d["site"] == "final_norm"].iloc[0]
        w = s[(s["arm"] == arm) & (s["quantity"] == "delta_fro") & (s["group"] == "total")].iloc[0]
        per = s[(s["arm"] == arm) & (s["quantity"] == "delta_pr_per_dW") & (s["site"] == "resid_post")]
        per = per.sort_values("layer").iloc[-1]
        r = runs[runs["arm"] == arm]
        steps = "/".join(str(int(v)) for v in r.sort_values("seed")["steps"])
        cells = [f"`{arm}`", str(int(rp["n"].max())), steps] + [ci(x) for _, x in rp.iterrows()] + [
            ci(fn), ci_plain(w, 3), ci_plain(per, 2)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def expected_runs(runs: pd.DataFrame) -> list[str]:
    """Per-seed rows: arm, seed, steps, final train loss, stop rule met, fine-tuning stop / best step, held-out loss of
    the measured model, ‖ΔW‖_F total."""
    out = []
    for _, r in runs.sort_values(["arm", "seed"]).iterrows():
        if r["arm"] not in ARMS:
            continue
        stop = "–" if pd.isna(r.get("stop_step")) else str(int(r["stop_step"]))
        best = "–" if pd.isna(r.get("best_step")) else str(int(r["best_step"]))
        loss = "–" if pd.isna(r["final_train_loss"]) else f"{r['final_train_loss']:.3f}"
        out.append(f"| `{r['arm']}` | {int(r['seed'])} | {int(r['steps'])} | {loss} | "
                   f"{'yes' if r['converged'] else 'no'} | {stop} | {best} | {r['heldout_loss']:.3f} | "
                   f"{r['dW_total']:.3f} |")
    return out


def expected_weights(summary: pd.DataFrame) -> list[str]:
    """‖ΔW‖_F per parameter group and arm (mean [t interval] over seeds)."""
    s = summary.fillna({"site": "", "group": ""})
    out = []
    for arm in ARMS:
        w = s[(s["arm"] == arm) & (s["quantity"] == "delta_fro")].set_index("group")
        cells = [ci_plain(w.loc[g], 3) for g in WEIGHT_GROUPS]
        out.append("| " + " | ".join([f"`{arm}`"] + cells) + " |")
    return out


WEIGHT_GROUPS = ("embedding", "block.0", "block.1", "block.2", "block.3", "final_norm", "unembedding", "total")


def docs_section() -> str:
    text = DOCS.read_text(encoding="utf-8")
    assert SECTION in text, f"{DOCS} has no '{SECTION}' section"
    body = text.split(SECTION, 1)[1]
    return body.split("\n## ", 1)[0]


@pytest.fixture(scope="module")
def committed():
    d = run_dir()
    return pd.read_csv(d / "tables" / "summary.csv"), pd.read_csv(d / "tables" / "runs.csv"), d


def test_docs_table_equals_committed_outputs(committed):
    summary, runs, _ = committed
    section = docs_section()
    for line in expected_lines(summary, runs) + expected_runs(runs) + expected_weights(summary):
        assert line in section, f"docs/hyperfit.md does not show the committed number row:\n{line}"
    assert "hyperfit-controls" in section  # the experiment is named next to its numbers


def test_committed_run_is_the_documented_configuration(committed):
    import json

    _, runs, d = committed
    cfg = json.loads((d / "config.json").read_text())
    cfg = cfg.get("config", cfg)
    assert cfg["seeds"] == [0, 1, 2] and cfg["reuse"] == "zoo:text-hyperfit" and cfg["threads"] == 1
    assert sorted(runs["arm"].unique()) == sorted(ARMS)
    assert (runs.groupby("arm")["seed"].nunique() == 3).all()
    # the fine-tuning budget is the hyperfit run's step count, seed by seed
    hf = runs[runs["arm"] == "hyperfit"].set_index("seed")["steps"]
    fs = runs[runs["arm"] == "finetune-steps"].set_index("seed")["steps"]
    assert (hf == fs).all()


def test_expected_lines_detect_a_changed_number(committed):
    summary, runs, _ = committed
    section = docs_section()
    broken = summary.copy()
    i = broken.index[(broken["arm"] == "hyperfit") & (broken["quantity"] == "delta_pr")][0]
    broken.loc[i, "mean"] += 1.0  # a drifted output no longer matches the docs
    assert any(line not in section for line in expected_lines(broken, runs))


LORA = ROOT / "results" / "hyperfit-train"
LORA_SECTION = "### Late-Stage LoRA to the stop loss"


def lora_row(d: Path) -> str:
    """One docs row per committed `hyperfit-train` run: r, α, lr, trainable parameters, epochs and seconds, the
    epoch-mean loss at epochs 1 / 100 / 200 / last, the minimum (its epoch), converged."""
    import json

    res = json.loads((d / "json" / "hyperfit.json").read_text())
    c = res["config"]
    h = pd.read_csv(d / "tables" / "history.csv").set_index("epoch")["train_loss"]
    at = " / ".join(f"{h.loc[e]:.3f}" for e in (1, 100, 200)) + f" / {h.iloc[-1]:.3f}"
    return (f"| {c['lora_layers']} | {c['lora_r']} | {c['lora_alpha']:g} | {c['lr']:g} | {res['trainable_params']:,} | "
            f"{res['epochs']} ({res['seconds']:.0f} s) | {at} | {h.min():.3f} ({int(h.idxmin())}) | "
            f"{'yes' if res['converged'] else 'no'} |")


def test_docs_lora_rows_equal_committed_runs():
    text = DOCS.read_text(encoding="utf-8")
    assert LORA_SECTION in text
    section = text.split(LORA_SECTION, 1)[1].split("\n## ", 1)[0]
    runs = sorted(p for p in LORA.iterdir() if (p / "json" / "hyperfit.json").is_file())
    assert len(runs) == 3
    for d in runs:
        assert lora_row(d) in section, f"docs/hyperfit.md lacks the committed hyperfit-train row:\n{lora_row(d)}"


def test_readme_quotes_the_committed_last_block_numbers(committed):
    summary, _, _ = committed
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Hyperfitting layer geometry", 1)[1].split("\n### ", 1)[0]
    assert "hyperfit-controls" in section
    s = summary.fillna({"site": "", "group": ""})
    for arm in ("hyperfit", "finetune-steps", "shuffled"):
        row = s[(s["arm"] == arm) & (s["quantity"] == "delta_pr") & (s["site"] == "resid_post") & (s["layer"] == 3)]
        assert ci(row.iloc[0]) in section, f"README lacks {arm}'s committed last-block ΔDim {ci(row.iloc[0])}"
