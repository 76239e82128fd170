"""Figures for your own arrays: a plain array plus axis names in, a styled plotly Figure out (interplab's look,
readable at real-model size, exported with `interplab.figures.export` like every other figure).

    from interplab.figures import layer_head, layer_position, attention, layer_lines, export
    fig = layer_head(scores, title="Induction score", zlabel="score")       # scores: [n_layers, n_heads]
    export(fig, "induction.png")                                           # provenance inside the file

Conventions: row 0 at the top; layer and head axes carry integer ticks; a signed array gets the diverging scale
centred at 0, a non-negative one the sequential scale; cell values are printed only where a cell is wide and tall
enough to hold them (`cell_text`), NaN cells say why (`nan_reason`); token labels are shown as the text they
decode to (`i:token`, whitespace made visible), never as raw byte-level BPE pieces.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from interplab.core.errors import ShapeError
from interplab.figures.style import (DEFAULT_WIDTH, DIVERGING, PROBABILITY, QUALITATIVE, SEQUENTIAL,
                                     apply_style, explain_nan_cells, heatmap_axes, integer_axis)

__all__ = ["heatmap", "layer_head", "layer_position", "attention", "layer_lines", "display_tokens", "token_label",
           "token_text"]

_CELL_W, _CELL_H = 38, 18   # px a printed value needs at the default font (".2f" and a sign)


def _byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's `bytes_to_unicode`: the printable character byte-level BPE writes for each byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars)}


_BYTES = _byte_decoder()


def token_text(token) -> str:
    """The text a token stands for, whether it is given decoded (' Paris') or as a raw vocabulary piece: a
    byte-level BPE piece ('ĠParis', 'Ċ', 'Ã©') is mapped back through the byte table, a SentencePiece '▁' is a
    space. Decoded text passes through unchanged (a piece is only re-read when it has a shifted byte character
    such as 'Ġ', or when its non-ASCII characters are exactly the UTF-8 bytes of other text)."""
    s = str(token)
    if "▁" in s:
        return s.replace("▁", " ")
    if not s or any(c not in _BYTES for c in s):
        return s
    shifted = any(ord(c) >= 256 for c in s)
    if not shifted and s.isascii():
        return s
    raw = bytes(_BYTES[c] for c in s)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        # a piece holding part of a multi-byte character: show the bytes when it was a piece, else the text
        return raw.decode("utf-8", errors="replace") if shifted else s


def token_label(token) -> str:
    """One token as a readable label: its text with a leading space shown as '␣', newlines as '⏎', tabs as '⇥'
    (an empty token as '')."""
    s = token_text(token).replace("\n", "⏎").replace("\t", "⇥")
    if s.startswith(" "):
        s = "␣" + s[1:]
    return s if s else "''"


def display_tokens(tokens: Sequence[str]) -> list[str]:
    """Axis labels for tokens: `i:text` (plotly merges equal categories; prompts repeat tokens), each shown as the
    text it decodes to (`token_label`), so an axis never shows 'Ġ'/'Ċ' pieces."""
    return [f"{i}:{token_label(t)}" for i, t in enumerate(tokens)]


def _scale(z: np.ndarray, diverging: bool | None):
    finite = z[np.isfinite(z)]
    signed = bool(finite.size and finite.min() < 0 < finite.max()) if diverging is None else diverging
    if signed:
        m = float(np.abs(finite).max()) if finite.size else 1.0
        return dict(colorscale=DIVERGING, zmid=0.0, zmin=-m, zmax=m)
    return dict(colorscale=SEQUENTIAL)


def _fits(n_rows: int, n_cols: int, width: int, height: int) -> bool:
    plot_w, plot_h = width - 180, height - 130
    return plot_w / max(n_cols, 1) >= _CELL_W and plot_h / max(n_rows, 1) >= _CELL_H


def heatmap(z, *, x: Sequence | None = None, y: Sequence | None = None, xaxis: str = "", yaxis: str = "",
            title: str | None = None, zlabel: str = "value", diverging: bool | None = None,
            cell_text: bool | str = "auto", fmt: str = ".2f", nan_reason: str = "not computed",
            width: int | None = None, height: int | None = None, colorscale: str | None = None):
    """A heatmap of a 2-D array z [rows, cols] with optional tick labels x (cols) and y (rows).

    diverging: None picks from the data (signed -> RdBu centred at 0); cell_text: 'auto' prints values only where
    they fit, True / False force it. Integer-valued label axes get integer ticks."""
    import plotly.graph_objects as go

    a = np.asarray(z, dtype=float)
    if a.ndim != 2:
        raise ShapeError(f"heatmap needs a 2-D array [rows, cols], got shape {a.shape}")
    rows, cols = a.shape
    for name, labels, n in (("x", x, cols), ("y", y, rows)):
        if labels is not None and len(labels) != n:
            raise ShapeError(f"{name} has {len(labels)} labels for {n} {'columns' if name == 'x' else 'rows'}")
    width = width or max(DEFAULT_WIDTH, min(1400, 24 * cols + 220))
    height = height or max(320, min(1200, 22 * rows + 160))
    show = _fits(rows, cols, width, height) if cell_text == "auto" else bool(cell_text)
    style = dict(colorscale=colorscale) if colorscale else _scale(a, diverging)
    xs = list(x) if x is not None else list(range(cols))
    ys = list(y) if y is not None else list(range(rows))
    text = np.where(np.isfinite(a), np.vectorize(lambda v: format(v, fmt), otypes=[object])(a), "")
    fig = go.Figure(go.Heatmap(
        z=a, x=xs, y=ys, **style, colorbar=dict(title=dict(text=zlabel, side="right")),
        text=text if show else None, texttemplate="%{text}" if show else None,
        hovertemplate=f"{yaxis or 'row'} %{{y}}<br>{xaxis or 'col'} %{{x}}<br>{zlabel} %{{z:{fmt}}}"
                      "<extra></extra>"))
    apply_style(fig, title=title, xaxis=xaxis or None, yaxis=yaxis or None, width=width, height=height)
    heatmap_axes(fig, y_reversed=True)
    for letter, labels in (("x", xs), ("y", ys)):
        if all(isinstance(v, (int, np.integer)) for v in labels):
            integer_axis(fig, letter, values=labels)
        else:
            fig.update_layout(**{f"{letter}axis": dict(type="category", automargin=True)})
    if np.isnan(a).any():
        explain_nan_cells(fig, nan_reason, fmt=fmt, values=show)
    return fig


def layer_head(scores, *, title: str | None = None, zlabel: str = "score", diverging: bool | None = None,
               cell_text: bool | str = "auto", nan_reason: str = "not computed", **kw):
    """Layer × head heatmap of scores [n_layers, n_heads] (e.g. an induction or Truth score per head)."""
    a = np.asarray(scores, dtype=float)
    if a.ndim != 2:
        raise ShapeError(f"layer_head needs scores [n_layers, n_heads], got shape {a.shape}")
    return heatmap(a, xaxis="head", yaxis="layer", title=title, zlabel=zlabel, diverging=diverging,
                   cell_text=cell_text, nan_reason=nan_reason, **kw)


def layer_position(values, tokens: Sequence[str], *, title: str | None = None, zlabel: str = "value",
                   diverging: bool | None = None, cell_text: bool | str = "auto", **kw):
    """Layer × position heatmap of values [n_layers, n_tokens] with decoded token labels on the x axis (e.g. a
    logit-lens probability or a patching effect per layer and position)."""
    a = np.asarray(values, dtype=float)
    if a.ndim != 2 or a.shape[1] != len(tokens):
        raise ShapeError(f"layer_position needs values [n_layers, {len(tokens)} tokens], got shape {a.shape}")
    return heatmap(a, x=display_tokens(tokens), xaxis="token", yaxis="layer", title=title, zlabel=zlabel,
                   diverging=diverging, cell_text=cell_text, **kw)


def attention(pattern, tokens: Sequence[str], *, title: str | None = None, zlabel: str = "weight", **kw):
    """One attention pattern [query, key] with decoded token labels on both axes (weights in [0, 1])."""
    a = np.asarray(pattern, dtype=float)
    if a.ndim != 2 or a.shape != (len(tokens), len(tokens)):
        raise ShapeError(f"attention needs a square [query, key] pattern for {len(tokens)} tokens, got {a.shape}")
    labels = display_tokens(tokens)
    fig = heatmap(a, x=labels, y=labels, xaxis="key", yaxis="query", title=title, zlabel=zlabel,
                  colorscale=PROBABILITY, **kw)
    fig.update_traces(zmin=0.0, zmax=1.0)
    return fig


def layer_lines(values, *, lo=None, hi=None, names: Sequence[str] | None = None, layers: Sequence[int] | None = None,
                xaxis: str = "layer", yaxis: str = "value", title: str | None = None, band_label: str = "95% CI"):
    """Lines over layers: values [n_layers] or [n_series, n_layers] (or a {name: [n_layers]} mapping), with an
    optional band lo..hi of the same shape (e.g. a bootstrap interval)."""
    import plotly.graph_objects as go

    if isinstance(values, Mapping):
        names = list(values)
        v = np.asarray([np.asarray(values[k], dtype=float) for k in names])
        lo = None if lo is None else np.asarray([np.asarray(lo[k], dtype=float) for k in names])
        hi = None if hi is None else np.asarray([np.asarray(hi[k], dtype=float) for k in names])
    else:
        v = np.atleast_2d(np.asarray(values, dtype=float))
        lo = None if lo is None else np.atleast_2d(np.asarray(lo, dtype=float))
        hi = None if hi is None else np.atleast_2d(np.asarray(hi, dtype=float))
    if v.ndim != 2:
        raise ShapeError(f"layer_lines needs values [n_layers] or [n_series, n_layers], got {v.shape}")
    if (lo is None) != (hi is None) or (lo is not None and (lo.shape != v.shape or hi.shape != v.shape)):
        raise ShapeError("lo and hi must both be given, each shaped like values")
    names = list(names) if names is not None else [f"series {i}" for i in range(v.shape[0])]
    if len(names) != v.shape[0]:
        raise ShapeError(f"{len(names)} names for {v.shape[0]} series")
    xs = list(layers) if layers is not None else list(range(v.shape[1]))
    if len(xs) != v.shape[1]:
        raise ShapeError(f"{len(xs)} layers for {v.shape[1]} values per series")
    fig = go.Figure()
    for i, name in enumerate(names):
        colour = QUALITATIVE[i % len(QUALITATIVE)]
        if lo is not None:
            fig.add_trace(go.Scatter(x=xs + xs[::-1], y=list(hi[i]) + list(lo[i][::-1]), fill="toself",
                                     fillcolor=_rgba(colour, 0.18), line=dict(width=0), hoverinfo="skip",
                                     name=f"{name} {band_label}", showlegend=False))
        fig.add_trace(go.Scatter(x=xs, y=v[i], mode="lines+markers", name=name, line=dict(color=colour)))
    apply_style(fig, title=title, xaxis=xaxis, yaxis=yaxis, legend=v.shape[0] > 1)
    integer_axis(fig, "x", values=xs)
    return fig


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"
