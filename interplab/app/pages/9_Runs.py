"""Runs page: every saved run (experiment, config, date, interplab version, figures), a filter for damaged and
failed runs, and "reopen in its method page". A view over interplab.results (the same functions as
`interplab runs list|show|rm|clean`)."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

st.set_page_config(page_title="interplab · Runs", page_icon=":microscope:", layout="wide")

from interplab.app.jobs_view import jobs_overview  # noqa: E402
from interplab.app.runs_view import method_page, request_reopen, run_label, show_run  # noqa: E402
from interplab.results import list_runs, load_run  # noqa: E402
from interplab.results.runs import interplab_home, read_manifest, run_problems  # noqa: E402

st.title("Runs")
st.caption(f"Runs under `{interplab_home()}/runs` (set INTERPLAB_HOME to look elsewhere). `interplab runs clean` "
           "removes failed runs and what killed ones left.")

jobs_overview("runs_jobs")          # running jobs (progress, cancel) and the last finished ones

show_bad = st.checkbox("Also show damaged, failed and unfinished runs", False, key="runs_show_bad")
kinds_filter = st.text_input("Experiment contains", "", key="runs_kind_filter")
df = list_runs(include_failed=show_bad)
if kinds_filter.strip():
    df = df[df["kind"].str.contains(kinds_filter.strip(), regex=False)]
if not len(df):
    st.info("No runs yet. Run an experiment, e.g. `interplab run truth-scores --set model=zoo:toy-base`, "
            "or tick the box above to see failed ones.")
    st.stop()


def _version(path: str) -> str:
    import json
    from pathlib import Path

    try:
        return json.loads((Path(path) / "config.json").read_text()).get("interplab_version", "?")
    except (OSError, ValueError):
        return "?"


table = df.assign(version=[_version(p) for p in df["path"]])[
    ["kind", "name", "status", "created", "version", "n_figures", "n_tables", "n_arrays"]]
st.dataframe(table, hide_index=True, key="runs_table")

labels = [run_label(k, n) for k, n in zip(df["kind"], df["name"])]
pick = st.selectbox("Run", labels[::-1], key="runs_pick")   # newest first
row = df.iloc[labels.index(pick)]
if row["status"] != "complete":
    probs = run_problems(row["path"])
    err = (read_manifest(Path(row["path"])) or {}).get("error") or {}
    why = f" with {err.get('type')}: {err.get('message')}" if err else ""
    st.warning(f"This run is {row['status']}{why}" + (": " + "; ".join(probs) if probs else "") +
               ". Its files may be incomplete; `interplab runs rm` or `interplab runs clean` removes it.")
    st.stop()

run = load_run(row["path"])
page = method_page(run.kind)
if page is not None:
    if st.button(f"Reopen in its method page ({page.split('/')[-1][2:-3].replace('_', ' ')})", key="runs_reopen"):
        request_reopen(run.kind, run.name)
        try:
            st.switch_page(page)
        except Exception:  # noqa: BLE001 - e.g. the page is not part of this app instance
            st.info(f"Open {page} from the sidebar: it shows this run at the top.")
else:
    st.caption("No method page shows this experiment; its files are below.")
show_run(run, key="runs")
