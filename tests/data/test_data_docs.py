"""docs/data.md: every Python block not marked `<!-- needs: hub -->` runs here, offline, on the zoo organisms."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "data.md"


def offline_blocks() -> list[tuple[str, str]]:
    text = DOC.read_text()
    out = []
    for m in re.finditer(r"```python\n(.*?)```", text, re.S):
        before = text[:m.start()].rstrip().splitlines()
        if before and before[-1].strip().startswith("<!-- needs: hub"):
            continue
        heading = next((ln for ln in reversed(before) if ln.startswith("#")), "?")
        out.append((heading.lstrip("# ").strip(), m.group(1)))
    return out


def test_every_method_has_an_offline_and_a_hub_example():
    text = DOC.read_text()
    names = [h for h, _ in offline_blocks()]
    for method in ("Truth Scores", "DecodeShare", "CRH", "SAE training (FAST vs block)", "Hyperfitting geometry"):
        assert method in names
    assert text.count("<!-- needs: hub") >= 5


@pytest.mark.slow
@pytest.mark.parametrize("heading,code", offline_blocks(), ids=[h for h, _ in offline_blocks()])
def test_docs_block_runs(heading, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    exec(compile(code, f"docs/data.md [{heading}]", "exec"), {"__name__": "__docs__"})
