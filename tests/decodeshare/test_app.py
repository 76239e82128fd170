"""AppTest: the DecodeShare page renders on a toy-vocabulary random model, explains a non-multitask model, and
runs the ablation section."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

import interplab.app  # noqa: E402

PAGE = str(Path(interplab.app.__file__).resolve().parent / "pages" / "3_DecodeShare.py")
TIMEOUT = 240


@pytest.fixture(scope="module")
def toy_ckpt(tmp_path_factory):
    from interplab.data.toy_vocab import build_toy_tokenizer
    from interplab.train.arch import ArchConfig, build_model
    from interplab.train.checkpoint import save_checkpoint

    tok = build_toy_tokenizer()
    m = build_model(ArchConfig(n_layers=2, d_model=32, d_mlp=64, n_heads=2, n_kv_heads=1, d_head=16, n_ctx=128),
                    tok, seed=0)
    return save_checkpoint(m, tok, tmp_path_factory.mktemp("dsapp") / "ckpt")


def _text(at) -> str:
    parts = []
    for kind in ("markdown", "title", "header", "subheader", "caption", "warning", "success", "info", "error"):
        parts += [str(getattr(e, "value", "")) for e in getattr(at, kind)]
    return "\n".join(parts)


def test_page_explains_non_multitask_model(monkeypatch, checkpoint_factory):
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(checkpoint_factory("llama")))
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    assert "multitask-decode organism" in _text(at)


def test_page_shows_the_shipped_smollm2_runs(monkeypatch, checkpoint_factory):
    """The real-model expander opens on the committed SmolLM2 task screen and study (results/), whatever model is
    picked below it."""
    import pandas as pd

    from interplab.results.runs import load_run, shipped_runs

    runs = [d for d in shipped_runs("decodeshare") if d.parent.name == "decodeshare-smollm2"]
    assert runs, "results/decodeshare-smollm2/ is missing"
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(checkpoint_factory("llama")))
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    screen = next(d.value for d in at.dataframe if "passes" in d.value.columns)
    shipped = pd.read_csv(shipped_runs("decodeshare-tasks")[-1] / "tables" / "tasks.csv")
    assert list(screen["task"]) == list(shipped["task"]) and int(screen["passes"].sum()) == int(shipped["passes"].sum())
    run = load_run(at.session_state["ds_real_study"])
    info = run.json("info")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["|S| decode / k"] == f"{info['k_s']} / {info['k']}" and metrics["layer"] == str(info["layer"])
    assert {"ds_real_gen__chart", "ds_real_sweep__chart", "ds_real_steer__chart"} <= {
        c.key for c in at.get("plotly_chart")}
    # the run's verdicts are on the page, each inconclusive one as a warning that names why
    report = run.validity()
    warnings = " ".join(str(w.value) for w in at.warning)
    for v in report.verdict_list():
        assert v.claim in _text(at)
        if v.outcome == "inconclusive":
            assert v.claim in warnings and v.reason.split(";")[0][:60] in warnings


def _small_page():
    """The page on a tiny calibration (6 prompts of copy and mc, 4 new tokens, tau x k threshold), rendered once."""
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT)
    at.session_state["ds_ncalib"] = 6
    at.session_state["ds_maxnew"] = 4
    at.session_state["ds_thr"] = "tau x k"
    at.session_state["ds_tasks"] = ["copy", "mc"]
    return at.run()


@pytest.mark.slow
def test_page_renders_and_runs_ablation(monkeypatch, toy_ckpt):
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(toy_ckpt))
    at = _small_page()
    assert not at.exception, at.exception
    text = _text(at)
    assert "Shared decode subspace" in text and "Generation with and without the projection" in text
    assert len(at.get("plotly_chart")) >= 3
    assert "Shared subspace removed" in text
    at.slider(key="ds_neval").set_value(4)
    at.button(key="ds_run").click()
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert "ds_result" in at.session_state and len(at.dataframe) >= 1
    assert len(at.get("plotly_chart")) >= 4
    # what the page computed live carries its verdicts too (4 eval items per task: too few units, a warning)
    assert "H2, removing Q_S only while decoding lowers accuracy" in _text(at)
    assert any("sampling_units" in str(w.value) for w in at.warning)


@pytest.mark.slow
def test_page_runs_patchback(monkeypatch, toy_ckpt):
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(toy_ckpt))
    at = _small_page()
    assert not at.exception, at.exception
    assert "Patchback" in _text(at)
    at.slider(key="ds_neval").set_value(4)
    # a malformed window is a typed library error, shown as st.error
    at.text_input(key="ds_pb_extra").input("x")
    at.button(key="ds_pb_run").click()
    at.run()
    assert not at.exception, at.exception
    assert any("Patchback failed" in e.value and "window" in e.value for e in at.error), [e.value for e in at.error]
    assert "ds_pb_result" not in at.session_state
    at.text_input(key="ds_pb_extra").input("1")
    at.button(key="ds_pb_run").click()
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert "ds_pb_result" in at.session_state
    pb = at.session_state["ds_pb_result"][1]
    assert "n_flip" in pb.info and list(pb.table.columns)[:3] == ["source", "window", "task"]
    # a random model answers nothing correctly, so the removal flips nothing: the page says so, no empty figure
    if pb.info["n_flip"] == 0:
        assert "nothing to rescue" in _text(at) and "ds_patchback__chart" not in [c.key for c in at.get("plotly_chart")]


@pytest.mark.slow
def test_page_patchback_figure(monkeypatch, toy_ckpt):
    """With flips (a stubbed library result: the random model has none), the page shows the rescue-rate bars and
    the table, and passes the chosen windows through."""
    import pandas as pd

    import interplab.probes.decodeshare.study as studymod
    from interplab.probes.decodeshare import PatchbackResult

    seen = {}

    def fake(model, prompts, answers, **kw):
        seen.update(kw)
        rows = [{"source": src, "window": w, "task": t, "n_flip": 4, "n_rescued": r, "rescue_rate": r / 4,
                 "lo": 0.0, "hi": 1.0, "identical_rate": 0.5, "patch_k": 2, "n_edited": 8, "n_no_donor": 0}
                for src, r in (("same", 4), ("transfer", 2), ("haar", 0)) for w in ("{0}", "all")
                for t in ("copy", "all")]
        return PatchbackResult(pd.DataFrame(rows), pd.DataFrame(), {"n_flip": 4, "baseline_acc": 0.5})

    monkeypatch.setattr(studymod, "patchback_rescue", fake)
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(toy_ckpt))
    at = _small_page()
    at.multiselect(key="ds_pb_windows").set_value(["0", "0,1"])
    at.button(key="ds_pb_run").click()
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert seen["windows"] == ["0", "0,1"] and set(seen["controls"]) == {"non-shared", "haar"}
    assert "ds_patchback__chart" in [c.key for c in at.get("plotly_chart")]
    assert any("rescue_rate" in d.value.columns and len(d.value) == 12 for d in at.dataframe)
