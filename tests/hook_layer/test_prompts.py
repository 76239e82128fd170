"""One prompt path (issue 15, item 2): chat models read plain strings through their chat template, text and chat
forms of one conversation give the same ids and answers, raw organisms keep <bos> + text, and unknown words warn."""
from __future__ import annotations

import warnings

import pytest

import interplab
from interplab.core.errors import InputError, UnknownTokenWarning

CHAT = [{"role": "system", "content": "copy"}, {"role": "user", "content": "s1 s2 s3 sep"}]


@pytest.fixture(scope="module")
def chat_model():
    return interplab.load_model("zoo:toy-chat", device="cpu")


@pytest.fixture(scope="module")
def base_model():
    return interplab.load_model("zoo:toy-base", device="cpu")


def test_text_and_chat_forms_agree(chat_model):
    m = chat_model
    rendered = m.tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    ids_chat = m.tokenize([CHAT]).input_ids[0].tolist()
    assert ids_chat == m.apply_chat_template(CHAT)                      # the template's own ids
    assert m.tokenize(rendered).input_ids[0].tolist() == ids_chat       # rendered text: no <bos> added
    assert m.tokenize(CHAT).input_ids[0].tolist() == ids_chat           # one conversation, unbatched
    assert m.generate([CHAT], max_new_tokens=8).text == m.generate(rendered, max_new_tokens=8).text == ["s1 s2 s3"]
    # the old path (tokenizer <bos> + template text) is still reachable explicitly, and differs
    old = m.tokenize(rendered, chat=False).input_ids[0].tolist()
    assert old == [m.tokenizer.bos_token_id] + ids_chat
    assert m.generate(rendered, max_new_tokens=8, chat=False).text == ["s1 s1 s2 s3 s3"]


def test_plain_string_is_a_user_turn_on_a_chat_model(chat_model):
    m = chat_model
    assert m.chat_default
    user = [{"role": "user", "content": "s1 s2 s3 sep"}]
    assert m.tokenize("s1 s2 s3 sep").input_ids.tolist() == m.tokenize([user]).input_ids.tolist()
    assert m.tokenize(["s1 s2 s3 sep"], chat=False).input_ids[0, 0].item() == m.tokenizer.bos_token_id
    out = m.run(["s1 s2 sep", [*CHAT]], capture=["resid_post.0"])       # strings and chats mix in one batch
    assert out.cache.last("resid_post.0").shape == (2, m.d_model)


def test_raw_organisms_keep_text_with_bos(base_model):
    m = base_model
    assert m.is_chat and not m.chat_default                              # template carried, not trained on
    ids = m.tokenize("copy s1 s2 sep").input_ids[0].tolist()
    assert ids[0] == m.tokenizer.bos_token_id and len(ids) == 5
    assert m.generate("copy s1 s2 s3 sep", max_new_tokens=8).text == ["s1 s2 s3"]
    assert m.tokenize([CHAT]).input_ids[0].tolist() == m.apply_chat_template(CHAT)   # explicit chats still work


def test_chat_flags_are_checked(chat_model):
    pcfg = interplab.load_model("zoo:pcfg-L4", device="cpu")           # no chat template
    assert not pcfg.is_chat
    with pytest.raises(InputError, match="chat template"):
        pcfg.tokenize("a b", chat=True)
    with pytest.raises(InputError, match="chat=False"):
        chat_model.tokenize([CHAT], chat=False)


def test_unknown_tokens_are_named(chat_model):
    m = chat_model
    with pytest.warns(UnknownTokenWarning, match="'zebra'"):
        m.run("copy zebra s1 sep")
    assert m.unknown_tokens(["copy zebra s1 giraffe"]) == ["zebra", "giraffe"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.run("s1 s2 sep")                                                # known words: no warning
    assert m.unknown_tokens([[4, 5, 6]]) == []                           # ids are never checked
