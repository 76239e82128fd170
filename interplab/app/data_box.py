"""The "Your data" section of every method page: a path box or an upload, a preview of the first rows, column
validation that names the missing column (st.error), and a button that runs the method's main experiment on the
file through `run_experiment`, so the file's path is part of the run's recorded config (`config.json`).

Uploads are saved under `<INTERPLAB_HOME>/uploads/<sha256-prefix>-<name>` (content-addressed, so re-uploading the
same file reuses it and the recorded path stays valid)."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Mapping

import streamlit as st

from interplab.core.errors import InterplabError

__all__ = ["data_box", "run_with_data", "experiment_of", "your_data"]


def experiment_of(method: str) -> str:
    """The experiment `method`'s data box runs (its `MethodSpec.data.experiment`)."""
    from interplab.methods import get_method

    spec = get_method(method)
    if spec.data is None or not spec.data.experiment:
        raise InterplabError(f"method {method!r} declares no user-data experiment")
    return spec.data.experiment


def _save_upload(up) -> Path:
    from interplab.results.runs import interplab_home

    data = up.getvalue()
    folder = interplab_home() / "uploads"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()[:16]}-{Path(up.name).name}"
    if not path.exists():
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path


def data_box(method: str, key: str) -> str:
    """Render the data section; return the validated file path ('' when none or invalid)."""
    from interplab.data.files import FILE_SUFFIXES
    from interplab.data.user import check_user_file, describe_columns

    st.caption(f"Columns — {describe_columns(method)}. Formats: {', '.join(sorted(FILE_SUFFIXES))}. "
               "See docs/data.md.")
    path = st.text_input("Path to a data file", key=f"{key}_path", placeholder="/path/to/data.jsonl")
    up = st.file_uploader("…or upload one", key=f"{key}_upload",
                          type=[s.lstrip(".") for s in FILE_SUFFIXES])
    chosen = str(_save_upload(up)) if up is not None else path.strip()
    if not chosen:
        return ""
    try:
        df = check_user_file(method, chosen)
    except InterplabError as exc:
        st.error(str(exc))
        return ""
    st.dataframe(df, key=f"{key}_preview")
    st.caption(f"Preview of the first {len(df)} rows of `{chosen}`.")
    return chosen


def run_with_data(method: str, path: str, key: str, overrides: Mapping[str, object]) -> Path | None:
    """A button running the method's experiment with data=path (+ overrides); shows the run folder."""
    from interplab.experiments.registry import run_experiment

    name = experiment_of(method)
    if not st.button(f"Run `{name}` on this file", key=f"{key}_run", disabled=not path):
        return None
    try:
        with st.spinner(f"running {name}…"):
            out = run_experiment(name, {**{k: v for k, v in overrides.items()}, "data": path})
    except InterplabError as exc:
        st.error(str(exc))
        return None
    st.success(f"Run saved to `{out}` (its config.json records data = `{path}`).")
    return out


def your_data(method: str, key: str, overrides: Mapping[str, object]) -> Path | None:
    """A method page's "Your data" section: the file box (`data_box`) and its run button (`run_with_data`)."""
    with st.expander("Your data (CSV / JSONL / Parquet file)"):
        return run_with_data(method, data_box(method, key=key), key=key, overrides=overrides)
