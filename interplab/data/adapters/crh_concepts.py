"""The CRH paper's concept list, shipped as package data, and the text formats of CRH pairs (crh.md §2.1).

`paper_concepts()` reads `interplab/data/resources/crh/concepts_100.csv` (source: github.com/mbzuai-nlp/CRH @
e8f609f, `CRH_Data/data_indices/concepts_100.csv`, MIT licence; see SOURCE.md next to it): 100 rows of
`concept_id, output_concept, concept_genre, instruction` (text 34, code 33, math 33). `instruction` is the
system-style order that elicits the concept; a chat model answers each question without and with it and the
last-token residual difference is the concept's diff vector.

Pair text (§2.1): `"User: {question}\\nAssistant: {response}"`, default special tokens, no chat template; the
generation prompt of the steering runs is `"User: {q}\\nAssistant: "` (§3). The repo's pair CSVs
(`qid,cid,question,concept,resp_no_concept,resp_with_concept`) are read by `pair_rows`. Questions come from
AlpacaEval (`alpaca_questions`: hub `tatsu-lab/alpaca_eval`, field `instruction`, 805 prompts).
"""
from __future__ import annotations

import csv
from importlib import resources
from typing import Iterator

from interplab.core.errors import ConfigError, DataError
from interplab.data.files import open_source

__all__ = ["CONCEPT_FIELDS", "PAIR_FIELDS", "CONCEPTS_SOURCE", "PAIR_TEMPLATE", "PROMPT_TEMPLATE",
           "paper_concepts", "concept_by_id", "pair_text", "steer_prompt", "pair_rows", "alpaca_questions"]

CONCEPT_FIELDS = ("concept_id", "output_concept", "concept_genre", "instruction")
PAIR_FIELDS = ("qid", "cid", "question", "concept", "resp_no_concept", "resp_with_concept")
CONCEPTS_SOURCE = ("github.com/mbzuai-nlp/CRH @ e8f609f, CRH_Data/data_indices/concepts_100.csv (MIT licence); "
                   "schema of AxBench Concept500")
PAIR_TEMPLATE = "User: {question}\nAssistant: {response}"
PROMPT_TEMPLATE = "User: {question}\nAssistant: "
ALPACA_HUB, ALPACA_CONFIG, ALPACA_SPLIT = "tatsu-lab/alpaca_eval", "alpaca_eval", "eval"


def paper_concepts(genre: str | None = None, limit: int | None = None) -> list[dict]:
    """The 100 CRH concepts as dicts (concept_id as int), in file order; genre filters to text/code/math."""
    if genre is not None and genre not in ("text", "code", "math"):
        raise ConfigError(f"genre must be 'text', 'code' or 'math', got {genre!r}")
    ref = resources.files("interplab.data").joinpath("resources/crh/concepts_100.csv")
    with ref.open("r", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        if genre is not None and r["concept_genre"] != genre:
            continue
        out.append({"concept_id": int(r["concept_id"]), "output_concept": r["output_concept"],
                    "concept_genre": r["concept_genre"], "instruction": r["instruction"]})
    return out[:limit] if limit is not None else out


def concept_by_id(concept_id: int) -> dict:
    """One concept row by its id (2..497)."""
    for r in paper_concepts():
        if r["concept_id"] == int(concept_id):
            return r
    raise ConfigError(f"no CRH concept with id {concept_id}; ids run 2..497 (100 concepts)")


def pair_text(question: str, response: str) -> str:
    """The text whose last-token residual gives act_no / act_with (§2.1)."""
    return PAIR_TEMPLATE.format(question=question, response=response)


def steer_prompt(question: str) -> str:
    """The generation prompt of the steering runs (§3)."""
    return PROMPT_TEMPLATE.format(question=question)


def pair_rows(source, *, limit: int | None = None, seed: int | None = None) -> Iterator[dict]:
    """Rows of a CRH pair file (the repo's `data_pairs_*` CSV schema, PAIR_FIELDS; qid/cid optional)."""
    need = ("question", "concept", "resp_no_concept", "resp_with_concept")
    for i, r in enumerate(open_source(source, limit=limit, seed=seed, file_split=False)):
        missing = [f for f in need if f not in r]
        if missing:
            raise DataError(f"CRH pair row {i} is missing column(s) {missing}; the pair schema is {list(PAIR_FIELDS)}")
        yield r


def alpaca_questions(source=None, *, limit: int | None = None, seed: int | None = None) -> Iterator[str]:
    """AlpacaEval questions (`instruction` field; a `question` field in a local file works too)."""
    for i, r in enumerate(open_source(source, hub=ALPACA_HUB, config=ALPACA_CONFIG, split=ALPACA_SPLIT,
                                      limit=limit, seed=seed, file_split=False)):
        q = r.get("instruction", r.get("question"))
        if not q:
            raise DataError(f"AlpacaEval row {i} has no 'instruction' (or 'question') field: {sorted(r)}")
        yield str(q)
