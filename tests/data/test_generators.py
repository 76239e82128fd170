"""Synthetic task generators: encoding parity with the HF tokenizer, semantics, metadata, determinism, splits."""
from __future__ import annotations

import numpy as np
import pytest

from interplab.data import toy_vocab as tv
from interplab.data.concepts import Concepts, concept_token_set
from interplab.data.ctxmem import CtxMem, CtxMemConfig, memory_map
from interplab.data.examples import Example, collate, encode, is_heldout, sample_examples
from interplab.data.multitask import Multitask
from interplab.data.toy_tasks import TOY_TASKS, toy_mixture, toy_task_fns
from interplab.core.errors import ConfigError


@pytest.fixture(scope="module")
def tok():
    return tv.build_toy_tokenizer()


def test_vocab_matches_tokenizer(tok):
    assert tok.get_vocab() == tv.toy_vocab()
    assert len(tv.toy_vocab()) < 200
    # every word of every task is a known single token (no <unk>)
    rng = np.random.default_rng(0)
    unk = tok.unk_token_id
    for fn in toy_task_fns().values():
        for _ in range(20):
            ex = fn(rng)
            assert unk not in tok(ex.text("raw")).input_ids


def test_encode_equals_tokenizer_both_formats(tok):
    rng = np.random.default_rng(1)
    V = tv.toy_vocab()
    for name, fn in toy_task_fns().items():
        for _ in range(5):
            ex = fn(rng)
            r = encode(ex, V, "raw")
            assert list(r.ids) == tok(ex.text("raw")).input_ids, name
            assert list(r.ids[:r.prompt_len]) == tok(ex.prompt).input_ids
            c = encode(ex, V, "chat")
            assert list(c.ids) == tok.apply_chat_template(ex.messages())["input_ids"], name
            gen = tok.apply_chat_template(ex.messages(with_response=False), add_generation_prompt=True)["input_ids"]
            assert list(c.ids[:c.prompt_len]) == gen
            # word_pos maps raw prompt words to the same token in both formats
            words = ex.prompt_words
            for i, w in enumerate(words):
                assert r.ids[r.word_pos[i]] == V[w] and c.ids[c.word_pos[i]] == V[w]


def test_chat_template_renders_expected_ids(tok):
    V = tv.toy_vocab()
    ex = Example("copy", ("copy",), ("s1", "s2", "sep"), ("s1", "s2"))
    expected = [4, V["system"], V["copy"], 5, 4, V["user"], V["s1"], V["s2"], V["sep"], 5,
                4, V["assistant"], V["s1"], V["s2"], 5]
    assert V["<|im_start|>"] == 4 and V["<|im_end|>"] == 5
    assert tok.apply_chat_template(ex.messages())["input_ids"] == expected
    assert list(encode(ex, V, "chat").ids) == expected


def test_ctxmem_semantics_and_metadata():
    cm = CtxMem()
    M = memory_map()
    assert sorted(M.values()) == sorted(tv.VALUES)  # a permutation
    rng = np.random.default_rng(0)
    n_in = 0
    for _ in range(300):
        ex = cm.generation(rng)
        m = ex.meta
        w = ex.prompt_words
        assert w[m["pos"]["query"]] == m["query_entity"] and w[m["pos"]["last"]] == tv.ANS
        if m["in_context"]:
            n_in += 1
            assert m["context_value"] != M[m["query_entity"]] and m["contradicts_memory"]
            assert ex.response == (m["context_value"],)
            assert w[m["pos"]["evidence_entity"]] == m["query_entity"]
            assert w[m["pos"]["evidence_value"]] == m["context_value"]
        else:
            assert m["query_entity"] not in [e for e, _ in m["pairs"]]
            assert ex.response == (M[m["query_entity"]],) and m["pos"]["evidence_entity"] is None
    assert 0.6 < n_in / 300 < 0.8
    labels, kinds = [], set()
    for _ in range(400):
        ex = cm.verification(rng)
        m = ex.meta
        w = ex.prompt_words
        assert m["label"] == int(m["candidate"] == m["context_value"])
        assert ex.response == ((tv.TRUE,) if m["label"] else (tv.FALSE,))
        assert w[m["pos"]["candidate"]] == m["candidate"] and w[m["pos"]["candidate"] - 1] == tv.CAND
        assert w[m["pos"]["query"]] == m["query_entity"] and w[-1] == tv.VER
        assert m["pos"]["candidate"] < m["pos"]["query"]  # candidate before the query (default layout)
        if m["candidate_kind"] == "memory":
            assert m["candidate"] == M[m["query_entity"]]
        if m["candidate_kind"] == "distractor":  # another pair's value: the "in the context?" shortcut fails
            assert m["candidate"] in dict(m["pairs"]).values() and m["candidate"] != m["context_value"]
        labels.append(m["label"])
        kinds.add(m["candidate_kind"])
    assert 0.4 < np.mean(labels) < 0.6 and kinds == {"context", "memory", "distractor", "random"}
    for layout, marker, offset in (("candidate_last", tv.CAND, 2), ("answer", tv.ANS, 2)):
        ex = CtxMem(CtxMemConfig(layout=layout)).verification(rng)
        assert ex.prompt_words[ex.meta["pos"]["candidate"] - 1] == marker
        assert ex.meta["pos"]["candidate"] == ex.meta["pos"]["query"] + offset
    with pytest.raises(ConfigError, match="layout"):
        CtxMem(CtxMemConfig(layout="sideways")).verification(rng)


def test_multitask_answers():
    mt = Multitask()
    rng = np.random.default_rng(0)
    sym = {s: i for i, s in enumerate(tv.SYMBOLS)}
    for _ in range(50):
        for t in ("copy", "rev", "sort", "inc", "mc"):
            ex = mt.example(t, rng)
            x = [sym[s] for s in ex.meta["x"]]
            y = list(ex.response)
            assert ex.system == (t,) and ex.user[-1] == tv.SEP
            if t == "copy":
                assert [sym[s] for s in y] == x
            elif t == "rev":
                assert [sym[s] for s in y] == x[::-1]
            elif t == "sort":
                assert [sym[s] for s in y] == sorted(x)
            elif t == "inc":
                assert [sym[s] for s in y] == [(i + 1) % 16 for i in x]
            else:
                assert y[0] == tv.ANS and len(y) == 2
                opts = ex.meta["options"]
                assert opts[tv.LETTERS.index(y[1])] == tv.SYMBOLS[max(x)]
                assert len(set(opts)) == 4
            if t != "mc":
                assert len(y) == len(x)


def test_concepts():
    co = Concepts()
    rng = np.random.default_rng(0)
    for _ in range(50):
        ex = co.instructed(rng)
        toks = set(concept_token_set(ex.meta["concept"]))
        assert ex.system == (tv.MENTION, ex.meta["concept"]) and toks & set(ex.response)
        assert set(ex.meta["concept_tokens"]) == toks
        no = co.plain(rng)
        all_concept = {t for ts in tv.CONCEPTS.values() for t in ts}
        assert not (set(no.response) & all_concept) and no.system == ()
    a, b = co.pair(rng, "animal")
    assert a.prompt == b.prompt and set(b.response) & set(tv.CONCEPTS["animal"])
    assert not set(a.response) & set(tv.CONCEPTS["animal"])


def test_determinism_and_heldout_split():
    fns = toy_task_fns()
    for name, fn in fns.items():
        a = sample_examples(fn, 20, seed=3, split="test")
        b = sample_examples(fn, 20, seed=3, split="test")
        assert [x.text() for x in a] == [x.text() for x in b], name
        assert all(is_heldout(x) for x in a)
    mix = toy_mixture({t: 1.0 for t in TOY_TASKS}, batch_size=64, seed=5)
    for step in (0, 7):
        assert not any(is_heldout(ex) for ex, _ in mix.examples(step))
        b1, b2 = mix(step), mix(step)
        assert all((b1[k] == b2[k]).all() for k in b1)
    assert not (mix(0)["input_ids"].shape == mix(1)["input_ids"].shape
                and (mix(0)["input_ids"] == mix(1)["input_ids"]).all())


def test_collate_loss_mask():
    V = tv.toy_vocab()
    rng = np.random.default_rng(0)
    exs = [toy_task_fns()["copy"](rng) for _ in range(4)]
    encs = [encode(e, V) for e in exs]
    b = collate(encs, V["<pad>"])
    for i, (e, enc) in enumerate(zip(exs, encs)):
        lm = b["loss_mask"][i]
        assert int(lm.sum()) == len(e.response) + 1
        assert b["input_ids"][i][lm].tolist() == [V[w] for w in e.response] + [V["<eos>"]]
        assert int(b["attention_mask"][i].sum()) == len(enc.ids)
