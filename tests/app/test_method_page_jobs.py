"""Issue 48: every method page launches its headline experiment on the sidebar's model as a job (Truth Scores:
the world-facts map and the gating sweep; DecodeShare: the chat-task study; CRH: crh-concepts; Hyperfitting:
hyperfit-train, then hyperfit-geometry against its checkpoint), with the size and estimate shown before launch,
and a saved run of another model is labelled as that model's, never shown as the loaded one's.

The model is a random tiny checkpoint (a local folder: not an organism, so the pages take the real-model path and
the documented real-model settings apply). `interplab.jobs.submit` is stubbed at the jobs API boundary: the test
checks what would be launched; the launch itself, end to end (a job process, progress, cancel, the result on the
page), is the one `test_job_panel.py` runs for Patching through the same panel."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

import interplab.app  # noqa: E402
from interplab.experiments.registry import resolve_config  # noqa: E402

PAGES = Path(interplab.app.__file__).resolve().parent / "pages"
TIMEOUT = 300
SMOL = "real:smollm2-135m-instruct"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from interplab.testing import make_random_checkpoint

    return str(make_random_checkpoint("llama", tmp_path_factory.mktemp("pages48") / "tiny", n_layers=2,
                                      d_model=32, n_heads=4, n_kv_heads=2, vocab=48, seed=0))


@pytest.fixture
def launched(tmp_path, monkeypatch, ckpt):
    """The sidebar's model is `ckpt`; every launch is a job (no computing in place); submit only records."""
    from interplab import jobs

    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", ckpt)
    monkeypatch.setenv("INTERPLAB_INLINE_MAX_S", "0")
    monkeypatch.setenv("INTERPLAB_JOB_TIME_BUDGET_S", str(10 ** 9))    # no "launch anyway" tick needed
    calls = []

    def submit(experiment, overrides=None, **kw):
        calls.append((experiment, dict(overrides or {}), kw))
        return SimpleNamespace(id=f"stub-{len(calls)}")

    monkeypatch.setattr(jobs, "submit", submit)
    return calls


def _open(page: str) -> AppTest:
    at = AppTest.from_file(str(PAGES / page), default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    return at


def _launch(at, key: str, calls: list) -> tuple[str, object, dict]:
    """Click the panel's launch button; (experiment, resolved config, the submit's keywords)."""
    work = [c.value for c in at.caption if c.value.startswith("**Work:**")]
    assert work and all("size unknown" not in w and "no estimate" not in w for w in work), work
    n = len(calls)
    at.button(key=f"{key}__go").click().run()
    assert not at.exception, at.exception
    assert len(calls) == n + 1, "the launch button submitted nothing"
    experiment, overrides, kw = calls[-1]
    assert kw["size"] is not None and kw["estimate_s"] is not None      # what the page showed, recorded
    return experiment, resolve_config(experiment, overrides)[1], overrides


def test_truth_scores_launches_the_world_facts_map_and_gating_on_the_loaded_model(launched, ckpt):
    at = _open("2_Truth_Scores.py")
    exp, cfg, _ = _launch(at, "ts_facts", launched)
    assert exp == "truth-scores" and cfg.model == ckpt and cfg.data == "world-facts" and cfg.fmt == "chat"
    assert cfg.known == "compute"          # no closed-book filter ships for this model: it answers them first
    at = _open("2_Truth_Scores.py")
    exp, cfg, _ = _launch(at, "ts_sweep", launched)
    assert exp == "truth-gating-sweep" and cfg.target == ckpt and cfg.data == "world-facts"
    assert cfg.score_source == "self" and cfg.sites == ["z"] and cfg.known == "compute"


def test_truth_scores_labels_smollm2s_run_as_another_models(launched, ckpt):
    at = _open("2_Truth_Scores.py")
    box = at.selectbox(key="ts_facts_run")
    assert "(another model)" in box.format_func(box.value) and SMOL in box.format_func(box.value)
    assert any(SMOL in i.value and "not the loaded model" in i.value for i in at.info)
    assert not at.session_state["ts_scored"]       # SmolLM2's map does not become the loaded model's


def test_decodeshare_launches_the_chat_task_study(launched, ckpt):
    at = _open("3_DecodeShare.py")
    exp, cfg, _ = _launch(at, "ds_real", launched)
    assert exp == "decodeshare" and cfg.model == ckpt and cfg.data == "real-tasks"
    assert cfg.n_calib == 32 and cfg.n_eval == 40 and "steer" in cfg.parts       # the documented study
    box = at.selectbox(key="ds_real_study")
    assert all("(another model)" in box.format_func(o) for o in box.options)      # only SmolLM2's runs ship


def test_crh_launches_crh_concepts_at_the_documented_depths(launched, ckpt):
    at = _open("4_CRH.py")
    assert at.radio(key="crh_source").value == "Model concepts"           # the loaded model, not synthetic data
    exp, cfg, _ = _launch(at, "crh_concepts", launched)
    assert exp == "crh-concepts" and cfg.model == ckpt and cfg.data == "offline"
    assert cfg.select_layers == [0, 1] and cfg.steer_layer == 0            # blocks 5, 10, 15 of 30, scaled to 2


def test_hyperfitting_hyperfits_the_loaded_model_then_measures_it(launched, ckpt, tmp_path):
    at = _open("6_Hyperfitting.py")
    assert any("No hyperfitted descendant" in i.value for i in at.info)
    exp, cfg, _ = _launch(at, "geo_train", launched)
    assert exp == "hyperfit-train" and cfg.base == ckpt and cfg.method == "lora"      # the documented recipe
    # a finished hyperfit-train run of this model is the target B; the geometry job compares it with A
    from interplab.results.runs import new_run

    with new_run("hyperfit-train", cfg, root=tmp_path / "home") as run:
        from shutil import copytree

        copytree(ckpt, Path(run.path) / "checkpoint")
    at = _open("6_Hyperfitting.py")
    assert at.selectbox(key="geo_b_pick").value.endswith("/checkpoint")
    exp, cfg, _ = _launch(at, "geo_job", launched)
    assert exp == "hyperfit-geometry" and cfg.base == ckpt and cfg.targets[0].endswith("/checkpoint")
    assert "geo_pr__chart" in [c.key for c in at.get("plotly_chart")]     # the sidebar's model measured in place


@pytest.mark.slow
def test_the_geometry_job_really_runs_and_lands_on_the_hyperfitting_page(tmp_path, monkeypatch, ckpt):
    """End to end, unstubbed: the launch starts a job process (`interplab.jobs`, submitit's local executor), the
    page follows it, and its run's result is drawn on the page when it lands."""
    import os
    import time

    from interplab import jobs

    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", ckpt)
    monkeypatch.setenv("INTERPLAB_INLINE_MAX_S", "0")
    monkeypatch.setenv("INTERPLAB_JOB_TIME_BUDGET_S", str(10 ** 9))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    at = _open("6_Hyperfitting.py")
    at.text_input(key="geo_b_path").input(ckpt).run()          # B: a checkpoint of A's shape (here A itself)
    at.button(key="geo_job__go").click().run()
    assert not at.exception, at.exception
    t0 = time.monotonic()
    while "geo_job_pr__chart" not in [c.key for c in at.get("plotly_chart")]:
        assert time.monotonic() - t0 < 240, "the geometry job did not land on the page"
        time.sleep(1.0)
        at.run()
        assert not at.exception, at.exception
    done = jobs.list_jobs()
    assert len(done) == 1 and done[0].state == "complete" and done[0].record.experiment == "hyperfit-geometry"


def test_atlas_of_a_real_model_launches_the_atlas_experiment_as_a_job(launched, ckpt):
    """A real model's atlas takes minutes (the committed SmolLM2 run: 426 s): the page sizes it and launches the
    `atlas` experiment on the sidebar's model with the page's options, instead of computing under a spinner."""
    at = _open("14_Atlas.py")
    at.number_input(key="at_items").set_value(32).run()
    at.checkbox(key="at_dirs").uncheck().run()
    n = len(launched)
    at.button(key="at_run").click().run()
    assert not at.exception, at.exception
    assert len(launched) == n + 1, "Build atlas computed in place instead of launching a job"
    exp, overrides, kw = launched[-1]
    cfg = resolve_config(exp, overrides)[1]
    assert exp == "atlas" and cfg.models == [ckpt] and cfg.n_truth_items == 32 and not cfg.directions
    assert kw["size"] is not None and kw["estimate_s"] is not None
    assert "at_result" not in at.session_state
