"""Bring your own data: the documented columns of a user file for each method, and their validation.

| method      | required columns                                          | optional                 |
|-------------|-----------------------------------------------------------|--------------------------|
| truth       | text, label (1/0 or gold/hallucinated; 1 = context-supported) | -                    |
| decodeshare | task, prompt, answer                                      | choices, split           |
| crh         | concept, question, resp_no_concept, resp_with_concept     | qid, cid, concept_words  |
| sae         | messages (JSONL: list of {role, content}) or user + assistant (CSV) | system, split  |
| hyperfit    | text                                                      | split                    |

DecodeShare `choices` is a JSON list or `a|b|c` (the answer must be one of them; the same count on every row of a
task), `split` is train/test. Files are CSV, TSV, JSON, JSONL, Parquet or Arrow (`interplab.data.files`). `check_user_file` is what the app's data
box and every `--set data=PATH` run call first: it reads the first rows only and raises `DataError` naming the
missing column.
"""
from __future__ import annotations

import json
from typing import Iterator

from interplab.core.errors import ConfigError, DataError
from interplab.data.files import preview, read_records, require_columns, shuffled, take

__all__ = ["USER_COLUMNS", "OPTIONAL_COLUMNS", "METHODS", "check_user_file", "user_records", "parse_choices",
           "describe_columns"]

def _specs() -> dict:
    """The methods that take a user file (their `MethodSpec.data`), by name: the one declaration of their columns."""
    from interplab.methods import methods

    return {m.name: m.data for m in methods() if m.data is not None}


def __getattr__(name: str):
    # computed on access, so a method plugged in after this import (INTERPLAB_METHODS) is included
    if name == "USER_COLUMNS":
        return {k: d.columns for k, d in _specs().items()}
    if name == "OPTIONAL_COLUMNS":
        return {k: d.optional for k, d in _specs().items()}
    if name == "METHODS":
        return tuple(_specs())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def describe_columns(method: str) -> str:
    """One line naming the columns of `method`'s user file (for help texts and errors)."""
    spec = _check_method(method)
    req = spec.describe or ", ".join(spec.columns)
    opt = ", ".join(spec.optional)
    return f"required: {req}" + (f"; optional: {opt}" if opt else "")


def _check_method(method: str):
    specs = _specs()
    if method not in specs:
        raise ConfigError(f"unknown method {method!r}; user files exist for {list(specs)}")
    return specs[method]


def _required(method: str, columns) -> tuple:
    if method == "sae" and "messages" not in columns and {"user", "assistant"} & set(columns):
        return ("user", "assistant")
    return _specs()[method].columns


def check_user_file(method: str, path, n: int = 5):
    """The first n rows as a DataFrame; raises DataError naming any missing required column."""
    _check_method(method)
    df = preview(path, n)
    if df.empty:
        raise DataError(f"{path} has no rows")
    require_columns(list(df.columns), _required(method, df.columns), source=str(path),
                    hint=f"A {method} file needs columns: {describe_columns(method)} (docs/data.md).")
    return df


def parse_choices(value) -> list[str] | None:
    """A `choices` cell: a list, a JSON list string, or `a|b|c`; empty -> None."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, (list, tuple)):
        out = [str(v) for v in value]
    else:
        s = str(value).strip()
        if not s:
            return None
        if s.startswith("["):
            try:
                out = [str(v) for v in json.loads(s)]
            except json.JSONDecodeError:
                raise DataError(f"choices {s!r:.60} is not a JSON list") from None
        else:
            out = [p.strip() for p in s.split("|")]
    return [c for c in out if c != ""] or None


def _label(v, i: int) -> int:
    s = str(v).strip().lower()
    if s in ("1", "gold", "true", "1.0"):
        return 1
    if s in ("0", "hallucinated", "false", "0.0"):
        return 0
    raise DataError(f"row {i}: label {v!r} must be 1/0 or gold/hallucinated")


def _clean(method: str, row: dict, i: int) -> dict:
    if method == "truth":
        if not str(row["text"]).strip():
            raise DataError(f"row {i}: empty text")
        return {"text": str(row["text"]), "label": _label(row["label"], i)}
    if method == "decodeshare":
        out = {"task": str(row["task"]), "prompt": str(row["prompt"]), "answer": str(row["answer"]),
               "choices": parse_choices(row.get("choices")), "split": str(row.get("split") or "")}
        if out["choices"] is not None and out["answer"] not in out["choices"]:
            raise DataError(f"row {i}: answer {out['answer']!r} is not one of its choices {out['choices']}")
        return out
    if method == "sae":
        from interplab.data.adapters.chat_messages import to_messages

        return {"messages": to_messages(row, i), "split": str(row.get("split") or "")}
    return dict(row)


def user_records(method: str, path, *, limit: int | None = None, seed: int | None = None,
                 split: str | None = None) -> Iterator[dict]:
    """Validated rows of a user file for `method` (labels as 0/1, choices as lists, chat rows as messages)."""
    check_user_file(method, path, n=1)
    rows = read_records(path, split=split)
    if seed is not None:
        rows = shuffled(rows, seed)
    for i, row in enumerate(take(rows, limit)):
        yield _clean(method, row, i)
