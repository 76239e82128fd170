"""Figure builders (pure) and the registered experiments end to end on the smallest organism."""
import json

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from interplab.figures import pcfg as F


def _probe_frame():
    rows = []
    for bk, lo, curve in (("1", 1, [0.9, 0.95, 0.96]), ("2-3", 2, [0.3, 0.7, 0.8]), ("all", 0, [0.2, 0.6, 0.9])):
        for l, s in zip((-1, 0, 1), curve):
            rows.append({"layer": l, "target": "t" if bk != "all" else "p", "bucket": bk, "span_len_lo": lo,
                         "metric": "r2", "score": s, "score_std": 0.01, "score_random_init": s / 2,
                         "score_shuffled": 0.1, "l_star": 0})
    return pd.DataFrame(rows)


def test_figure_builders(tmp_path):
    from interplab.figures import export
    from interplab.probes.pcfg import local_to_global, lstar_slope

    kl = pd.DataFrame({"position": range(5), "kl": np.linspace(0.1, 0.01, 5), "kl_se": 0.01, "kl_bigram": 0.5,
                       "kl_unigram": 0.6})
    df = _probe_frame()
    ls = local_to_global(df)
    am = pd.DataFrame([{"layer": l, "head": h, "k": k, "offset": 2 ** (k - 1), "mass": 0.1 * k, "uniform": 0.1}
                       for l in range(2) for h in range(2) for k in (1, 2)])
    figs = [
        F.kl_by_position_figure({"a": kl, "b": kl}),
        F.depth_sweep_figure(pd.DataFrame({"n_layers": [2, 4], "kl": [0.01, 0.005], "kl_se": [0.001, 0.001],
                                           "kl_bigram": [0.5, 0.5]}), log2_n=4),
        F.next_token_figure([0.5, 0.5, 0], [0.4, 0.5, 0.1], ["a", "b", "EOS"]),
        F.probe_curves_figure(df, "t"),
        F.local_to_global_heatmap(df, "t"),
        F.lstar_figure(ls, slopes={"t": lstar_slope(ls, "t")}),
        F.attention_offset_figure(am),
        F.parse_tree_figure(["a", "b"], [(0, 2, 0, 0), (0, 1, 1, 1), (1, 2, 1, 1)], ["S", "A"], colors=[1, .5, .2]),
        F.training_curve_figure([{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0, "kl": 0.1}], baselines={"bigram": 0.5}),
        F.calibration_figure(np.random.default_rng(0).random(100), np.random.default_rng(1).random(100)),
    ]
    assert all(isinstance(f, go.Figure) and len(f.data) >= 1 for f in figs)
    # the heatmap is normalised per bucket (max 1) and l* markers exist
    z = np.array(figs[4].data[0].z, dtype=float)
    assert np.allclose(np.nanmax(z, axis=1), 1.0)
    export(figs[3], tmp_path / "curves.html")
    assert (tmp_path / "curves.html").stat().st_size > 1000


@pytest.mark.slow
def test_experiments_run_on_pcfg_L2(tmp_path):
    from interplab.experiments.registry import run_experiment

    p = run_experiment("pcfg-depth", {"models": "zoo:pcfg-L2", "n_sequences": 32}, root=tmp_path)
    summ = pd.read_csv(next(p.rglob("depth_summary.csv")))
    assert summ.kl.iloc[0] < summ.kl_bigram.iloc[0]
    from interplab.probes.pcfg import DepthSweep, ProbeStudy
    from interplab.results import load_run

    assert isinstance(load_run(p).result("depth"), DepthSweep)       # the run reopens as its typed result
    p = run_experiment("pcfg-probes", {"model": "zoo:pcfg-L2", "n_sequences": 60, "n_seeds": 1,
                                       "targets": "span_posterior,next_token"}, root=tmp_path)
    pr = pd.read_csv(p / "tables" / "probes.csv")
    assert isinstance(load_run(p).result("study"), ProbeStudy)
    assert set(pr.layer) == {-1, 0, 1} and {"l_star", "score_random_init"} <= set(pr.columns)
    assert any(p.rglob("l_star.html"))
    p = run_experiment("pcfg-attention", {"models": "zoo:pcfg-L2", "n_sequences": 16}, root=tmp_path)
    am = pd.read_csv(next(p.rglob("attention_offset.csv")))
    assert set(am.k) == {1, 2, 3, 4} and (am.mass <= 1).all()
    from interplab.probes.pcfg import AttentionOffsets

    res = load_run(p).result("attention")
    assert isinstance(res, AttentionOffsets) and list(res.frames()) == ["zoo:pcfg-L2"]
    pd.testing.assert_frame_equal(res.table, am, check_dtype=False)
