"""Faults (docs/reliability.md): a run killed at any point never lists as complete, a rerun succeeds and
`interplab runs clean` removes the leftovers; a full disk is a typed error that leaves earlier runs intact; a damaged
run folder is reported by list/show, not crashed on."""
from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from interplab.cli import main
from interplab.core.errors import ResultsError
from interplab.results import runs
from interplab.results.runs import list_runs, load_run, new_run

# crh-synthetic is model-free and writes tables, arrays and figures over several seconds: kill points land mid-write
KILL_ARGS = ["run", "crh-synthetic", "--set", "n_seeds=3", "--set", "n_perm=100"]


def _cli(home, *args, **kw):
    env = {**os.environ, "INTERPLAB_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-c", "import sys; from interplab.cli import main; sys.exit(main())",
                             *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _wait_partial(home, proc, timeout=300.0) -> bool:
    """Wait until the run's hidden .partial folder exists (the run has started writing); False if it ended first."""
    kind = home / "runs" / "crh-synthetic"
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if kind.is_dir() and any(d.name.endswith(".partial") for d in kind.iterdir()):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


@pytest.mark.slow
def test_sigkill_never_leaves_a_complete_looking_run(tmp_path):
    home = tmp_path / "home"
    rng = random.Random(0)
    p = _cli(home, *KILL_ARGS)
    assert _wait_partial(home, p)
    t0 = time.perf_counter()
    out, err = p.communicate(timeout=600)
    writing = time.perf_counter() - t0  # how long the run spends writing its folder
    assert p.returncode == 0, err[-2000:]
    assert len(list_runs("crh-synthetic", root=home)) == 1
    killed_mid_run = 0
    for _ in range(4):  # kill at random points while the run is being written
        p = _cli(home, *KILL_ARGS)
        if _wait_partial(home, p):
            time.sleep(rng.uniform(0.0, 0.9) * writing)
            killed_mid_run += p.poll() is None
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
        df = list_runs("crh-synthetic", root=home)
        assert (df.status == "complete").all()
        for path in df.path:  # every run listed as complete really is
            assert not runs.run_problems(path), path
            load_run(path)
    assert killed_mid_run, "every kill came after its run had finished; the test exercised nothing"
    before = len(list_runs("crh-synthetic", root=home))
    left = runs.leftovers(home)
    assert left, "a killed run leaves a hidden .partial folder (none found: the kills all missed the run?)"
    assert all(p.name.startswith(".") for p in left)
    assert main(["runs", "clean", "--out", str(home)]) == 0
    assert runs.leftovers(home) == []
    assert len(list_runs("crh-synthetic", root=home)) == before  # finished runs are never touched
    p = _cli(home, *KILL_ARGS)  # a rerun after the kills succeeds
    assert p.wait(timeout=600) == 0
    assert len(list_runs("crh-synthetic", root=home)) == before + 1


def test_clean_spares_a_run_that_is_still_being_written(tmp_path):
    run = new_run("demo", {"a": 1}, root=tmp_path)
    run.save_table("t", pd.DataFrame({"x": [1]}))
    assert runs.leftovers(tmp_path) == []  # its writer (this process) is alive: not a leftover
    run.fail(RuntimeError("boom"))         # a failed run is a leftover (moved out of its hidden folder)
    assert runs.leftovers(tmp_path) == [run.final_path] and not run.partial_path.exists()


def test_full_disk_is_a_typed_error_and_earlier_runs_survive(tmp_path, monkeypatch):
    with new_run("demo", {"a": 1}, root=tmp_path) as run:
        run.save_table("t", pd.DataFrame({"x": [1, 2]}))
    good = run.final_path
    real_replace = os.replace

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(ResultsError, match="no space left"):
        with new_run("demo", {"a": 2}, root=tmp_path) as run2:
            run2.save_table("t", pd.DataFrame({"x": [3]}))
    monkeypatch.setattr(os, "replace", real_replace)
    assert load_run(good).table("t").x.tolist() == [1, 2]
    assert list(list_runs("demo", root=tmp_path).path) == [str(good)]


def test_damaged_run_is_reported_not_crashed_on(tmp_path, capsys):
    with new_run("demo", {"a": 1}, root=tmp_path) as run:
        run.save_table("t", pd.DataFrame({"x": [1, 2]}))
    (run.final_path / "tables" / "t.csv").unlink()
    df = list_runs("demo", root=tmp_path, include_failed=True)
    assert df.status.tolist() == ["damaged"]
    assert list_runs("demo", root=tmp_path).empty  # not offered as a complete run
    assert main(["runs", "show", str(run.final_path)]) == 1
    assert "tables/t.csv is missing" in capsys.readouterr().out
    (run.final_path / "run.json").write_text("{ not json")
    assert main(["runs", "list", "--all", "--out", str(tmp_path)]) == 0
    assert main(["runs", "show", str(run.final_path)]) == 2  # a typed error, not a traceback


def test_runs_rm_only_removes_runs(tmp_path):
    with new_run("demo", {"a": 1}, root=tmp_path) as run:
        pass
    assert main(["runs", "rm", str(tmp_path), "--out", str(tmp_path)]) == 2  # not a run folder: refused
    assert main(["runs", "rm", str(run.final_path), "--out", str(tmp_path)]) == 0
    assert not run.final_path.exists()
