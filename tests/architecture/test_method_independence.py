"""Issue 26, method independence, enforced: no method package imports another, and the lenses (the atlas among them)
read each method's declared `AtlasPart` through `interplab.methods` instead of importing method internals or the
validation organisms. Both are import-linter contracts in pyproject.toml; the second test shows the check can fail."""
from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from tests.architecture.test_layers import PKG, ROOT, _lint

_CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
INDEPENDENCE = next(c["name"] for c in _CONTRACTS if c["type"] == "independence")
FORBIDDEN = next(c["name"] for c in _CONTRACTS
                 if c["type"] == "forbidden" and c["source_modules"] == ["interplab.probes.lenses"])


def contract_modules() -> set[str]:
    """What the independence contract must list: derived from the method declarations, never kept by hand."""
    import os

    import interplab.methods as M

    saved = os.environ.pop(M.PLUGIN_ENV, None)
    try:
        M.reset()
        return {spec.package for spec in M.methods()} | {"interplab.probes.lenses"}
    finally:
        if saved is not None:
            os.environ[M.PLUGIN_ENV] = saved
        M.reset()


def _kept(stdout: str, name: str) -> bool:
    # import-linter wraps long contract names at 80 columns in its report
    return f"{name} KEPT" in " ".join(stdout.split())


def test_methods_are_independent_and_the_lenses_do_not_import_organisms():
    pytest.importorskip("importlinter")
    independent = next(c for c in _CONTRACTS if c["name"] == INDEPENDENCE)["modules"]
    assert set(independent) == contract_modules(), (
        "pyproject.toml's independence contract must list every method's package (its MethodSpec.package) "
        f"plus interplab.probes.lenses: missing {sorted(contract_modules() - set(independent))}, "
        f"extra {sorted(set(independent) - contract_modules())}")
    assert next(c for c in _CONTRACTS if c["name"] == FORBIDDEN)["forbidden_modules"] == ["interplab.zoo.validation"]
    res = _lint(ROOT)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    for name in (INDEPENDENCE, FORBIDDEN):
        assert _kept(res.stdout, name), (name, res.stdout[-4000:])


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(PKG, tmp_path / "interplab", ignore=shutil.ignore_patterns("weights", "__pycache__", "*.json"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.parametrize("module, line, broken", [
    # CRH importing Truth Scores: one method importing another
    ("probes/crh/__init__.py", "import interplab.probes.truth", "interplab.probes.crh is not allowed to import "
                                                                "interplab.probes.truth"),
    # the atlas importing DecodeShare directly instead of reading its part
    ("probes/lenses/atlas.py", "from interplab.probes.decodeshare import haar_basis",
     "interplab.probes.lenses is not allowed to import interplab.probes.decodeshare"),
])
def test_a_cross_method_import_is_caught(tmp_path, module, line, broken):
    """A copy of the package with one forbidden import breaks the independence contract, naming the pair."""
    pytest.importorskip("importlinter")
    root = _copy(tmp_path)
    target = root / "interplab" / module
    target.write_text(target.read_text() + f"\n{line}  # forbidden\n")
    res = _lint(root)
    assert res.returncode != 0
    flat = " ".join(res.stdout.split())
    assert not _kept(res.stdout, INDEPENDENCE) and "BROKEN" in flat
    assert broken in flat
