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
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))  # no saved validate-crh runs: no validation chart
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
    # the committed SmolLM2 spiral run opens with its verdict: one prompt pair fails the unit check
    assert "crh_sp_saved_helix_fixed__chart" in [c.key for c in at.get("plotly_chart")]
    assert any("Spiral probe" in w.value and "Inconclusive because sampling_units" in w.value
               for w in at.warning), [w.value for w in at.warning]
    at.button(key="crh_try_go").click().run()
    assert not at.exception, at.exception
    assert len(next(d.value for d in at.dataframe if "condition" in d.value.columns)) == 2


@pytest.mark.slow
def test_crh_page_spiral_probe(monkeypatch, tmp_path, checkpoint_factory):
    ckpt = checkpoint_factory("llama", n_layers=2, vocab=96)
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(ckpt))
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT).run()
    at.radio(key="crh_source").set_value("Model concepts").run()
    at.number_input(key="crh_ntrain").set_value(8).run()
    assert not at.exception, at.exception
    # the default toy pair (animal / color) is out of this random vocab: both tokenise to <unk> -> a readable error
    at.button(key="crh_sp_go").click().run()
    assert not at.exception, at.exception
    assert any("tokenise identically" in e.value for e in at.error), [e.value for e in at.error]
    assert "crh_sp_optim__chart" not in [c.key for c in at.get("plotly_chart")]
    # a custom pair differing in one token
    at.radio(key="crh_sp_source").set_value("Custom prompts").run()
    at.text_input(key="crh_sp_prompt_ori").input("w1 w2 w3 w4").run()
    at.text_input(key="crh_sp_prompt_tgt").input("w1 w5 w3 w4").run()
    at.number_input(key="crh_sp_steps").set_value(3).run()
    at.button(key="crh_sp_go").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    # the live probe carries the verdict crh-spiral saves: 6 budgets are too few for held-out folds
    assert any("Spiral probe" in w.value and "not computable" in w.value
               and "sampling_units" in w.value for w in at.warning), [w.value for w in at.warning]
    keys = [c.key for c in at.get("plotly_chart")]
    assert {"crh_sp_helix_fixed__chart", "crh_sp_helix_faithful__chart", "crh_sp_optim__chart"} <= set(keys), keys
    fits = at.dataframe[-1].value                        # the helix-fit table closes the section
    assert set(fits["fit to"]) == {"trajectory", "straight line (LRH control)", "flat (top-2 PCs control)"}
