"""The Runs page (issue 15, "Provenance"): every run with its experiment, config, date, version and figures, a
filter for failed runs, reopening a run in its method page (Truth Scores, Models), downloads named after the run."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

import interplab.app  # noqa: E402
from interplab.app.runs_view import REOPEN_KEY, download_stem, method_page  # noqa: E402
from interplab.results import load_run, new_run  # noqa: E402

PAGES = Path(interplab.app.__file__).resolve().parent / "pages"
TIMEOUT = 180


@dataclass
class _Cfg:
    x: int = 1


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    from interplab.experiments.truth_scores import ReleasedLineageConfig, released_lineage

    root = tmp_path_factory.mktemp("runs_home")
    # the Runs page needs any finished run with tables and figures, not the authors' numbers: on a clone without
    # ../shared (the maps are not redistributed) the same experiment runs on random maps in the released file names
    from tests.truth_scores._released import MISSING

    directory = ""
    if MISSING:
        import numpy as np

        d = tmp_path_factory.mktemp("random_maps")
        rng = np.random.default_rng(0)
        for name in ("llama2_halueval_292", "vicuna_halueval_292"):
            np.save(d / f"converted_score_cv5_head_metrics_{name}.npy", rng.uniform(0.4, 0.8, (4, 4)))
        directory = str(d)
    cfg = ReleasedLineageConfig(directory=directory, n_permutations=20, figure_formats=["html"])
    with new_run("truth-released-lineage", cfg, root=root) as run:
        released_lineage(cfg, run)
    with pytest.raises(RuntimeError):
        with new_run("demo", _Cfg(), root=root):
            raise RuntimeError("boom")
    return root, run


def test_method_pages_exist_for_known_kinds():
    for kind in ("truth-scores", "truth-released-lineage", "decodeshare", "crh-toy", "pcfg-depth", "hyperfit-eval",
                 "sae-train", "next-token"):
        page = method_page(kind)
        assert page is not None and (PAGES.parent / page).is_file(), kind
    assert method_page("my-probe") is None


def test_runs_page_lists_filters_and_reopens(home, monkeypatch):
    root, run = home
    monkeypatch.setenv("INTERPLAB_HOME", str(root))
    at = AppTest.from_file(str(PAGES / "9_Runs.py"), default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert list(table["kind"]) == ["truth-released-lineage"] and table["version"].iloc[0] == interplab.__version__
    assert int(table["n_figures"].iloc[0]) >= 3
    at.checkbox(key="runs_show_bad").check().run()
    assert set(at.dataframe[0].value["status"]) == {"complete", "failed"}
    at.selectbox(key="runs_pick").select(f"truth-released-lineage/{run.name}").run()
    assert not at.exception, at.exception
    # the run's figures are shown (keys from the run's figure names); their downloads are named after the run
    assert "runs_fig_per_layer__chart" in [c.key for c in at.get("plotly_chart")]
    assert download_stem(load_run(run.path), "per_layer") == f"truth-released-lineage_{run.name}_per_layer"
    at.button(key="runs_reopen").click().run()
    assert at.session_state[REOPEN_KEY] == f"truth-released-lineage/{run.name}"
    # the failed run is explained, not shown
    failed = [o for o in at.selectbox(key="runs_pick").options if o.startswith("demo/")]
    at.selectbox(key="runs_pick").select(failed[0]).run()
    assert not at.exception and any("failed" in w.value for w in at.warning)


def test_truth_scores_page_shows_a_reopened_run(home, monkeypatch):
    root, run = home
    monkeypatch.setenv("INTERPLAB_HOME", str(root))
    at = AppTest.from_file(str(PAGES / "2_Truth_Scores.py"), default_timeout=TIMEOUT)
    at.session_state[REOPEN_KEY] = f"truth-released-lineage/{run.name}"
    at.run()
    assert not at.exception, at.exception
    assert any(f"Saved run truth-released-lineage/{run.name}" in e.label for e in at.expander)
    saved = load_run(run.path).result("released_lineage").to_frame()
    assert any(d.value.shape == saved.shape for d in at.dataframe)          # the typed result, via LoadedRun.result
    at.button(key="reopened_close").click().run()
    assert REOPEN_KEY not in at.session_state and not any("Saved run" in e.label for e in at.expander)


def test_models_page_shows_a_reopened_next_token_run(tmp_path, monkeypatch):
    from interplab.experiments.models import NextTokenConfig, next_token

    cfg = NextTokenConfig(model="zoo:toy-chat", prompt="s1 s2 sep")
    with new_run("next-token", cfg, root=tmp_path) as run:
        next_token(cfg, run)
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path))
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", "zoo:toy-chat")
    at = AppTest.from_file(str(PAGES / "1_Models.py"), default_timeout=TIMEOUT)
    at.query_params["run"] = f"next-token/{run.name}"                   # a shared link works too
    at.run()
    assert not at.exception, at.exception
    assert any(f"Saved run next-token/{run.name}" in e.label for e in at.expander)
    keys = [c.key for c in at.get("plotly_chart")]
    assert "reopened_fig_top_tokens__chart" in keys and "reopened_fig_attention__chart" in keys
