"""docs/sae.md "On a real model" equals the committed SmolLM2-135M-Instruct runs (results/sae-*-smollm2/): every
table row and quoted number is rebuilt here from the outputs (the docs were written from these functions), so docs
and outputs cannot drift, and a drifted output fails."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.real_model_docs import ROOT, doc_section, run_dir, validity_report
PARETO = ("sae-pareto", "topk32-2seeds")
STEER = ("sae-steer-sweep", "fast-seed0-im_start")
STEER_NULL = ("sae-steer-sweep", "fast-seed0-random-feature")   # the null: a random live feature
EVAL = ("sae-eval", "fast-seed0-conventions")          # the shipped SAE under every convention
VERDICTS = ("sae-verdicts", "pareto-and-steering")     # the verdicts of the runs above
METHODS = ("FAST", "BT(F)", "BT(P)")
EVALS = {"fast": "FAST (per dialogue)", "packed": "packed blocks"}
SHIPPED_SAE = "topk_k=32_fast_seed0"




def section() -> str:
    return doc_section("sae.md")


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
        for m in METHODS:
            dl = runs[(runs["eval"] == ev) & (runs["method"] == m)]["delta_loss_pct_response"]
            out[f"delta_loss range {ev} {m}"] = f"{dl.min():.1f} % to {dl.max():.1f} %"
        out[f"special tokens {ev}"] = f"{int(runs[runs['eval'] == ev]['n_tokens_special'].iloc[0])}"
        for m in METHODS:   # per seed: the paper's headline metric, whose 2-seed interval is wide
            v = runs[(runs["eval"] == ev) & (runs["method"] == m)].sort_values("seed")["log2_mse_special"]
            out[f"log2 MSE_st {ev} {m}"] = " / ".join(f"{x:.2f}" for x in v)
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


def steer_rows(run: tuple[str, str] = STEER) -> list[str]:
    s = pd.read_csv(run_dir(*run) / "tables" / "steering_summary.csv")
    rows = []
    for _, r in s.iterrows():
        cells = [f"{r['alpha_rel']:g}"] + [ci(r[c], r[f"{c}_lo"], r[f"{c}_hi"], f) for c, f in STEER_COLS]
        cells.append(f"{int(r['n_answer_kept'])} / {int(r['n'])}")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def steer_numbers() -> dict[str, str]:
    summ = json.loads((run_dir(*STEER) / "json" / "summary.json").read_text())
    null = json.loads((run_dir(*STEER_NULL) / "json" / "summary.json").read_text())
    sc = summ["steering_unit"]
    return {"feature": f"#{summ['feature']}", "null feature": f"#{null['feature']}",
            "unit": f"{sc['typical_norm']:.1f}", "mean_all": f"{sc['mean_norm_all']:.1f}",
            "median": f"{sc['median_norm']:.1f}"}


TEMPLATE_TOKENS = r"assistant|<\|im_start\|>|<\|im_end\|>"


def template_rows() -> list[str]:
    """Replies that contain chat-template text ("assistant", <|im_start|>, <|im_end|>) per alpha, top feature vs the
    random-feature null, with exact (Clopper-Pearson) 95 % intervals."""
    from scipy.stats import binomtest

    counts = {}
    for run in (STEER, STEER_NULL):
        t = pd.read_csv(run_dir(*run) / "tables" / "steering.csv")
        t["tpl"] = t["text"].fillna("").str.contains(TEMPLATE_TOKENS, regex=True)
        counts[run] = t.groupby("alpha_rel")["tpl"].agg(["sum", "size"])
    rows = []
    for a, r in counts[STEER].iterrows():
        cells = [f"{a:g}"]
        for run in (STEER, STEER_NULL):
            k, n = int(counts[run].loc[a, "sum"]), int(counts[run].loc[a, "size"])
            lo, hi = binomtest(k, n).proportion_ci(0.95, method="exact")
            cells.append(f"{k} / {n} [{lo:.2f}, {hi:.2f}]")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


# ---- position conventions (issue 46) ---------------------------------------------------------
CONVENTION_NAMES = {"interplab_positions": "interplab's positions (sink left out)",
                    "saelens_positions": "SAELens's positions (special tokens left out)",
                    "all_tokens": "all tokens (nothing left out)"}


def convention_rows() -> list[str]:
    """The conventions table: one row per position set of the committed sae-eval run, the answers
    row from its metrics, and SAELens's own run_evals on the same tokens."""
    d = run_dir(*EVAL)
    conv = pd.read_csv(d / "tables" / "conventions.csv").set_index("convention")
    met = pd.read_csv(d / "tables" / "metrics.csv").iloc[0]
    ref = json.loads((d / "json" / "saelens_run_evals.json").read_text())
    rows = []
    for c, label in CONVENTION_NAMES.items():
        r = conv.loc[c]
        rows.append(f"| {label} | {int(r['n_positions']):,} | {r['mse_sum_d']:.1f} | "
                    f"{r['ce_clean']:.4f} | "
                    f"{r['ce_sae']:.4f} | {r['delta_loss_pct']:.2f} % | {r['ce_loss_score']:.5f} | "
                    f"{r['kl_sae']:.4f} |")
    rows.append(f"| assistant answers (interplab) | {int(met['n_tokens_response']):,} | — | "
                f"{met['ce_clean_response']:.4f} | {met['ce_sae_response']:.4f} | "
                f"{met['delta_loss_pct_response']:.2f} % | {met['ce_loss_score_response']:.5f} | "
                f"{met['kl_sae_response']:.4f} |")
    dl = (ref["ce_loss_with_sae"] - ref["ce_loss_without_sae"]) / ref["ce_loss_without_sae"] * 100
    rows.append(f"| SAELens `run_evals`, same tokens | — | {ref['mse']:.1f} | "
                f"{ref['ce_loss_without_sae']:.4f} | "
                f"{ref['ce_loss_with_sae']:.4f} | {dl:.2f} % | {ref['ce_loss_score']:.5f} | "
                f"{ref['kl_div_with_sae']:.4f} |")
    return rows


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


@pytest.mark.parametrize("run", [STEER, STEER_NULL], ids=["im_start", "random"])
def test_steering_rows_equal_the_committed_sweep(run):
    rows = steer_rows(run)
    assert len(rows) >= 4
    assert not _missing(rows), "\n".join(_missing(rows))


def test_template_token_rows_equal_the_committed_replies():
    rows = template_rows()
    assert len(rows) >= 4
    assert not _missing(rows), "\n".join(_missing(rows))


def test_convention_rows_equal_the_committed_sae_eval_run():
    rows = convention_rows()
    assert len(rows) == 5
    assert not _missing(rows), "\n".join(_missing(rows))


def test_claim_table_equals_the_committed_validity_reports():
    """The claim table (claim | measured | validity checks | verdict) is the committed runs'
    reports, row for row."""
    from tests.real_model_docs import assert_claim_table

    assert_claim_table(section(), run_dir(*VERDICTS), run_dir(*EVAL))


@pytest.mark.parametrize("numbers", [clean_numbers, steer_numbers])
def test_quoted_numbers_equal_the_outputs(numbers):
    text = section()
    missing = {k: v for k, v in numbers().items() if v not in text}
    assert not missing, f"docs/sae.md 'On a real model' lacks {missing}"


def test_committed_runs_are_complete_and_ship_one_sae():
    from interplab.results.runs import run_problems
    from interplab.zoo import shipped_saes

    for kind, label in (PARETO, STEER, STEER_NULL, EVAL, VERDICTS):
        d = run_dir(kind, label)
        assert run_problems(d) == [], (d, run_problems(d))
        assert (d.parent / "README.md").is_file()   # one README per results/<kind>-smollm2/ folder
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


def test_readme_quotes_equal_the_outputs():
    n = clean_numbers()
    packed = pd.read_csv(run_dir(*PARETO) / "tables" / "matched_l0.csv")
    r = packed[(packed["eval"] == "packed") & (packed["method"] == "BT(F)")].iloc[0]
    quotes = [n[f"log2 MSE_st fast {m}"] for m in METHODS]
    quotes.append(ci(r["fast_minus_log2_mse_mean"], r["fast_minus_log2_mse_lo"], r["fast_minus_log2_mse_hi"], "+.3f"))
    conv = pd.read_csv(run_dir(*EVAL) / "tables" / "conventions.csv").set_index("convention")
    met = pd.read_csv(run_dir(*EVAL) / "tables" / "metrics.csv").iloc[0]
    ref = json.loads((run_dir(*EVAL) / "json" / "saelens_run_evals.json").read_text())
    quotes += [f"{met['delta_loss_pct_response']:.2f} %", f"{ref['mse']:.1f}",
               f"{ref['ce_loss_score']:.5f}"]
    quotes += [f"{conv.loc[c, 'delta_loss_pct']:.2f} %" for c in CONVENTION_NAMES]
    outcomes = (validity_report(run_dir(*VERDICTS)).outcomes
                | validity_report(run_dir(*EVAL)).outcomes)
    # the README quotes a verdict only as the committed reports give it
    assert set(outcomes.values()) == {"inconclusive", "not reproduced", "reproduced"}
    quotes += ["**inconclusive**", "**does not reproduce**"]
    flat = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "sae-pareto-smollm2" in flat
    missing = [q for q in quotes if q not in flat]
    assert not missing, f"README.md does not quote {missing}"
