"""Adapters, file reading and scoring on fixtures written here in each source's real field names and shapes
(made up, not copied from the datasets)."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from interplab.core.errors import DataError, InputError
from interplab.data import files
from interplab.data.adapters import chat_messages, crh_concepts, decodeshare_pool as pool, halueval, text_corpus
from interplab.data.scoring import (Accuracy, HaluEvalMetrics, accuracy, answer_correct, final_answer_span, halueval_metrics, parse_choice,
                                    parse_final_answer, parse_halueval, parse_number)


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


HALU_QA = [{"knowledge": f"K{i} is a city.", "question": f"Where is K{i}?", "right_answer": f"R{i}",
            "hallucinated_answer": f"H{i}"} for i in range(300)]


# ----------------------------------------------------------------------------------------------- files
@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet", "arrow"])
def test_read_records_every_format(tmp_path, fmt):
    df = pd.DataFrame({"text": ["a", "b", "c"], "label": [1, 0, 1]})
    p = tmp_path / f"d.{fmt}"
    if fmt == "jsonl":
        df.to_json(p, orient="records", lines=True)
    elif fmt == "json":
        df.to_json(p, orient="records")
    elif fmt == "csv":
        df.to_csv(p, index=False)
    elif fmt == "parquet":
        df.to_parquet(p)
    else:
        import pyarrow as pa

        t = pa.Table.from_pandas(df, preserve_index=False)
        with pa.OSFile(str(p), "wb") as sink, pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
    rows = list(files.read_records(p))
    assert [r["text"] for r in rows] == ["a", "b", "c"]
    assert [int(r["label"]) for r in rows] == [1, 0, 1]
    assert len(list(files.read_records(p, limit=2))) == 2


def test_read_records_streams_lazily(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps({"text": "ok"}) + "\n" + "{not json\n")
    it = files.read_records(p)
    assert next(it) == {"text": "ok"}  # the broken second line is not read yet
    with pytest.raises(DataError, match="line 2"):
        next(it)


def test_shuffle_is_seeded_and_a_permutation():
    a = list(files.shuffled(range(50), seed=3, buffer_size=8))
    assert sorted(a) == list(range(50)) and a != list(range(50))
    assert a == list(files.shuffled(range(50), seed=3, buffer_size=8))
    assert a != list(files.shuffled(range(50), seed=4, buffer_size=8))


def test_offline_hub_fails_fast_naming_the_local_route(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(files.HubUnavailableError, match=r"to_json.*data=path"):
        list(halueval.truth_probe_items(limit=2))
    for task in pool.POOL_TASKS:
        with pytest.raises(files.HubUnavailableError, match=pool.POOL_TASKS[task].hub):
            next(pool.pool_examples(task))
    for fn in (lambda: next(chat_messages.chat_dialogues()), lambda: next(text_corpus.texts()),
               lambda: next(crh_concepts.alpaca_questions())):
        with pytest.raises(files.HubUnavailableError):
            fn()
    assert issubclass(files.HubUnavailableError, DataError)


def test_require_columns_names_the_missing_one():
    with pytest.raises(DataError, match="missing column 'label'"):
        files.require_columns(["text"], ["text", "label"], source="x.csv")


# ----------------------------------------------------------------------------------------------- HaluEval
def test_halueval_probe_template_and_split(tmp_path):
    p = _jsonl(tmp_path / "qa_data.jsonl", HALU_QA)
    items = list(halueval.truth_probe_items(p, split="probe"))
    assert len(items) == 292  # the repo's --max_samples 292
    it0 = items[0]
    ans = "R0" if it0["label"] == 1 else "H0"
    assert it0["text"] == f"Context:\nK0 is a city.\n\nQuestion: Where is K0?\nAnswer: {ans}"
    labels = [i["label"] for i in items]
    assert 0.35 < sum(labels) / len(labels) < 0.65  # the answer coin is balanced
    assert labels == [i["label"] for i in halueval.truth_probe_items(p, split="probe")]  # deterministic
    remain = list(halueval.truth_probe_items(p, split="remain"))
    assert len(remain) == 8 and remain[0]["index"] == 292
    both = list(halueval.truth_probe_items(p, split="probe", answer="both", limit=4))
    assert [b["label"] for b in both] == [1, 0, 1, 0]


def test_halueval_eval_prompt_exact(tmp_path):
    p = _jsonl(tmp_path / "a.jsonl", [{"knowledge": "Paris is in France.", "question": "Where is Paris?",
                                       "selected_answer": "Germany", "ground_truth": "Yes"}])
    it = next(halueval.eval_items(p, split="all"))
    assert it["prompt"] == ("USER: You are a huallucination detector. You MUST determine if the provided answer "
                            "contains hallucination or not for the question based on the world knowledge. The "
                            "answer you provided MUST be Yes or No.\n\n#Knowledge:Paris is in France.\n\n"
                            "#Question#: Where is Paris?\n#Answer#: Germany ASSISTANT:")
    assert it["ground_truth"] == "yes"


def test_halueval_setd_schema_and_bad_rows(tmp_path):
    p = _jsonl(tmp_path / "setD.jsonl", [{"context": "c", "question": "q", "answer": "a", "label": "gold"},
                                         {"context": "c", "question": "q", "answer": "b", "label": "hallucinated"}])
    assert [i["label"] for i in halueval.truth_probe_items(p, split="all")] == [1, 0]
    bad = _jsonl(tmp_path / "bad.jsonl", [{"question": "q"}])
    with pytest.raises(DataError, match="right_answer"):
        list(halueval.truth_probe_items(bad, split="all"))


@pytest.mark.parametrize("reply,parsed", [
    ("Yes", "yes"), ("yes.", "yes"), ("No, it is fine", "no"), ("  NO", "no"), ("Yesterday", "unknown"),
    ("I think yes", "unknown"), ("", "unknown"), ("Nope", "unknown"), ("no.", "no")])
def test_parse_halueval_regex(reply, parsed):
    assert parse_halueval(reply) == parsed


def test_halueval_metrics_unknown_modes():
    replies = ["Yes", "No", "maybe", "Yes", "??"]
    gt = ["yes", "no", "yes", "no", "no"]
    repo = halueval_metrics(replies, gt, unknown="no")  # maybe->no (wrong), ??->no (right)
    assert isinstance(repo, HaluEvalMetrics) and repo["accuracy"] == pytest.approx(3 / 5)
    assert repo["unknown_rate"] == pytest.approx(2 / 5)
    assert repo["precision"] == pytest.approx(1 / 2) and repo["recall"] == pytest.approx(1 / 2)
    assert repo["f1"] == pytest.approx(0.5)
    assert repo["yes_ratio_gt_repo"] == pytest.approx(2 / 5)
    wrong = halueval_metrics(replies, gt, unknown="wrong")
    assert wrong["accuracy"] == pytest.approx(2 / 5)
    drop = halueval_metrics(replies, gt, unknown="drop")
    assert drop["n_scored"] == 3 and drop["accuracy"] == pytest.approx(2 / 3)
    with pytest.raises(InputError):
        halueval_metrics(["yes"], ["maybe"])


# ----------------------------------------------------------------------------------------------- DecodeShare pool
POOL_FIXTURES = {
    "gsm8k": {"question": "Tom has 3 apples and buys 1,200 more. How many?", "answer": "3+1200=1203\n#### 1,203"},
    "commonsenseqa": {"id": "x", "question": "Where do fish live?", "question_concept": "fish",
                      "choices": {"label": ["A", "B", "C", "D", "E"], "text": ["sea", "sky", "car", "tree", "desk"]},
                      "answerKey": "A"},
    "strategyqa": {"qid": "q1", "term": "t", "description": "d", "question": "Can fish fly?", "answer": False,
                   "facts": "f"},
    "aqua": {"question": "2+2?", "options": ["A)3", "B)4", "C)5", "D)6", "E)7"], "rationale": "r", "correct": "B"},
    "arc_challenge": {"id": "a", "question": "Which is hot?",
                      "choices": {"text": ["ice", "fire", "snow", "rain"], "label": ["1", "2", "3", "4"]},
                      "answerKey": "2"},
    "openbookqa": {"id": "o", "question_stem": "The sun is a", "choices": {"text": ["star", "moon", "rock", "gas"],
                                                                           "label": ["A", "B", "C", "D"]},
                   "answerKey": "A"},
    "qasc": {"id": "q", "question": "What do plants need?", "choices": {"text": list("abcdefgh"),
                                                                       "label": list("ABCDEFGH")},
             "answerKey": "H", "fact1": "f1", "fact2": "f2", "combinedfact": "cf", "formatted_question": "fq"},
    "boolq": {"question": "is the sky blue", "answer": True, "passage": "The sky is blue."},
    "piqa": {"goal": "Open a jar", "sol1": "twist the lid", "sol2": "bake it", "label": 0},
    "logiqa": {"context": "All A are B.", "query": "Which follows?", "options": ["w", "x", "y", "z"],
               "correct_option": 2},
}
GOLDS = {"gsm8k": "1203", "commonsenseqa": "A", "strategyqa": "No", "aqua": "B", "arc_challenge": "B",
         "openbookqa": "A", "qasc": "H", "boolq": "A", "piqa": "A", "logiqa": "C"}


def test_pool_covers_the_spec_tasks():
    assert set(pool.H1_TASKS) | set(pool.LOTO_TASKS) == set(pool.POOL_TASKS) == set(POOL_FIXTURES)


@pytest.mark.parametrize("task", sorted(POOL_FIXTURES))
def test_pool_task_schema_templates_gold(tmp_path, task):
    p = _jsonl(tmp_path / f"{task}.jsonl", [POOL_FIXTURES[task]] * 12)
    exs = list(pool.pool_examples(task, p, split="calib", seed=None))
    assert len(exs) == 12
    assert {e.gold for e in exs} == {GOLDS[task]}
    assert {e.template for e in exs} == {0, 1, 2}  # 12 ex_ids hit all three templates
    for e in exs:
        assert e.template == pool.template_id(e.ex_id, 1234)
        assert "Final answer" in e.prompt
    e0 = next(pool.pool_examples(task, p, template=0, seed=None))
    if task == "gsm8k":
        assert e0.prompt == ("Question: Tom has 3 apples and buys 1,200 more. How many?\nLet's think step by step.\n"
                             "At the end, write exactly one line in the format: \"Final answer: <number>\".\n")
    if task == "aqua":  # prefixes stripped, the answer prefix forced as in the reference
        assert "A) 3\nB) 4" in e0.prompt and "A)3" not in e0.prompt and e0.prompt.endswith("\nFinal answer:")
    if task == "arc_challenge":
        assert e0.prompt == ("Question: Which is hot?\nChoices:\nA) ice\nB) fire\nC) snow\nD) rain\nReason step by "
                             "step.\nAt the end, write exactly one line: \"Final answer: <A/B/C/D>\".\n")
    if task == "boolq":
        assert e0.prompt.startswith("Question: Passage: The sky is blue.\nQuestion: is the sky blue\nChoices:\n"
                                    "A) Yes\nB) No")


def test_pool_shuffle_keeps_the_gold_option(tmp_path):
    p = _jsonl(tmp_path / "csqa.jsonl", [POOL_FIXTURES["commonsenseqa"]] * 10)
    for e in pool.pool_examples("commonsenseqa", p, shuffle_choices=True, seed=None):
        assert e.options[pool.LETTERS.index(e.gold)] == "sea"


def test_pool_missing_field_names_schema(tmp_path):
    p = _jsonl(tmp_path / "g.jsonl", [{"question": "q"}])
    with pytest.raises(DataError, match="answer"):
        next(pool.pool_examples("gsm8k", p))


@pytest.mark.parametrize("text,kind,letters,out", [
    ("so 3+4=7.\nFinal answer: 1,234.50", "numeric", "", "1234.5"),
    ("Final answer: 12\nmore text\nFinal answer: 13", "numeric", "", "13"),
    (" 42 apples\nbecause", "numeric", "", "42"),
    ("no numbers here", "numeric", "", ""),
    ("Final answer: Yes", "yesno", "", "YES"),
    ("final ANSWER:false", "yesno", "", "NO"),
    ("Final answer: (C)", "mc", "ABCD", "C"),
    ("Final answer: option b", "mc", "ABCD", "B"),
    ("Final answer: 2", "mc", "ABCD", "B"),
    # the reference's last resort (a choice letter in the first 32 characters) reads the A of "FINAL" when the
    # stated letter is out of range: pinned, faithful (docs/data.md notes it)
    ("Final answer: E", "mc", "ABCD", "A"),
    ("Final answer: E", "mc", "ABCDE", "E"),
    ("", "mc", "ABCD", ""),
])
def test_final_answer_parsing(text, kind, letters, out):
    assert parse_final_answer(text, kind, letters or "ABCDE") == out


def test_final_answer_scoring():
    assert final_answer_span("a\nFinal answer: B\n") == "B"
    assert parse_number("x -3.0") == "-3" and parse_choice("", "AB") == ""
    assert answer_correct("Final answer: 1203", "1203", "numeric")
    assert not answer_correct("Final answer:", "1203", "numeric")
    res = accuracy(["Final answer: A", "### 99 ###", "Final answer: B"], ["A", "A", "A"], "mc", "AB")
    assert isinstance(res, Accuracy) and res["accuracy"] == pytest.approx(1 / 3)
    assert res["extraction_rate"] == pytest.approx(2 / 3)


# ----------------------------------------------------------------------------------------------- CRH, chat, text
def test_crh_concepts_ship_as_package_data():
    rows = crh_concepts.paper_concepts()
    assert len(rows) == 100
    assert {g: sum(r["concept_genre"] == g for r in rows) for g in ("text", "code", "math")} == \
        {"text": 34, "code": 33, "math": 33}
    assert rows[0]["concept_id"] == 2 and "C/C++" in rows[0]["instruction"]
    assert min(r["concept_id"] for r in rows) == 2 and max(r["concept_id"] for r in rows) == 497
    assert crh_concepts.pair_text("q?", "r.") == "User: q?\nAssistant: r."
    assert crh_concepts.steer_prompt("q?") == "User: q?\nAssistant: "
    assert "mbzuai-nlp/CRH" in crh_concepts.CONCEPTS_SOURCE


def test_alpaca_questions_local(tmp_path):
    p = _jsonl(tmp_path / "alpaca.jsonl", [{"dataset": "helpful_base", "instruction": "What is 2+2?",
                                            "output": "4", "generator": "gpt4"}])
    assert list(crh_concepts.alpaca_questions(p)) == ["What is 2+2?"]


def test_chat_schemas(tmp_path):
    rows = [
        {"id": "t", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
         "source": "tulu"},
        {"conversation_hash": "h", "model": "gpt-4", "conversation": [
            {"role": "user", "content": "hey", "language": "English", "turn_identifier": 1},
            {"role": "assistant", "content": "yo", "language": "English", "turn_identifier": 1}]},
        {"id": "i", "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]},
        {"messages": json.dumps([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}])},
    ]
    p = _jsonl(tmp_path / "chat.jsonl", rows)
    dialogs = list(chat_messages.chat_dialogues(p))
    assert dialogs[1] == [{"role": "user", "content": "hey"}, {"role": "assistant", "content": "yo"}]
    assert dialogs[2][1] == {"role": "assistant", "content": "a"}
    assert dialogs[3][0]["content"] == "x"
    with pytest.raises(DataError, match="no chat field"):
        chat_messages.to_messages({"text": "x"})


def test_text_corpus_filters_wikitext_headings(tmp_path):
    p = _jsonl(tmp_path / "wiki.jsonl", [{"text": ""}, {"text": " = Valkyria = \n"}, {"text": " The game is fun . \n"}])
    assert list(text_corpus.texts(p)) == ["The game is fun ."]
    with pytest.raises(DataError, match="'body'"):
        list(text_corpus.texts(p, field="body"))


def test_pool_to_user_rows(tmp_path):
    from interplab.data.user import parse_choices

    p = _jsonl(tmp_path / "piqa.jsonl", [POOL_FIXTURES["piqa"]] * 2 + [POOL_FIXTURES["piqa"] | {"label": 1}])
    rows = list(pool.to_user_rows(pool.pool_examples("piqa", p, seed=None)))
    assert [r["answer"] for r in rows] == [" A", " A", " B"]
    assert rows[0]["choices"] == [" A", " B"] and rows[0]["prompt"].endswith("\nFinal answer:")
    assert parse_choices(rows[0]["choices"]) == [" A", " B"]
    g = _jsonl(tmp_path / "g.jsonl", [POOL_FIXTURES["gsm8k"]])
    assert "choices" not in next(pool.to_user_rows(pool.pool_examples("gsm8k", g, seed=None)))


def test_hub_route_streams_with_the_adapters_ids(monkeypatch):
    """Online, an adapter asks `datasets` for a streamed split of its hub id/config; a load failure becomes the typed
    error. (`datasets.load_dataset` is replaced: no network here.)"""
    import datasets

    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    calls = []

    def fake(name, config=None, *, split, streaming, revision=None):
        calls.append((name, config, split, streaming))
        return iter([POOL_FIXTURES["arc_challenge"]] * 3)

    monkeypatch.setattr(datasets, "load_dataset", fake)
    exs = list(pool.pool_examples("arc_challenge", split="eval", limit=2, seed=None))
    assert calls == [("allenai/ai2_arc", "ARC-Challenge", "test", True)] and len(exs) == 2

    def broken(*a, **k):
        raise ConnectionError("no route to host")

    monkeypatch.setattr(datasets, "load_dataset", broken)
    with pytest.raises(files.HubUnavailableError, match="no route to host.*to_json"):
        next(halueval.truth_probe_items())
