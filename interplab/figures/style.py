"""Shared look for every interplab figure: one template, one font stack, named colour scales.

Figure builders call `apply_style(fig, title=...)` last, so all pages and exported figures look alike:

    from interplab.figures.style import apply_style, SEQUENTIAL, DIVERGING
    fig = go.Figure(go.Heatmap(z=z, colorscale=DIVERGING, zmid=0))
    apply_style(fig, title="Truth scores", xaxis="head", yaxis="layer")
"""
from __future__ import annotations

from typing import Any

TEMPLATE = "plotly_white"
FONT_FAMILY = "Inter, Helvetica Neue, Arial, sans-serif"
FONT_SIZE = 13
TITLE_SIZE = 16

SEQUENTIAL = "Viridis"         # magnitudes >= 0 (attention weights, participation ratios, activations)
DIVERGING = "RdBu_r"           # signed scores centred at 0 (pass zmid=0)
PROBABILITY = "Blues"          # probabilities in [0, 1]
QUALITATIVE = [                # categorical series (colour-blind safe, Okabe-Ito)
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
]
ACCENT = QUALITATIVE[0]

DEFAULT_WIDTH = 720
DEFAULT_HEIGHT = 480


def apply_style(fig, *, title: str | None = None, xaxis: str | None = None, yaxis: str | None = None,
                height: int | None = None, width: int | None = None, legend: bool | None = None,
                **layout: Any):
    """Apply the interplab template, fonts, margins and colourway in place; returns `fig` for chaining."""
    fig.update_layout(
        template=TEMPLATE,
        font=dict(family=FONT_FAMILY, size=FONT_SIZE),
        colorway=QUALITATIVE,
        margin=dict(l=60, r=30, t=60 if title else 30, b=50),
    )
    if title is not None:
        fig.update_layout(title=dict(text=title, font=dict(size=TITLE_SIZE), x=0.0, xanchor="left"))
    if xaxis is not None:
        fig.update_xaxes(title_text=xaxis)
    if yaxis is not None:
        fig.update_yaxes(title_text=yaxis)
    if height is not None:
        fig.update_layout(height=height)
    if width is not None:
        fig.update_layout(width=width)
    if legend is not None:
        fig.update_layout(showlegend=legend)
    if layout:
        fig.update_layout(**layout)
    return fig


def heatmap_axes(fig, *, y_reversed: bool = True, square: bool = False):
    """Matrix-style axes for heatmaps: row 0 at the top, optionally square cells."""
    if y_reversed:
        fig.update_yaxes(autorange="reversed")
    if square:
        fig.update_yaxes(scaleanchor="x", scaleratio=1)
    return fig
