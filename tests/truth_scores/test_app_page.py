"""AppTest: the Truth Scores page renders the released maps without a model, and scores / gates a random
toy-vocabulary checkpoint."""
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

import interplab.app  # noqa: E402
from tests.truth_scores._released import needs_released  # noqa: E402

PAGE = str(Path(interplab.app.__file__).resolve().parent / "pages" / "2_Truth_Scores.py")
TIMEOUT = 180


@needs_released
def test_page_released_maps(monkeypatch, tmp_path):
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(tmp_path / "missing"))
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    keys = [c.key for c in at.get("plotly_chart")]
    for k in ("ts_heatmap__chart", "ts_matrix__chart", "ts_bars__chart", "ts_perlayer__chart", "ts_scatter__chart",
              "ts_null__chart"):
        assert k in keys, keys
    at.radio(key="ts_view").set_value("gates").run()
    at.selectbox(key="ts_mode").set_value("contrast").run()
    at.number_input(key="ts_alpha").set_value(6.0).run()  # Vicuna, contrast, alpha 6: min gate -0.96
    assert not at.exception, at.exception
    assert any("negative gates" in w.value for w in at.warning)


@pytest.mark.slow
def test_page_scores_and_gates_a_model(monkeypatch, tmp_path, toy_random_ckpts):
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(toy_random_ckpts["base"]))
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT).run()
    at.radio(key="ts_source").set_value("Score a model (CtxMem)").run()
    at.number_input(key="ts_n").set_value(40).run()
    at.number_input(key="ts_epochs").set_value(20).run()
    at.button(key="ts_go").click().run()
    assert not at.exception, at.exception
    keys = [c.key for c in at.get("plotly_chart")]
    assert "ts_heatmap__chart" in keys and "ts_evidence__chart" in keys
    at.button(key="ts_try_go").click().run()
    assert not at.exception, at.exception
    assert len(at.code) == 2


def test_a_real_model_is_pointed_to_its_own_data_not_scored_on_organism_text(monkeypatch, tmp_path):
    """Issue 25 §4: CtxMem prompts are toy-language text; on a real model the page says so and points to the data
    box instead of scoring a meaningless map (no model is loaded for this)."""
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", "real:smollm2-135m-instruct")
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT).run()
    if "Score a model (CtxMem)" in at.radio(key="ts_source").options:
        at.radio(key="ts_source").set_value("Score a model (CtxMem)").run()
    assert not at.exception, at.exception
    assert any("toy language" in i.value and "Your data" in i.value for i in at.info), [i.value for i in at.info]
    assert not [b for b in at.button if b.key == "ts_go"]


def test_page_opens_the_shipped_world_facts_run(monkeypatch, tmp_path):
    """Section 7 shows the committed SmolLM2 world-facts map (results/truth-scores-smollm2/) without a model."""
    from interplab.results.runs import shipped_runs

    assert any((d / "facts_map").exists() for d in shipped_runs("truth-scores"))
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(tmp_path / "missing"))
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    keys = [c.key for c in at.get("plotly_chart")]
    for k in ("ts_facts_heatmap__chart", "ts_facts_layers__chart", "ts_facts_null__chart",
              "ts_facts_evidence__chart"):
        assert k in keys, keys
    assert any(m.label.startswith("significant heads (maxT)") and m.value.startswith("122")
               for m in at.metric), [(m.label, m.value) for m in at.metric]
