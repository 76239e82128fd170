"""Run directories: atomic runs, no silent overwrite, round trips."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest

from interplab.core.errors import InputError, ResultsError
from interplab.results import list_runs, load_run, new_run
from interplab.figures.export import save_figure


@dataclass
class Cfg:
    model: str = "m"
    layer: int = 1
    seed: int = 7
    scales: list = field(default_factory=lambda: [0.5, 1.0])


def _df():
    return pd.DataFrame({"token": ["a", "b", "c"], "prob": [0.5, 0.3, 0.2], "rank": [0, 1, 2]})


def test_round_trip_all_artifacts(tmp_path):
    import plotly.graph_objects as go

    arrs = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "i": np.array([1, 2, 3], dtype=np.int64)}
    fig = go.Figure(go.Bar(x=["a", "b"], y=[1.0, 2.0]))
    with new_run("demo", Cfg(), root=tmp_path) as run:
        assert run.path.name.startswith(".") and run.path.name.endswith(".partial")
        run.save_arrays("acts", arrs)
        run.save_table("top", _df())
        run.save_table("top_pq", _df(), fmt="parquet")
        run.save_json("summary", {"acc": np.float32(0.25), "n": np.int64(3)})
        save_figure(run, "bars", fig)
    final = run.path
    assert final.is_dir() and not final.name.startswith(".")
    assert not (final.parent / f".{final.name}.partial").exists()

    lr = load_run(final)
    assert lr.config == {"model": "m", "layer": 1, "seed": 7, "scales": [0.5, 1.0]}
    assert lr.config_as(Cfg) == Cfg()
    meta = json.loads((final / "config.json").read_text())
    assert meta["seed"] == 7 and meta["versions"]["torch"] and meta["versions"]["transformers"]
    assert meta["interplab_version"] and meta["timestamp"] and meta["config_class"].endswith("Cfg")
    got = lr.arrays("acts")
    np.testing.assert_array_equal(got["x"], arrs["x"])
    np.testing.assert_array_equal(got["i"], arrs["i"])
    pd.testing.assert_frame_equal(lr.table("top"), _df())
    pd.testing.assert_frame_equal(lr.table("top_pq"), _df())
    assert lr.json("summary") == {"acc": 0.25, "n": 3}
    assert list(lr.figures) == ["bars"]
    assert list(lr.figures["bars"].data[0].y) == [1.0, 2.0]
    assert (final / "figures" / "bars.html").stat().st_size > 1000
    assert lr.table_names == ["top", "top_pq"] and lr.array_names == ["acts"]
    with pytest.raises(ResultsError, match="no table 'nope'.*top"):
        lr.table("nope")

    df = list_runs(root=tmp_path)
    assert list(df["name"]) == [final.name] and df.loc[0, "kind"] == "demo"
    assert df.loc[0, "n_arrays"] == 1 and df.loc[0, "n_tables"] == 2 and df.loc[0, "n_figures"] == 1


def test_crash_leaves_earlier_runs_readable_and_failed_run_unlisted(tmp_path):
    with new_run("demo", {"a": 1}, root=tmp_path) as good:
        good.save_arrays("x", {"v": np.ones(3)})
    with pytest.raises(RuntimeError, match="boom"):
        with new_run("demo", {"a": 2}, root=tmp_path) as bad:
            bad.save_arrays("x", {"v": np.zeros(3)})
            raise RuntimeError("boom")
    assert bad.status == "failed"
    # kept for inspection in its visible folder (issue 48: no hidden .partial folder is left behind)
    assert bad.path == bad.final_path and bad.path.exists() and not bad.partial_path.exists()
    manifest = json.loads((bad.path / "run.json").read_text())
    assert manifest["status"] == "failed" and manifest["error"]["message"] == "boom"

    df = list_runs("demo", root=tmp_path)
    assert list(df["name"]) == [good.final_path.name]
    np.testing.assert_array_equal(load_run(good.path).arrays("x")["v"], np.ones(3))
    with pytest.raises(ResultsError, match="not complete.*boom"):
        load_run(bad.path)
    all_df = list_runs("demo", root=tmp_path, include_failed=True)
    assert set(all_df["status"]) == {"complete", "failed"}


def test_unfinished_run_is_not_listed(tmp_path):
    run = new_run("demo", None, root=tmp_path)
    run.save_json("j", [1, 2])
    assert list_runs(root=tmp_path).empty
    run.finish()
    assert len(list_runs(root=tmp_path)) == 1


def test_no_silent_overwrite(tmp_path):
    with new_run("demo", {}, root=tmp_path, name="fixed") as r:
        r.save_table("t", _df())
    before = (r.path / "tables" / "t.csv").read_bytes()
    with pytest.raises(ResultsError, match="already exists"):
        new_run("demo", {}, root=tmp_path, name="fixed")
    assert (r.path / "tables" / "t.csv").read_bytes() == before
    # a partial run of the same name is also refused
    new_run("demo", {}, root=tmp_path, name="other")
    with pytest.raises(ResultsError, match="already being written"):
        new_run("demo", {}, root=tmp_path, name="other")
    # artifacts inside a run are not replaced silently either, and a finished run is frozen
    run = new_run("demo", {}, root=tmp_path)
    run.save_table("t", _df())
    with pytest.raises(ResultsError, match="overwrite=True"):
        run.save_table("t", _df())
    run.save_table("t", _df().head(1), overwrite=True)
    run.finish()
    with pytest.raises(ResultsError, match="complete"):
        run.save_json("late", {})
    assert len(load_run(run.path).table("t")) == 1


def test_root_from_env_and_name_validation(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    with new_run("k", {"x": 1}) as run:
        pass
    assert run.path.parent == tmp_path / "home" / "runs" / "k"
    assert len(list_runs()) == 1
    # relative "<kind>/<name>" resolves against the runs root
    assert load_run(f"k/{run.path.name}").config == {"x": 1}
    for bad in ["../x", "a/b", ".hidden", ""]:
        with pytest.raises(InputError):
            new_run(bad, {})
    with pytest.raises(InputError, match="dataclass instance or a dict"):
        new_run("k", [1, 2])
    with pytest.raises(ResultsError, match="no run directory"):
        load_run(tmp_path / "missing")


def test_relative_paths_survive_finish(tmp_path):
    # a path recorded while the run is still the hidden .partial folder must point into the final folder
    run = new_run("demo", None, root=tmp_path)
    (run.path / "saes" / "a").mkdir(parents=True)
    rel = run.relative(run.path / "saes" / "a")
    assert rel == "saes/a"
    assert run.relative(tmp_path) == str(tmp_path.resolve())  # outside the run: absolute
    run.finish()
    assert (run.path / rel).is_dir()


def test_a_cancelled_run_is_removed_and_a_later_run_works(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with new_run("demo", {"a": 1}, root=tmp_path) as run:
            run.save_arrays("x", {"v": np.ones(3)})
            raise KeyboardInterrupt   # Ctrl-C, SIGINT, a job's cancel
    assert run.status == "cancelled" and not run.partial_path.exists() and not run.final_path.exists()
    assert list_runs("demo", root=tmp_path, include_failed=True).empty
    with new_run("demo", {"a": 2}, root=tmp_path) as again:
        again.save_json("j", [1])
    assert list(list_runs("demo", root=tmp_path).path) == [str(again.path)]


def test_progress_json_follows_the_progress_protocol(tmp_path, monkeypatch):
    from interplab.core import progress
    from interplab.results import runs

    monkeypatch.setattr(runs, "PROGRESS_INTERVAL_S", 0.0)     # every update written
    seen = []
    run = new_run("demo", None, root=tmp_path)
    with progress.reporting_to(run.report_progress):
        with progress.task(10, "cells") as outer:
            with progress.task(4, "cells", phase="resid_pre") as inner:   # same unit: counts into the outer
                inner.advance(4)
                seen.append(runs.read_progress(run.path))
            with progress.task(3, "prompts", phase="harvest") as sub:      # another unit: a sub-task
                sub.advance(2)
                seen.append(runs.read_progress(run.path))
            outer.advance(6)
    final = runs.read_progress(run.path)
    run.finish()
    assert (seen[0]["done"], seen[0]["total"], seen[0]["phase"]) == (4, 10, "resid_pre")
    assert seen[1]["done"] == 4 and [t["unit"] for t in seen[1]["tasks"]] == ["cells", "prompts"]
    assert seen[1]["tasks"][1]["done"] == 2 and seen[1]["tasks"][1]["phase"] == "harvest"
    assert final["done"] == final["total"] == 10 and final["fraction"] == 1.0 and final["eta_s"] == 0
    assert runs.read_progress(run.path)["done"] == 10      # kept in the finished run (a rate for later estimates)
    # throttled: at most one write per interval, but the last state before the work ends is always written
    monkeypatch.setattr(runs, "PROGRESS_INTERVAL_S", 3600.0)
    run2 = new_run("demo", None, root=tmp_path)
    with progress.reporting_to(run2.report_progress):
        with progress.task(100, "steps") as t:
            for _ in range(99):
                t.advance()
            assert runs.read_progress(run2.path)["done"] == 0       # only the opening write so far
            t.advance()                                              # the last unit is always written
            assert runs.read_progress(run2.path)["done"] == 100
    with progress.reporting_to(run2.report_progress):
        with progress.task(10, "steps") as t:
            t.advance(3)                                             # throttled...
    assert runs.read_progress(run2.path)["done"] == 3               # ...but flushed when the work ends
    monkeypatch.setattr(runs, "PROGRESS_INTERVAL_S", 0.0)
    run2.progress(5, 7, "items")                                        # the direct form for an experiment's loop
    p = runs.read_progress(run2.path)
    assert (p["done"], p["total"], p["unit"]) == (5, 7, "items")
