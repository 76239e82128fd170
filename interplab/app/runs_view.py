"""Saved runs in the app: the Runs page's table and the "reopen in its method page" hand-over.

A run is reopened by name (`kind/name` under the results root): the Runs page puts it in
`st.session_state[REOPEN_KEY]` and the `run` query parameter and switches to the method page; the method page calls
`show_reopened_run(kinds)`, which shows the run's config, its typed results (`LoadedRun.result(name)`) and its saved
figures (downloads named after the run, not the widget)."""
from __future__ import annotations

import streamlit as st

__all__ = ["REOPEN_KEY", "METHOD_PAGES", "method_page", "run_label", "download_stem", "request_reopen",
           "reopened_run_id", "show_reopened_run", "show_run"]

REOPEN_KEY = "reopen_run"


def method_pages_by_prefix() -> dict[str, str]:
    """experiment kind prefix -> the page that shows it: the Models page's, then each method page's `reopens`."""
    from interplab.methods import method_pages

    out = {"next-token": "pages/1_Models.py", "patching": "pages/10_Patching.py",
           "lenses-facts": "pages/10_Patching.py", "logit-lens": "pages/11_Logit_Lens.py"}
    for _, page in method_pages():
        out.update({prefix: page.file for prefix in page.reopens})
    return out


def __getattr__(name: str):
    if name == "METHOD_PAGES":
        return method_pages_by_prefix()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def method_page(kind: str) -> str | None:
    for prefix, page in method_pages_by_prefix().items():
        if kind == prefix or kind.startswith(prefix):
            return page
    return None


def run_label(kind: str, name: str) -> str:
    return f"{kind}/{name}"


def download_stem(run, figure: str) -> str:
    """File name of a downloaded figure: experiment, run and figure (e.g. truth-scores_20261201-1200-ab12cd_heatmap);
    the run's config travels inside the file (interplab.figures.metadata)."""
    return f"{run.kind}_{run.name}_{figure}"


def request_reopen(kind: str, name: str) -> None:
    st.session_state[REOPEN_KEY] = run_label(kind, name)
    st.query_params["run"] = run_label(kind, name)


def reopened_run_id() -> str | None:
    return st.session_state.get(REOPEN_KEY) or st.query_params.get("run")


def _close() -> None:
    st.session_state.pop(REOPEN_KEY, None)
    if "run" in st.query_params:
        del st.query_params["run"]


def show_run(run, key: str) -> None:
    """Config, versions, typed results and figures of a LoadedRun."""
    import pandas as pd

    from interplab.app.widgets import show_figure
    from interplab.experiments.registry import discover

    discover()  # every built-in result class registered, so a run saved before results named their module reads too
    meta = run.meta
    versions = meta.get("versions", {}) or {}
    st.markdown(f"**{run.kind}** · `{run.name}` · created {run.manifest.get('created', '?')} · interplab "
                f"{meta.get('interplab_version', versions.get('interplab', '?'))}")
    st.json(run.config, expanded=False)
    from interplab.app.widgets import validity_panel

    validity_panel(run.validity(), key=f"{key}_validity")
    for rn in run.result_names:
        try:
            res = run.result(rn)
            frame = res.to_frame()
        except Exception as exc:  # noqa: BLE001 - one unreadable result must not hide the rest of the run
            st.warning(f"result {rn!r} could not be read: {exc}")
            continue
        st.markdown(f"**Result `{rn}`** ({type(res).__name__})")
        st.dataframe(frame if isinstance(frame, pd.DataFrame) else pd.DataFrame(frame), key=f"{key}_res_{rn}")
    import interplab

    for fn in run.figure_names:
        meta = {"interplab_version": interplab.__version__, "figure": fn, "experiment": run.kind,
                "run": run_label(run.kind, run.name), "config": run.config}
        show_figure(run.figure(fn), key=f"{key}_fig_{fn}", filename=download_stem(run, fn), metadata=meta)


def show_reopened_run(kinds: tuple[str, ...]):
    """On a method page: when a run of one of `kinds` (prefixes) was reopened from the Runs page, show it in an
    expander with a Close button and return the LoadedRun; else None."""
    rid = reopened_run_id()
    if not rid:
        return None
    kind = rid.split("/", 1)[0]
    if not any(kind == k or kind.startswith(k) for k in kinds):
        return None
    from interplab.results import load_run

    try:
        run = load_run(rid)
    except Exception as exc:  # noqa: BLE001 - a vanished run is a notice, not a crash
        st.warning(f"Cannot reopen run {rid}: {exc}")
        _close()
        return None
    with st.expander(f"Saved run {rid}", expanded=True):
        show_run(run, key="reopened")
        st.button("Close the saved run", key="reopened_close", on_click=_close)
    return run
