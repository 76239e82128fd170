"""Every documented snippet runs (issue 15, "What to build" 1): each ```python block of README.md and docs/*.md is
executed, blocks of one file in order in one fresh namespace, with its own working directory, a temporary
INTERPLAB_HOME and the hub offline, in a snippet interpreter kept per pytest worker (`snippets.py --serve`: the
imports are paid once; `test_a_failing_block_fails` runs the one-file script mode a reader would use). Only blocks marked `<!-- needs: gpu REASON -->` / `<!-- needs: hub REASON -->` are skipped. The
outputs a snippet describes are checked by the asserts written in the docs themselves."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.snippets import extract

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCS_WITH_CODE = [p for p in FILES if extract(p)]


def test_skips_say_why():
    for p in FILES:
        for b in extract(p):
            if b.needs:
                assert len(b.reason) >= 8, f"{p.name}:{b.line}: a needs:{b.needs} marker must say why (got {b.reason!r})"


def test_extract_sees_markers_and_order(tmp_path):
    md = tmp_path / "x.md"
    md.write_text("```python\nx = 1\n```\n\n<!-- needs: gpu 40 GB of weights -->\n\n```python\nx = 2\n```\n"
                  "```python\nassert x == 1\n```\n")
    blocks = extract(md)
    assert [b.needs for b in blocks] == [None, "gpu", None] and blocks[1].reason == "40 GB of weights"
    assert blocks[2].line == 10


def _run(path: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "INTERPLAB_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, str(ROOT / "tests" / "docs" / "snippets.py"), str(path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session")
def snippet_runner(tmp_path_factory):
    """One `snippets.py --serve` interpreter; `run(path, tmp_path)` -> (rc, output)."""
    import json

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "docs" / "snippets.py"), "--serve"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                            cwd=str(tmp_path_factory.mktemp("snippets")))

    def run(path: Path, tmp_path: Path) -> tuple[int, str]:
        req = {"path": str(path), "cwd": str(tmp_path), "env": {"INTERPLAB_HOME": str(tmp_path / "home")}}
        proc.stdin.write(json.dumps(req) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the snippet interpreter died (exit {proc.wait()}) while running {path.name}")
        ans = json.loads(line)
        return ans["rc"], ans["out"]

    yield run
    proc.stdin.close()
    proc.wait(timeout=60)


def test_a_failing_block_fails(tmp_path):
    md = tmp_path / "bad.md"
    md.write_text("```python\nprompts = ['a']\n```\n```python\nassert len(prompts) == 2, 'documented output'\n```\n")
    out = _run(md, tmp_path)
    assert out.returncode != 0 and "bad.md:4" in out.stderr and "documented output" in out.stderr


def test_the_runner_reports_a_failing_block_and_keeps_namespaces_apart(tmp_path, snippet_runner):
    bad, good = tmp_path / "bad.md", tmp_path / "good.md"
    bad.write_text("```python\nprompts = ['a']\n```\n```python\nassert len(prompts) == 2, 'documented output'\n```\n")
    good.write_text("```python\nassert 'prompts' not in globals()\n```\n")
    rc, out = snippet_runner(bad, tmp_path)
    assert rc != 0 and "bad.md:4" in out and "documented output" in out
    assert snippet_runner(good, tmp_path)[0] == 0      # the next file does not see the last one's names


@pytest.mark.slow
@pytest.mark.parametrize("path", DOCS_WITH_CODE, ids=lambda p: p.name)
def test_documented_snippets_run(path, tmp_path, snippet_runner):
    rc, out = snippet_runner(path, tmp_path)
    assert rc == 0, out[-8000:]
