"""The job panel (issue 48) in Streamlit's AppTest: the Patching page launches its sweep on an organism as a job
(INTERPLAB_INLINE_MAX_S=0 turns off computing in place), shows its progress, shows the result when it lands, and a
reopened tab (a fresh session) finds it again; a panel's Cancel stops the job's process and leaves no run folder."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

import interplab.app  # noqa: E402
from interplab import jobs  # noqa: E402
from interplab.core.procs import pid_alive  # noqa: E402
from interplab.results.runs import list_runs, runs_root  # noqa: E402

pytestmark = pytest.mark.slow
PAGES = Path(interplab.app.__file__).resolve().parent / "pages"
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 300


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", "zoo:toy-chat")
    monkeypatch.setenv("INTERPLAB_INLINE_MAX_S", "0")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return tmp_path / "home"


def _poll(at, until, timeout=240.0, what="the job"):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        at.run()
        assert not at.exception, at.exception
        if until(at):
            return at
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _charts(at) -> set[str]:
    return {c.key for c in at.get("plotly_chart")}


def test_patching_runs_as_a_job_shows_progress_and_its_result_also_in_a_new_tab(home):
    at = AppTest.from_file(str(PAGES / "10_Patching.py"), default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    assert any("**Work:** 420 cells" in c.value and "runs as a job" in c.value for c in at.caption)
    at.multiselect(key="pt_sites").set_value(["resid_pre"]).run()
    at.button(key="pt_run").click().run()
    assert not at.exception, at.exception
    assert at.button(key="pt_run").disabled                                 # one job at a time per panel
    assert at.get("progress") and at.button(key="pt__cancel")              # live progress and a Cancel button
    _poll(at, lambda a: "pt_fig_resid_pre__chart" in _charts(a))
    assert any("finished in" in c.value for c in at.caption)
    done = jobs.list_jobs()
    assert len(done) == 1 and done[0].state == "complete" and list(list_runs("patching").path) == [str(done[0].run)]
    # the tab is closed and opened again: a new session finds the job by its settings and shows its result
    again = AppTest.from_file(str(PAGES / "10_Patching.py"), default_timeout=TIMEOUT).run()
    again.multiselect(key="pt_sites").set_value(["resid_pre"]).run()
    assert not again.exception and "pt_fig_resid_pre__chart" in _charts(again)
    runs_page = AppTest.from_file(str(PAGES / "9_Runs.py"), default_timeout=TIMEOUT).run()
    assert not runs_page.exception and any(done[0].id in str(d.value) for d in runs_page.dataframe)


PANEL = """
import streamlit as st
import tests.jobs.sleepy
from interplab.app.widgets import job_panel
run = job_panel("test-jobs-sleepy", {"n": 4000, "step_s": 0.05}, "sl", label="Sleep")
st.write("result" if run is not None else "no result")
"""


def test_the_panel_cancels_its_job(home):
    at = AppTest.from_string(PANEL, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    assert any("no loaded model" in c.value and "runs as a job" in c.value for c in at.caption)  # nothing guessed
    at.button(key="sl__go").click().run()
    _poll(at, lambda a: "steps" in (a.get("progress")[0].proto.text if a.get("progress") else ""),
          what="progress")
    job = jobs.list_jobs(active=True)[0]
    pid = json.loads((jobs.jobs_root() / job.id / "worker.json").read_text())["pid"]
    runs_page = AppTest.from_file(str(PAGES / "9_Runs.py"), default_timeout=TIMEOUT).run()
    assert not runs_page.exception and runs_page.button(key=f"runs_jobs_cancel_{job.id}")   # listed, cancellable
    at.button(key="sl__cancel").click().run()
    assert not at.exception, at.exception
    assert jobs.status(job.id).state == "cancelled" and not pid_alive(pid)
    kind = runs_root() / "test-jobs-sleepy"
    assert not kind.is_dir() or not any(kind.iterdir())                      # no .partial, no run
    assert any("cancelled" in c.value for c in at.caption) and not at.button(key="sl__go").disabled
