"""Issue 49: the docs site (mkdocs + mkdocstrings: the guides plus an API reference built from the docstrings)
builds in strict mode, and a broken API reference fails the build."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _build(cfg: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(cfg), "-d",
                           str(out)], capture_output=True, text=True, timeout=600,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(out.parent)})


def test_docs_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocstrings")
    res = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert res.returncode == 0, res.stderr[-3000:]
    page = (tmp_path / "site" / "api" / "models" / "index.html").read_text(encoding="utf-8")
    assert "LabModel" in page and "generate" in page                  # the API reference has the docstrings
    assert (tmp_path / "site" / "tutorials" / "01_induction_heads" / "index.html").is_file()


def test_a_broken_reference_fails(tmp_path):
    pytest.importorskip("mkdocstrings")
    docs = tmp_path / "docs"
    (docs / "api").mkdir(parents=True)
    (docs / "index.md").write_text("# x\n")
    (docs / "api" / "bad.md").write_text("# bad\n\n::: interplab.models.no_such_module.Thing\n")
    cfg = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:")[0]
    cfg = cfg.replace("paths: [.]", f"paths: [{ROOT}]")
    (tmp_path / "mkdocs.yml").write_text(cfg + "\nnav:\n  - Home: index.md\n  - Bad: api/bad.md\n")
    res = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert res.returncode != 0
    assert "no_such_module" in res.stderr
