"""The multitask-decode data DecodeShare runs on: encoded examples of each task with forced-choice candidates
(`multitask_sets`), and the prompt format an organism was trained with (`resolve_format`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from interplab.core.errors import ConfigError, InputError

__all__ = ["SEQ_TASKS", "ALL_TASKS", "TaskSet", "resolve_format", "multitask_sets", "user_task_sets",
           "real_task_sets", "reply_correct", "encode_rows", "BUILTIN_DATA"]

# data= names of the built-in real-model task sets (the rest of data= values are user files)
BUILTIN_DATA = ("real-tasks",)

SEQ_TASKS = ("copy", "rev", "sort", "inc")
ALL_TASKS = ("copy", "rev", "sort", "inc", "mc")


@dataclass
class TaskSet:
    """Encoded multitask examples of one task.

    prompts: prompt token ids; answers: answer ids without the stop token; stop: the stop-token id;
    fc_cands [n][C]: forced-choice candidates as full answers (ids incl. the stop token); fc_gold [n]: index of the
    gold candidate; fc_equiv [n, C]: candidate equals the gold answer (handles coinciding transforms, e.g. sorted
    inputs); inputs: the input symbol indices; examples: the Example objects (or data rows).
    parse [n] (real-model tasks): (gold text, echo, answer pool) per example; a generated reply is then correct when
    the pool answer it names first, echoes of the subject skipped, is the gold (`reply_correct`), not when its
    tokens equal the answer's."""
    task: str
    prompts: list
    answers: list
    stop: int
    fc_cands: list
    fc_gold: np.ndarray
    fc_equiv: np.ndarray
    inputs: list
    examples: list = field(default_factory=list)
    parse: list | None = None

    def __len__(self) -> int:
        return len(self.prompts)


def resolve_format(model_name: str, fmt: str = "auto") -> str:
    """'raw' or 'chat'. auto: the zoo recipe's training format for `zoo:` names, 'chat' when the name contains
    'chat', else 'raw'."""
    if fmt in ("raw", "chat"):
        return fmt
    if fmt != "auto":
        raise ConfigError(f"format must be 'auto', 'raw' or 'chat'; got {fmt!r}")
    name = str(model_name)
    if name.startswith("zoo:"):
        try:
            from interplab.zoo.registry import get_recipe

            return str(get_recipe(name).data.get("format", "raw"))
        except Exception:  # noqa: BLE001 - fall through to the name heuristic
            pass
    return "chat" if "chat" in name.lower() else "raw"


def transform(task: str, x: list[int], V: int) -> list[int]:
    """The answer of sequence task `task` on input symbol indices `x` (alphabet size V)."""
    if task == "copy":
        return list(x)
    if task == "rev":
        return list(reversed(x))
    if task == "sort":
        return sorted(x)
    if task == "inc":
        return [(i + 1) % V for i in x]
    raise InputError(f"no transform for task {task!r}")


def multitask_sets(model, tasks: Sequence[str], n: int, *, seed: int = 0, split: str = "test",
                   fmt: str = "raw") -> dict[str, TaskSet]:
    """n encoded examples per task from `interplab.data.multitask` (split "train" for calibration, "test" for
    evaluation). Sequence tasks get the four transforms (copy/rev/sort/inc of the same input) as forced-choice
    candidates; mc gets `ans A..D`."""
    from interplab.data import toy_vocab as tv
    from interplab.data.examples import encode
    from interplab.data.multitask import Multitask

    vocab = model.tokenizer.get_vocab()
    mt = Multitask()
    V = mt.config.n_symbols
    stop_word = "<eos>" if fmt == "raw" else "<|im_end|>"
    if stop_word not in vocab:
        raise InputError(f"{model.name} has no {stop_word!r} token: it is not a multitask-decode organism")
    stop = vocab[stop_word]
    out = {}
    for ti, task in enumerate(tasks):
        if task not in ALL_TASKS:
            raise ConfigError(f"unknown multitask task {task!r}; use any of {ALL_TASKS}")
        exs = mt.sample(task, n, seed=seed * 1000 + ti, split=split)
        prompts, answers, cands, gold, equiv, inputs = [], [], [], [], [], []
        for ex in exs:
            enc = encode(ex, vocab, fmt)
            prompts.append(list(enc.ids[:enc.prompt_len]))
            ans = [vocab[w] for w in ex.response]
            answers.append(ans)
            x = [int(w[1:]) for w in ex.meta["x"]]
            inputs.append(x)
            if task == "mc":
                cs = [[vocab[tv.ANS], vocab[L], stop] for L in tv.LETTERS]
                g = tv.LETTERS.index(ex.meta["correct"])
            else:
                cs = [[vocab[tv.SYMBOLS[i]] for i in transform(t, x, V)] + [stop] for t in SEQ_TASKS]
                g = SEQ_TASKS.index(task)
            cands.append(cs)
            gold.append(g)
            equiv.append([c == cs[g] for c in cs])
        out[task] = TaskSet(task, prompts, answers, stop, cands, np.asarray(gold), np.asarray(equiv, bool),
                            inputs, exs)
    return out



def _candidate_lists(rows: list[dict], rng: np.random.Generator, max_candidates: int = 16) -> list[list[str]]:
    """Each row's forced-choice candidates: its `choices`, else the task's distinct answers (gold plus up to
    max_candidates - 1 others, seeded), so every row of a task without choices has the same candidate count."""
    if all(r.get("choices") for r in rows):
        sizes = sorted({len(r["choices"]) for r in rows})
        if len(sizes) > 1:
            raise InputError(f"task {rows[0]['task']!r}: every row needs the same number of choices (forced choice "
                             f"scores one candidate list per prompt), got {sizes}; repeat a choice to pad")
        return [list(r["choices"]) for r in rows]
    if any(r.get("choices") for r in rows):
        raise InputError(f"task {rows[0]['task']!r}: give `choices` on every row or on none")
    pool = sorted({r["answer"] for r in rows})
    k = min(len(pool), max_candidates)
    out = []
    for r in rows:
        others = [a for a in pool if a != r["answer"]]
        pick = list(rng.choice(others, size=k - 1, replace=False)) if k > 1 else []
        cands = sorted([r["answer"], *map(str, pick)])
        out.append(cands)
    return out


def user_task_sets(model, records, *, seed: int = 0) -> tuple[dict[str, TaskSet], dict[str, TaskSet]]:
    """(calibration, evaluation) TaskSets from user rows {task, prompt, answer, choices?, split?}
    (`interplab.data.user.user_records("decodeshare", path)`).

    Prompts are tokenised with the model's default special tokens (no chat template, as the reference's H1 and
    eval_perf); answers and choices are continuation texts tokenised without special tokens (include a leading
    space when the tokenizer needs one). The stop token is EOS. split 'train' rows calibrate, 'test' rows evaluate;
    rows without a split alternate (even row index of the task -> calibration, odd -> evaluation)."""
    rows = list(records)
    if not rows:
        raise InputError("the DecodeShare data file has no rows")
    stop = model.eos_token_id
    if stop is None:
        raise InputError(f"{model.name} has no EOS token; DecodeShare's exact-match scoring needs one")
    tok = model.tokenizer
    by_task: dict[str, list[dict]] = {}
    for r in rows:
        by_task.setdefault(r["task"], []).append(r)
    rng = np.random.default_rng(seed)
    calib, evals = {}, {}
    for task, trs in by_task.items():
        cands = _candidate_lists(trs, rng)
        parts: dict[str, list[int]] = {"calib": [], "eval": []}
        for i, r in enumerate(trs):
            sp = r.get("split") or ""
            side = "calib" if sp == "train" or (sp == "" and i % 2 == 0) else "eval"
            if sp not in ("", "train", "test"):
                raise InputError(f"task {task!r}: split must be 'train', 'test' or empty, got {sp!r}")
            parts[side].append(i)
        for side, idx in parts.items():
            if not idx:
                raise InputError(f"task {task!r} has no {'calibration' if side == 'calib' else 'evaluation'} rows "
                                 "(split 'train' / 'test'; rows without a split alternate)")
            prompts = [list(tok(trs[i]["prompt"])["input_ids"]) for i in idx]
            answers = [list(tok(trs[i]["answer"], add_special_tokens=False)["input_ids"]) for i in idx]
            fc = [[list(tok(c, add_special_tokens=False)["input_ids"]) + [stop] for c in cands[i]] for i in idx]
            gold = np.asarray([cands[i].index(trs[i]["answer"]) for i in idx])
            equiv = np.asarray([[c == f[g] for c in f] for f, g in zip(fc, gold)], bool)
            ts = TaskSet(task, prompts, answers, int(stop), fc, gold, equiv, [[] for _ in idx],
                         [trs[i] for i in idx])
            (calib if side == "calib" else evals)[task] = ts
    return calib, evals


def reply_correct(ts: TaskSet, texts: Sequence[str], token_correct, parse: list | None = None) -> np.ndarray:
    """Per-example correctness of generated replies: the parsed answer (`parse`, default ts.parse) against its gold
    when the set has one, else `token_correct` (the token-level exact match of `generate_exact_match`)."""
    from interplab.data.world_facts import first_named
    from interplab.data.scoring import normalise_words

    parse = ts.parse if parse is None else parse
    if parse is None:
        return np.asarray(token_correct, bool)
    if len(parse) != len(texts):
        raise InputError(f"{len(texts)} replies but {len(parse)} parse keys")
    out = []
    for text, (gold, echo, pool) in zip(texts, parse):
        named = first_named(text, echo, pool)
        out.append(named is not None and normalise_words(named) == normalise_words(gold))
    return np.asarray(out, bool)


def encode_rows(model, rows: list, stop: int) -> TaskSet:
    """A TaskSet of `decode_tasks.DecodeRow`s of one task (chat-templated prompts, parsed replies)."""
    from interplab.data.world_facts import chat_prompt

    tok = model.tokenizer
    # a chat template writes its own special tokens; a plain prompt takes the tokenizer's (Gemma's <bos>)
    plain = not getattr(tok, "chat_template", None)
    prompts = [list(tok(chat_prompt(r.message, tok), add_special_tokens=plain)["input_ids"]) for r in rows]
    answers = [list(tok(r.answer, add_special_tokens=False)["input_ids"]) for r in rows]
    fc = [[list(tok(c, add_special_tokens=False)["input_ids"]) + [stop] for c in r.choices] for r in rows]
    gold = np.asarray([r.choices.index(r.answer) for r in rows])
    equiv = np.asarray([[c == f[g] for c in f] for f, g in zip(fc, gold)], bool)
    return TaskSet(rows[0].task, prompts, answers, int(stop), fc, gold, equiv, [[] for _ in rows], list(rows),
                   parse=[(r.answer, r.echo, r.pool) for r in rows])


def real_task_sets(model, tasks: Sequence[str], *, n_calib: int, n_eval: int, seed: int = 0,
                   known: str | None = None) -> tuple[dict[str, TaskSet], dict[str, TaskSet]]:
    """(calibration, evaluation) TaskSets of the built-in real-model tasks (`interplab.data.decode_tasks`): each
    task's seeded rows, the first n_calib calibrating and the next n_eval evaluating (disjoint). Prompts are the
    user message through the model's chat template (plain text ending in "Answer:" without one); replies are
    parsed (`reply_correct`); forced choice scores each candidate followed by EOS. known: the closed-book filter of
    the fact tasks (default: the model's shipped one, else every fact)."""
    from interplab.data.decode_tasks import decode_task_rows
    from interplab.data.world_facts import shipped_known

    stop = model.eos_token_id
    if stop is None:
        raise InputError(f"{model.name} has no EOS token; DecodeShare's forced choice ends each candidate with it")
    if known is None:
        key = str(model.name).removeprefix("real:")
        known = key if key in shipped_known() else ""
    rows = decode_task_rows(list(tasks), known=known or None, seed=seed)
    calib, evals = {}, {}
    for task, rs in rows.items():
        if len(rs) < n_calib + n_eval:
            raise ConfigError(f"task {task!r} has {len(rs)} rows, fewer than n_calib + n_eval = {n_calib + n_eval}; "
                              "lower them")
        calib[task] = encode_rows(model, rs[:n_calib], stop)
        if n_eval:   # 0: calibration only (the layer scan)
            evals[task] = encode_rows(model, rs[n_calib:n_calib + n_eval], stop)
    return calib, evals
