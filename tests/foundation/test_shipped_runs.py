"""Committed run outputs (results/<experiment>/) are found as read-only references for the app's saved-run widgets,
and only complete runs count."""
from __future__ import annotations

import json

from interplab.results.runs import list_runs, shipped_runs, shipped_runs_root


def test_committed_runs_are_found_relative_to_the_project():
    root = shipped_runs_root()
    assert root.name == "results" and (root.parent / "pyproject.toml").is_file()
    pareto = shipped_runs("sae-pareto")
    # the organism run under results/sae-pareto/ and a real model's under results/sae-pareto-<model>/
    assert pareto and pareto[0].parent == root / "sae-pareto"
    assert all(p.parent.parent == root and p.parent.name in ("sae-pareto", "sae-pareto-smollm2") for p in pareto)
    assert shipped_runs("pcfg-depth-sweep") == [root / "pcfg-depth-sweep"]  # a run folder directly under its kind
    assert shipped_runs("no-such-experiment") == []


def test_only_complete_runs_are_offered(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERPLAB_SHIPPED_RESULTS", str(tmp_path))
    for name, status in (("a", "complete"), ("b", "failed"), ("c", None)):
        d = tmp_path / "exp" / name
        d.mkdir(parents=True)
        if status:
            (d / "run.json").write_text(json.dumps({"status": status, "files": {}}))
    assert shipped_runs("exp") == [tmp_path / "exp" / "a"]
    # a real-model run folder <kind>-<model>/ is the kind's too; a sibling experiment sharing the prefix is not
    for folder, kind in (("exp-smollm2", "exp"), ("exp-sweep", "exp-sweep")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "run.json").write_text(json.dumps({"status": "complete", "kind": kind, "files": {}}))
    assert shipped_runs("exp") == [tmp_path / "exp" / "a", tmp_path / "exp-smollm2"]
    assert shipped_runs("exp-sweep") == [tmp_path / "exp-sweep"]
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    assert len(list_runs("exp")) == 0  # shipped runs are not the user's runs


def test_every_committed_run_is_intact():
    """Each run folder under results/ lists in its manifest only files that are committed (figures and weights are
    left out of the repository, and out of the manifest), so none is 'damaged' and the app can offer it."""
    from interplab.results.runs import read_manifest, run_problems

    folders = [m.parent for m in shipped_runs_root().rglob("run.json")]
    assert len(folders) >= 10
    for d in folders:
        assert read_manifest(d)["status"] == "complete" and not run_problems(d), (d, run_problems(d))


def test_run_model_reads_the_saved_config(tmp_path):
    from interplab.results.runs import run_model, shipped_runs_root

    assert run_model(shipped_runs_root() / "sae-pareto-smollm2" / "topk32-2seeds") == "real:smollm2-135m-instruct"
    (tmp_path / "config.json").write_text("{not json")
    assert run_model(tmp_path) is None and run_model(tmp_path / "missing") is None
    (tmp_path / "config.json").write_text(json.dumps({"config": {"seed": 0}}))
    assert run_model(tmp_path) is None
