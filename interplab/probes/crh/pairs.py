"""The paper's concept data pipeline (spec methods/crh.md §2.1): the concept menu CSV and model-generated
(without, with) pairs for one concept instruction."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from interplab.core.errors import ConfigError, DataError, InputError
from interplab.core.result import Result
from interplab.probes.crh.judges import CONCEPT, NORMAL
from interplab.probes.crh.steering import _judge, _stop_strings, truncate_at


MENU_COLUMNS = ("concept_id", "output_concept", "concept_genre", "instruction")


def load_concept_menu(path) -> "Any":
    """Read a CRH concept menu CSV (the paper's `concepts_100.csv` schema: concept_id, output_concept,
    concept_genre, instruction) into a DataFrame, checking the columns."""
    import pandas as pd

    p = Path(path)
    if not p.exists():
        raise DataError(f"concept menu {p} does not exist (the CRH menu ships as concepts_100.csv)")
    df = pd.read_csv(p)
    missing = [c for c in MENU_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"{p} lacks columns {missing}; expected {list(MENU_COLUMNS)}")
    return df


@dataclass
class ConceptPairs(Result):
    """Model-generated (without, with) pairs for one concept (the paper's data pipeline, spec §2.1).

    questions: the user questions; resp_no / resp_with: the model's answers without / with the instruction
    (system turn); pairs: the inputs whose difference is the concept diff — the *same* uninstructed conversation
    with either answer (chat-template ids for `fmt="chat"`, "User: q\\nAssistant: r" strings for `fmt="plain"`, the
    repo's format); keep: bool mask of pairs kept by the optional filter judge (with → 2, without → 1)."""

    questions: list
    resp_no: list
    resp_with: list
    pairs: list
    keep: np.ndarray

    def kept(self) -> list:
        return [p for p, k in zip(self.pairs, self.keep) if k]

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"question": self.questions, "resp_no_concept": self.resp_no,
                             "resp_with_concept": self.resp_with, "kept": self.keep})


def generate_concept_pairs(model, questions: Sequence[str], instruction: str, *, fmt: str = "chat",
                           max_new_tokens: int = 32, filter_judge=None, max_rows: int = 64) -> ConceptPairs:
    """Answer each question twice — without and with `instruction` as the system turn (chat template) — and build
    (without, with) inputs from the uninstructed conversation (spec §2.1; the repo's generation script is not
    public). `filter_judge` (optional): keep pairs whose with-answer is label 2 and without-answer label 1."""
    if fmt not in ("chat", "plain"):
        raise ConfigError(f"fmt must be 'chat' or 'plain', got {fmt!r}")
    qs = list(questions)
    if not qs:
        raise InputError("generate_concept_pairs needs at least one question")
    p_no = [model.apply_chat_template([{"role": "user", "content": q}]) for q in qs]
    p_yes = [model.apply_chat_template([{"role": "system", "content": instruction}, {"role": "user", "content": q}])
             for q in qs]
    texts = []
    for i in range(0, 2 * len(qs), max_rows):
        rows = (p_no + p_yes)[i: i + max_rows]
        texts += truncate_at(model.generate(rows, max_new_tokens=max_new_tokens, return_logits=False).text,
                             _stop_strings(model, None))
    r_no, r_yes = texts[: len(qs)], texts[len(qs):]
    if fmt == "chat":
        def conv(q, r):
            return model.apply_chat_template([{"role": "user", "content": q}, {"role": "assistant", "content": r}],
                                             add_generation_prompt=False)
    else:
        def conv(q, r):
            return f"User: {q}\nAssistant: {r}"
    pairs = [(conv(q, a), conv(q, b)) for q, a, b in zip(qs, r_no, r_yes)]
    keep = np.ones(len(qs), bool)
    if filter_judge is not None:
        keep = (_judge(filter_judge, r_yes) == CONCEPT) & (_judge(filter_judge, r_no) == NORMAL)
    return ConceptPairs(questions=qs, resp_no=r_no, resp_with=r_yes, pairs=pairs, keep=keep)
