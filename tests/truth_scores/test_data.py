"""CtxMem items for the Truth-Score pipeline: labels, evidence positions, formats."""
from __future__ import annotations

import numpy as np

from interplab.data.toy_vocab import build_toy_tokenizer
from interplab.probes.truth.data import ctxmem_counterfactual_set, ctxmem_truth_set


def test_truth_set_labels_and_evidence_positions_both_formats():
    tok = build_toy_tokenizer()
    for fmt in ("raw", "chat"):
        items = ctxmem_truth_set(40, seed=3, fmt=fmt, tokenizer=tok)
        assert {it["label"] for it in items} == {0, 1}
        for it in items:
            ids = tok(it["text"])["input_ids"] if fmt == "raw" else it["text"]
            if fmt == "chat":
                assert tok.convert_ids_to_tokens(ids[:1]) == ["<|im_start|>"]  # no <bos> before the template
            words = tok.convert_ids_to_tokens(ids)
            e_pos, v_pos = it["evidence"]
            assert words[e_pos] == it["query_entity"] and v_pos == e_pos + 1
            cand = words[words.index("cand") + 1]
            assert it["label"] == int(cand == words[v_pos])  # gold iff the candidate is the context's value
            assert (it["candidate_kind"] == "context") == bool(it["label"])


def test_counterfactual_set_contradicts_memory():
    items = ctxmem_counterfactual_set(30, seed=2)
    assert all(it["context_value"] != it["memory_value"] for it in items)
    words = [it["text"].split() for it in items]
    assert all(w[-1] == "ans" and w[-2] == it["query_entity"] and it["context_value"] in w
               for w, it in zip(words, items))
    chat = ctxmem_counterfactual_set(5, seed=2, fmt="chat")
    assert all(isinstance(it["text"], list) for it in chat)
    assert np.mean([len(it["text"]) for it in chat]) > np.mean([len(w) for w in words[:5]])
