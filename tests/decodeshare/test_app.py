"""AppTest: the DecodeShare page renders on a toy-vocabulary random model, explains a non-multitask model, and
runs the ablation section."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

import interplab.app  # noqa: E402

PAGE = str(Path(interplab.app.__file__).resolve().parent / "pages" / "3_DecodeShare.py")
TIMEOUT = 240


@pytest.fixture(scope="module")
def toy_ckpt(tmp_path_factory):
    from interplab.data.toy_vocab import build_toy_tokenizer
    from interplab.train.arch import ArchConfig, build_model
    from interplab.train.checkpoint import save_checkpoint

    tok = build_toy_tokenizer()
    m = build_model(ArchConfig(n_layers=2, d_model=32, d_mlp=64, n_heads=2, n_kv_heads=1, d_head=16, n_ctx=128),
                    tok, seed=0)
    return save_checkpoint(m, tok, tmp_path_factory.mktemp("dsapp") / "ckpt")


def _text(at) -> str:
    parts = []
    for kind in ("markdown", "title", "header", "subheader", "caption", "warning", "success", "info", "error"):
        parts += [str(getattr(e, "value", "")) for e in getattr(at, kind)]
    return "\n".join(parts)


def test_page_explains_non_multitask_model(monkeypatch, checkpoint_factory):
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(checkpoint_factory("llama")))
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    assert "multitask-decode organism" in _text(at)


@pytest.mark.slow
def test_page_renders_and_runs_ablation(monkeypatch, toy_ckpt):
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(toy_ckpt))
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT)
    at.session_state["ds_ncalib"] = 6
    at.session_state["ds_maxnew"] = 4
    at.session_state["ds_thr"] = "tau x k"
    at.session_state["ds_tasks"] = ["copy", "mc"]
    at.run()
    assert not at.exception, at.exception
    text = _text(at)
    assert "Shared decode subspace" in text and "Generation with and without the projection" in text
    assert len(at.get("plotly_chart")) >= 3
    assert "Shared subspace removed" in text
    at.slider(key="ds_neval").set_value(4)
    at.button(key="ds_run").click()
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert "ds_result" in at.session_state and len(at.dataframe) >= 1
    assert len(at.get("plotly_chart")) >= 4
