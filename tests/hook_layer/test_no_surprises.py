"""Issue 49, "no silent surprises": a setting with no effect raises, what a plain string became is visible (the
rendered prompt on every output, a one-time notice naming the template's text), padding is never read by
accident (zeros in the dense cache, real-token readers beside it), and reprs say what runs."""
from __future__ import annotations

import warnings

import pytest
import torch

import interplab
from interplab.core.errors import ChatTemplateNotice, InputError
from interplab.interventions import Steer


@pytest.fixture(scope="module")
def chat():
    return interplab.load_model("zoo:toy-chat", device="cpu")


def test_temperature_under_greedy_raises(chat):
    with pytest.raises(InputError, match="no effect under greedy"):
        chat.generate("s1 s2 sep", max_new_tokens=2, temperature=0.7)
    chat.generate("s1 s2 sep", max_new_tokens=2, temperature=1.0)               # the neutral value is accepted
    a = chat.generate("s1 s2 sep", max_new_tokens=4, greedy=False, temperature=0.7, seed=3)
    b = chat.generate("s1 s2 sep", max_new_tokens=4, greedy=False, temperature=0.7, seed=3)
    assert a.text == b.text


def test_template_notice_once_and_rendered_prompts():
    m = interplab.load_model("zoo:toy-chat", device="cpu")      # a fresh model: the notice is per model
    with pytest.warns(ChatTemplateNotice, match="user turns of its chat template") as rec:
        out = m.run(["s1 s2 sep", "s3 sep"])
    assert len([w for w in rec if w.category is ChatTemplateNotice]) == 1
    assert all("<|im_start|>" in p and "user" in p for p in out.prompts)
    assert out.prompts[0].rstrip().endswith("assistant") or "assistant" in out.prompts[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.run("s1 sep")                                          # shown once per model
        m.run("s1 sep", chat=False)                              # raw text is never templated
    gen = m.generate("s1 s2 sep", max_new_tokens=2)
    assert gen.prompts == m.run("s1 s2 sep").prompts
    raw = m.run("s1 sep", chat=False)
    assert "<|im_start|>" not in raw.prompts[0]


def test_no_notice_for_a_raw_model():
    m = interplab.load_model("zoo:toy-base", device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.run("s1 s2 sep")


def test_padding_is_zero_in_the_dense_cache(chat):
    out = chat.run(["s1 s2 s3 s4 s5 s6 sep", "s1 sep"], capture=["resid_post.1", "attn_pattern.0"],
                   chat=False)
    real = out.cache.real_mask
    assert not bool(real.all())
    x, raw = out.cache["resid_post.1"], out.cache.raw("resid_post.1")
    assert bool((x[~real] == 0).all()) and bool((raw[~real] != 0).any())
    assert torch.equal(x[real], raw[real])
    pat = out.cache["attn_pattern.0"]                            # [b, h, q, k]: padding query rows are zero
    assert bool((pat.permute(0, 2, 1, 3)[~real] == 0).all())
    want = torch.stack([raw[i][real[i]].mean(0) for i in range(2)])
    torch.testing.assert_close(out.cache.mean("resid_post.1"), want, rtol=1e-6, atol=1e-6)
    assert out.cache["resid_post.1"] is out.cache["resid_post.1"]   # built once per site
    torch.testing.assert_close(out.cache.last("resid_post.1"), raw[:, -1])


def test_reprs_say_what_runs():
    s = Steer("resid_post.2", torch.ones(4), positions="decode")
    assert "phases=('decode',)" in repr(s)
    assert "phases=('prefill',)" in repr(Steer("resid_post.2", torch.ones(4), positions="prompt"))


def test_token_helpers(chat):
    assert chat.to_str_tokens([chat.token_id("s1")]) == [chat.tokenizer.decode([chat.token_id("s1")])]
    with pytest.raises(InputError, match="not a single token"):
        chat.token_id("s1 s2")
    toks = chat.to_str_tokens("s1 s2 sep", chat=False)
    assert len(toks) == chat.tokenize("s1 s2 sep", chat=False).shape[1]


def test_mean_can_skip_the_first_token(chat):
    out = chat.run(["s1 s2 s3 s4 sep", "s1 s2 sep"], capture=["resid_post.1"], chat=False)
    raw = out.cache.raw("resid_post.1")
    real = out.cache.real_mask
    want = torch.stack([raw[i][real[i]][1:].mean(0) for i in range(2)])
    torch.testing.assert_close(out.cache.mean("resid_post.1", skip_first=1), want, rtol=1e-6, atol=1e-6)
    with pytest.raises(InputError, match="no token left"):
        out.cache.mean("resid_post.1", skip_first=10)
