"""AppTest: Home and Models render without exceptions, with a real random checkpoint and with a missing model."""
from __future__ import annotations

from pathlib import Path

import pytest

import interplab

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

import interplab.app  # noqa: E402

APP_DIR = Path(interplab.app.__file__).resolve().parent
HOME = str(APP_DIR / "Home.py")
MODELS = str(APP_DIR / "pages" / "1_Models.py")
TIMEOUT = 180


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from interplab.testing import make_random_checkpoint

    return make_random_checkpoint("llama", tmp_path_factory.mktemp("app") / "llama", n_layers=2, d_model=32,
                                  n_heads=4, n_kv_heads=2, vocab=48, seed=0)


@pytest.fixture(scope="module")
def small_ckpt(tmp_path_factory):
    from interplab.testing import make_random_checkpoint

    return make_random_checkpoint("gpt2", tmp_path_factory.mktemp("app") / "gpt2", n_layers=1, d_model=16,
                                  n_heads=2, n_kv_heads=2, vocab=40, seed=0)


def _text(at) -> str:
    parts = []
    for kind in ("markdown", "title", "header", "subheader", "caption", "warning", "success", "info", "error"):
        parts += [str(getattr(e, "value", "")) for e in getattr(at, kind)]
    return "\n".join(parts)


def test_home_model_not_available(monkeypatch):
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", "zoo:no-such-organism")
    at = AppTest.from_file(HOME, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    text = _text(at)
    for page in ("Models", "Truth Scores", "DecodeShare", "CRH", "PCFG", "Hyperfitting", "SAE Training",
                 "Feature Browser"):
        assert f"**{page}.**" in text
    assert len(at.warning) == 1 and "not available" in at.warning[0].value
    assert "interplab zoo train no-such-organism" in text and "Local checkpoint" in text
    # the sidebar offers the checkpoint box and the backend choice
    assert at.text_input(key="model_path") is not None and at.selectbox(key="model_backend").value == "bridge"


def test_models_page_missing_path_explains(monkeypatch, tmp_path):
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(tmp_path / "no-checkpoint-here"))
    at = AppTest.from_file(MODELS, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    assert len(at.warning) == 1 and "no-checkpoint-here" in at.warning[0].value
    assert not at.dataframe  # the page stopped before running anything


def test_home_and_models_with_random_checkpoint(monkeypatch, tmp_path, ckpt, small_ckpt):
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(tmp_path / "missing"))
    at = AppTest.from_file(HOME, default_timeout=TIMEOUT).run()
    at.text_input(key="model_path").input(str(ckpt)).run()
    assert not at.exception, at.exception
    assert not at.warning and "2 layers" in at.success[0].value

    at = AppTest.from_file(MODELS, default_timeout=TIMEOUT).run()
    assert len(at.warning) == 1  # default model missing
    at.text_input(key="model_path").input(str(ckpt)).run()
    assert not at.exception, at.exception
    assert not at.warning
    arch = at.dataframe[0].value  # architecture table first, top tokens second
    got = dict(zip(arch["property"], arch["value"]))
    assert got["n_layers"] == "2" and got["n_heads (query)"] == "4" and got["n_kv_heads"] == "2"
    assert got["d_model"] == "32" and got["d_head"] == "8" and got["vocab"] == "48"
    assert at.text_input(key="models_prompt").value.startswith("w")  # vocabulary words, not <unk>
    top = at.dataframe[1].value
    assert len(top) == 10 and (top["prob"].diff().dropna() <= 1e-9).all()
    # the two charts (top tokens, attention) are rendered
    assert [c.key for c in at.get("plotly_chart")] == ["top_tokens__chart", "attention__chart"]

    # change layer/head and top-k: still no exception, table follows top_k
    at.number_input(key="models_layer").set_value(1).run()
    at.number_input(key="models_head").set_value(3).run()
    at.number_input(key="models_topk").set_value(5).run()
    assert not at.exception, at.exception
    assert len(at.dataframe[1].value) == 5
    assert "layer 1, head 3" in _text(at)

    # switching to a smaller model clamps layer/head into its range instead of failing
    at.text_input(key="model_path").input(str(small_ckpt)).run()
    assert not at.exception, at.exception
    assert at.number_input(key="models_layer").value == 0 and at.number_input(key="models_head").value == 1
    arch = at.dataframe[0].value
    assert dict(zip(arch["property"], arch["value"]))["architecture"] == "GPT2LMHeadModel"
    assert "layer 0, head 1" in _text(at)


def test_models_page_prompts_chat_organisms_through_their_template(monkeypatch):
    """Issue 15 item 2: toy-chat opens in the chat form (system + user turn through its template, no <bos>) and
    answers its task; a word the tokenizer does not know gets a notice naming it."""
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", "zoo:toy-chat")
    at = AppTest.from_file(MODELS, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    assert at.radio(key="models_form").value == "chat template"
    assert at.text_input(key="models_system").value == "copy"
    tokens = _text(at).split("**Tokens")[1]
    assert "`<|im_start|>`" in tokens and "`<bos>`" not in tokens
    assert at.dataframe[1].value["token"].iloc[0] == "s1"          # copy s1 s2 s3 -> first answer token s1
    assert not at.warning

    with pytest.warns(interplab.UnknownTokenWarning, match="zebra"):  # the Python warning, besides the notice
        at.text_input(key="models_prompt").input("s1 zebra sep").run()
    assert not at.exception, at.exception
    assert len(at.warning) == 1 and "'zebra'" in at.warning[0].value

    with pytest.warns(interplab.UnknownTokenWarning, match="zebra"):  # raw text: still unknown
        at.radio(key="models_form").set_value("raw text (+ <bos>)").run()
    assert not at.exception, at.exception
    assert "`<bos>`" in _text(at).split("**Tokens")[1]


def test_home_describes_every_page(monkeypatch):
    """A newcomer's map: the Home page has a paragraph for every page of the sidebar."""
    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", "zoo:toy-chat")
    at = AppTest.from_file(HOME, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    text = _text(at)
    for f in (APP_DIR / "pages").glob("*.py"):
        title = f.stem.split("_", 1)[1].replace("_", " ")
        assert f"**{title}.**" in text, f"Home has no paragraph for the {title} page"


def test_every_page_gets_its_model_from_page_model():
    """Issue 26 §4: a page takes the sidebar's model through widgets.page_model (no page runs the picker or loads
    the picked model itself); require_model remains for a page's second model (a PR reference, a validation
    organism, Hyperfitting's target)."""
    import re

    pages = sorted((APP_DIR / "pages").glob("*.py"))
    own = {p.name: re.findall(r"\b(model_picker|picked_device_dtype|try_get_model)\(", p.read_text()) for p in pages}
    assert {k: v for k, v in own.items() if v} == {}
    uses = [p.name for p in pages if "page_model(" in p.read_text()]
    assert len(uses) == len(pages) - 1, uses   # all but Runs (no model); Hyperfitting's base is the sidebar's
