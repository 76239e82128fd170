"""The toy method's figure."""
from __future__ import annotations

import plotly.graph_objects as go


def norm_bars(norms) -> go.Figure:
    fig = go.Figure(go.Bar(x=list(range(len(norms))), y=list(norms)))
    fig.update_layout(xaxis_title="layer", yaxis_title="mean ‖resid_post‖",
                      title="Toy method: residual norm per layer")
    return fig
