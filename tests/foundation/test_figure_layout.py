"""The figure rules (interplab.figures.style): titles never clipped, legends off the data and the colourbars, integer
axes with integer ticks, 10^k log ticks, NaN cells and empty bars that say why. Each rule is checked on real builders
and shown to catch the broken variant (`layout_problems` on a figure built without the helper)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from interplab.figures.style import (NA_TEXT, apply_style, explain_nan_cells, integer_axis, label_empty_bars,
                                     layout_problems, legend_below, nice_int_step, wrap_title)


def test_integer_axes_get_integer_ticks():
    from interplab.figures.truth_scores import score_heatmap
    from interplab.probes.truth import TruthScores

    fig = score_heatmap(TruthScores.from_array(np.random.default_rng(0).random((4, 4))))
    assert layout_problems(fig) == []
    for ax in (fig.layout.xaxis, fig.layout.yaxis):  # the 4 x 4 map had ticks at -0.5, 0.5, 1.5
        assert ax.dtick == 1 and ax.tickformat == "d"
    big = score_heatmap(TruthScores.from_array(np.random.default_rng(0).random((32, 32))))
    assert big.layout.xaxis.dtick == 5  # a coarser integer step, never a crowd of 32 ticks
    raw = go.Figure(go.Heatmap(z=np.zeros((4, 4))))  # broken variant: no style applied
    assert any("integer ticks" in p for p in layout_problems(raw))
    assert layout_problems(integer_axis(integer_axis(raw, "x", values=range(4)), "y", values=range(4))) == []


def test_nice_int_step():
    assert [nice_int_step(s) for s in (3, 12, 13, 31, 100, 1000)] == [1, 1, 2, 5, 10, 100]


def test_log_axes_use_exponents():
    fig = go.Figure(go.Scatter(x=[1e-5, 1e-4, 1e-3], y=[1, 2, 3]))
    fig.update_xaxes(type="log")
    assert any("log axis" in p for p in layout_problems(fig))  # plotly's default reads '100μ'
    apply_style(fig)
    fig.update_xaxes(type="log")  # made log after apply_style: the template still labels it 10^k
    assert layout_problems(fig) == []


def test_long_titles_are_wrapped_with_room():
    t = "Evidence attention of heads grouped by Truth Score (95% bootstrap CI) on every scored prompt"
    assert all(len(line) <= 64 for line in wrap_title(t).split("<br>"))
    fig = go.Figure(go.Scatter(x=[0.5, 1.5], y=[0.1, 0.2]))
    fig.update_layout(title=t)
    assert any("title" in p for p in layout_problems(fig))
    apply_style(fig, title=t)
    assert layout_problems(fig) == []
    assert fig.layout.margin.t >= 20 + 22 * fig.layout.title.text.count("<br>") + 22


def test_lineage_nan_cells_and_empty_bars_say_why():
    from interplab.figures.truth_scores import NOT_COMPARABLE, lineage_bars, lineage_matrix

    m = pd.DataFrame([[1.0, np.nan, 0.5], [np.nan, 1.0, np.nan], [0.5, np.nan, 1.0]],
                     index=list("abc"), columns=list("abc"))
    fig = lineage_matrix(m)
    assert layout_problems(fig) == []
    text = np.asarray(fig.data[0].text)
    assert (text[np.isnan(m.to_numpy())] == NA_TEXT).all() and text[0, 0] == "1.00"
    assert any(NOT_COMPARABLE in str(a.text).replace("<br>", " ") for a in fig.layout.annotations)
    bars = lineage_bars(m, "a")
    assert list(bars.data[0].text) == [NA_TEXT, ""] and layout_problems(bars) == []
    raw = go.Figure(go.Heatmap(z=m.to_numpy(), x=list("abc"), y=list("abc")))
    assert any("NaN cells" in p for p in layout_problems(raw))
    assert layout_problems(explain_nan_cells(raw, "why")) == []
    rawbar = go.Figure(go.Bar(x=["a", "b"], y=[0.3, np.nan]))
    assert any("empty" in p for p in layout_problems(rawbar))
    assert layout_problems(label_empty_bars(rawbar, "why")) == []


def test_legends_leave_colourbars_and_right_axes_alone():
    from interplab.figures.geometry import pr_by_layer_figure

    df = pd.DataFrame({"layer": [0, 1, 2, 3], "site": ["resid_post"] * 4, "pr_a": [1.0, 2, 3, 4],
                       "pr_b": [1.5, 2.5, 3.5, 6], "delta_pr": [0.5, 0.5, 0.5, 2]})
    fig = pr_by_layer_figure(df)  # ΔDim bars on a right-hand axis: the legend used to cover its ticks
    assert layout_problems(fig) == [] and fig.layout.legend.orientation == "h"
    assert "ΔDim last block" in fig.layout.title.text  # the summary line is part of the title, not cut at the left
    both = go.Figure([go.Heatmap(z=[[0, 1], [1, 0]], x=["a", "b"], y=["a", "b"]),
                      go.Scatter(x=["a"], y=["b"], name="marked"), go.Scatter(x=["b"], y=["a"], name="other")])
    assert any("colourbar" in p for p in layout_problems(both))
    inside = go.Figure([go.Scatter(x=[0.5], y=[1], name="a"), go.Scatter(x=[0.5], y=[2], name="b")])
    inside.update_layout(legend=dict(x=0.5, y=0.5))
    assert any("inside the plot area" in p for p in layout_problems(inside))
    assert layout_problems(legend_below(inside)) == []


@pytest.mark.parametrize("builder", ["principal_angle_figure", "sensitivity_figure"])
def test_decodeshare_side_figures_keep_legends_below(builder):
    from interplab.figures import decodeshare as F

    if builder == "principal_angle_figure":
        fig = F.principal_angle_figure({"decode vs prefill": [10.0, 30.0, 60.0]})
    else:
        fig = F.sensitivity_figure(pd.DataFrame({"rho": [0.95] * 3, "tau": [1e-3, 1e-2, 1e-1], "k": [30, 30, 30],
                                                 "k_s": [30, 18, 1], "bound": [5e3, 5e2, 50]}))
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.y < 0
    assert layout_problems(fig) == []
