"""Plotly figure builders (pure functions of results -> Figure; they never run a model) and `export(fig, path)`."""
from interplab.figures.export import export

__all__ = ["export"]
