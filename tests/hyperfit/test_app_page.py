"""The Hyperfitting page renders with two random checkpoints and explains a missing model."""
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

import interplab.app  # noqa: E402

PAGE = str(Path(interplab.app.__file__).resolve().parent / "pages" / "6_Hyperfitting.py")


@pytest.mark.slow
def test_layer_geometry_page(tmp_path_factory, monkeypatch):
    import importlib

    from interplab.testing import make_random_checkpoint

    # hide the shipped organisms so the first render takes the "model not available" path (fast, deterministic)
    empty = tmp_path_factory.mktemp("no_zoo")
    monkeypatch.setattr(importlib.import_module("interplab.models.zoo_dirs"), "SHIPPED_DIR", empty / "shipped")
    monkeypatch.setenv("INTERPLAB_HOME", str(empty / "home"))

    root = tmp_path_factory.mktemp("geo_app")
    pa = make_random_checkpoint("llama", root / "a", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, vocab=48, seed=0)
    pb = make_random_checkpoint("llama", root / "b", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, vocab=48, seed=3)
    at = AppTest.from_file(PAGE, default_timeout=240)
    at.run()
    assert not at.exception, at.exception
    # a missing zoo model is explained, not a crash (after the shipped runs' validity warnings, if any)
    assert any("not available" in w.value for w in at.warning)
    at.text_input(key="geo_a_path").input(str(pa))
    at.text_input(key="geo_b_path").input(str(pb))
    at.text_area(key="geo_custom").input("\n\n".join(" ".join(f"w{(i * 5 + j * 3) % 40}" for j in range(40))
                                                   for i in range(6)))
    at.number_input(key="geo_nprompts").set_value(2)
    at.number_input(key="geo_newtok").set_value(8)
    at.number_input(key="geo_ctx").set_value(8)
    at.run()
    assert not at.exception, at.exception
    # the only warnings left are the shipped runs' inconclusive verdicts (issue 46), none about these models
    assert all("Inconclusive because" in w.value for w in at.warning), [w.value for w in at.warning]
    # the first render shows the geometry only (after the shipped hyperfit-controls run's two figures);
    # generation-heavy views wait for the button (fast first open)
    from interplab.results.runs import shipped_runs

    controls = ["geo_controls_ddim__chart", "geo_controls_dw__chart"] if shipped_runs("hyperfit-controls") else []
    saved = (["geo_saved_bars__chart"] if shipped_runs("hyperfit-eval") else []) + (
        ["geo_saved_ksfig__chart"] if shipped_runs("hyperfit-ksweep") else [])
    assert [c.key for c in at.get("plotly_chart")] == controls + saved + ["geo_pr__chart", "geo_cosl2__chart",
                                                                          "geo_spectrum__chart"]
    at.button(key="geo_more").click().run()
    assert not at.exception, at.exception
    keys = [c.key for c in at.get("plotly_chart")]
    for k in ("geo_pr__chart", "geo_cosl2__chart", "geo_spectrum__chart", "geo_ranks__chart",
              "geo_temperature__chart", "geo_diversity__chart"):
        assert k in keys
    table = next(d.value for d in at.dataframe if "pr_a" in d.value.columns)  # after the shipped run's tables
    assert {"pr_a", "pr_b", "delta_pr", "cos", "l2"} <= set(table.columns) and len(table) == 3
    assert any("T\\* =" in m.value for m in at.markdown)


def test_layer_geometry_page_shows_saved_controls_run(tmp_path, monkeypatch):
    """The hyperfit-controls section shows a saved run (the committed results/hyperfit-controls result, saved as a
    run in a fresh INTERPLAB_HOME) through `saved_result`: the ΔDim-by-arm and ‖ΔW‖ figures and the runs table."""
    import importlib

    from interplab.probes.hyperfit import HyperfitControlsResult
    from interplab.results.runs import new_run

    committed = sorted((Path(__file__).resolve().parents[2] / "results" / "hyperfit-controls").glob("*/controls"))
    assert committed, "results/hyperfit-controls holds no committed run"
    monkeypatch.setattr(importlib.import_module("interplab.models.zoo_dirs"), "SHIPPED_DIR", tmp_path / "shipped")
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    res = HyperfitControlsResult.load(committed[0])
    with new_run("hyperfit-controls", res.config, root=tmp_path / "home") as run:
        run.save_result("controls", res)
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    keys = [c.key for c in at.get("plotly_chart")]
    assert keys[:2] == ["geo_controls_ddim__chart", "geo_controls_dw__chart"]
    runs = next(d.value for d in at.dataframe if set(d.value.columns) >= {"arm", "seed", "dW_total"})
    assert set(runs["arm"]) >= {"hyperfit", "finetune", "finetune-steps", "shuffled"}


def test_page_opens_the_shipped_smollm2_table_and_k_sweep(tmp_path, monkeypatch):
    """Issue 28 §2: with no runs of one's own, the saved-runs box opens the committed SmolLM2 runs (the table with
    the pooled-seed row, the k sweep)."""
    import importlib

    monkeypatch.setattr(importlib.import_module("interplab.models.zoo_dirs"), "SHIPPED_DIR", tmp_path / "shipped")
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    assert "hyperfit-eval-smollm2" in str(at.selectbox(key="geo_saved_eval").value)
    keys = [c.key for c in at.get("plotly_chart")]
    assert "geo_saved_bars__chart" in keys and "geo_saved_ksfig__chart" in keys
    table = next(d.value for d in at.dataframe if "setting" in d.value.columns and "ttr_lo" in d.value.columns)
    assert "targets pooled" in set(table["setting"]) and "base greedy" in set(table["setting"])
    # issue 46: the saved runs' verdicts sit beside their numbers (a failed check as a visible warning)
    assert "hyperfit-geometry-smollm2" in str(at.selectbox(key="geo_saved_geo").value)
    shown = [m.value for kind in ("success", "info", "warning") for m in getattr(at, kind)]
    assert any("Terminal Expansion" in m and "standardised PR" in m for m in shown)
    assert any("Sampling at the entropy-matched temperature" in m for m in shown)
