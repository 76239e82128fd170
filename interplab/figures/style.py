"""Shared look for every interplab figure: one template, one font stack, named colour scales.

Figure builders call `apply_style(fig, title=...)` last, so all pages and exported figures look alike:

    from interplab.figures.style import apply_style, SEQUENTIAL, DIVERGING
    fig = go.Figure(go.Heatmap(z=z, colorscale=DIVERGING, zmid=0))
    apply_style(fig, title="Truth scores", xaxis="head", yaxis="layer")
"""
from __future__ import annotations

from typing import Any

import numpy as np

from interplab.core.nan import finite_max, finite_min

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
    # log axes read 10^-4, not "100μ" (template-wide, so axes made log after apply_style are covered too)
    fig.layout.template.layout.xaxis.exponentformat = "power"
    fig.layout.template.layout.yaxis.exponentformat = "power"
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
    return finish_layout(fig)


def heatmap_axes(fig, *, y_reversed: bool = True, square: bool = False):
    """Matrix-style axes for heatmaps: row 0 at the top, optionally square cells."""
    if y_reversed:
        fig.update_yaxes(autorange="reversed")
    if square:
        fig.update_yaxes(scaleanchor="x", scaleratio=1)
    return fig


# ------------------------------------------------------------------------------------------------ layout audit
# Why these rules: figures are exported into papers, where a clipped title, a legend over the data or a tick at
# "layer 1.5" is a visible defect. `apply_style` applies the fixes that can be derived from the figure itself
# (title wrapping and top margin, integer ticks on integer-valued axes, exponent labels on log axes, legends moved
# off colourbars); the explicit helpers below cover what needs the builder's knowledge (why a cell is NaN).
# `layout_problems(fig)` checks a finished figure against the same rules (used by the tests and the app tests).

TITLE_CHARS = 64               # characters per title line before wrapping (fits a half-width column at 16 px)
TITLE_LINE_PX = 22             # top margin per title line
NOTE_CHARS = 40                # characters per line of a note above the plot (it starts at the plot's left edge)
INTEGER_HINTS = ("layer", "head", "step", "position", "index", "n_layers", "k (", "dimension", "count", "block")
MAX_INT_TICKS = 12
NA_TEXT = "n/a"


def wrap_title(text: str, width: int = TITLE_CHARS) -> str:
    """Break a title at spaces into lines of at most `width` characters (existing <br> breaks are kept)."""
    lines = []
    for part in str(text).split("<br>"):
        line = ""
        for word in part.split(" "):
            if line and len(_strip_tags(line)) + 1 + len(_strip_tags(word)) > width:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return "<br>".join(lines)


def _n_lines(text) -> int:
    return 0 if not text else str(text).count("<br>") + 1


def _axis_key(ref: str, letter: str) -> str:
    """'x' -> 'xaxis', 'x2' -> 'xaxis2'."""
    return f"{letter}axis{ref[1:]}"


def _axis_values(fig, key: str) -> list:
    """All data values drawn on the cartesian axis `key` ('xaxis', 'yaxis2', ...); None when not numeric."""
    letter = key[0]
    out = []
    for tr in fig.data:
        if not hasattr(tr, f"{letter}axis"):
            continue  # polar, 3-D, pie ...
        ref = getattr(tr, f"{letter}axis", None) or letter
        if _axis_key(ref, letter) != key:
            continue
        vals = getattr(tr, letter, None)
        if vals is None and tr.type == "heatmap" and tr.z is not None:
            z = np.asarray(tr.z, dtype=object)
            n = z.shape[1] if letter == "x" and z.ndim == 2 else z.shape[0]
            vals = list(range(n))
        if vals is None:
            continue
        if tr.type == "bar" and letter == ("y" if getattr(tr, "orientation", None) != "h" else "x"):
            continue  # bar heights are measurements, not positions
        out.extend(list(np.asarray(vals, dtype=object).ravel()))
    return out


def _integral(values) -> bool:
    try:
        a = np.asarray([v for v in values if v is not None], dtype=float)
    except (TypeError, ValueError):
        return False
    return a.size > 0 and bool(np.all(np.isfinite(a))) and bool(np.all(a == np.round(a)))


def _axes(fig, letter: str) -> list[str]:
    keys = [k for k in fig.layout.to_plotly_json() if k.startswith(f"{letter}axis")]
    refs = {_axis_key(getattr(tr, f"{letter}axis", None) or letter, letter) for tr in fig.data
            if hasattr(tr, f"{letter}axis")}
    return sorted(set(keys) | refs)


def _is_integer_axis(fig, key: str) -> bool:
    ax = fig.layout[key]
    if ax.type in ("log", "category", "date", "multicategory"):
        return False
    vals = _axis_values(fig, key)
    if not vals or not _integral(vals):
        return False
    title = (ax.title.text or "").lower() if ax.title is not None else ""
    return len(set(float(v) for v in vals)) >= 3 or any(h in title for h in INTEGER_HINTS)


def nice_int_step(span: float, max_ticks: int = MAX_INT_TICKS) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that gives at most `max_ticks` ticks over `span`."""
    step, mult = 1, 1
    while span / step > max_ticks:
        for m in (2, 5, 10):
            step = mult * m
            if span / step <= max_ticks:
                return step
        mult *= 10
    return step


def integer_axis(fig, axis: str = "x", *, row=None, col=None, values=None):
    """Integer ticks (0, 1, 2, ... or a coarser integer step) on a layer/head/step axis: never 'layer 1.5'."""
    vals = np.asarray(values if values is not None else [0, MAX_INT_TICKS], dtype=float)
    span = finite_max(vals) - finite_min(vals)
    step = nice_int_step(span if np.isfinite(span) else 1.0)
    upd = dict(tickmode="linear", tick0=0, dtick=step, tickformat="d")
    (fig.update_xaxes if axis == "x" else fig.update_yaxes)(row=row, col=col, **upd)
    return fig


def _fix_integer_axes(fig) -> None:
    for letter in ("x", "y"):
        for key in _axes(fig, letter):
            ax = fig.layout[key]
            if ax.dtick is not None or ax.tickvals is not None or not _is_integer_axis(fig, key):
                continue
            vals = np.asarray(_axis_values(fig, key), dtype=float)
            ax.update(tickmode="linear", tick0=0, dtick=nice_int_step(float(vals.max() - vals.min())),
                      tickformat="d")


def log_axis(fig, axis: str = "y", **kw):
    """A log axis labelled 10^k (never SI prefixes like '100μ')."""
    upd = dict(type="log", exponentformat="power", showexponent="all", dtick=1)  # one labelled tick per decade
    (fig.update_xaxes if axis == "x" else fig.update_yaxes)(**upd, **kw)
    return fig


def _has_colorbar(fig) -> bool:
    for tr in fig.data:
        if getattr(tr, "showscale", None) is False:
            continue
        if tr.type in ("heatmap", "contour", "histogram2d", "surface"):
            return True
        marker = getattr(tr, "marker", None)
        if marker is not None and (getattr(marker, "showscale", None) or (
                getattr(marker, "colorbar", None) is not None and marker.colorbar.title.text)):
            return True
    return False


def _right_axis(fig) -> bool:
    """A secondary y axis on the right: its tick labels sit where a default legend would go."""
    return any(fig.layout[k].side == "right" for k in _axes(fig, "y"))


def _legend_shown(fig) -> bool:
    if fig.layout.showlegend is False:
        return False
    named = [tr for tr in fig.data if tr.showlegend is not False and (tr.name or tr.showlegend)]
    return len(named) >= (1 if fig.layout.showlegend else 2)


def legend_below(fig, *, rows: int = 1):
    """A horizontal legend under the plot area (off the axes and the colourbars), with room reserved for it."""
    b = max(fig.layout.margin.b or 50, 70 + 24 * rows)
    # the legend's offset is in plot-area fractions: place it ~56 px under the plot, below the x-axis title
    plot_h = max(120, (fig.layout.height or 450) - (fig.layout.margin.t or 60) - b)
    fig.update_layout(legend=dict(orientation="h", x=0.0, xanchor="left", y=-56 / plot_h, yanchor="top"),
                      margin=dict(b=b))
    return fig


def explain_nan_cells(fig, reason: str, *, trace: int = 0, fmt: str = ".2f", values: bool = True):
    """Write 'n/a' into every NaN cell of heatmap `trace` (with `reason` on hover) and a note under the plot, so
    a blank cell never looks like a missing value by accident. values=False leaves the other cells blank (a map
    too dense for printed values)."""
    tr = fig.data[trace]
    z = np.asarray(tr.z, dtype=float)
    shown = np.vectorize(lambda v: format(v, fmt))(np.nan_to_num(z)) if values else np.full(z.shape, "")
    text = np.where(np.isnan(z), NA_TEXT, shown)
    hover = np.where(np.isnan(z), reason, "")
    tr.update(text=text, texttemplate="%{text}", hovertext=hover)
    if np.isnan(z).any():
        _note(fig, f"{NA_TEXT}: {reason}")
    return fig


def label_empty_bars(fig, reason: str, *, trace: int = 0):
    """Bars whose value is NaN get an 'n/a' label at 0 (hover: `reason`): an empty slot always says why."""
    tr = fig.data[trace]
    y = np.asarray(tr.y, dtype=float)
    if not np.isnan(y).any():
        return fig
    tr.update(y=np.nan_to_num(y, nan=0.0), text=[NA_TEXT if np.isnan(v) else "" for v in y], textposition="outside",
              hovertext=[reason if np.isnan(v) else "" for v in y])
    _note(fig, f"{NA_TEXT}: {reason}")
    return fig


def _note(fig, text: str) -> None:
    # above the plot area, under the title: below it, rotated category labels would run into it
    fig.add_annotation(text=wrap_title(text, NOTE_CHARS), xref="paper", yref="paper", x=0.0, y=1.0,
                       xanchor="left", yanchor="bottom", align="left", showarrow=False, font=dict(size=11),
                       name="interplab_note", yshift=4)


def finish_layout(fig):
    """The automatic part of the audit (also run by `apply_style`): wrap the title and size the top margin for it and
    the subplot titles, integer ticks on integer-valued axes, legend off the colourbar."""
    title = fig.layout.title.text if fig.layout.title is not None else None
    if title:
        wrapped = wrap_title(title)
        fig.layout.title.text = wrapped
        sub = max((_n_lines(a.text) for a in fig.layout.annotations if a.yref == "paper" and (a.y or 0) >= 1.0),
                  default=0)
        # plotly centres a multi-line title's block on its first line: pad it down by half a line per extra line,
        # or its first line pokes above the figure (clipped in exports)
        extra = 11 * (_n_lines(wrapped) - 1)
        top = 24 + TITLE_LINE_PX * _n_lines(wrapped) + extra + 18 * sub
        fig.update_layout(margin=dict(t=max(fig.layout.margin.t or 0, top)),
                          title=dict(y=1.0, yanchor="top", yref="container", pad=dict(t=12 + extra)))
    _fix_integer_axes(fig)
    if (_legend_shown(fig) and (_has_colorbar(fig) or _right_axis(fig))
            and (fig.layout.legend.x is None or fig.layout.legend.x >= 1.0) and fig.layout.legend.orientation != "h"):
        legend_below(fig)
    return fig


def layout_problems(fig) -> list[str]:
    """What in `fig` breaks the figure rules (empty list = none): clipped titles, legends inside the plot area or on
    a colourbar, half-step ticks on integer axes, SI-prefixed log ticks, NaN heatmap cells or bars nobody explains."""
    out = []
    title = fig.layout.title.text if fig.layout.title is not None else None
    if title:
        lines = str(title).split("<br>")
        if max(len(_strip_tags(ln)) for ln in lines) > TITLE_CHARS + 8:
            out.append(f"title line longer than {TITLE_CHARS} characters (clipped in a half-width column): {title!r}")
        need = 20 + TITLE_LINE_PX * len(lines)
        if (fig.layout.margin.t or 0) < need:
            out.append(f"top margin {fig.layout.margin.t} < {need} px for a {len(lines)}-line title")
    lg = fig.layout.legend
    if _legend_shown(fig):
        x, y = lg.x, lg.y
        if x is not None and y is not None and 0 <= x < 1 and 0 < y < 1:
            out.append(f"legend inside the plot area at ({x}, {y})")
        if (_has_colorbar(fig) or _right_axis(fig)) and (x is None or x >= 1.0) and lg.orientation != "h":
            out.append("legend at the right edge, where the colourbar or a right-hand axis is")
    for letter in ("x", "y"):
        for key in _axes(fig, letter):
            ax = fig.layout[key]
            fmt = ax.exponentformat or fig.layout.template.layout[f"{letter}axis"].exponentformat
            if ax.type == "log" and fmt not in ("power", "e", "E"):
                out.append(f"{key} is a log axis without exponentformat='power' (ticks read like '100μ')")
            elif _is_integer_axis(fig, key):
                ok = (ax.dtick is not None and float(ax.dtick) == int(float(ax.dtick))) or (
                    ax.tickvals is not None and _integral(ax.tickvals))
                if not ok:
                    out.append(f"{key} has integer data but no integer ticks (dtick/tickvals)")
    notes = " ".join(str(a.text) for a in fig.layout.annotations)
    for i, tr in enumerate(fig.data):
        if tr.type == "heatmap" and tr.z is not None:
            z = np.asarray(tr.z, dtype=float)
            if np.isnan(z).any():
                text = np.asarray(tr.text, dtype=object) if tr.text is not None else None
                if text is None or text.shape != z.shape or not all(str(t) for t in text[np.isnan(z)]):
                    out.append(f"heatmap trace {i} has NaN cells without text saying why")
                elif NA_TEXT not in notes and tr.hovertext is None:
                    out.append(f"heatmap trace {i}: NaN cells are labelled but not explained")
        vals = tr.x if tr.type == "bar" and tr.orientation == "h" else getattr(tr, "y", None)
        if tr.type == "bar" and vals is not None and _numeric(vals):
            y = np.asarray(vals, dtype=float)
            if np.isnan(y).any():
                out.append(f"bar trace {i} has empty (NaN) bars without a label")
    return out


def _numeric(vals) -> bool:
    try:
        np.asarray([np.nan if v is None else v for v in vals], dtype=float)
        return True
    except (TypeError, ValueError):
        return False


def _strip_tags(s: str) -> str:
    import re

    return re.sub(r"<[^>]+>", "", s)
