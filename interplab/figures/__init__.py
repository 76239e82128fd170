"""Plotly figure builders (pure functions of results or plain arrays -> Figure; they never run a model), the
shared style, and `export(fig, path)`.

For your own arrays: `heatmap`, `layer_head`, `layer_position`, `attention`, `layer_lines` (interplab.figures.arrays).
To style a figure you built: `apply_style`, `heatmap_axes`, `integer_axis`, `log_axis`, `legend_below` and the
colour scales `SEQUENTIAL`, `DIVERGING`, `PROBABILITY`, `QUALITATIVE` (interplab.figures.style)."""
from interplab.figures.arrays import attention, display_tokens, heatmap, layer_head, layer_lines, layer_position
from interplab.figures.export import chromium_available, export, render
from interplab.figures.style import (DIVERGING, PROBABILITY, QUALITATIVE, SEQUENTIAL, apply_style, heatmap_axes,
                                     integer_axis, layout_problems, legend_below, log_axis)

__all__ = ["export", "render", "chromium_available", "heatmap", "layer_head", "layer_position", "attention",
           "layer_lines", "display_tokens", "apply_style", "heatmap_axes", "integer_axis", "log_axis",
           "legend_below", "layout_problems", "SEQUENTIAL", "DIVERGING", "PROBABILITY", "QUALITATIVE"]
