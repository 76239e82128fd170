"""CRH on a real chat model by name (issue 28 §1): `crh-concepts` and `crh-spiral` on SmolLM2-135M-Instruct with
tiny settings (smoke: the real tokenizer, chat template, residual scale and the elicitation tables end to end), and
the CRH page on it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

SMOL = "real:smollm2-135m-instruct"


def _require_smollm2():
    from interplab.models import real

    if not real.is_installed(real.real_model(SMOL)):
        pytest.fail(f"{SMOL} is not installed; `bash scripts/setup.sh install` installs the real models")


@pytest.mark.slow
def test_crh_concepts_runs_on_the_real_model(tmp_path):
    import pandas as pd

    from interplab.experiments.registry import run_experiment
    from interplab.probes.crh.study import ConceptStudy
    from interplab.results.runs import load_run

    _require_smollm2()
    path = run_experiment("crh-concepts", {
        "model": SMOL, "concepts": "price,temperature,wetland", "n_train": "4", "n_test": "2",
        "layers": "5,10", "n_strengths": "2", "n_p": "2", "n_bins": "3", "max_new_tokens": "4",
        "n_perm": "5", "select_concepts": "1", "select_positions": "mean", "select_layers": "10"},
        root=tmp_path)
    s = json.loads((path / "json" / "summary.json").read_text())
    assert s["format"] == "chat" and s["data"] == "offline" and s["steer_layer"] == 10
    assert s["read_choice"]["held_out"] and len(s["validity"]) == 6
    # the residual-norm unit is the model's own scale (SmolLM2's mid-layer norms are ~10^2), not the diffmean norm
    assert all(u > 20 for u in s["strength_unit"].values())
    study = load_run(path).result("study")
    assert isinstance(study, ConceptStudy) and len(study.concepts) == 2
    scored = set(s["read_choice"]["selection"]) ^ {"price", "temperature", "wetland"}
    assert set(study.concepts) == scored
    assert set(study.stats["layer"]) == {5, 10}
    es = pd.read_csv(path / "tables" / "elicitation_summary.csv")
    assert {"unsteered", "diffmean", "pca", "probe", "control", "sector", "sector best",
            "penalty p=0"} == set(es["method"])
    # unsteered replies to public-fact questions are ordinary language: none is gibberish
    assert es.loc[es["method"] == "unsteered", "gibberish_rate"].iloc[0] == 0
    assert (path / "figures" / "elicitation.html").exists()


@pytest.mark.slow
def test_crh_spiral_takes_real_concepts_by_name(tmp_path):
    from interplab.experiments.registry import run_experiment
    from interplab.probes.crh.real_data import real_spiral_prompts

    _require_smollm2()
    import interplab

    m = interplab.load_model(SMOL)
    ori, tgt = real_spiral_prompts(m, "temperature", "wetland")
    assert len(ori) == len(tgt) and ori[:-1] == tgt[:-1] and ori[-1] != tgt[-1]
    assert m.tokenizer.decode(ori[-1:]).strip() == "temperature"
    path = run_experiment("crh-spiral", {"model": SMOL, "concept_ori": "temperature", "concept_tgt": "wetland",
                                         "layer": "10", "w_min": "0.5", "w_max": "3.0", "w_step": "0.5",
                                         "steps": "2"}, root=tmp_path)
    s = json.loads((path / "json" / "summary.json").read_text())
    assert s["loss_text"][-1] == "Ġtemperature" and s["src"] != s["dst"]
    assert s["site"] == "resid_pre.10"


@pytest.mark.slow
def test_crh_page_opens_on_the_paper_concepts_for_smollm2(monkeypatch, tmp_path):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    import interplab.app

    _require_smollm2()
    page = str(Path(interplab.app.__file__).resolve().parent / "pages" / "4_CRH.py")
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", SMOL)
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    at = AppTest.from_file(page, default_timeout=300).run()
    at.radio(key="crh_source").set_value("Model concepts").run()
    assert not at.exception, at.exception
    assert at.selectbox(key="crh_kind").value == "paper concept (offline pairs)"
    assert at.selectbox(key="crh_offline_concept").value == "temperature"
    assert at.number_input(key="crh_layer").value == 10
    charts = [c.key for c in at.get("plotly_chart")]
    assert "crh_model_scene_only__chart" in charts
    # the committed SmolLM2 study opens in the saved-run box
    assert "crh_concepts_elicitation__chart" in charts and "crh_concepts_stats__chart" in charts
    # ... with its verdicts: a failed check is a visible warning beside the numbers (issue 46)
    assert any("Inconclusive because floor_ceiling" in w.value for w in at.warning)
    at.button(key="crh_try_go").click().run()
    assert not at.exception, at.exception
    table = next(d.value for d in at.dataframe if "condition" in d.value.columns)
    assert len(table) == 2 and table["output"].str.len().min() > 0    # both replies are words, not empty
    assert at.radio(key="crh_sp_source").value == "Offline concept pair (real chat model)"
