"""Reusable Streamlit widgets: figures with export buttons, the sidebar model picker, model loading with help.

Typical page:

    from interplab.app.widgets import page_model, show_figure
    pm = page_model("mypage")                     # the sidebar's model (every page gets it this way)
    model = pm.load()                             # shows what to do and stops the page when it cannot load
    show_figure(my_figure_builder(result), key="scores")
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from interplab.app import state
from interplab.app.jobs_view import job_panel

__all__ = ["show_figure", "validity_panel", "model_picker", "require_model", "picked_device_dtype",
           "static_export_available", "page_model", "PageModel", "parse_list", "job_panel"]


@st.cache_data(ttl=300, show_spinner=False)
def static_export_available() -> bool:
    """Is a Chromium available for PNG/SVG/PDF export (checked at most every 5 minutes)."""
    from interplab.figures.export import chromium_available

    return chromium_available()


def _file_stem(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(key)).strip("_") or "figure"


def _rendered(fig, fmt: str, metadata: dict | None) -> bytes:
    from interplab.figures.export import PUBLICATION_SCALE, render

    data = render(fig, fmt, scale=None if fmt == "html" else PUBLICATION_SCALE)   # the export default
    if metadata is None:
        return data
    from interplab.figures.metadata import embed_metadata

    return embed_metadata(data, fmt, metadata)


def show_figure(fig, key: str, *, filename: str | None = None, exports: bool = True, metadata: dict | None = None,
                selectable: bool = False):
    """st.plotly_chart plus download buttons: HTML always, PNG/SVG/PDF when a Chromium is available. `filename`
    names the downloads (default: the widget key); `metadata` (e.g. the run and config that made the figure,
    `interplab.figures.metadata.figure_metadata`) is written into every downloaded file. selectable: a click on a
    point reruns the page and the selected points are returned (a list of dicts; empty when nothing is selected).

    Static images are rendered only when their button is clicked (deferred downloads), through the same
    `interplab.figures.export` code path as scripts and the CLI."""
    sel = dict(on_select="rerun", selection_mode="points") if selectable else {}
    event = st.plotly_chart(fig, key=f"{key}__chart", width="stretch", config={"displaylogo": False}, **sel)
    points = list(event.selection.get("points", [])) if selectable and event is not None else []
    if exports:
        _download_buttons(fig, key, filename, metadata)
    return points if selectable else None


def _download_buttons(fig, key: str, filename: str | None, metadata: dict | None) -> None:
    import plotly.graph_objects as go

    from interplab.figures.export import MIME_TYPES, STATIC_FORMATS

    frozen = go.Figure(fig)  # a private copy: the page may keep mutating `fig`
    stem = _file_stem(filename or key)
    formats = ["html"] + (list(STATIC_FORMATS) if static_export_available() else [])
    cols = st.columns(len(formats) + (0 if len(formats) > 1 else 1))
    for col, fmt in zip(cols, formats):
        with col:
            st.download_button(
                f"{fmt.upper()}", data=(lambda f=fmt: _rendered(frozen, f, metadata)), file_name=f"{stem}.{fmt}",
                mime=MIME_TYPES[fmt], key=f"{key}__dl_{fmt}", on_click="ignore",
                help=f"download this figure as {fmt.upper()}",
            )
    if len(formats) == 1:
        with cols[-1]:
            st.caption("PNG/SVG/PDF export needs Chromium (`apt-get install chromium`).")


def model_picker(key: str = "model", *, sidebar: bool = True, page: str | None = None,
                 suggested: str | None = None, fits=None) -> tuple[str, str]:
    """Sidebar widget: a zoo organism or a local checkpoint path, and a backend. Returns (name, backend).

    The last choice is remembered across pages in `st.session_state["interplab_model"]`. A page whose method needs a
    particular kind of organism passes `page` (its name), `suggested` (a zoo name where the method shows something)
    and `fits(zoo_name) -> bool`: when the page is opened on a remembered zoo organism that does not fit, it starts on
    `suggested` instead and says so (a local checkpoint, or a model named with `interplab app --model`, is kept)."""
    box = st.sidebar if sidebar else st
    remembered = st.session_state.get("interplab_model") or {}
    default = remembered.get("name") or state.default_model()
    organisms = dict(state.zoo_organisms())
    reals = state.real_models()                       # {"real:NAME": install hint or None when installed}
    zoo = list(organisms) + list(reals)
    default_zoo = default[4:] if default.startswith("zoo:") else default if default in reals else None
    if default_zoo and default_zoo not in zoo:
        zoo = [default_zoo] + zoo
    default_path = "" if default.startswith("zoo:") or default in reals else default
    zkey = f"{key}_zoo"
    fresh = page is not None and st.session_state.get("interplab_page") != page
    if page is not None:
        st.session_state["interplab_page"] = page
    current = st.session_state.get(zkey) if st.session_state.get(zkey) in zoo else default_zoo
    switched = None
    # a model named at start-up (`interplab app --model`) is the user's explicit choice: never switched away from
    explicit = not remembered and state.DEFAULT_MODEL_ENV in os.environ
    if (fresh and suggested in zoo and fits is not None and not default_path and current is not None
            and not explicit and not fits(current)):
        st.session_state[zkey], switched = suggested, current
    elif st.session_state.get(zkey) not in zoo:
        st.session_state[zkey] = default_zoo if default_zoo in zoo else zoo[0]

    with box:
        st.subheader("Model")
        if switched:
            st.caption(f"Opened on `{suggested}`: this page's method needs another kind of organism than "
                       f"`{switched}`.")
        organism = st.selectbox(
            "Organism or real model", zoo, key=zkey,
            format_func=lambda n: (f"{n} (not installed: {reals[n]})" if reals.get(n) else n) if n in reals
            else n if organisms.get(n, True) else f"{n} (not built)",
            help="interplab's own small model organisms (`interplab zoo list`; build a missing one with `interplab "
                 "zoo train NAME`) and the real pretrained models that install offline (real:NAME, "
                 "`interplab models list`; the first load de-quantizes the GGUF, about a minute)")
        path = st.text_input("Local checkpoint (overrides the organism)", value=default_path, key=f"{key}_path",
                             placeholder="/path/to/hf-checkpoint-dir",
                             help="A Hugging Face checkpoint directory: config.json, model.safetensors, tokenizer "
                                  "files. A hub id works where the hub is reachable.")
        backend_default = remembered.get("backend", "bridge")
        backend = st.selectbox("Backend", list(state.BACKENDS), index=list(state.BACKENDS).index(backend_default),
                               key=f"{key}_backend", help="bridge = TransformerLens TransformerBridge; nnsight")
        with st.expander("Device and precision"):
            devs = state.devices()
            st.selectbox("Device", devs, index=devs.index(remembered.get("device", "cpu"))
                         if remembered.get("device", "cpu") in devs else 0, key=f"{key}_device")
            st.selectbox("dtype", list(state.DTYPES), index=list(state.DTYPES).index(remembered.get("dtype", "float32")),
                         key=f"{key}_dtype")
    name = path.strip() if path and path.strip() else organism if organism in reals else f"zoo:{organism}"
    device, dtype = picked_device_dtype(key)
    st.session_state["interplab_model"] = {"name": name, "backend": backend, "device": device, "dtype": dtype}
    return name, backend


def picked_device_dtype(key: str = "model") -> tuple[str, str]:
    return (st.session_state.get(f"{key}_device", "cpu"), st.session_state.get(f"{key}_dtype", "float32"))


def require_model(name: str, backend: str = "bridge", device: str | None = None, dtype: str | None = None,
                  *, key: str = "model", stop: bool = True):
    """Load (cached) or explain why not and what to do; with stop=True the page stops there."""
    d, t = picked_device_dtype(key)
    model, err = state.try_get_model(name, backend=backend, device=device or d, dtype=dtype or t)
    if model is None:
        st.warning(f"**Model `{name}` is not available.** {err}")
        st.markdown(state.model_help(name))
        if stop:
            st.stop()
    return model


@dataclass(frozen=True)
class PageModel:
    """The model a page works on, as the sidebar picked it: name, backend, device, dtype; `key` identifies it for
    caches and results ((normalized name, backend, device, dtype)); `is_new` is True on the page's first run with
    it (the page resets its defaults and drops results computed on another model). Nothing is loaded until `load`
    (explains and stops the page when the model is unavailable) or `try_load` ((model, error), no UI)."""

    name: str
    backend: str
    device: str
    dtype: str
    key: tuple
    is_new: bool
    picker: str = "model"

    def load(self, *, stop: bool = True):
        return require_model(self.name, self.backend, self.device, self.dtype, key=self.picker, stop=stop)

    def try_load(self):
        return state.try_get_model(self.name, backend=self.backend, device=self.device, dtype=self.dtype)

    def like(self, name: str) -> PageModel:
        """A page's second model (a hyperfitted target, a PR reference, a validation organism), loaded as this
        one is: the sidebar's backend, device and dtype; its own `key`."""
        return PageModel(name, self.backend, self.device, self.dtype,
                         (state.normalize_name(name), self.backend, self.device, self.dtype), False, self.picker)


def page_model(prefix: str, *, picker: str = "model", page: str | None = None, suggested: str | None = None,
               fits=None) -> PageModel:
    """Every page's one way to its model: the sidebar picker (`model_picker`, with the page's `suggested` organism
    and `fits` rule) and its device/dtype, as a `PageModel`. `prefix` namespaces the page's session-state key."""
    name, backend = model_picker(picker, page=page, suggested=suggested, fits=fits)
    device, dtype = picked_device_dtype(picker)
    key = (state.normalize_name(name), backend, device, dtype)
    is_new = st.session_state.get(f"{prefix}_model_key") != key
    st.session_state[f"{prefix}_model_key"] = key
    return PageModel(name, backend, device, dtype, key, is_new, picker)


def saved_result(experiment: str, result: str, key: str, *, label: str = "Saved run", hint: str = "",
                 prefer_model: str | None = None, loaded: str | None = None):
    """The `result` of a saved run of `experiment` the user picks: their own runs newest first, then the runs the
    project ships under results/ (so a page opens on a real result), or None with a caption saying how to make one.
    prefer_model: order the shipped runs so that those made with this model come first, then the organism runs of
    results/<experiment>/, then the other models' runs (results/<experiment>-<model>/). loaded: the sidebar's model:
    every run is labelled with the model it was made with, the loaded model's first, and a run of another model
    says so in a warning. A saved result names its class's module, so nothing needs importing first."""
    from interplab.core.errors import InterplabError
    from interplab.results.runs import list_runs, load_run, run_model, shipped_runs, shipped_runs_root

    try:
        runs = list_runs(experiment)
    except (OSError, InterplabError):  # no runs folder yet
        runs = []
    # an experiment with several modes saves different results (truth-scores: `truth_scores` on CtxMem, `facts_map`
    # on world facts): offer the runs that hold this one
    own = [p for p in (list(runs["path"])[::-1] if len(runs) else []) if (Path(p) / result).exists()]
    shipped = [str(p) for p in shipped_runs(experiment)][::-1]
    shipped = [p for p in shipped if (Path(p) / result).exists()]
    if prefer_model is not None:
        shipped.sort(key=lambda p: 0 if run_model(p) == prefer_model else 1 if Path(p).parent.name == experiment
                     else 2)   # a stable sort: newest first within each group
    if not own and not shipped:
        st.caption(f"No saved runs: `interplab run {experiment}`{hint}.")
        return None
    root = shipped_runs_root().parent
    models = _run_models(own + shipped) if loaded is not None else {}
    if loaded is not None:       # the loaded model's runs first (a stable sort keeps yours before the shipped)
        own.sort(key=lambda p: models.get(p) != loaded)
        shipped.sort(key=lambda p: models.get(p) != loaded)

    def name(p: str) -> str:
        where = f"shipped: {Path(p).relative_to(root).as_posix()}" if p in shipped else p
        return where if loaded is None else f"{where} · {_model_label(models.get(p), loaded)}"
    path = st.selectbox(label, own + shipped, key=key, format_func=name,
                        help=None if own else f"The run committed with interplab; yours appear here after "
                                              f"`interplab run {experiment}`{hint}.")
    run = load_run(path)
    if loaded is not None and models.get(path) != loaded:
        st.info(f"This saved run was made with **{models.get(path) or 'a model it does not name'}**, not the "
                f"loaded model `{loaded}`: its numbers are that model's.")
    validity_panel(run.validity(), key=f"{key}_validity")
    return run.result(result)


def validity_panel(report, key: str) -> None:
    """A saved run's verdicts: each failed check as a visible warning, the full table in an expander; a run
    without a report says so (its numbers were not checked)."""
    if report is None:
        st.caption("This run carries no validity checks (saved before runs checked themselves, or its experiment "
                   "makes no claim): read its numbers as unchecked.")
        return
    for v in report.verdict_list():
        text = f"**{v.outcome}** — {v.claim}: {v.measured}"
        if v.outcome == "inconclusive":
            st.warning(text + f"  \nInconclusive because {v.reason}")
        elif v.outcome == "reproduced":
            st.success(text)
        else:
            st.info(text)
    with st.expander(f"Validity checks ({len(report.checks)}; {len(report.failed_checks)} failed)"):
        st.dataframe(report.checks, key=key, hide_index=True)


def parse_list(text: str, field: str, item=float) -> list:
    """A comma-separated box ("0,0.5,1") as a list, parsed as `--set field=...` is (a ConfigError names the field)."""
    from interplab.experiments.registry import parse_value

    return parse_value(text, list[item], field=field)


def later_verdicts(verdict_experiment: str, run_path, key: str) -> None:
    """The verdicts a later `verdict_experiment` run (e.g. `pcfg-verdicts`) made from the saved run
    at `run_path` (its json/sources.json names the run): shown with `validity_panel` under a caption
    saying where they come from, for runs committed before runs checked themselves. Nothing when no
    such run exists."""
    from interplab.core.errors import InterplabError
    from interplab.results.runs import list_runs, load_run, shipped_runs, shipped_runs_root

    if not run_path:
        return
    base = shipped_runs_root().parent
    target = Path(run_path).resolve()
    try:
        own = list(list_runs(verdict_experiment)["path"])[::-1]
    except (OSError, InterplabError, KeyError):
        own = []
    for p in own + [str(p) for p in shipped_runs(verdict_experiment)][::-1]:
        try:
            run = load_run(p)
            sources = run.json("sources") if "sources" in run.json_names else {}
        except (OSError, InterplabError):
            continue
        named = {(Path(s) if Path(s).is_absolute() else base / s).resolve()
                 for s in sources.values()}
        if target in named:
            st.caption(f"Verdicts on this run, made later from its saved outputs by `interplab run "
                       f"{verdict_experiment}` ({Path(p).name}):")
            validity_panel(run.validity(), key=key)
            return


def _run_models(paths) -> dict:
    """{run folder: the model it was made with} (`model_jobs.run_model_name` of its config)."""
    from interplab.app.model_jobs import run_model_name
    from interplab.results.runs import CONFIG_FILE, read_json

    out = {}
    for p in paths:
        try:
            out[p] = run_model_name(read_json(Path(p) / CONFIG_FILE).get("config", {}) or {})
        except (OSError, ValueError, AttributeError):
            out[p] = None
    return out


def _model_label(model: str | None, loaded: str) -> str:
    if model == loaded:
        return f"{model} (the loaded model)"
    return f"{model or 'model not recorded'} (another model)"
