"""HaluEval-QA for Truth Scores and the TruthProbe HaluEval evaluation (truth_scores.md §2.1, §5).

Source schema (HaluEval `qa_data.json`, hub `pminervini/HaluEval` config `qa`, split `data`; 10,000 rows):
`knowledge`, `question`, `right_answer`, `hallucinated_answer`. The repo's derived files are read too:
setD (`context`, `question`, `answer`, `label` in {gold, hallucinated}) and the evaluation annotations
(`knowledge`, `question`, `selected_answer`, `ground_truth` in {yes, no}, yes = hallucinated).

* Probing (§2.1): `"Context:\\n{c}\\n\\nQuestion: {q}\\nAnswer: {a}"`, y = 1 for gold, 0 for hallucinated; the
  first 292 rows are the probing split (`split="probe"`), the other 9,708 the evaluation split (`split="remain"`).
* Evaluation (§5): `USER: You are a huallucination detector. ... MUST be Yes or No.` + `\\n\\n#Knowledge:{k}\\n\\n
  #Question#: {q}\\n#Answer#: {a} ASSISTANT:` (typo as in the original), greedy, 7 new tokens, parsed by
  `interplab.data.scoring.parse_halueval` / `halueval_metrics`.

Which answer a raw QA row contributes is not in the repo (its derived files are not published); interplab picks it
per row with a seeded coin (`answer="coin"`, labelled [ours]) or emits both answers (`answer="both"`).
"""
from __future__ import annotations

import hashlib
from typing import Iterator

from interplab.core.errors import ConfigError, DataError
from interplab.data.files import open_source

__all__ = ["HUB", "HUB_CONFIG", "HUB_SPLIT", "N_PROBE", "N_ROWS", "RAW_FIELDS", "PROBE_TEMPLATE",
           "EVAL_PRE_PROMPT", "EVAL_POST_PROMPT", "MAX_NEW_TOKENS", "probe_text", "eval_prompt", "halueval_rows",
           "truth_probe_items", "eval_items"]

HUB, HUB_CONFIG, HUB_SPLIT = "pminervini/HaluEval", "qa", "data"
N_ROWS, N_PROBE = 10_000, 292
RAW_FIELDS = ("knowledge", "question", "right_answer", "hallucinated_answer")
SETD_FIELDS = ("context", "question", "answer", "label")
EVAL_FIELDS = ("knowledge", "question", "selected_answer", "ground_truth")
PROBE_TEMPLATE = "Context:\n{c}\n\nQuestion: {q}\nAnswer: {a}"
EVAL_PRE_PROMPT = ("USER: You are a huallucination detector. You MUST determine if the provided answer contains "
                   "hallucination or not for the question based on the world knowledge. The answer you provided "
                   "MUST be Yes or No.")
EVAL_POST_PROMPT = "ASSISTANT:"
MAX_NEW_TOKENS = 7
ANSWER_MODES = ("coin", "both", "gold", "hallucinated")


def probe_text(context: str, question: str, answer: str) -> str:
    """The Truth-Score probing text (no chat template; the tokenizer's default special tokens are added)."""
    return PROBE_TEMPLATE.format(c=context, q=question, a=answer)


def eval_prompt(knowledge: str, question: str, answer: str) -> str:
    """The TruthProbe HaluEval prompt (lmms-eval `halueval_remain`, use_knowledge=True, no instruction file)."""
    body = "\n\n#Knowledge:" + knowledge + "\n\n#Question#: " + question + "\n#Answer#: " + answer
    return f"{EVAL_PRE_PROMPT}{body} {EVAL_POST_PROMPT}"


def _coin(seed: int, index: int) -> bool:
    return int(hashlib.md5(f"{seed}|halueval|{index}".encode()).hexdigest()[:8], 16) % 2 == 0


def _rows_from(row: dict, index: int, answer: str, seed: int) -> list[dict]:
    """One source row -> rows of {knowledge, question, answer, label (1 gold / 0 hallucinated), index}."""
    keys = set(row)
    if set(RAW_FIELDS) <= keys:
        k, q = str(row["knowledge"]), str(row["question"])
        both = [(str(row["right_answer"]), 1), (str(row["hallucinated_answer"]), 0)]
        pick = {"both": both, "gold": both[:1], "hallucinated": both[1:],
                "coin": [both[0] if _coin(seed, index) else both[1]]}[answer]
        return [{"knowledge": k, "question": q, "answer": a, "label": y, "index": index} for a, y in pick]
    if set(SETD_FIELDS) <= keys:
        lab = str(row["label"]).strip().lower()
        if lab not in ("gold", "hallucinated", "1", "0"):
            raise DataError(f"HaluEval setD row {index}: label {row['label']!r} is not gold/hallucinated")
        return [{"knowledge": str(row["context"]), "question": str(row["question"]), "answer": str(row["answer"]),
                 "label": int(lab in ("gold", "1")), "index": index}]
    if set(EVAL_FIELDS) <= keys:
        gt = str(row["ground_truth"]).strip().lower()
        if gt not in ("yes", "no"):
            raise DataError(f"HaluEval evaluation row {index}: ground_truth {row['ground_truth']!r} is not yes/no")
        return [{"knowledge": str(row["knowledge"]), "question": str(row["question"]),
                 "answer": str(row["selected_answer"]), "label": int(gt == "no"), "index": index}]
    raise DataError(f"HaluEval row {index} has fields {sorted(keys)}; expected the QA fields {list(RAW_FIELDS)}, "
                    f"setD {list(SETD_FIELDS)} or evaluation {list(EVAL_FIELDS)}")


def halueval_rows(source=None, *, split: str = "all", limit: int | None = None, seed: int = 0,
                  answer: str = "coin", n_probe: int = N_PROBE) -> Iterator[dict]:
    """Rows {knowledge, question, answer, label, index} of HaluEval-QA (hub by default, or a local file).

    split: 'probe' = source rows [0, n_probe) (the repo's `--max_samples 292`), 'remain' = rows from n_probe on
    (the 9,708 evaluation items), 'all'. The order is the source order (the repo takes the first rows, so no
    shuffle); seed only drives the answer coin. limit: at most this many output rows."""
    if split not in ("probe", "remain", "all"):
        raise ConfigError(f"split must be 'probe', 'remain' or 'all', got {split!r}")
    if answer not in ANSWER_MODES:
        raise ConfigError(f"answer must be one of {ANSWER_MODES}, got {answer!r}")
    src_limit = n_probe if split == "probe" else None
    n_out = 0
    for i, row in enumerate(open_source(source, hub=HUB, config=HUB_CONFIG, split=HUB_SPLIT, limit=src_limit,
                                        file_split=False)):
        if split == "remain" and i < n_probe:
            continue
        for r in _rows_from(row, i, answer, seed):
            if limit is not None and n_out >= limit:
                return
            n_out += 1
            yield r


def truth_probe_items(source=None, *, split: str = "probe", limit: int | None = None, seed: int = 0,
                      answer: str = "coin") -> Iterator[dict]:
    """{"text", "label"} items for `truth_scores(model, items)` (label 1 = gold / context-supported)."""
    for r in halueval_rows(source, split=split, limit=limit, seed=seed, answer=answer):
        yield {"text": probe_text(r["knowledge"], r["question"], r["answer"]), "label": r["label"],
               "index": r["index"]}


def eval_items(source=None, *, split: str = "remain", limit: int | None = None, seed: int = 0,
               answer: str = "coin") -> Iterator[dict]:
    """{"prompt", "ground_truth"} items of the HaluEval evaluation (ground_truth 'yes' = hallucinated answer)."""
    for r in halueval_rows(source, split=split, limit=limit, seed=seed, answer=answer):
        yield {"prompt": eval_prompt(r["knowledge"], r["question"], r["answer"]),
               "ground_truth": "no" if r["label"] == 1 else "yes", "index": r["index"]}
