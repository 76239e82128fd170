"""docs/decodeshare.md "On a real model" quotes the committed SmolLM2 runs (results/decodeshare-tasks-smollm2/,
results/decodeshare-layers-smollm2/, results/decodeshare-smollm2/): every table row is rebuilt here from the runs'
own files, so the docs cannot drift from the runs. Run as a script to print the rows for the docs."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from interplab.results.runs import shipped_runs

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "decodeshare.md"
CONDITIONS = ("shared", "prefill-est", "haar", "var-matched", "alpha-match", "k-match")


def _runs(kind: str, folder: str) -> list[Path]:
    return [d for d in shipped_runs(kind) if d.parent.name == folder or d.name == folder]


def _iv(v: float, lo: float, hi: float, signed: bool = False) -> str:
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(v)} [{f.format(lo)}, {f.format(hi)}]"


def study_runs() -> dict[int, Path]:
    """{layer: run folder} of the shipped H2/LOTO/steering runs."""
    return {json.loads((d / "json" / "info.json").read_text())["layer"]: d
            for d in _runs("decodeshare", "decodeshare-smollm2")}


def screen_rows() -> list[str]:
    """Per task: baseline generation exact match and forced-choice accuracy (40 items each) and the screen's verdict."""
    d = _runs("decodeshare-tasks", "decodeshare-tasks-smollm2")[-1]
    t = pd.read_csv(d / "tables" / "tasks.csv").set_index(["task", "metric"])
    rows = []
    for task in dict.fromkeys(t.index.get_level_values("task")):
        g, f = t.loc[(task, "gen")], t.loc[(task, "fc")]
        rows.append(f"| {task} | {_iv(g['acc'], g['lo'], g['hi'])} | {_iv(f['acc'], f['lo'], f['hi'])} | "
                    f"{int(g['n'])} | {'—' if task == 'all' else 'yes' if g['passes'] else 'no'} |")
    return rows


def layer_rows() -> list[str]:
    d = _runs("decodeshare-layers", "decodeshare-layers-smollm2")[-1]
    t = pd.read_csv(d / "tables" / "layers.csv")
    t = t[(t["mode"] == "paper") & (t["threshold"] == "tau_k=1")]
    return [f"| {int(r['layer'])} | {int(r['k'])} | {int(r['k_s'])} | {r['p_perm']:.4f} | {r['p_rot']:.3f} |"
            for _, r in t.iterrows()]


def study_h1_rows() -> list[str]:
    """The two study layers' own H1 numbers and the decode-vs-prefill principal angles (H3's geometry)."""
    rows = []
    for layer, d in sorted(study_runs().items()):
        i = json.loads((d / "json" / "info.json").read_text())
        a = i["angles_decode_vs_prefill"]
        rows.append(f"| {layer} | {i['k']} | {i['k_s']} | {i['p_perm']:.4f} | {i['p_rot']:.3f} | {i['k_s_prefill']} | "
                    f"{a['mean']:.1f}° (n = {a['n']}, {a['min']:.1f}–{a['max']:.1f}°) |")
    return rows


def ablation_rows() -> list[str]:
    """Pooled over the six tasks (240 items): accuracy after each removal, generation and forced choice."""
    rows = []
    for layer, d in sorted(study_runs().items()):
        a = pd.read_csv(d / "tables" / "ablation.csv")
        a = a[a["task"] == "all"].set_index(["condition", "metric"])
        for metric in ("gen", "fc"):
            cells = [_iv(*a.loc[(c, metric), ["acc", "lo", "hi"]]) for c in ("baseline",) + CONDITIONS]
            rows.append(f"| {layer} | {metric} | " + " | ".join(cells) + " |")
    return rows


def contrast_rows() -> list[str]:
    """Shared removal minus each control, pooled, paired bootstrap over items."""
    rows = []
    for layer, d in sorted(study_runs().items()):
        s = pd.read_csv(d / "tables" / "shared_vs_controls.csv")
        s = s[s["task"] == "all"].set_index(["control", "metric"])
        for metric in ("gen", "fc"):
            cells = [f"{_iv(*s.loc[(c, metric), ['shared_minus_control', 'lo', 'hi']], signed=True)} "
                     f"p {s.loc[(c, metric), 'p']:.2g}" for c in CONDITIONS[1:]]
            rows.append(f"| {layer} | {metric} | " + " | ".join(cells) + " |")
    return rows


def energy_rows() -> list[str]:
    """Removed energy Σ‖h − h̃‖² (generation, pooled) relative to the shared removal."""
    rows = []
    for layer, d in sorted(study_runs().items()):
        a = pd.read_csv(d / "tables" / "ablation.csv")
        a = a[(a["task"] == "all") & (a["metric"] == "gen")].set_index("condition")
        ref = a.loc["shared", "energy"]
        rows.append(f"| {layer} | " + " | ".join(f"{a.loc[c, 'energy'] / ref:.2f}" for c in CONDITIONS) + " |")
    return rows


def loto_rows() -> list[str]:
    rows = []
    for layer, d in sorted(study_runs().items()):
        lo = pd.read_csv(d / "tables" / "loto.csv")
        lo = lo[lo["metric"] == "gen"].set_index(["condition", "task"])
        for task in dict.fromkeys(lo.index.get_level_values("task")):
            cells = [_iv(*lo.loc[(c, task), ["acc", "lo", "hi"]])
                     for c in ("baseline", "loto-removed", "loto-haar", "loto-haar-energy")]
            rows.append(f"| {layer} | {task} | " + " | ".join(cells) + " |")
    return rows


def steering_rows() -> list[str]:
    rows = []
    for layer, d in sorted(study_runs().items()):
        s = json.loads((d / "json" / "info.json").read_text())["steering"]
        st = pd.read_csv(d / "tables" / "steering.csv")
        v = st[st["vector"] == "v"].set_index("scale")
        cells = [f"{_iv(*v.loc[sc, ['effect', 'lo', 'hi']])} (src {v.loc[sc, 'src_acc']:.2f})" for sc in (1.0, 2.0)]
        rows.append(f"| {layer} | {s['sh_v']:.3f} | {s['sh_v_haar_mean']:.3f} | {s['sh_v_haar_q95']:.3f} | "
                    f"{s['p_sh_v_vs_haar']:.3f} | " + " | ".join(cells) + " |")
    return rows


def all_rows() -> list[str]:
    return screen_rows() + layer_rows() + study_h1_rows() + ablation_rows() + contrast_rows() + energy_rows() + loto_rows() \
        + steering_rows()


def test_runs_are_shipped():
    assert sorted(study_runs()) == [15, 24]
    assert _runs("decodeshare-tasks", "decodeshare-tasks-smollm2")
    assert _runs("decodeshare-layers", "decodeshare-layers-smollm2")


def test_docs_quote_the_runs():
    doc = DOC.read_text()
    for line in all_rows():
        assert line in doc, f"docs/decodeshare.md lacks the row {line!r}"


def test_docs_h1_prose_matches_the_layer_scan():
    d = _runs("decodeshare-layers", "decodeshare-layers-smollm2")[-1]
    t = pd.read_csv(d / "tables" / "layers.csv")
    t = t[t["mode"] == "paper"]
    k1 = t[t["threshold"] == "tau_k=1"]
    floor = k1["p_rot"].min()
    passing = [int(x) for x in k1.loc[k1["p_rot"] <= floor + 1e-12, "layer"]]
    fail = k1[k1["p_rot"] > floor + 1e-12]["p_rot"]
    t3 = t[t["threshold"] == "tau=0.001"]["k_s"]
    flat = " ".join(DOC.read_text().split())
    assert (k1["p_perm"] == k1["p_perm"].min()).all() and passing == list(range(12)) + [25, 29]
    for q in (f"|S| = {k1['k_s'].min()}–{k1['k_s'].max()} of k = {k1['k'].min()}–{k1['k'].max()} directions",
              f"(p_rot {fail.min():.3f}–{fail.max():.3f})", f"the sets are {t3.min()}–{t3.max()} directions"):
        assert q in flat, f"docs/decodeshare.md does not quote {q!r}"


def test_readme_quotes_the_layer15_study():
    a = pd.read_csv(study_runs()[15] / "tables" / "ablation.csv")
    g = a[(a["task"] == "all") & (a["metric"] == "gen")].set_index("condition")["acc"]
    flat = " ".join((ROOT / "README.md").read_text().split())
    for q in (f"from {g['baseline']:.3f} to {g['shared']:.3f} at layer 15 (Haar {g['haar']:.3f}, prefill-estimated "
              f"{g['prefill-est']:.3f})", f"(α-matched {g['alpha-match']:.3f}, k-matched {g['k-match']:.3f})"):
        assert q in flat, f"README.md does not quote {q!r}"


if __name__ == "__main__":
    for f in (screen_rows, layer_rows, study_h1_rows, ablation_rows, contrast_rows, energy_rows, loto_rows, steering_rows):
        try:
            print(f.__name__, *f(), sep="\n")
        except (IndexError, FileNotFoundError, KeyError) as e:
            print(f.__name__, "unavailable:", e)
        print()
