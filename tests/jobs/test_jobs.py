"""Jobs (issue 48): a job runs the experiment through submitit's local executor in its own process, writes progress
into its run folder, lands in Runs, can be cancelled (its process stops, no .partial folder is left, a later run
works), and an error or a killed process after the run folder was created leaves no hidden folder either."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from interplab import jobs
from interplab.core.procs import pid_alive
from interplab.jobs.records import WORKER, jobs_root
from interplab.results.runs import leftovers, list_runs, load_run, runs_root
from tests.jobs import sleepy

ROOT = Path(__file__).resolve().parents[2]
SLOW = {"n": "4000", "step_s": "0.05"}       # 200 s: long enough to be stopped mid-run, never to finish


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty interplab home; the job processes find this repository's `tests` package (the test experiment)."""
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return tmp_path / "home"


def _wait_for(pred, timeout=180.0, what="condition"):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _progress_done(job_id):
    st = jobs.status(job_id)
    assert st.state in ("submitting", "queued", "running"), (st.state, st.error)
    return (st.progress or {}).get("done", 0)


def _hidden(home: Path, kind: str) -> list[str]:
    d = runs_root(home) / kind
    return [p.name for p in d.iterdir() if p.name.startswith(".")] if d.is_dir() else []


@pytest.mark.slow
def test_a_job_on_an_organism_completes_and_its_run_is_in_runs(home):
    est = jobs.estimate_for("patching", {"model": "zoo:toy-chat"})
    assert est.seconds is None and "size" in est.source   # no model given: no size, no estimate (nothing guessed)
    st = jobs.submit("patching", {"model": "zoo:toy-chat", "attribution": "false"})
    assert st.state in ("submitting", "queued", "running")
    assert jobs.list_jobs(active=True)[0].id == st.id
    st = jobs.wait(st.id, timeout=300)
    assert st.state == "complete", st.error
    runs = list_runs("patching")
    assert list(runs["path"]) == [str(st.run)]
    run = load_run(st.run)
    assert run.result("exact").results["resid_pre"].values.shape[0] == 4
    p = st.progress
    assert p["unit"] == "cells" and p["done"] == p["total"] > 0 and p["rate"] > 0
    engine = json.loads((jobs_root() / st.id / "engine.json").read_text())
    worker = json.loads((jobs_root() / st.id / WORKER).read_text())
    assert engine["executor"] == "local" and worker["pid"] != os.getpid()      # its own process
    # the run is a rate for the next estimate on this model
    import interplab

    est = jobs.estimate_for("patching", {"model": "zoo:toy-chat", "attribution": "false"},
                            loaded=interplab.load_model("zoo:toy-chat"))
    assert est.source.startswith("measured: 1 earlier run") and est.size.units == p["total"]
    assert not _hidden(home, "patching")


@pytest.mark.slow
def test_progress_advances_cancel_stops_the_process_and_a_later_run_works(home, capsys):
    cancelled = jobs.submit(sleepy.NAME, SLOW)
    killed = jobs.submit(sleepy.NAME, SLOW)
    first = _wait_for(lambda: _progress_done(cancelled.id) >= 3, what="progress of the first job")
    _wait_for(lambda: _progress_done(cancelled.id) > first, timeout=30, what="progress to advance")
    _wait_for(lambda: _progress_done(killed.id) >= 1, what="progress of the second job")
    p = jobs.status(cancelled.id).progress
    assert p["total"] == 4000 and p["unit"] == "steps" and p["rate"] > 0 and p["eta_s"] > 0
    assert any(name.endswith(".partial") for name in _hidden(home, sleepy.NAME))   # written while running

    from interplab.cli import main

    assert main(["jobs", "list"]) == 0 and cancelled.id in capsys.readouterr().out
    pid = json.loads((jobs_root() / cancelled.id / WORKER).read_text())["pid"]
    st = jobs.cancel(cancelled.id)
    assert st.state == "cancelled" and not pid_alive(pid)
    # killed outright (out of memory, say): the job is settled as failed and its hidden folder removed
    kpid = json.loads((jobs_root() / killed.id / WORKER).read_text())["pid"]
    os.kill(kpid, signal.SIGKILL)
    _wait_for(lambda: not pid_alive(kpid), timeout=30, what="the killed worker to go")
    st = jobs.status(killed.id)
    assert st.state == "failed" and "ended without a result" in st.error
    assert not _hidden(home, sleepy.NAME) and not leftovers(home)
    assert list_runs(sleepy.NAME, include_failed=True).empty      # nothing of either run is kept

    # an error after the run folder exists, and a plain later run, side by side
    failing = jobs.submit(sleepy.NAME, {"n": "5", "step_s": "0.01", "fail_at": "2"})
    later = jobs.submit(sleepy.NAME, {"n": "3", "step_s": "0.01"})
    bad, good = jobs.wait(failing.id, timeout=300), jobs.wait(later.id, timeout=300)
    assert bad.state == "failed" and "planned failure at step 2" in bad.error
    assert good.state == "complete" and load_run(good.run).table("steps").step.tolist() == [0, 1, 2]
    assert not _hidden(home, sleepy.NAME)
    runs = list_runs(sleepy.NAME, include_failed=True)
    assert sorted(runs.status) == ["complete", "failed"]
    assert list(list_runs(sleepy.NAME).path) == [str(good.run)]   # a failed run is never offered as a result
    assert main(["jobs", "show", bad.id]) == 1 and "planned failure" in capsys.readouterr().out
