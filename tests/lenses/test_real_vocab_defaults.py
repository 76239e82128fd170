"""Issue 48: the lens pages' defaults on a model with a real byte-level BPE vocabulary (a tiny random Llama whose
tokenizer is trained here on a few sentences, so 'Ġ'/'Ċ' pieces exist as on SmolLM2): the default pair is the
fact pair with single-token answers and the patching metric is their logit difference; the Direction defaults read
16 different prompts; every page figure and the Models page's token list show text, never raw BPE pieces."""
from __future__ import annotations

import json

import pytest

import interplab
from interplab.probes.lenses.common import CAPITALS

RAW = ("Ġ", "Ċ")


@pytest.fixture(scope="module")
def bpe_model_dir(tmp_path_factory):
    from tokenizers import ByteLevelBPETokenizer
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from interplab.testing import make_config

    corpus = [f"The capital of {c} is the city of {a}.\n{a} is in {c}." for c, a in CAPITALS] * 30
    corpus += ["SmolLM is a small model.\nIt reads text.", "the cat sat on the mat"] * 30
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=700, min_frequency=2, special_tokens=["<s>", "</s>", "<pad>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>",
                                  pad_token="<pad>")
    cfg = make_config("llama", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, vocab=len(tok), n_ctx=64)
    cfg.initializer_range = 0.2
    import torch

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("bpe") / "llama-bpe"
    AutoModelForCausalLM.from_config(cfg).save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def bpe_model(bpe_model_dir):
    return interplab.load_model(str(bpe_model_dir))


def test_default_pair_is_the_fact_pair_with_single_token_answers(bpe_model):
    from interplab.probes.lenses import default_fact_pair, default_pair
    from interplab.probes.lenses.common import prompt_ids

    m = bpe_model
    assert "ĠParis" in m.tokenizer.get_vocab()                       # a byte-level vocabulary
    pair = default_fact_pair(m)
    assert (pair.clean, pair.corrupt) == ("The capital of France is the city of", "The capital of Italy is the city of")
    assert (pair.answer, pair.wrong) == (" Paris", " Rome")
    assert len(prompt_ids(m, pair.clean)) == len(prompt_ids(m, pair.corrupt))
    cleans = [default_pair(m, seed=s)[0] for s in range(16)]
    assert len(set(cleans)) == 16                                    # distinct contexts for the Direction page


def test_patching_default_metric_is_the_answers_logit_difference(bpe_model_dir, tmp_path):
    from interplab.experiments.registry import run_experiment
    from interplab.results.runs import load_run

    path = run_experiment("patching", {"model": str(bpe_model_dir), "sites": "resid_pre", "positions": "all",
                                       "attribution": False}, root=tmp_path)
    s = json.loads((path / "summary.json").read_text()) if (path / "summary.json").exists() else \
        load_run(path).json("summary")
    assert (s["answer"], s["wrong"]) == (" Paris", " Rome")


def test_direction_defaults_and_steering_units(bpe_model):
    from interplab.probes.lenses import collect_directions, default_direction, direction_dashboard
    from interplab.probes.lenses.common import fact_token_ids

    m = bpe_model
    d = default_direction(m)
    assert d.token == " Paris" and d.site == f"resid_post.{m.n_layers - 1}" and len(d.prompts) == 16
    dash = direction_dashboard(m, d.vector, d.site, list(d.prompts), steer_prompt=d.steer_prompt,
                               steer_scales=d.scales, relative_scales=True)
    assert dash.steer_unit > 1.0 and set(dash.steering) == {"0.0", "0.1", "0.2", "0.3"}
    assert dash.top_contexts["prompt"].nunique() > 1
    reg = collect_directions(m, d.site, runs=False, saes=False, unembedding=fact_token_ids(m))
    neigh = reg.neighbours(d.vector, k=10)
    assert neigh["cosine"].round(6).nunique() == len(neigh) == 10      # distinct neighbours, not one cosine


def test_next_token_report_shows_text(bpe_model):
    from interplab.probes.next_token import next_token_report, token_steer

    r = next_token_report(bpe_model, "The capital of France is", top_k=5)
    assert r.tokens[1] == " capital" and not any(p in "".join(r.tokens) for p in RAW)
    assert not any(p in "".join(r.top["token"]) for p in RAW)
    assert token_steer(bpe_model, " Paris", 0, 4.0).scale == 4.0     # the text of a token works as its piece


@pytest.mark.parametrize("page,buttons", [("1_Models.py", ()), ("11_Logit_Lens.py", ()),
                                          ("10_Patching.py", ()), ("13_Direction.py", ("dir_go",))])
def test_page_figures_show_no_bpe_pieces(bpe_model_dir, monkeypatch, tmp_path, page, buttons):
    pytest.importorskip("streamlit")
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    import interplab.app

    monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", str(bpe_model_dir))
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    at = AppTest.from_file(str(Path(interplab.app.__file__).parent / "pages" / page), default_timeout=240).run()
    for key in buttons:
        at.button(key=key).click().run()
    assert not at.exception, at.exception
    charts = [el.proto.spec for el in at.get("plotly_chart")]
    assert charts or page == "10_Patching.py"
    text = "\n".join(charts + [str(m.value) for m in at.markdown] + [str(c.value) for c in at.code])
    assert not [p for p in RAW if p in text], page


def test_patching_default_grid_fits_the_model(bpe_model_dir, monkeypatch, tmp_path):
    """The Patching page's default grid is one cell per position unless that is large: SmolLM2's chat-templated
    pair (42 tokens x 30 layers x 10 sites per layer = 12,600 cells, ~30 min) patches whole layers, heads only
    (resid_pre over all positions would restore the clean run by construction); a short prompt on a small model
    and the organisms keep every position and both sites."""
    pytest.importorskip("streamlit")
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    import interplab.app

    page = str(Path(interplab.app.__file__).parent / "pages" / "10_Patching.py")
    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    both = ["resid_pre", "attn_z"]
    for model, positions, sites in ((str(bpe_model_dir), "each", both), ("zoo:toy-chat", "each", both),
                                    ("real:smollm2-135m-instruct", "all", ["attn_z"])):
        monkeypatch.setenv("INTERPLAB_DEFAULT_MODEL", model)
        at = AppTest.from_file(page, default_timeout=240).run()
        assert not at.exception, at.exception
        assert at.selectbox(key="pt_positions").value == positions, model
        assert at.multiselect(key="pt_sites").value == sites, model
