"""Issue 48: the PCFG page opens a model without a training grammar on toy-english, whose sampled sentence has
nested phrases, not on the first example alphabetically ("hand": "a a a", one parse of p = 1)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

import interplab.app  # noqa: E402

PAGE = str(Path(interplab.app.__file__).resolve().parent / "pages" / "5_PCFG.py")


def test_pcfg_page_default_example_is_not_degenerate(monkeypatch, tmp_path):
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", "zoo:toy-chat")
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    at = AppTest.from_file(PAGE, default_timeout=180).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="pcfg_source").value == "toy-english"
    sentence = next(m.value for m in at.markdown if m.value.startswith("**Sentence**"))
    words = re.search(r"`([^`]*)`", sentence).group(1).split()
    assert len(words) >= 5 and len(set(words)) >= 4, sentence
