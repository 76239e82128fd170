"""Figure export: one function, format chosen by the file suffix.

- `.html`: an interactive page that works offline: plotly.js inlined (`self_contained=True`, the default of `export`),
  or, for the figures of a run (`save_figure`), one shared `plotly.min.js` next to them, so a run folder stays small.
- Static formats default to a publication scale (`PUBLICATION_SCALE` = 2: a 700×500 figure becomes 1400×1000 px).
- `metadata=` (a dict; `save_figure` passes the run, its config and the interplab version) is written into the file:
  PNG tEXt chunk, SVG <metadata>, PDF info dictionary, HTML comment (`interplab.figures.metadata`).
- `.png`, `.svg`, `.pdf`: static images rendered by kaleido 1.x in a local Chromium (Debian `chromium`; set
  `BROWSER_PATH` to point at another binary). MathJax is off, so nothing is fetched from a CDN. One headless
  Chromium is started on first use and reused for every later export in the process (closed at exit).

Every file is written atomically (rendered to bytes first, then written to a temp file and renamed into place).
"""
from __future__ import annotations

import asyncio
import atexit
import os
import threading
from pathlib import Path
from typing import Any

from interplab.core.errors import InputError, InterplabError, MissingDependencyError
from interplab.core.io import write_bytes, write_text

__all__ = [
    "export",
    "render",
    "to_html",
    "find_chromium",
    "chromium_available",
    "shutdown_renderer",
    "ExportError",
    "SUPPORTED_FORMATS",
    "STATIC_FORMATS",
    "MIME_TYPES",
]

STATIC_FORMATS = ("png", "svg", "pdf")
SUPPORTED_FORMATS = ("html",) + STATIC_FORMATS
MIME_TYPES = {
    "html": "text/html",
    "png": "image/png",
    "svg": "image/svg+xml",
    "pdf": "application/pdf",
}
_RENDER_TIMEOUT_S = 120.0
PUBLICATION_SCALE = 2.0
PLOTLYJS_NAME = "plotly.min.js"

INSTALL_HINT = (
    "Static figure export (.png/.svg/.pdf) needs a local Chromium. Install it with `apt-get install chromium` "
    "(Debian/Ubuntu) or point the BROWSER_PATH environment variable at a Chrome/Chromium binary. "
    "`.html` export works without a browser."
)


class ExportError(InterplabError):
    """Rendering a figure failed for a reason other than a missing browser."""


# --------------------------------------------------------------------------------------------------- browser lookup
def find_chromium() -> str | None:
    """Path of the Chromium kaleido will use, or None. `BROWSER_PATH` wins when set (and must exist)."""
    env = os.environ.get("BROWSER_PATH")
    if env:
        return env if (os.path.isfile(env) and os.access(env, os.X_OK)) else None
    try:
        from choreographer.browsers.chromium import Chromium
    except ImportError:  # pragma: no cover - kaleido is a hard dependency
        return None
    try:
        return Chromium.find_browser(skip_local=False)
    except Exception:  # noqa: BLE001 - best-effort lookup
        return None


def chromium_available() -> bool:
    return find_chromium() is not None


def _require_chromium() -> str:
    path = find_chromium()
    if path is None:
        where = os.environ.get("BROWSER_PATH")
        prefix = f"No Chromium at BROWSER_PATH={where!r}. " if where else "No Chromium/Chrome found on this machine. "
        raise MissingDependencyError(prefix + INSTALL_HINT)
    return path


# --------------------------------------------------------------------------------------------------- renderer
class _Renderer:
    """One kaleido browser on a private event loop in a daemon thread, shared by every export in the process.

    This is what `kaleido.start_sync_server(mathjax=False)` does, plus a timeout on each render and a restart when
    the browser died (kaleido's own sync server blocks forever if its browser fails to start)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._kaleido: Any = None
        self._browser_path: str | None = None

    def _alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._kaleido is not None

    def _start(self, browser_path: str) -> None:
        import kaleido

        _quiet_browser_channel()

        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="interplab-kaleido", daemon=True)
        thread.start()

        async def _open():
            k = kaleido.Kaleido(n=1, timeout=_RENDER_TIMEOUT_S, mathjax=False, path=browser_path)
            await k.open()
            return k

        try:
            k = asyncio.run_coroutine_threadsafe(_open(), loop).result(timeout=_RENDER_TIMEOUT_S)
        except BaseException as exc:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            if type(exc).__name__ == "ChromeNotFoundError":
                raise MissingDependencyError(f"Chromium at {browser_path!r} could not be used. " + INSTALL_HINT) from None
            raise ExportError(
                f"Could not start Chromium at {browser_path!r} for figure export ({type(exc).__name__}: {exc}). "
                + INSTALL_HINT
            ) from None
        self._loop, self._thread, self._kaleido, self._browser_path = loop, thread, k, browser_path

    def render(self, fig_dict: dict, opts: dict) -> bytes:
        browser_path = _require_chromium()
        with self._lock:
            if not self._alive() or self._browser_path != browser_path:
                self._stop_locked()
                self._start(browser_path)
            fut = asyncio.run_coroutine_threadsafe(self._kaleido.calc_fig(fig_dict, opts=opts), self._loop)
            try:
                return fut.result(timeout=_RENDER_TIMEOUT_S + 10)
            except BaseException as exc:
                fut.cancel()
                self._stop_locked()  # a fresh browser next time
                raise ExportError(f"kaleido failed to render the figure as {opts.get('format')}: "
                                  f"{type(exc).__name__}: {exc}") from None

    def _stop_locked(self) -> None:
        loop, thread, k = self._loop, self._thread, self._kaleido
        self._loop = self._thread = self._kaleido = None
        if loop is None:
            return
        if k is not None and thread is not None and thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(k.close(), loop).result(timeout=10)
            except BaseException:  # noqa: BLE001 - closing is best effort
                pass
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=5)

    def stop(self) -> None:
        with self._lock:
            self._stop_locked()


_RENDERER = _Renderer()
atexit.register(_RENDERER.stop)


class _DropBenignJSONError:
    """choreographer logs a traceback ("JSONError decoding message. Ignoring") when Chromium's pipe splits a
    message, then recovers and the export succeeds; the traceback on a successful export read as a failure."""

    @staticmethod
    def filter(record) -> bool:
        return not str(record.msg).startswith("JSONError decoding message")


def _quiet_browser_channel() -> None:
    import logging

    log = logging.getLogger("choreographer.channels.pipe")
    if not any(isinstance(f, _DropBenignJSONError) for f in log.filters):
        log.addFilter(_DropBenignJSONError())


def shutdown_renderer() -> None:
    """Close the shared Chromium now (it is also closed at interpreter exit)."""
    _RENDERER.stop()


# --------------------------------------------------------------------------------------------------- public API
def _check_fig(fig) -> dict:
    if hasattr(fig, "to_dict") and hasattr(fig, "to_plotly_json"):
        return fig.to_dict()
    if isinstance(fig, dict) and ("data" in fig or "layout" in fig):
        return fig
    raise InputError(f"export() needs a plotly Figure (or a figure dict), got {type(fig).__name__}")


def _fmt(fmt: str) -> str:
    f = str(fmt).lower().lstrip(".")
    if f not in SUPPORTED_FORMATS:
        raise InputError(f"unsupported figure format {fmt!r}; supported: "
                         + ", ".join("." + s for s in SUPPORTED_FORMATS))
    return f


def to_html(fig, *, width: int | None = None, height: int | None = None, plotlyjs: str | None = None) -> str:
    """HTML with plotly.js inlined (no CDN), or loading it from the relative path `plotlyjs` (e.g. "plotly.min.js")."""
    import plotly.graph_objects as go

    fig_dict = _check_fig(fig)
    f = go.Figure(fig_dict) if isinstance(fig, dict) else fig
    return f.to_html(
        include_plotlyjs=plotlyjs or True,
        full_html=True,
        include_mathjax=False,
        default_width=f"{width}px" if width else "100%",
        default_height=f"{height}px" if height else "100%",
        config={"displaylogo": False},
    )


def render(fig, fmt: str, *, width: int | None = None, height: int | None = None,
           scale: float | None = None) -> bytes:
    """Render a figure to bytes in `fmt` (html, png, svg, pdf)."""
    fmt = _fmt(fmt)
    if fmt == "html":
        return to_html(fig, width=width, height=height).encode("utf-8")
    fig_dict = _check_fig(fig)
    opts: dict[str, Any] = {"format": fmt}
    if width is not None:
        opts["width"] = int(width)
    if height is not None:
        opts["height"] = int(height)
    if scale is not None:
        opts["scale"] = float(scale)
    data = _RENDERER.render(fig_dict, opts)
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not data:
        raise ExportError(f"kaleido returned an empty {fmt} image")
    return bytes(data)


def export(fig, path, *, width: int | None = None, height: int | None = None, scale: float | None = None,
           metadata: dict | None = None, self_contained: bool = True) -> Path:
    """Write `fig` to `path`; the suffix picks the format (.html, .png, .svg, .pdf). Returns the path.

    `.html` is interactive and offline: plotly.js inlined, or with self_contained=False loaded from one
    `plotly.min.js` written once into the same folder. Static formats render at `scale` (default
    PUBLICATION_SCALE = 2), need a local Chromium and raise `MissingDependencyError` (with the install command)
    when there is none. `metadata` (JSON-able dict) is embedded in the file. The write is atomic."""
    path = Path(path)
    if not path.suffix:
        raise InputError(f"cannot tell the figure format of {str(path)!r}: give it a suffix, one of "
                         + ", ".join("." + s for s in SUPPORTED_FORMATS))
    fmt = _fmt(path.suffix)
    if fmt == "html":
        js = None
        if not self_contained:
            js = PLOTLYJS_NAME
            if not (path.parent / js).is_file():
                from plotly.offline import get_plotlyjs

                write_text(path.parent / js, get_plotlyjs())
        data = to_html(fig, width=width, height=height, plotlyjs=js).encode("utf-8")
    else:
        data = render(fig, fmt, width=width, height=height, scale=PUBLICATION_SCALE if scale is None else scale)
    from interplab.figures.metadata import embed_metadata, figure_metadata

    # every exported file says what made it: the interplab version at least, plus what the caller adds
    data = embed_metadata(data, fmt, {**figure_metadata(), **(metadata or {})})
    return write_bytes(path, data)


def save_figure(run, name: str, fig, formats=("html",), *, overwrite: bool = False,
                self_contained: bool = False) -> list[Path]:
    """Write `fig` into run folder `run` (a `RunDir`): figures/<name>.plotly.json (so `interplab export` can
    re-render it) plus one file per format, each carrying the run, its config and the interplab version
    (`interplab.figures.metadata`). HTML figures share figures/plotly.min.js unless `self_contained`."""
    if isinstance(formats, str):
        formats = (formats,)
    bad = [f for f in formats if str(f).lower().lstrip(".") not in SUPPORTED_FORMATS]
    if bad:
        raise InputError(f"figure formats {bad} not supported; use any of {SUPPORTED_FORMATS}")
    if not hasattr(fig, "to_json"):
        raise InputError(f"save_figure({name!r}) needs a plotly Figure, got {type(fig).__name__}")
    target = run.target("figures", name, ".plotly.json", overwrite)
    write_text(target, fig.to_json())
    paths = [run.record(target, "figure")]
    for f in formats:
        f = str(f).lower().lstrip(".")
        out = run.target("figures", name, f".{f}", overwrite)
        from interplab.figures.metadata import figure_metadata

        export(fig, out, metadata=figure_metadata(run, name), self_contained=self_contained)
        paths.append(run.record(out, f"figure-{f}"))
    return paths
