"""The shipped world facts and the counterfactual-context Truth-Score set built from them (issue 27 §1); no model:
`known_facts` runs on a stub whose replies are scripted here."""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from interplab.core.errors import ConfigError, DataError
from interplab.data.adapters.halueval import probe_text
from interplab.data.scoring import normalise_words
from interplab.data.world_facts import (COLUMNS, RELATIONS, closed_book_prompt, counterfactual_items, fact_sentence,
                                        first_named, generation_prompt, known_facts, load_facts, verification_rows)


@pytest.fixture(scope="module")
def facts():
    return load_facts()


@pytest.fixture(scope="module")
def items(facts):
    return counterfactual_items(facts, seed=0)


def test_shipped_facts_are_large_varied_and_unique(facts):
    assert list(facts.columns) == list(COLUMNS)
    assert len(facts) >= 450
    counts = facts["relation"].value_counts()
    assert len(counts) >= 6 and set(counts.index) <= set(RELATIONS)
    assert (counts >= 40).all(), counts.to_dict()
    assert not facts.duplicated(["relation", "subject"]).any()
    assert (facts["object"].str.split().str.len() <= 3).all()
    assert facts.loc[(facts.relation == "capital") & (facts.subject == "France"), "object"].item() == "Paris"


def test_relation_filter(facts):
    sub = load_facts(["capital", "author"])
    assert set(sub["relation"]) == {"capital", "author"}
    assert len(sub) == facts["relation"].isin(["capital", "author"]).sum()
    with pytest.raises(ConfigError, match="planet"):
        load_facts(["planet"])


def test_counterfactual_is_another_object_of_the_same_relation(facts, items):
    assert len(items) == len(facts)
    objects = {rel: set(g["object"]) for rel, g in facts.groupby("relation")}
    for it, row in zip(items, facts.itertuples()):
        assert (it["relation"], it["subject"], it["memory_value"]) == (row.relation, row.subject, row.object)
        assert normalise_words(it["context_value"]) != normalise_words(it["memory_value"])
        assert it["context_value"] in objects[it["relation"]]
        sentences = [s.rstrip(".") for s in it["context"].split(". ")]
        assert 2 <= len(sentences) <= 3
        # the counterfactual sentence is in the context once; no sentence states the memory value
        cf = fact_sentence(it["relation"], it["subject"], it["context_value"])
        assert it["context"].count(cf) == 1
        assert sum(s.endswith(" " + it["context_value"]) for s in sentences) == 1
        assert not any(s.endswith(" " + it["memory_value"]) for s in sentences)
        assert it["question"].endswith("?")


def test_counterfactuals_are_seeded(facts, items):
    again = counterfactual_items(facts, seed=0)
    other = counterfactual_items(facts, seed=1)
    assert again == items
    assert [i["context_value"] for i in other] != [i["context_value"] for i in items]
    assert [i["context"] for i in other] != [i["context"] for i in items]


def test_verification_rows_pair_context_and_memory(items):
    rows = verification_rows(items, seed=0)
    assert len(rows) == 2 * len(items)
    assert {r["label"] for r in rows} == {0, 1}
    assert sum(r["label"] for r in rows) == len(items)
    by_item = {it["index"]: it for it in items}
    for r in rows:
        it = by_item[r["index"]]
        want = it["context_value"] if r["label"] == 1 else it["memory_value"]
        assert r["answer"] == want
        assert r["candidate_kind"] == ("context" if r["label"] == 1 else "memory")
        assert r["knowledge"] == it["context"] and r["question"] == it["question"]
        text = probe_text(r["knowledge"], r["question"], r["answer"])
        assert it["context_value"] in text.split("\n\nQuestion:")[0]
    # a prefix mixes relations and labels
    head = rows[:40]
    assert len({r["relation"] for r in head}) >= 3 and sum(r["label"] for r in head) == 20
    assert verification_rows(items, seed=0) == rows
    assert verification_rows(items, seed=1) != rows


def test_bad_csv_names_the_missing_column(tmp_path):
    p = tmp_path / "facts.csv"
    pd.DataFrame({"relation": ["capital"], "subject": ["France"], "answer": ["Paris"]}).to_csv(p, index=False)
    with pytest.raises(DataError, match="object") as err:
        load_facts(path=p)
    assert "facts.csv" in str(err.value)


def test_bad_csv_duplicates_and_unknown_relations(tmp_path):
    p = tmp_path / "dup.csv"
    p.write_text("relation,subject,object\ncapital,France,Paris\ncapital,France,Lyon\n")
    with pytest.raises(DataError, match="duplicate"):
        load_facts(path=p)
    p.write_text("relation,subject,object\nplanet_order,Mars,4\n")
    with pytest.raises(DataError, match="planet_order"):
        load_facts(path=p)


def test_first_named():
    caps = ["Paris", "Rome", "Mexico City", "Bogota"]
    assert first_named("The capital of France is Paris.", "France", caps) == "Paris"
    assert first_named("Rome, or maybe Paris", "France", caps) == "Rome"
    assert first_named("The capital of Colombia is Bogotá.", "Colombia", caps) == "Bogota"
    assert first_named("The capital of Mexico is Mexico City.", "Mexico", caps) == "Mexico City"
    assert first_named("Parisian food\nParis", "France", caps) is None   # first line only, whole words
    # an echo of the subject is not an answer
    assert first_named("South Africa is in Africa.", "South Africa", ["Africa", "Europe"]) == "Africa"
    assert first_named("South Africa is a country.", "South Africa", ["Africa", "Europe"]) is None
    # a possessive 's is not sulfur's symbol
    assert first_named("Hydrogen's symbol is H.", "hydrogen", ["H", "S"]) == "H"


class _Tok:
    chat_template = "chatml"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert not tokenize and add_generation_prompt
        return f"<user>{messages[0]['content']}</user><assistant>"

    def decode(self, toks, skip_special_tokens=True):
        return toks


def test_prompts(items, facts):
    msg = generation_prompt(items[0])
    assert msg.startswith("Answer with the answer only.\n\nContext: ")
    assert msg.endswith(items[0]["question"] + "\nAnswer:")                 # a base model's cue
    plain = msg.removesuffix("\nAnswer:")
    assert generation_prompt(items[0], _Tok()) == f"<user>{plain}</user><assistant>"
    row = facts.iloc[0]
    assert closed_book_prompt(row) == f"Answer with the answer only.\n\nQuestion: {items[0]['question']}\nAnswer:"
    assert closed_book_prompt(row, SimpleNamespace(chat_template=None)) == closed_book_prompt(row)


def test_known_facts_on_a_stub_model(facts):
    sub = facts[facts["relation"] == "capital"].head(3).reset_index(drop=True)
    replies = {sub.subject[0]: f"The capital of {sub.subject[0]} is {sub.object[0]}.",
               sub.subject[1]: f"I think {sub.object[2]}.",
               sub.subject[2]: "I do not know."}
    calls = []

    def generate(prompts, max_new_tokens, return_logits, chat):
        calls.append((len(prompts), max_new_tokens, chat))
        out = [next(v for k, v in replies.items() if f"capital of {k}?" in p) for p in prompts]
        return SimpleNamespace(new_tokens=out)

    model = SimpleNamespace(tokenizer=_Tok(), generate=generate)
    df = known_facts(model, sub, max_new_tokens=5, batch_size=2)
    assert calls == [(2, 5, False), (1, 5, False)]
    assert df["known"].tolist() == [True, False, False]
    assert df["named"].tolist()[:2] == [sub.object[0], sub.object[2]]
    assert list(df.columns) == ["relation", "subject", "object", "reply", "named", "known"]


def test_in_context_distractors_are_same_relation_and_change_nothing_else(facts):
    from interplab.data.scoring import normalise_words
    from interplab.data.world_facts import counterfactual_items, fact_sentence, verification_rows

    plain = counterfactual_items(facts, seed=3)
    dis = counterfactual_items(facts, seed=3, distractor=True)
    truth = {(r, s): o for r, s, o in facts.itertuples(index=False)}
    for a, b in zip(plain, dis):
        assert {k: a[k] for k in a if k != "context"} == {k: b[k] for k in a if k != "context"}
        v = b["distractor_value"]
        assert truth[(b["relation"], b["distractor_subject"])] == v          # a true fact ...
        assert normalise_words(v) not in {normalise_words(b["memory_value"]), normalise_words(b["context_value"])}
        sent = fact_sentence(b["relation"], b["distractor_subject"], v)
        assert sent in b["context"] and b["context"].replace(" " + sent, "").replace(sent + " ", "") == a["context"]
    rows = verification_rows(dis[:20], seed=1)
    assert len(rows) == 60 and sum(r["label"] for r in rows) == 20
    assert {r["candidate_kind"] for r in rows} == {"context", "memory", "distractor"}
    assert verification_rows(plain[:20], seed=1) == [r for r in verification_rows(plain[:20], seed=1)]
