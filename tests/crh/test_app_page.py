"""AppTest: the CRH page renders its synthetic views without a model, and the model views on a random checkpoint."""
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

import interplab.app  # noqa: E402

PAGE = str(Path(interplab.app.__file__).resolve().parent / "pages" / "4_CRH.py")
TIMEOUT = 180


def test_crh_page_synthetic(monkeypatch, tmp_path):
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(tmp_path / "missing"))
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    keys = [c.key for c in at.get("plotly_chart")]
    assert keys == ["crh_syn_scene__chart", "crh_syn_polar__chart", "crh_syn_penalty__chart",
                    "crh_syn_pairwise__chart"]
    assert "sector centre error" in at.success[0].value
    at.checkbox(key="crh_syn_null").check().run()
    assert not at.exception, at.exception


@pytest.mark.slow
def test_crh_page_model(monkeypatch, tmp_path, checkpoint_factory):
    ckpt = checkpoint_factory("llama", n_layers=2, vocab=96)
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(ckpt))
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT).run()
    at.radio(key="crh_source").set_value("Model concepts").run()
    assert not at.exception, at.exception
    assert at.selectbox(key="crh_kind").value == "toy concept (vocab fallback)"
    at.number_input(key="crh_ntrain").set_value(8).run()
    assert not at.exception, at.exception
    assert "crh_model_scene_only__chart" in [c.key for c in at.get("plotly_chart")]
    at.button(key="crh_try_go").click().run()
    assert not at.exception, at.exception
    assert len(at.dataframe[0].value) == 2
