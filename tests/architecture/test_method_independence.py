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


def _kept(stdout: str, name: str) -> bool:
    # import-linter wraps long contract names at 80 columns in its report
    return f"{name} KEPT" in " ".join(stdout.split())


def test_methods_are_independent_and_the_lenses_do_not_import_organisms():
    pytest.importorskip("importlinter")
    independent = next(c for c in _CONTRACTS if c["name"] == INDEPENDENCE)["modules"]
    assert {"interplab.probes.lenses", "interplab.sae", "interplab.probes.truth", "interplab.probes.decodeshare",
            "interplab.probes.crh", "interplab.probes.pcfg", "interplab.probes.hyperfit"} <= set(independent)
    assert next(c for c in _CONTRACTS if c["name"] == FORBIDDEN)["forbidden_modules"] == ["interplab.zoo.validation"]
    res = _lint(ROOT)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    for name in (INDEPENDENCE, FORBIDDEN):
        assert _kept(res.stdout, name), (name, res.stdout[-4000:])


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(PKG, tmp_path / "interplab", ignore=shutil.ignore_patterns("weights", "__pycache__", "*.json"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_a_method_importing_another_is_caught(tmp_path):
    """A copy of the package where CRH imports Truth Scores breaks the independence contract."""
    pytest.importorskip("importlinter")
    root = _copy(tmp_path)
    init = root / "interplab" / "probes" / "crh" / "__init__.py"
    init.write_text(init.read_text() + "\nimport interplab.probes.truth  # forbidden: one method importing another\n")
    res = _lint(root)
    assert res.returncode != 0
    flat = " ".join(res.stdout.split())
    assert not _kept(res.stdout, INDEPENDENCE) and "BROKEN" in flat
    assert "interplab.probes.crh is not allowed to import interplab.probes.truth" in flat


def test_the_lenses_importing_a_method_is_caught(tmp_path):
    """A copy where the atlas imports DecodeShare directly (instead of reading its part) breaks it too."""
    pytest.importorskip("importlinter")
    root = _copy(tmp_path)
    atlas = root / "interplab" / "probes" / "lenses" / "atlas.py"
    atlas.write_text(atlas.read_text() + "\nfrom interplab.probes.decodeshare import haar_basis  # forbidden\n")
    res = _lint(root)
    assert res.returncode != 0
    flat = " ".join(res.stdout.split())
    assert not _kept(res.stdout, INDEPENDENCE)
    assert "interplab.probes.lenses is not allowed to import interplab.probes.decodeshare" in flat
