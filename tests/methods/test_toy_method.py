"""Issue 26 §1: a seventh method declared once, in its own folder (tests/methods/toy_method), appears in the CLI,
the app's page list and Home, the data boxes, the Runs page's hand-over, the smoke runs and the atlas, with no edit
to interplab."""
from __future__ import annotations

import sys

import pytest

import interplab.methods as M

PLUGIN = "tests.methods.toy_method"


@pytest.fixture
def toy(monkeypatch):
    from interplab.experiments import registry

    monkeypatch.setenv(M.PLUGIN_ENV, PLUGIN)
    M.reset()
    registry.discover(force=True)
    yield M.get_method("toy_method")
    monkeypatch.delenv(M.PLUGIN_ENV)
    M.reset()
    # the registry is process-wide: leave it as the other tests expect it (and let the next test register again)
    registry._REGISTRY.pop("toy-method-norms", None)
    sys.modules.pop(f"{PLUGIN}.experiment", None)


@pytest.fixture(scope="module")
def ckpt():
    from interplab.zoo import resolve

    return resolve("zoo:toy-chat")  # a shipped organism whose vocabulary spells the toy method's texts


def _declared_builtins() -> set[str]:
    """The methods declared by the modules of interplab.methods (each module's METHOD), read from the files."""
    import importlib
    import pkgutil

    import interplab.methods as pkg

    mods = (importlib.import_module(f"interplab.methods.{i.name}") for i in pkgutil.iter_modules(pkg.__path__))
    return {m.METHOD.name for m in mods if isinstance(getattr(m, "METHOD", None), M.MethodSpec)}


def test_without_the_plugin_only_the_declared_builtins():
    M.reset()
    names = [m.name for m in M.methods()]
    assert len(names) >= 6 and set(names) == _declared_builtins() and "toy_method" not in names


def test_the_toy_method_appears_everywhere(toy, capsys):
    from interplab import cli
    from interplab.app.navigation import app_pages
    from interplab.app.runs_view import method_page
    from interplab.data.user import USER_COLUMNS, describe_columns
    from interplab.testing import SMOKE_EXPERIMENTS

    assert [m.name for m in M.methods()][-1] == "toy_method"
    assert cli.main(["run", "--list"]) in (0, None)
    out = capsys.readouterr().out
    assert "Toy Method (toy_method): mean residual norm per layer" in out and "toy-method-norms" in out
    page = toy.pages[0]
    assert page in app_pages() and app_pages()[-1] == page          # unnumbered: after the built-in pages
    assert method_page("toy-method-norms") == page.file
    assert USER_COLUMNS["toy_method"] == ("text",) and describe_columns("toy_method") == "required: text"
    assert SMOKE_EXPERIMENTS["toy-method-norms"] == ("model={m}", "n_texts=2")
    assert M.method_of_experiment("toy-method-norms") is toy


def test_the_toy_methods_smoke_run_and_data_box_experiment(toy, ckpt, tmp_path, monkeypatch):
    import pandas as pd

    from interplab import cli
    from interplab.app.data_box import experiment_of
    from interplab.results import load_run
    from interplab.testing import smoke_experiment_args

    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    assert cli.main(["run", "toy-method-norms", *smoke_experiment_args("toy-method-norms", ckpt)]) in (0, None)
    data = tmp_path / "texts.csv"
    pd.DataFrame({"text": ["the big cat", "a small dog and a fox"]}).to_csv(data, index=False)
    from interplab.experiments import run_experiment

    path = run_experiment(experiment_of("toy_method"), {"model": str(ckpt), "data": str(data)},
                          root=tmp_path / "runs")
    norms = load_run(path).table("norms")
    assert list(norms.layer) == [0, 1, 2, 3] and (norms.mean_norm > 0).all()


def test_home_lists_the_toy_method(toy):
    from streamlit.testing.v1 import AppTest

    from interplab.app.navigation import APP_DIR

    at = AppTest.from_file(str(APP_DIR / "Home.py"), default_timeout=180).run()
    assert not at.exception, at.exception
    assert any("**Toy Method.** The mean residual-stream norm" in str(m.value) for m in at.markdown)


def test_a_second_method_under_a_taken_name_is_refused(toy):
    import dataclasses

    from interplab.core.errors import ConfigError

    with pytest.raises(ConfigError, match="already registered"):
        M.register_method(dataclasses.replace(toy, title="Another"))
    with pytest.raises(ConfigError, match="lower-case identifier"):
        dataclasses.replace(toy, name="Toy-Method").validate()
    with pytest.raises(ConfigError, match="not one of its experiments"):
        dataclasses.replace(toy, data=M.DataSpec(("text",), experiment="nope")).validate()


def test_a_plugin_that_cannot_be_imported_is_named(monkeypatch):
    from interplab.core.errors import ConfigError

    monkeypatch.setenv(M.PLUGIN_ENV, "no_such_module_for_interplab")
    M.reset()
    try:
        with pytest.raises(ConfigError, match="no_such_module_for_interplab"):
            M.methods()
    finally:
        monkeypatch.delenv(M.PLUGIN_ENV)
        M.reset()


def test_the_atlas_shows_the_toy_methods_layer_map(toy):
    import interplab
    from interplab.probes.lenses.atlas import LAYER_LABELS, atlas

    m = interplab.load_model("zoo:toy-chat")
    a = atlas(m, n_truth_items=16, n_decode_prompts=2, n_concept_pairs=4, directions=False, n_boot=100, n_perm=100)
    assert "toy_norm" in a.layer_maps and a.layer_maps["toy_norm"].shape == (m.n_layers,)
    assert LAYER_LABELS["toy_norm"] == "mean residual norm"
    assert "toy_norm" in set(a.agreement.map_a) | set(a.agreement.map_b)   # it is compared with the other maps
