"""The DecodeShare task pool (decodeshare.md §3, §5; reference `decodeshare/benchmark_dataloaders.py` @ 37208ab):
GSM8K, CSQA, StrategyQA, AQuA, ARC-C, OBQA, QASC, BoolQ, PIQA, LogiQA, each as prompts with three templates that end
in a `Final answer:` line, the gold answer and the forced-choice labels.

Template id = md5("{template_seed}|tmpl|{ex_id}")[:8] mod 3 (the reference's `stable_int_seed`), ex_id =
"{task}-{split}-{i}" with i the row's position in the stream; `template_id=0..2` pins one template. Choice
shuffling (off by default, as in the reference) is keyed to (seed, ex_id). `answer_prefix="\\nFinal answer:"`
appends the reference's answer prefix (its FC protocol teacher-forces it; AQuA always gets it in the reference, which
interplab keeps as `aqua_force_prefix=True`).

Per task: hub id (config), calibration / evaluation splits, real field names -> (question, options, gold), and the
answer kind (numeric / yesno / mc with its letters). Parse replies with `interplab.data.scoring`.
"""
from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from interplab.core.errors import ConfigError, DataError
from interplab.data.files import open_source

__all__ = ["POOL_TASKS", "H1_TASKS", "LOTO_TASKS", "NUMERIC_TEMPLATES", "YESNO_TEMPLATES", "MC_TEMPLATES",
           "ANSWER_PREFIX", "PoolTask", "PoolExample", "template_id", "build_prompt", "pool_examples", "to_user_rows"]

LETTERS = "ABCDEFGH"
ANSWER_PREFIX = "\nFinal answer:"

NUMERIC_TEMPLATES = (
    "Question: {q}\nLet's think step by step.\nAt the end, write exactly one line in the format: "
    "\"Final answer: <number>\".\n",
    "Solve the problem carefully.\nProblem: {q}\nShow your reasoning.\nAt the end, output one line: "
    "\"Final answer: <number>\".\n",
    "You are a math tutor.\nQuestion: {q}\nReason step by step.\nFinish with: \"Final answer: <number>\".\n",
)
YESNO_TEMPLATES = (
    "Question: {q}\nPlease reason step by step.\nAt the end, write exactly one line: \"Final answer: Yes\" or "
    "\"Final answer: No\".\n",
    "Decide whether the statement is true.\nQuestion: {q}\nExplain briefly.\nEnd with: \"Final answer: Yes\" or "
    "\"Final answer: No\".\n",
    "Question: {q}\nThink step by step.\nProvide a single final line: \"Final answer: Yes\" or "
    "\"Final answer: No\".\n",
)
MC_TEMPLATES = (
    "Question: {q}\nChoices:\n{choices}\nReason step by step.\nAt the end, write exactly one line: "
    "\"Final answer: <{letters}>\".\n",
    "Multiple-choice question:\n{q}\nOptions:\n{choices}\nThink step by step.\nFinish with one line: "
    "\"Final answer: <{letters}>\".\n",
    "Answer the question.\n{q}\n{choices}\nShow reasoning.\nConclude with: \"Final answer: <{letters}>\".\n",
)


@dataclass(frozen=True)
class PoolTask:
    """One pool task: hub id/config, its splits (calibration = train-like, evaluation = held out), answer kind,
    choice letters, the real fields it reads, and the row -> (question, options, gold) function."""
    name: str
    hub: str
    config: str | None
    calib_split: str
    eval_split: str
    kind: str
    fields: tuple
    extract: Callable[[dict], tuple]
    letters: str = ""


def _labels_texts(choices: Any) -> tuple[list[str], list[str]]:
    if isinstance(choices, dict) and "text" in choices:
        texts = [str(t) for t in choices["text"]]
        labels = [str(x).strip().upper() for x in choices.get("label", [])]
        return texts, labels if len(labels) == len(texts) else list(LETTERS[:len(texts)])
    raise DataError(f"choices must be {{'text': [...], 'label': [...]}}, got {type(choices).__name__}")


def _gold_letter(key: Any, labels: list[str]) -> str:
    k = str(key).strip().upper()
    if k in labels:
        return LETTERS[labels.index(k)]
    if k.isdigit():  # ARC has some numeric keys ("1".."4") with numeric labels handled above; else 1-based
        j = int(k)
        return LETTERS[j - 1] if 1 <= j <= len(labels) else ""
    return k if k in LETTERS[:len(labels)] else ""


def _mc_choices(question_key: str):
    def f(r):
        texts, labels = _labels_texts(r["choices"])
        return str(r[question_key]), texts, _gold_letter(r["answerKey"], labels)
    return f


def _gsm8k(r):
    m = re.search(r"####\s*([-+]?[\d,]+(?:\.\d+)?)", str(r["answer"]))
    gold = m.group(1).replace(",", "") if m else ""
    return str(r["question"]), None, gold


def _yes_no(v: Any) -> str:
    s = str(v).strip().lower()
    return {"true": "Yes", "1": "Yes", "yes": "Yes", "false": "No", "0": "No", "no": "No"}.get(s, "")


def _strategyqa(r):
    return str(r["question"]), None, _yes_no(r["answer"])


def _strip_prefix(opt: str) -> str:
    s, prev = str(opt).strip(), None
    while prev != s:  # AQuA options carry their own "A)" prefix; left in they leak the label under shuffling
        prev, s = s, re.sub(r"^\s*[A-Ea-e]\s*[\)\.\:\-]\s*", "", s).strip()
    return s


def _aqua(r):
    opts = [_strip_prefix(o) for o in list(r["options"])[:5]]
    return str(r["question"]), opts, str(r["correct"]).strip().upper()[:1]


def _boolq(r):
    gold = "A" if _yes_no(r["answer"]) == "Yes" else "B"
    return f"Passage: {r['passage']}\nQuestion: {r['question']}", ["Yes", "No"], gold


def _piqa(r):
    lab = str(r["label"]).strip()
    return str(r["goal"]), [str(r["sol1"]), str(r["sol2"])], {"0": "A", "1": "B"}.get(lab, "")


def _logiqa(r):
    ctx, q = str(r.get("context", "")).strip(), str(r["query"]).strip()
    qf = f"{ctx}\n\nQuestion: {q}" if ctx and ctx not in q else q
    opts = [str(o) for o in r["options"]]
    j = int(r["correct_option"])
    return qf, opts, LETTERS[j] if 0 <= j < len(opts) else ""


POOL_TASKS: dict[str, PoolTask] = {t.name: t for t in (
    PoolTask("gsm8k", "openai/gsm8k", "main", "train", "test", "numeric", ("question", "answer"), _gsm8k),
    PoolTask("commonsenseqa", "tau/commonsense_qa", None, "train", "validation", "mc",
             ("question", "choices", "answerKey"), _mc_choices("question"), "ABCDE"),
    PoolTask("strategyqa", "ChilleD/StrategyQA", None, "train", "test", "yesno", ("question", "answer"),
             _strategyqa),
    PoolTask("aqua", "deepmind/aqua_rat", "raw", "train", "test", "mc", ("question", "options", "correct"), _aqua,
             "ABCDE"),
    PoolTask("arc_challenge", "allenai/ai2_arc", "ARC-Challenge", "train", "test", "mc",
             ("question", "choices", "answerKey"), _mc_choices("question"), "ABCD"),
    PoolTask("openbookqa", "allenai/openbookqa", "main", "train", "test", "mc",
             ("question_stem", "choices", "answerKey"), _mc_choices("question_stem"), "ABCD"),
    PoolTask("qasc", "allenai/qasc", None, "train", "validation", "mc", ("question", "choices", "answerKey"),
             _mc_choices("question"), "ABCDEFGH"),
    PoolTask("boolq", "google/boolq", None, "train", "validation", "mc", ("question", "answer", "passage"), _boolq,
             "AB"),
    PoolTask("piqa", "ybisk/piqa", None, "train", "validation", "mc", ("goal", "sol1", "sol2", "label"), _piqa, "AB"),
    PoolTask("logiqa", "lucasmccabe/logiqa", None, "train", "validation", "mc",
             ("context", "query", "options", "correct_option"), _logiqa, "ABCD"),
)}
#: the paper's H1 pool and the H2 leave-one-task-out pool (decodeshare.md §3)
H1_TASKS = ("gsm8k", "commonsenseqa", "strategyqa", "aqua", "arc_challenge", "openbookqa", "qasc", "boolq", "piqa")
LOTO_TASKS = ("gsm8k", "commonsenseqa", "strategyqa", "aqua", "arc_challenge", "openbookqa", "qasc", "logiqa")


@dataclass
class PoolExample:
    """One prompt of the pool: task, ex_id, template id, prompt text, gold ('72', 'Yes'/'No' or a letter),
    answer kind, the forced-choice candidate labels (letters, or Yes/No), the options' texts."""
    task: str
    ex_id: str
    template: int
    prompt: str
    gold: str
    kind: str
    candidates: list[str]
    options: list[str] = field(default_factory=list)


def template_id(ex_id: str, template_seed: int = 1234, n: int = 3) -> int:
    """The reference's template choice: md5("{seed}|tmpl|{ex_id}") first 8 hex digits, mod n."""
    return int(hashlib.md5(f"{template_seed}|tmpl|{ex_id}".encode()).hexdigest()[:8], 16) % n


def build_prompt(kind: str, question: str, options: list[str] | None, template: int) -> str:
    """The prompt of one example under template 0, 1 or 2 (choices written as `A) text` lines)."""
    if not 0 <= template < 3:
        raise ConfigError(f"template must be 0, 1 or 2, got {template}")
    if kind == "numeric":
        return NUMERIC_TEMPLATES[template].format(q=question)
    if kind == "yesno":
        return YESNO_TEMPLATES[template].format(q=question)
    labels = LETTERS[:len(options or [])]
    lines = "\n".join(f"{lab}) {txt}" for lab, txt in zip(labels, options or []))
    return MC_TEMPLATES[template].format(q=question, choices=lines, letters="/".join(labels))


def _shuffle(options: list[str], gold: str, seed: int, ex_id: str) -> tuple[list[str], str]:
    rng = random.Random(int(hashlib.md5(f"{seed}|shuffle|{ex_id}".encode()).hexdigest()[:8], 16))
    idx = list(range(len(options)))
    rng.shuffle(idx)
    old = LETTERS.index(gold) if gold and gold in LETTERS[:len(options)] else None
    new_gold = LETTERS[idx.index(old)] if old is not None else ""
    return [options[i] for i in idx], new_gold


def pool_examples(task: str, source=None, *, split: str = "calib", limit: int | None = None, seed: int = 0,
                  template_seed: int = 1234, template: int | None = None, shuffle_choices: bool = False,
                  answer_prefix: str | None = None, aqua_force_prefix: bool = True,
                  require_gold: bool = True) -> Iterator[PoolExample]:
    """PoolExamples of `task` from the hub (its calibration or evaluation split) or a local file in the source's
    schema. split: 'calib', 'eval' or a split name. seed: buffer-shuffle seed of the row stream (None = source
    order). Rows without a usable gold are skipped when require_gold (the reference drops them for evaluation)."""
    if task not in POOL_TASKS:
        raise ConfigError(f"unknown pool task {task!r}; known: {sorted(POOL_TASKS)}")
    t = POOL_TASKS[task]
    split_name = {"calib": t.calib_split, "eval": t.eval_split}.get(split, split)
    n = 0
    for i, row in enumerate(open_source(source, hub=t.hub, config=t.config, split=split_name, seed=seed)):
        missing = [f for f in t.fields if f not in row]
        if missing:
            raise DataError(f"{task} row {i} is missing field(s) {missing} (has {sorted(row)}); the {task} schema "
                            f"is {list(t.fields)} ({t.hub})")
        question, options, gold = t.extract(row)
        if require_gold and not gold:
            continue
        ex_id = f"{task}-{split_name}-{i}"
        if options is not None and shuffle_choices:
            options, gold = _shuffle(options, gold, seed, ex_id)
        tid = template_id(ex_id, template_seed) if template is None else int(template)
        prompt = build_prompt(t.kind, question, options, tid)
        if answer_prefix is not None or (task == "aqua" and aqua_force_prefix):
            prompt = prompt.rstrip() + (answer_prefix if answer_prefix is not None else ANSWER_PREFIX)
        cands = list(LETTERS[:len(options)]) if options is not None else (["Yes", "No"] if t.kind == "yesno" else [])
        yield PoolExample(task, ex_id, tid, prompt, gold, t.kind, cands, list(options or []))
        n += 1
        if limit is not None and n >= limit:
            return


def to_user_rows(examples, *, answer_prefix: str = ANSWER_PREFIX) -> Iterator[dict]:
    """DecodeShare user-file rows {task, prompt, answer, choices} from PoolExamples, in the paper's forced-choice
    form: the prompt ends with the teacher-forced `answer_prefix` (unless it already does), answers and choices are
    the label tokens with a leading space (" A", " Yes", " 72"; numeric tasks have no choices and score by
    exact match of the generated number)."""
    for e in examples:
        prompt = e.prompt if e.prompt.rstrip().endswith(answer_prefix.strip()) else e.prompt.rstrip() + answer_prefix
        row = {"task": e.task, "prompt": prompt, "answer": f" {e.gold}"}
        if e.candidates:
            row["choices"] = [f" {c}" for c in e.candidates]
        yield row
