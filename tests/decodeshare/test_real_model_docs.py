"""docs/decodeshare.md "On a real model" quotes the committed SmolLM2 runs (results/decodeshare-tasks-smollm2/,
results/decodeshare-layers-smollm2/, results/decodeshare-smollm2/): every table row and the claim table are rebuilt
here from the runs' own files and validity reports, so the docs cannot drift from the runs. Run as a script to
print the rows for the docs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from interplab.probes.stats import holm_adjust
from tests.real_model_docs import assert_claim_table, doc_section, run_dir, validity_report

ROOT = Path(__file__).resolve().parents[2]
DOC = "decodeshare.md"
CONDITIONS = ("shared", "prefill-est", "haar", "var-matched", "alpha-match", "k-match")
LAYERS = (15, 24)
SCREENS = ("screen", "screen-calib")


def _iv(v: float, lo: float, hi: float, signed: bool = False) -> str:
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(v)} [{f.format(lo)}, {f.format(hi)}]"


def study_runs() -> dict[int, Path]:
    """{layer: run folder} of the committed H2 / sweep / LOTO / steering runs."""
    return {layer: run_dir("decodeshare", f"layer{layer}") for layer in LAYERS}


def layers_run() -> Path:
    """The layer scan judged again from its tables (Holm over layers); its source is `all-layers`."""
    return run_dir("decodeshare-layers", "all-layers-holm")


def _info(d: Path) -> dict:
    return json.loads((d / "json" / "info.json").read_text())


def _table(d: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(d / "tables" / f"{name}.csv")


def screen_rows() -> list[str]:
    """Per task: baseline generation exact match and forced-choice accuracy and the screen's verdict."""
    rows = []
    for label in SCREENS:
        t = _table(run_dir("decodeshare-tasks", label), "tasks").set_index(["task", "metric"])
        for task in dict.fromkeys(t.index.get_level_values("task")):
            g, f = t.loc[(task, "gen")], t.loc[(task, "fc")]
            rows.append(f"| {label} | {task} | {_iv(g['acc'], g['lo'], g['hi'])} | "
                        f"{_iv(f['acc'], f['lo'], f['hi'])} | {int(g['n'])} | "
                        f"{'—' if task == 'all' else 'yes' if g['passes'] else 'no'} |")
    return rows


def layer_rows() -> list[str]:
    t = _table(layers_run(), "layers")
    t = t[(t["mode"] == "paper") & (t["threshold"] == "tau_k=1")].sort_values("layer")
    hp, hr = holm_adjust(t["p_perm"].to_numpy()), holm_adjust(t["p_rot"].to_numpy())
    return [f"| {int(r['layer'])} | {int(r['k'])} | {int(r['k_s'])} | {r['p_perm']:.4f} | {a:.3f} | "
            f"{r['p_rot']:.3f} | {b:.2f} |" for (_, r), a, b in zip(t.iterrows(), hp, hr)]


def study_h1_rows() -> list[str]:
    """The two study layers' own H1 numbers and the decode-vs-prefill principal angles (H3's geometry)."""
    rows = []
    for layer, d in study_runs().items():
        i = _info(d)
        a = i["angles_decode_vs_prefill"]
        rows.append(f"| {layer} | {i['k']} | {i['k_s']} | {i['p_perm']:.4f} | {i['p_rot']:.3f} | "
                    f"{i['k_s_prefill']} | {a['mean']:.1f}° (n = {a['n']}, {a['min']:.1f}–{a['max']:.1f}°) |")
    return rows


def ablation_rows() -> list[str]:
    """Pooled over the six tasks: generation exact match after each removal at alpha = 1."""
    rows = []
    for layer, d in study_runs().items():
        a = _table(d, "ablation")
        a = a[(a["task"] == "all") & (a["metric"] == "gen")].set_index("condition")
        rows.append(f"| {layer} | " + " | ".join(_iv(*a.loc[c, ["acc", "lo", "hi"]])
                                                  for c in ("baseline",) + CONDITIONS) + " |")
    return rows


def contrast_rows() -> list[str]:
    """Shared removal minus each control at alpha = 1, pooled, paired bootstrap over items."""
    rows = []
    for layer, d in study_runs().items():
        s = _table(d, "shared_vs_controls")
        s = s[(s["task"] == "all") & (s["metric"] == "gen")].set_index("control")
        cells = [f"{_iv(*s.loc[c, ['shared_minus_control', 'lo', 'hi']], signed=True)} p {s.loc[c, 'p']:.2g}"
                 for c in CONDITIONS[1:]]
        rows.append(f"| {layer} | " + " | ".join(cells) + " |")
    return rows


def energy_rows() -> list[str]:
    """Per condition at alpha = 1: its strength, its size, the energy it removes on the calibration decode states
    relative to the shared removal's (the target), and the energy it removed per edited position during the
    evaluation relative to the shared removal's."""
    rows = []
    for layer, d in study_runs().items():
        conds = _info(d)["conditions"]
        a = _table(d, "ablation")
        a = a[(a["task"] == "all") & (a["metric"] == "gen")].set_index("condition")
        per_pos = a["energy"] / a["n_edited"]
        for c in CONDITIONS:
            k = conds[c]
            rows.append(f"| {layer} | {c} | {k['k']} | {k['alpha']:.2f} | {k['energy'] / k['target']:.2f} | "
                        f"{per_pos[c] / per_pos['shared']:.2f} |")
    return rows


def sweep_rows() -> list[str]:
    """Per layer and alpha: generation exact match of the shared removal and of each energy control, or why the
    control was not run (its energy ratio and strength)."""
    rows = []
    for layer, d in study_runs().items():
        sw = _table(d, "alpha_sweep").set_index(["condition", "alpha"])
        sw = sw[sw["metric"] == "gen"]
        sc = _table(d, "sweep_controls").set_index(["control", "alpha"])
        for a in sorted(sc.index.get_level_values("alpha").unique()):
            cells = [_iv(*sw.loc[("shared", a), ["acc", "lo", "hi"]])]
            for c in ("alpha-match", "k-match"):
                r = sc.loc[(c, a)]
                spec = f"k_C {int(r['k_c'])}, α_C {r['alpha_c']:.2f}, energy {r['ratio']:.2f}× target"
                cells.append(f"{_iv(*sw.loc[(c, a), ['acc', 'lo', 'hi']])} ({spec})" if r["evaluated"]
                             else f"not run ({spec})")
            rows.append(f"| {layer} | {a:g} | " + " | ".join(cells) + " |")
    return rows


def sweep_contrast_rows() -> list[str]:
    rows = []
    for layer, d in study_runs().items():
        con = _table(d, "sweep_contrasts")
        for _, r in con[con["metric"] == "gen"].sort_values(["control", "alpha"]).iterrows():
            rows.append(f"| {layer} | {r['control']} | {r['alpha']:g} | {r['acc_shared']:.3f} | "
                        f"{r['acc_control']:.3f} | {_iv(r['control_minus_shared'], r['lo'], r['hi'], True)} | "
                        f"{r['p']:.2g} |")
    return rows


def loto_rows() -> list[str]:
    rows = []
    for layer, d in study_runs().items():
        lo = _table(d, "loto")
        lo = lo[lo["metric"] == "gen"].set_index(["condition", "task"])
        for task in dict.fromkeys(lo.index.get_level_values("task")):
            cells = [_iv(*lo.loc[(c, task), ["acc", "lo", "hi"]])
                     for c in ("baseline", "loto-removed", "loto-haar", "loto-haar-energy")]
            rows.append(f"| {layer} | {task} | " + " | ".join(cells)
                        + f" | {lo.loc[('loto-haar-energy', task), 'alpha']:.2f} |")
    return rows


def steering_rows() -> list[str]:
    rows = []
    for layer, d in study_runs().items():
        s = _info(d)["steering"]
        st = _table(d, "steering")
        v = st[st["vector"] == "v"].set_index("scale")
        cells = [f"{_iv(*v.loc[sc, ['effect', 'lo', 'hi']])} (src {v.loc[sc, 'src_acc']:.2f})" for sc in (1.0, 2.0)]
        rows.append(f"| {layer} | {s['sh_v']:.3f} | {s['sh_v_haar_mean']:.3f} / {s['sh_v_haar_q95']:.3f} | "
                    f"{s['p_sh_v_vs_haar']:.3f} | {s['sh_v_var_mean']:.3f} / {s['sh_v_var_q95']:.3f} | "
                    f"{s['p_sh_v_vs_var']:.3f} | " + " | ".join(cells) + " |")
    return rows


ROWS = (screen_rows, layer_rows, study_h1_rows, ablation_rows, contrast_rows, energy_rows, sweep_rows,
        sweep_contrast_rows, loto_rows, steering_rows)


def test_runs_are_committed_with_their_reports():
    for d in [*study_runs().values(), layers_run()]:
        assert len(validity_report(d).verdicts), d
    assert json.loads((layers_run() / "json" / "source.json").read_text())["name"] == "all-layers"
    assert run_dir("decodeshare-layers", "all-layers")


def test_docs_quote_the_runs():
    section = doc_section(DOC)
    for f in ROWS:
        for line in f():
            assert line in section, f"docs/decodeshare.md ({f.__name__}) lacks the row {line!r}"


def test_claim_table_is_the_runs_verdicts():
    assert_claim_table(doc_section(DOC), *study_runs().values(), layers_run())


def test_docs_prose_matches_the_runs():
    """The numbers the section's prose quotes, each from its run."""
    flat = " ".join(doc_section(DOC).split())
    t = _table(layers_run(), "layers")
    k1 = t[(t["mode"] == "paper") & (t["threshold"] == "tau_k=1")]
    raw = k1[k1["p_rot"] < 0.05]
    t3 = t[(t["mode"] == "paper") & (t["threshold"] == "tau=0.001")]["k_s"]
    for q in (f"|S| = {k1['k_s'].min()}–{k1['k_s'].max()} of k = {k1['k'].min()}–{k1['k'].max()} directions",
              f"uncorrected p_rot < 0.05 at {len(raw)} layers",
              f"the sets are {t3.min()}–{t3.max()} directions"):
        assert q in flat, f"docs/decodeshare.md does not quote {q!r}"


def test_readme_quotes_only_what_the_reports_support():
    """README's DecodeShare paragraph quotes the layer-15 removal and names each energy-control verdict as the
    report has it."""
    flat = " ".join((ROOT / "README.md").read_text().split())
    para = flat.split("### DecodeShare", 1)[1].split("### ", 1)[0]
    a = _table(study_runs()[15], "ablation")
    g = a[(a["task"] == "all") & (a["metric"] == "gen")].set_index("condition")["acc"]
    assert f"from {g['baseline']:.3f} to {g['shared']:.3f} at layer 15" in para
    for layer, d in study_runs().items():
        for v in validity_report(d).verdict_list():
            if "energy with the" in v.claim:
                control = v.claim.split("with the ")[1].split(" control")[0]
                assert f"L{layer} {control}: {v.outcome}" in para, (layer, control, v.outcome)


if __name__ == "__main__":
    for f in ROWS:
        try:
            print(f.__name__, *f(), sep="\n")
        except (IndexError, FileNotFoundError, KeyError, AssertionError) as e:
            print(f.__name__, "unavailable:", e)
        print()
    for d in [*study_runs().values(), layers_run()]:
        print(validity_report(d).markdown())
