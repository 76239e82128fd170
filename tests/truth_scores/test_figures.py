"""Every Truth-Score figure builder returns a serialisable plotly Figure; HTML export works offline."""
from __future__ import annotations

import numpy as np
import pandas as pd

from interplab.figures import truth_scores as F
from interplab.probes.truth.lineage import correlation_matrix, lineage_correlation
from interplab.probes.truth.scores import truth_scores_from_activations


def _ts(seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 40)
    X = rng.standard_normal((40, 3, 5, 4))
    X[:, 1, 2, 0] += 2 * y
    return truth_scores_from_activations(X, y, epochs=5)


def test_all_builders(tmp_path):
    a, b = _ts(0), _ts(1)
    st = lineage_correlation(a, b, n_permutations=20, return_null=True)
    m = correlation_matrix({"a": a, "b": b})
    wp = pd.DataFrame({"layer": np.repeat(np.arange(3), 5), "head": np.tile(np.arange(5), 3),
                       **{c: np.linspace(0, 1, 15) for c in F.WP_COLUMNS}})
    sweep = pd.DataFrame({"mode": ["contrast"] * 4, "site": ["z", "z", "attn_out_chunks", "attn_out_chunks"],
                          "alpha": [0, 1, 0, 1], "context_acc": [0.5, 0.6, 0.5, 0.4],
                          "context_acc_lo": [0.4] * 4, "context_acc_hi": [0.7] * 4})
    groups = pd.DataFrame({"group": ["top-k", "bottom-k", "random-k"], "mean": [0.3, 0.1, 0.2],
                           "lo": [0.2, 0.05, 0.1], "hi": [0.4, 0.15, 0.3]})
    figs = [F.score_heatmap(a), F.score_heatmap(a, view="normalized"),
            F.score_heatmap(a, view="gates", mode="contrast", alpha=40.0),
            F.lineage_matrix(m), F.lineage_bars(m, "a", clip_negative=True), F.pair_scatter(a, b, stats=st),
            F.null_histogram(st["null"], st["pearson"], st["perm_p"]), F.per_layer_curves({"a-b": np.ones(3)}),
            F.topk_jaccard_curve({"a-b": (a, b)}), F.weight_preservation_lines({"x": wp}),
            F.weight_vs_score_change(wp, a, b), F.gate_preview(np.array([[1.2, -0.3], [0.9, 1.0]])),
            F.evidence_scatter(a, np.ones((3, 5)), rho=0.1), F.evidence_group_bars(groups),
            F.gating_sweep(sweep), F.probe_diagnostics(a)]
    for fig in figs:
        assert fig.to_json()
    # the gates view outlines negative gates; the heatmap is [layer, head] (3 x 5)
    g = figs[2]
    assert any(t.name == "negative gate" for t in g.data)
    assert np.asarray(figs[0].data[0].z).shape == (3, 5)
    from interplab.figures.export import export

    out = export(figs[0], tmp_path / "heatmap.html")
    assert out.stat().st_size > 1000
