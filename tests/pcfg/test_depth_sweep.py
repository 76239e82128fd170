"""The seeded depth sweep (`pcfg-depth-sweep`): config checks, the interval summaries against `probes.stats`, a smoke
run of the experiment (depths 1, 2 × 1 seed, 30 steps), the app section reading a saved run, and docs/pcfg.md's
numbers against the committed outputs of the full run (results/pcfg-depth-sweep)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from interplab.core.errors import ConfigError, ShapeError
from interplab.probes.pcfg import DepthSeedSweep, DepthSeedSweepConfig
from interplab.probes.pcfg.depth_seeds import summarise_sweep
from interplab.probes.stats import intervals, t_interval

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "results" / "pcfg-depth-sweep"
SMOKE = {"depths": "1,2", "seeds": "0", "steps": "30", "n_sequences": "32", "probe_sequences": "60",
         "n_splits": "2", "probe_targets": "span_posterior"}


@pytest.mark.parametrize("bad", [{"depths": []}, {"depths": [0, 2]}, {"depths": [2, 2]}, {"seeds": []},
                                 {"steps": 0}, {"probe_targets": ["next_token"]}, {"probe_targets": ["nope"]},
                                 {"level": 1.0}, {"threads": 0}, {"probe_sequences": 5}])
def test_config_validate_rejects(bad):
    with pytest.raises(ConfigError):
        DepthSeedSweepConfig(**bad).validate()
    assert DepthSeedSweepConfig().validate().steps == 1500


def _fake(kls: dict, slopes: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    orgs = pd.DataFrame([{"n_layers": L, "seed": s, "kl": v, "kl_ratio_bigram": v / 0.5}
                         for L, vs in kls.items() for s, v in enumerate(vs)])
    sl = pd.DataFrame([{"n_layers": L, "seed": s, "target": "span_posterior", "view": view, "slope": v + d,
                        "lo": np.nan, "hi": np.nan, "dof": 2}
                       for L, vs in slopes.items() for s, v in enumerate(vs)
                       for view, d in (("buckets", 0.0), ("split0", 0.1), ("split1", -0.1))])
    return orgs, sl


def test_summaries_are_t_intervals_over_seeds():
    orgs, sl = _fake({1: [0.03, 0.04, 0.05], 2: [0.01, 0.02, 0.012]}, {1: [0.0, 0.1, -0.1], 2: [0.5, 1.0, 0.8]})
    s = summarise_sweep(orgs, sl)
    kl = s["kl_by_depth"].set_index("n_layers")
    assert kl.loc[1, ["mean", "lo", "hi"]].tolist() == pytest.approx(t_interval([0.03, 0.04, 0.05]))
    assert kl.loc[2, "n"] == 3
    # the paired step is a t interval of the per-seed differences, deeper minus shallower
    st = s["kl_steps"].iloc[0]
    diff = intervals(np.array([0.01, 0.02, 0.012]) - np.array([0.03, 0.04, 0.05]))
    assert (st.from_layers, st.to_layers) == (1, 2) and st["mean"] == pytest.approx(diff["mean"])
    assert st["hi"] == pytest.approx(diff["hi"]) and st["hi"] < 0
    sd = s["slope_by_depth"].set_index(["view", "n_layers"])
    assert sd.loc[("seeds", 2), ["mean", "lo", "hi"]].tolist() == pytest.approx(t_interval([0.5, 1.0, 0.8]))
    assert sd.loc[("seeds", 2), "n"] == 3 and sd.loc[("splits", 2), "n"] == 6  # seeds × splits, buckets view excluded
    assert sd.loc[("splits", 1), "mean"] == pytest.approx(0.0)


def test_result_shape_checks():
    orgs, sl = _fake({1: [0.03, 0.04]}, {1: [0.0, 0.1]})
    with pytest.raises(ShapeError, match="organisms lacks"):
        DepthSeedSweep(grammar="g", steps=1, level=0.95, log2_n=4.0, organisms=orgs, slopes=sl,
                       l_star=pd.DataFrame(), probes=pd.DataFrame(), **summarise_sweep(orgs, sl))


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    from interplab.experiments.registry import run_experiment

    home = tmp_path_factory.mktemp("home")
    return home, run_experiment("pcfg-depth-sweep", SMOKE, root=home)


def test_smoke_run(smoke_run):
    from interplab.results import load_run

    _home, path = smoke_run
    run = load_run(path)
    res = run.result("sweep")
    assert isinstance(res, DepthSeedSweep)
    o = res.organisms
    assert sorted(o["n_layers"]) == [1, 2] and (o["steps_done"] == 30).all()  # equal step budget, exactly
    assert np.isfinite(o["kl"]).all() and (o["kl"] > 0).all()
    assert set(res.slopes["view"]) == {"buckets", "split0", "split1"}
    assert set(res.l_star["n_layers"]) == {1, 2} and res.l_star["l_star"].between(-1, 1).all()
    # the weights live in the run folder, one checkpoint per (depth, seed)
    assert (path / "organisms" / "L2-s0" / "grammar.json").is_file()
    assert {"kl_vs_depth", "l_star_by_depth_span_posterior"} <= set(run.figure_names)
    assert set(run.json("summary")["kl"]) == {"1", "2"}


def test_app_section_reads_saved_run(smoke_run, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    import interplab.app

    home, _path = smoke_run
    monkeypatch.setenv("INTERPLAB_HOME", str(home))
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", "zoo:no-such-organism")
    page = str(Path(interplab.app.__file__).resolve().parent / "pages" / "5_PCFG.py")
    at = AppTest.from_file(page, default_timeout=120).run()
    assert not at.exception, at.exception
    keys = [c.key for c in at.get("plotly_chart")]
    assert "pcfg_sweep_kl__chart" in keys and "pcfg_sweep_lstar__chart" in keys
    assert any("30 steps per organism" in str(m.value) for m in at.markdown)


# ------------------------------------------------------------------------------------------ docs vs committed run
def _committed():
    if not (COMMITTED / "sweep" / "result.json").is_file():
        pytest.fail(f"{COMMITTED}/sweep is missing: the committed outputs of `interplab run pcfg-depth-sweep`")
    return DepthSeedSweep.load(COMMITTED / "sweep")


def docs_table(res: DepthSeedSweep) -> str:
    """The table docs/pcfg.md quotes, rendered from the result (the docs must contain it verbatim)."""
    kl = res.kl_by_depth.set_index("n_layers")
    sd = res.slope_by_depth
    lines = ["| layers | KL mean [95% t] | KL / bigram | span_posterior slope [95% t] | inside slope [95% t] |",
             "|---|---|---|---|---|"]
    for L in kl.index:
        r = kl.loc[L]
        cells = [f"{int(L)}", f"{r['mean']:.4f} [{r['lo']:.4f}, {r['hi']:.4f}]", f"{100 * r['kl_ratio_bigram']:.1f} %"]
        for t in ("span_posterior", "inside"):
            s = sd[(sd["target"] == t) & (sd["view"] == "seeds") & (sd["n_layers"] == L)].iloc[0]
            cells.append(f"{s['mean']:.2f} [{s['lo']:.2f}, {s['hi']:.2f}]")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def docs_fragments(res: DepthSeedSweep) -> dict[str, str]:
    """The prose numbers docs/pcfg.md quotes, rendered from the result."""
    steps = "; ".join(f"{r.from_layers}→{r.to_layers}: {r.mean:+.4f} [{r.lo:+.4f}, {r.hi:+.4f}]"
                      for r in res.kl_steps.itertuples())
    lo68 = res.kl_steps[(res.kl_steps.from_layers == 6) & (res.kl_steps.to_layers == 8)]["lo"].iloc[0]
    sd = res.slope_by_depth[res.slope_by_depth["target"] == "span_posterior"].set_index(["view", "n_layers"])
    ratio = ", ".join(f"{sd.loc[('seeds', L), 'mean'] / L:.2f}" for L in (4, 6, 8))
    splits = ", ".join(f"{sd.loc[('splits', L), 'mean']:.2f}" for L in sorted(res.organisms["n_layers"].unique()))
    return {"TABLE_HERE": docs_table(res), "STEPS_HERE": steps, "LO68_HERE": f"{lo68:.5f}", "RATIO_HERE": ratio,
            "SPLITS_HERE": splits}


def test_docs_numbers_equal_committed_outputs():
    res = _committed()
    raw = (ROOT / "docs" / "pcfg.md").read_text()
    lines = "\n".join(line.strip() for line in raw.splitlines())  # the table sits indented inside a list item
    assert docs_table(res) in lines, "docs/pcfg.md's pcfg-depth-sweep table differs from the committed outputs"
    doc = " ".join(raw.split())  # prose numbers may wrap
    summary = json.loads((COMMITTED / "json" / "summary.json").read_text())
    assert summary["steps"] == res.steps and f"{res.steps} steps" in doc
    assert (res.organisms["steps_done"] == res.steps).all()
    for key, text in list(docs_fragments(res).items())[1:]:  # the table is checked above
        assert text in doc, f"docs/pcfg.md does not quote the committed {key.removesuffix('_HERE').lower()}: {text}"
    # the claims the prose draws from these numbers
    kl_steps = res.kl_steps.set_index(["from_layers", "to_layers"])
    assert kl_steps.loc[(1, 2), "hi"] < 0 < kl_steps.loc[(6, 8), "lo"]
    assert all(kl_steps.loc[k, "lo"] < 0 < kl_steps.loc[k, "hi"] for k in [(2, 3), (3, 4), (4, 6)])
    sd = res.slope_by_depth[(res.slope_by_depth["view"] == "seeds")].set_index(["target", "n_layers"])
    assert all(sd.loc[("span_posterior", L), "lo"] > 0 for L in (4, 6, 8))
    assert all(sd.loc[("inside", L), "lo"] > 0 for L in (3, 6, 8)) and sd.loc[("inside", 4), "lo"] < 0


def test_readme_numbers_equal_committed_outputs():
    res = _committed()
    readme = " ".join((ROOT / "README.md").read_text().split())
    kl = res.kl_by_depth.set_index("n_layers")["mean"]
    assert (f"KL falls from {kl[1]:.4f} (1 layer) to {kl[3]:.4f} (3 layers) and is flat beyond ({kl[6]:.4f} at 6, "
            f"{kl[8]:.4f} at 8 layers)") in readme
    sd = res.slope_by_depth
    s = sd[(sd["view"] == "seeds") & (sd["target"] == "span_posterior")].set_index("n_layers")
    assert (f"`span_posterior` {s.loc[4, 'mean']:.2f} [{s.loc[4, 'lo']:.2f}, {s.loc[4, 'hi']:.2f}] at 4 layers, "
            f"{s.loc[8, 'mean']:.2f} [{s.loc[8, 'lo']:.2f}, {s.loc[8, 'hi']:.2f}] at 8") in readme
    ratios = sorted(f"{s.loc[L, 'mean'] / L:.2f}" for L in (4, 6, 8))
    assert f"about {ratios[0]}–{ratios[-1]} of the depth per doubling" in readme

