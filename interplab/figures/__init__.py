"""Plotly figure builders (pure functions of results -> Figure; they never run a model) and `export(fig, path)`."""
from interplab.figures.export import chromium_available, export, render

__all__ = ["export", "render", "chromium_available"]
