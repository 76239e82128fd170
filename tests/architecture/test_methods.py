"""Issue 26: every method is declared once (interplab.methods) and has all its parts: API package, figures,
experiments registered by the declared modules, pages, docs and tests. Every experiment and every app page belongs
to exactly one method or is one of the tool pages / experiments (lenses, atlas, models, runs)."""
from __future__ import annotations

from pathlib import Path

import pytest

import interplab.methods as M

ROOT = Path(__file__).resolve().parents[2]
TOOL_EXPERIMENTS = {"atlas", "lenses-facts", "logit-lens", "next-token", "patching"}


@pytest.fixture(autouse=True)
def builtins_only(monkeypatch):
    monkeypatch.delenv(M.PLUGIN_ENV, raising=False)
    M.reset()
    yield
    M.reset()


def _builtin_names() -> list[str]:
    """The built-in methods, from their declarations (collection time: plug-ins left out)."""
    import os

    saved = os.environ.pop(M.PLUGIN_ENV, None)
    try:
        M.reset()
        return [s.name for s in M.methods()]
    finally:
        if saved is not None:
            os.environ[M.PLUGIN_ENV] = saved
        M.reset()


@pytest.mark.parametrize("name", _builtin_names())
def test_every_method_has_its_parts(name):
    from interplab.app.navigation import page_path
    from interplab.experiments.registry import get_experiment

    spec = M.get_method(name)
    M.resolve(spec.package)
    M.resolve(spec.figures)
    for exp in spec.experiments:
        assert get_experiment(exp).module in spec.experiment_modules, f"{exp} is registered outside {name}'s modules"
    for page in spec.pages:
        assert page_path(page).is_file(), page.file
    assert (ROOT / spec.doc).is_file(), spec.doc
    assert list((ROOT / spec.tests).glob("test_*.py")), f"{spec.tests} holds no tests"
    if spec.atlas:
        M.resolve(spec.atlas)


def test_every_experiment_and_page_belongs_to_one_method_or_the_tools():
    from interplab.app.navigation import TOOL_PAGES, page_path
    from interplab.experiments.registry import list_experiments

    owners: dict[str, list[str]] = {}
    for spec in M.methods():
        for exp in spec.experiments:
            owners.setdefault(exp, []).append(spec.name)
    # built-in experiments only: other tests register their own (e.g. tests.jobs.sleepy) in the same process
    registered = {e.name for e in list_experiments() if e.module.startswith("interplab.")}
    assert {e for e, o in owners.items() if len(o) > 1} == set()
    assert registered - set(owners) == TOOL_EXPERIMENTS
    assert set(owners) <= registered
    pages = [page_path(p).resolve() for p in TOOL_PAGES] + [page_path(p).resolve() for _, p in M.method_pages()]
    assert len(pages) == len(set(pages))
    assert set(pages) == {f.resolve() for f in (ROOT / "interplab" / "app" / "pages").glob("*.py")}


def test_architecture_doc_has_a_row_per_method():
    text = (ROOT / "docs" / "architecture.md").read_text()
    for spec in M.methods():
        assert f"| `{spec.name}` |" in text, f"docs/architecture.md has no row for {spec.name}"


@pytest.mark.parametrize("public, real", [("load_model", "interplab.models.loading:load_model"),
                                          ("harvest", "interplab.models.harvest:harvest")])
def test_the_entry_points_are_the_real_functions(public, real):
    """`interplab.load_model` / `harvest` are lazy exports of the real functions, so their signatures (every option)
    and docstrings are the real ones."""
    import interplab

    assert getattr(interplab, public) is M.resolve(real)


def test_one_lazy_export_scheme():
    """Every package that re-exports names lazily uses core.lazy.LazyExports (no hand-written tables)."""
    import re

    lazy = re.compile(r"^def __getattr__\(.*?(?=^\S)", re.M | re.S)   # a module-level __getattr__ that imports
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "interplab").rglob("*.py")
                 if any(re.search(r"import_module\(|^\s+(from \S+ )?import ", body, re.M)
                        for body in lazy.findall(p.read_text() + "\nEND"))]
    assert not offenders, f"hand-written module __getattr__ in {offenders}; use interplab.core.lazy.LazyExports"


def test_method_code_outside_its_package_follows_the_stated_rule():
    """A method's modules outside its package are declared (`MethodSpec.elsewhere`), sit in the layer the rule
    names (interventions, train, zoo, data, grammar), exist, and no module is claimed by two methods. The modules of
    those layers that are method-specific by construction (validation organisms, method recipes, hyperfitting and
    grammar training, per-method data adapters) must be claimed by one."""
    import importlib.util

    allowed = ("interplab.interventions.", "interplab.train.", "interplab.zoo.", "interplab.data.", "interplab.grammar")
    claimed: dict[str, str] = {}
    for spec in M.methods():
        for mod in spec.elsewhere:
            assert mod.startswith(allowed), f"{spec.name}: {mod} is not in a layer the rule allows"
            assert importlib.util.find_spec(mod) is not None, f"{spec.name}: {mod} does not exist"
            assert mod not in claimed, f"{mod} is claimed by {claimed[mod]} and {spec.name}"
            claimed[mod] = spec.name
    pkg = ROOT / "interplab"
    specific = [*(pkg / "zoo" / "validation").glob("[a-z]*.py"), pkg / "zoo" / "recipes" / "pcfg.py",
                pkg / "zoo" / "recipes" / "hyperfit.py", *(pkg / "train").glob("hyperfit*.py"),
                pkg / "train" / "grammar_eval.py",
                *[p for p in (pkg / "data" / "adapters").glob("[a-z]*.py") if p.stem != "text_corpus"]]
    names = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in specific}
    assert names - set(claimed) == set(), "method-specific modules no method declares"


def test_edits_are_defined_in_interventions_only():
    """Every Edit subclass of the package is defined under interplab/interventions (the hook layer's private guard,
    models/lab_model.py's _PadNaNGuard, sits below interventions and is not a user edit)."""
    import re

    rx = re.compile(r"^class (\w+)\([^)]*\bEdit\b[^)]*\):", re.M)
    outside = [f"{p.relative_to(ROOT)}:{m}" for p in (ROOT / "interplab").rglob("*.py")
               if "interventions" not in p.parts and p.name != "edit.py"
               for m in rx.findall(p.read_text()) if m != "_PadNaNGuard"]
    assert not outside, f"edits defined outside interplab/interventions: {outside}"
