"""docs/hyperfit.md "On a real model" equals the committed SmolLM2-135M-Instruct runs (results/hyperfit-*-smollm2/):
every table row is rebuilt here from the outputs (the docs were written from these functions), so docs and outputs
cannot drift, and a drifted output fails."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.real_model_docs import RESULTS, ROOT, assert_claim_table, doc_section, run_dir

SEEDS = (0, 1, 2)


def section() -> str:
    return doc_section("hyperfit.md")


def ci(mean, lo, hi, digits: int = 3, sign: str = "") -> str:
    return f"{mean:{sign}.{digits}f} [{lo:{sign}.{digits}f}, {hi:{sign}.{digits}f}]"


# ---- training ---------------------------------------------------------------------------------------------------
def train_row(seed: int) -> str:
    d = run_dir("hyperfit-train", f"lora-last5-seed{seed}")
    res = json.loads((d / "json" / "hyperfit.json").read_text())
    h = pd.read_csv(d / "tables" / "history.csv")
    return (f"| {seed} | {res['epochs']} | {res['steps']} | {h['train_loss'].iloc[0]:.3f} → "
            f"{h['train_loss'].iloc[-1]:.3f} | {'yes' if res['converged'] else 'no'} | {res['seconds']:.0f} s | "
            f"{res['trainable_params']:,} of {res['total_params']:,} |")


# ---- the paper's table ------------------------------------------------------------------------------------------
EVAL = ("hyperfit-eval", "lora-last5-3seeds")


def eval_table() -> pd.DataFrame:
    return pd.read_csv(run_dir(*EVAL) / "eval" / "table.csv")


def _cell(r, col: str, digits: int = 3) -> str:
    if "_lo" in r.index or f"{col}_lo" in r.index:
        lo, hi = r.get(f"{col}_lo"), r.get(f"{col}_hi")
        if lo == lo and hi == hi and r["kind"] in ("temperature", "target-pooled"):
            return ci(r[col], lo, hi, digits)
    return f"{r[col]:.{digits}f}"


def eval_rows(t: pd.DataFrame | None = None) -> list[str]:
    t = eval_table() if t is None else t
    out = []
    for _, r in t.iterrows():
        cols = ("ttr", "rep2", "rep3", "diversity", "loop_rate", "top1_agreement", "gen_top1",
                "changed_share", "nll", "entropy")
        cells = [f"`{r['setting']}`"] + [_cell(r, c) for c in cols]
        out.append("| " + " | ".join(cells) + " |")
    return out


# ---- rank reordering --------------------------------------------------------------------------------------------
RANKS = ("hyperfit-ranks", "lora-last5-seed0")


def ranks_row() -> str:
    d = run_dir(*RANKS)
    s = pd.read_csv(d / "tables" / "summary.csv").iloc[0]
    h = pd.read_csv(d / "tables" / "histograms.csv").set_index("bin")["fraction"]
    bins = " / ".join(f"{h[b]:.3f}" for b in ("1", "2-10", "11-200", ">200"))
    return (f"| `{s['target']}` | {int(s['n_steps']):,} | {s['override_rate']:.3f} | {bins} | "
            f"{100 * s['frac_rank_gt10_of_overrides']:.1f} % | {s['top1_agreement']:.3f} | "
            f"{s['tau_base']:.3f} / {s['tau_target']:.3f} | {s['h_base']:.2f} → {s['h_target']:.2f} | "
            f"{s['nll_base']:.2f} → {s['nll_target']:.2f} |")


# ---- geometry (controls: t intervals over seeds) ----------------------------------------------------------------
CONTROLS = ("hyperfit-controls", "lora-last5-3seeds")
ARMS = ("hyperfit", "finetune", "finetune-steps", "shuffled")
LAYERS = (0, 10, 20, 24, 25, 26, 27, 28, 29)


def controls_summary() -> pd.DataFrame:
    return pd.read_csv(run_dir(*CONTROLS) / "tables" / "summary.csv").fillna({"site": "", "group": ""})


def controls_runs() -> pd.DataFrame:
    return pd.read_csv(run_dir(*CONTROLS) / "tables" / "runs.csv")


def delta_dim_rows(s: pd.DataFrame | None = None) -> list[str]:
    s = controls_summary() if s is None else s
    out = []
    for arm in ARMS:
        d = s[(s["arm"] == arm) & (s["quantity"] == "delta_pr")]
        rp = d[d["site"] == "resid_post"].set_index("layer")
        fn = d[d["site"] == "final_norm"].iloc[0]
        cells = [f"`{arm}`", str(int(rp["n"].max()))] + [
            ci(rp.loc[l, "mean"], rp.loc[l, "lo"], rp.loc[l, "hi"], 1, "+") for l in LAYERS] + [
            ci(fn["mean"], fn["lo"], fn["hi"], 1, "+")]
        out.append("| " + " | ".join(cells) + " |")
    return out


def base_pr_row(s: pd.DataFrame | None = None) -> str:
    """The base model's PR at the same layers (hyperfit-geometry, teacher-forced, position 0 excluded)."""
    geo = pd.read_csv(run_dir("hyperfit-geometry", "lora-last5-3seeds") / "tables" / "geometry.csv")
    t = geo[(geo["tokens"] == "teacher_forced") & (~geo["bos"])]
    first = t[t["target"] == sorted(set(t["target"]))[0]]
    rp = first[first["site"] == "resid_post"].set_index("layer")["pr_a"]
    fn = first[first["site"] == "final_norm"]["pr_a"].iloc[0]
    return "| base PR | – | " + " | ".join(f"{rp.loc[l]:.1f}" for l in LAYERS) + f" | {fn:.1f} |"


GEOMETRY = ("hyperfit-geometry", "lora-last5-3seeds")


def geometry_table() -> pd.DataFrame:
    return pd.read_csv(run_dir(*GEOMETRY) / "tables" / "geometry.csv")


def geometry_rows(geo: pd.DataFrame | None = None) -> list[str]:
    """Per seed (hyperfit-geometry), at the last block: the standardised PR base → target and its ΔDim (the
    headline), the raw PR base → target and its ΔDim, ΔDim with position 0 and on the target's own generations
    (standardised / raw), ΔDim after the final norm (standardised / raw), and how far dropping one coordinate
    moves the base's raw and standardised PR (with that coordinate)."""
    geo = geometry_table() if geo is None else geo
    last = int(geo[geo["site"] == "resid_post"]["layer"].max())
    out = []
    for target, g in geo.groupby("target", sort=True):
        def at(col, site="resid_post", tokens="teacher_forced", bos=False):
            sel = g[(g["site"] == site) & (g["tokens"] == tokens) & (g["bos"] == bos)]
            if site == "resid_post":
                sel = sel[sel["layer"] == last]
            return float(sel[col].iloc[0])

        def both(**kw):
            return f"{at('delta_pr_std', **kw):+.1f} / {at('delta_pr', **kw):+.1f}"
        cells = [f"`{target}`", f"{at('pr_std_a'):.1f} → {at('pr_std_b'):.1f}", f"{at('delta_pr_std'):+.1f}",
                 f"{at('pr_a'):.1f} → {at('pr_b'):.1f}", f"{at('delta_pr'):+.1f}", both(bos=True),
                 both(tokens="generated"), both(site="final_norm"),
                 f"{100 * at('pr_loo_a'):.0f} % ({int(at('pr_loo_dim_a'))}) / {100 * at('pr_std_loo_a'):.1f} %"]
        out.append("| " + " | ".join(cells) + " |")
    return out


STD_LAYERS = (24, 25, 26, 27, 28, 29)


def std_delta_rows(g: pd.DataFrame | None = None) -> list[str]:
    """hyperfit-controls, standardised PR: ΔDim per arm at blocks 24-29 and after the final norm, mean and 95 %
    t interval over seeds, recomputed from the run's geometry table (pr_std_b - pr_std_a; the run predates the
    summary's standardised rows)."""
    from interplab.probes.stats import intervals

    g = pd.read_csv(run_dir(*CONTROLS) / "controls" / "geometry.csv") if g is None else g
    g = g.assign(d=g["pr_std_b"] - g["pr_std_a"])
    out = []
    for arm in ARMS:
        a = g[g["arm"] == arm]
        cells = [f"`{arm}`", str(a["seed"].nunique())]
        for site, layer in [("resid_post", x) for x in STD_LAYERS] + [("final_norm", STD_LAYERS[-1])]:
            v = a[(a["site"] == site) & (a["layer"] == layer)].sort_values("seed")["d"]
            iv = intervals(v.to_numpy(), method="t")
            cells.append(ci(iv["mean"], iv["lo"], iv["hi"], 1, "+"))
        out.append("| " + " | ".join(cells) + " |")
    return out


def derived_verdict_rows() -> list[str]:
    """The verdicts of the committed controls and k-sweep runs, computed from their saved results by the same pure
    functions their experiments now save (the runs predate validity reports)."""
    import interplab.probes.hyperfit  # noqa: F401 - registers the result classes
    from interplab.core.result import Result
    from interplab.probes.hyperfit.verdicts import controls_verdicts, ksweep_verdicts
    from interplab.probes.validity import ValidityReport

    vs = controls_verdicts(Result.load_any(run_dir(*CONTROLS) / "controls"))
    vs += ksweep_verdicts(Result.load_any(run_dir(*KSWEEP) / "k_sweep"))
    return ValidityReport.of(vs).markdown().splitlines()[2:]


def controls_run_rows(r: pd.DataFrame | None = None) -> list[str]:
    r = controls_runs() if r is None else r
    out = []
    for arm in ARMS:
        d = r[r["arm"] == arm].sort_values("seed")
        steps = "/".join(str(int(v)) for v in d["steps"])
        loss = "/".join(f"{v:.3f}" for v in d["final_train_loss"])
        held = "/".join(f"{v:.2f}" for v in d["heldout_loss"])
        dw = "/".join(f"{v:.3f}" for v in d["dW_total"])
        conv = "/".join("yes" if v else "no" for v in d["converged"])
        out.append(f"| `{arm}` | {steps} | {loss} | {conv} | {held} | {dw} |")
    return out


# ---- Late-Stage LoRA k sweep ------------------------------------------------------------------------------------
KSWEEP = ("hyperfit-ksweep", "ks-1-5-30")


def ksweep_frame() -> pd.DataFrame:
    return pd.read_csv(run_dir(*KSWEEP) / "k_sweep" / "frame.csv")


def ksweep_rows(f: pd.DataFrame | None = None) -> list[str]:
    f = ksweep_frame() if f is None else f
    out = []
    for _, r in f.iterrows():
        blocks = [int(b) for b in str(r["layers"]).split(",")]
        span = f"{blocks[0]}–{blocks[-1]}" if blocks == list(range(blocks[0], blocks[-1] + 1)) and len(blocks) > 1 \
            else ",".join(map(str, blocks))
        out.append(f"| {r['placement']} | {int(r['k'])} | {span} | {int(r['trainable_params']):,} | "
                   f"{int(r['epochs'])} | {r['final_loss']:.3f} | {'yes' if r['converged'] else 'no'} | "
                   f"{r['seconds']:.0f} s | {ci(r['ttr'], r['ttr_lo'], r['ttr_hi'])} | {r['rep2']:.3f} | "
                   f"{r['top1_agreement']:.3f} | {r['entropy']:.2f} |")
    return out


# ---- the tests ----------------------------------------------------------------------------------------------------
def test_training_rows():
    sec = section()
    for seed in SEEDS:
        assert train_row(seed) in sec, f"docs lack the training row of seed {seed}:\n{train_row(seed)}"


def test_table_rows():
    sec = section()
    for line in eval_rows():
        assert line in sec, f"docs lack the hyperfit-eval row:\n{line}"


def test_rank_row():
    assert ranks_row() in section()


def test_delta_dim_rows_and_runs():
    sec = section()
    for line in delta_dim_rows() + [base_pr_row()] + controls_run_rows() + geometry_rows() + std_delta_rows():
        assert line in sec, f"docs lack the geometry / controls row:\n{line}"


def test_claim_table_rows_are_the_runs_verdicts():
    """The claim table: every verdict the rerun eval and geometry runs saved, and the verdicts of the committed
    controls and k-sweep runs computed from their results, each as its row."""
    sec = section()
    assert_claim_table(sec, run_dir(*EVAL), run_dir(*GEOMETRY))
    for line in derived_verdict_rows():
        assert line in sec, f"docs lack the claim-table row:\n{line}"
    assert "| paper's claim | measured | validity checks | verdict |" in sec


def test_ksweep_rows():
    sec = section()
    for line in ksweep_rows():
        assert line in sec, f"docs lack the k-sweep row:\n{line}"


def test_a_drifted_output_fails():
    t = eval_table()
    t.loc[t.index[0], "ttr"] += 0.01
    assert any(line not in section() for line in eval_rows(t))
    s = controls_summary()
    i = s.index[(s["arm"] == "hyperfit") & (s["quantity"] == "delta_pr")][-1]
    s.loc[i, "mean"] += 1.0
    assert any(line not in section() for line in delta_dim_rows(s))
    g = geometry_table()
    last = (g["site"] == "resid_post") & (g["layer"] == g["layer"].max()) & (g["tokens"] == "teacher_forced")
    g.loc[g.index[last & ~g["bos"]][0], "delta_pr_std"] += 0.1
    assert any(line not in section() for line in geometry_rows(g))
    flat = " ".join(section().split())
    assert any(v not in flat for v in geometry_quotes(g).values())


@pytest.mark.parametrize("kind,label", [("hyperfit-train", f"lora-last5-seed{s}") for s in SEEDS]
                         + [EVAL, RANKS, CONTROLS, KSWEEP, GEOMETRY])
def test_committed_runs_are_intact_and_name_no_machine_path(kind, label):
    from interplab.results.runs import read_manifest, run_problems

    d = run_dir(kind, label)
    m = read_manifest(d)
    assert m["status"] == "complete" and m["kind"] == kind and m["name"] == label and not run_problems(d, m)
    assert (RESULTS / f"{kind}-smollm2" / "README.md").is_file()
    for f in d.rglob("*"):
        if f.suffix in (".json", ".csv"):
            assert "/tmp/" not in f.read_text(encoding="utf-8"), f"{f} names a machine path"


# ---- numbers quoted in the prose --------------------------------------------------------------------------------
def quotes() -> dict[str, str]:
    """Every number the section's prose quotes, formatted from the committed outputs."""
    t = eval_table().set_index("setting")
    base, pooled = t.loc["base greedy"], t.loc["targets pooled"]
    tstar = t[t["kind"] == "temperature"].iloc[0]
    static = t[t["kind"] == "static"]
    q = {
        "base_ttr": f"{base['ttr']:.3f}",
        "pooled_ttr": ci(pooled["ttr"], pooled["ttr_lo"], pooled["ttr_hi"]),
        "tstar": f"{tstar['temperature']:.3f}",
        "tstar_ttr": ci(tstar["ttr"], tstar["ttr_lo"], tstar["ttr_hi"]),
        "base_loop": f"{base['loop_rate']:.3f}",
        "pooled_loop": ci(pooled["loop_rate"], pooled["loop_rate_lo"], pooled["loop_rate_hi"]),
        "tstar_loop": f"{tstar['loop_rate']:.3f}",
        "base_rep2": f"{base['rep2']:.3f}",
        "pooled_rep2": f"{pooled['rep2']:.3f}",
        "pooled_entropy": f"{pooled['entropy']:.3f}",
        "base_entropy": f"{base['entropy']:.3f}",
        "static_alphas": ", ".join(f"{a:g}" for a in static["alpha"]),
        "static_unchanged": ", ".join(f"{a:g}" for a in static[static["changed_share"] == 0]["alpha"]),
        "static_top": f"α = {static['alpha'].iloc[-1]:g}", "static_top_ttr": f"{static['ttr'].iloc[-1]:.3f}",
        "static_top_changed": f"{100 * static['changed_share'].iloc[-1]:.0f} %",
        "static_top_loop": f"{static['loop_rate'].iloc[-1]:.3f}",
        "pooled_nll": ci(pooled["nll"], pooled["nll_lo"], pooled["nll_hi"]), "base_nll": f"{base['nll']:.3f}",
        "pooled_gen_top1": f"{pooled['gen_top1']:.3f}",
    }
    r = pd.read_csv(run_dir(*RANKS) / "tables" / "summary.csv").iloc[0]
    q.update({"override": f"{r['override_rate']:.3f}", "gt10": f"{100 * r['frac_rank_gt10_of_overrides']:.1f} %",
              "gt200": f"{100 * r['frac_rank_gt200_of_overrides']:.1f} %", "nll_base": f"{r['nll_base']:.2f}",
              "nll_target": f"{r['nll_target']:.2f}"})
    q.update(geometry_quotes())
    cs = controls_summary()
    for arm in ARMS:
        d = cs[(cs["arm"] == arm) & (cs["quantity"] == "delta_pr") & (cs["site"] == "resid_post")]
        row = d[d["layer"] == d["layer"].max()].iloc[0]
        q[f"ctl_{arm}_last"] = ci(row["mean"], row["lo"], row["hi"], 1, "+")
        w = cs[(cs["arm"] == arm) & (cs["quantity"] == "delta_fro") & (cs["group"] == "total")].iloc[0]
        q[f"ctl_{arm}_dw"] = ci(w["mean"], w["lo"], w["hi"], 2)
    f = ksweep_frame().set_index(["placement", "k"])
    for (place, k), r in f.iterrows():
        q[f"ks_{place}{k}_ttr"] = f"{r['ttr']:.3f}"
    return q


def geometry_quotes(geo: pd.DataFrame | None = None) -> dict[str, str]:
    """The geometry prose (hyperfit-geometry): spans over the 3 seeds of the last block's standardised and raw
    PR and ΔDim, the adapted and frozen blocks, with position 0 and on generations, and the leave-one-out moves."""
    geo = geometry_table() if geo is None else geo
    rp = geo[geo["site"] == "resid_post"]
    last = int(rp["layer"].max())

    def span(sel, col="delta_pr"):
        return f"{sel[col].min():+.1f} to {sel[col].max():+.1f}"
    tf0 = rp[(rp["tokens"] == "teacher_forced") & ~rp["bos"]]
    at = tf0[tf0["layer"] == last]
    bos = rp[(rp["tokens"] == "teacher_forced") & rp["bos"] & (rp["layer"] == last)]
    gen = rp[(rp["tokens"] == "generated") & (rp["layer"] == last)]
    q = {"geo_last": span(at), "geo_std_last": span(at, "delta_pr_std"),
         "geo_last_bos": span(bos), "geo_std_last_bos": span(bos, "delta_pr_std"),
         "geo_std_last_gen": span(gen, "delta_pr_std"),
         "geo_frozen_max": f"{tf0[tf0['layer'] < last - 4]['delta_pr_std'].abs().max():.1f}",
         "geo_base_last": f"{at['pr_a'].iloc[0]:.1f}",
         "geo_std_base_last": f"from {at['pr_std_a'].iloc[0]:.1f} to "
                              f"{at['pr_std_b'].min():.1f}–{at['pr_std_b'].max():.1f}",
         "geo_loo_raw": f"dropping coordinate {int(at['pr_loo_dim_a'].iloc[0])} moves it by "
                        f"{100 * at['pr_loo_a'].iloc[0]:.0f} %",
         "geo_loo_std": f"moves the standardised PR by {100 * at['pr_std_loo_a'].iloc[0]:.1f} %"}
    for layer in range(last - 4, last):
        q[f"geo_std_L{layer}"] = span(tf0[tf0["layer"] == layer], "delta_pr_std")
    return q


def test_prose_quotes_equal_outputs():
    sec = " ".join(section().split())  # a quote may wrap across lines
    for name, value in quotes().items():
        assert value in sec, f"docs prose lacks {name} = {value}"


def test_readme_quotes_the_smollm2_runs():
    flat = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    q = quotes()
    for key in ("geo_last", "geo_std_last", "base_ttr", "pooled_ttr", "tstar_ttr", "ks_late30_ttr",
                "ks_late5_ttr"):
        assert q[key] in flat, f"README.md does not quote {key} = {q[key]}"
