"""The layering of docs/architecture.md, enforced: import-linter's layers contract (pyproject.toml) over every import,
function-level ones included; no private (`_name`) imports across packages; no machine paths in the package."""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "interplab"


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, str(cwd / "pyproject.toml"), "--no-cache"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_layers_contract_holds():
    pytest.importorskip("importlinter")
    res = _lint(ROOT)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]


def test_forbidden_import_is_caught(tmp_path):
    """The check can fail: a copy of the package with one upward import (core -> probes) breaks the contract."""
    pytest.importorskip("importlinter")
    shutil.copytree(PKG, tmp_path / "interplab", ignore=shutil.ignore_patterns("weights", "__pycache__", "*.json"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "interplab" / "core" / "upward.py").write_text("from interplab.probes import stats  # forbidden\n")
    res = _lint(tmp_path)
    assert res.returncode != 0
    assert "interplab.core is not allowed to import interplab.probes" in res.stdout


def _top(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def private_imports() -> list[str]:
    """`from interplab.a.b import _x` where the importing module lives outside package interplab.a."""
    bad = []
    for path in PKG.rglob("*.py"):
        mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("interplab."):
                if _top(node.module) == _top(mod):
                    continue
                for alias in node.names:
                    if alias.name.startswith("_"):
                        bad.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {node.module}.{alias.name}")
    return bad


def test_no_private_imports_across_packages():
    assert not private_imports(), "\n".join(private_imports())


ABS_PATH = re.compile(r"(?<![\w.])/(?:work|home|root|Users|tmp|mnt)/[\w.-]+")


def test_no_machine_paths_in_package_or_shipped_weights():
    """Shipped code, cards and training records name zoo organisms or relative paths, never this machine's."""
    hits = []
    for path in PKG.rglob("*"):
        if path.is_file() and path.suffix in {".py", ".json", ".md", ".txt", ".jinja", ".toml"}:
            for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if ABS_PATH.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()[:120]}")
    assert not hits, "\n".join(hits[:40])
