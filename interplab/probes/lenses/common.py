"""What every lens shares: a clean/corrupt prompt pair, answer tokens, the metric (the grid edits it uses are defined
with the other edits, in interventions/grid.py).

A metric is any callable `logits_last [B, d_vocab] -> [B]` (the logits at the prompt's last position). The default
is the logit difference `logit[answer] - logit[wrong]`, the metric of TransformerLens's patching tutorials. Every
lens takes `edits=[...]`: those edits are applied in every forward the lens makes, underneath (before) the lens's own
patches or gradient probes, so a lens measures the edited model."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from interplab.interventions.grid import CellPatch, GradProbe, Interpolate  # noqa: F401 - the lenses' grid edits
from interplab.core.errors import InputError
from interplab.core.sites import LAYER_KINDS

Metric = Callable[[torch.Tensor], torch.Tensor]
PATCH_KINDS = ("resid_pre", "resid_post", "attn_out", "mlp_out", "attn_z")


def logit_diff_metric(answer: int, wrong: int | None = None) -> Metric:
    """logits_last [B, V] -> [B]: logit[answer] - logit[wrong] (just logit[answer] when wrong is None)."""
    def metric(logits: torch.Tensor) -> torch.Tensor:
        out = logits[:, answer]
        return out - logits[:, wrong] if wrong is not None else out
    metric.__name__ = f"logit_diff({answer},{wrong})"
    return metric


def token_id(model, token) -> int:
    """`LabModel.token_id`: an int id, or a string that is one token (a leading-space variant tried too)."""
    return model.token_id(token)


def token_strings(model, ids: Sequence[int]) -> list[str]:
    return [model.tokenizer.decode([int(t)]) for t in ids]


def prompt_ids(model, prompt) -> list[int]:
    """The token ids of one prompt (a string, or a list of token ids) exactly as `LabModel.run` would see it."""
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(t, int) for t in prompt):
        return [int(t) for t in prompt]
    if not isinstance(prompt, str):
        raise InputError(f"a lens prompt must be one string or one list of token ids, got {type(prompt).__name__}")
    return model.tokenize(prompt).row_tokens(0)


@dataclass
class PromptPair:
    """A clean and a corrupted prompt of the same token length, and the answer / wrong tokens of the metric."""

    clean: list[int]
    corrupt: list[int]
    answer: int
    wrong: int | None

    @property
    def n_pos(self) -> int:
        return len(self.clean)


def make_pair(model, clean, corrupt, answer=None, wrong=None, edits=None) -> PromptPair:
    """Tokenize both prompts; answer defaults to the clean run's top token and wrong to the corrupt run's top token
    (under `edits`)."""
    c, k = prompt_ids(model, clean), prompt_ids(model, corrupt)
    if len(c) != len(k):
        raise InputError(f"clean ({len(c)} tokens) and corrupt ({len(k)} tokens) prompts must have the same token "
                         "length so that positions line up; change the corrupted words for ones of equal length")
    if answer is None or wrong is None:
        logits = model.run([c, k], edits=list(edits or [])).logits[:, -1]
        answer = int(logits[0].argmax()) if answer is None else answer
        if wrong is None:
            wrong = int(logits[1].argmax())
    a = token_id(model, answer)
    w = token_id(model, wrong) if wrong is not None else None
    if w == a:
        w = None  # both runs predict the same token: fall back to the answer's logit alone
    return PromptPair(c, k, a, w)


def grid_layers(model, layers) -> list[int]:
    if layers is None:
        return list(range(model.n_layers))
    out = [int(x) + (model.n_layers if int(x) < 0 else 0) for x in layers]
    bad = [x for x in out if not 0 <= x < model.n_layers]
    if bad:
        raise InputError(f"layers {bad} are out of range for {model.name} ({model.n_layers} layers)")
    return out


def check_kinds(kinds: Sequence[str]) -> list[str]:
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    bad = [k for k in kinds if k not in PATCH_KINDS]
    if bad or not kinds:
        raise InputError(f"patchable site kinds are {PATCH_KINDS} (layer given separately), got {kinds}; "
                         f"all layer kinds: {LAYER_KINDS}")
    return kinds


FALLBACK_PAIR = ("The capital of France is", "The capital of Italy is")


# Public world facts (country, capital) for the real-model default pairs: each word is one token (with its leading
# space) in SmolLM2's and Gemma-3's tokenizers (tests/real_models/test_real_defaults.py), so the clean and
# corrupt prompts have equal lengths and the metric is the logit difference of two single-token answers.
CAPITALS = (("France", "Paris"), ("Italy", "Rome"), ("Germany", "Berlin"), ("Spain", "Madrid"),
            ("Japan", "Tokyo"), ("Russia", "Moscow"), ("China", "Beijing"), ("Egypt", "Cairo"),
            ("Greece", "Athens"), ("Austria", "Vienna"), ("Poland", "Warsaw"), ("Portugal", "Lisbon"),
            ("England", "London"), ("Norway", "Oslo"), ("Ireland", "Dublin"), ("Canada", "Ottawa"))
# the half-written sentence whose next token is the capital, for a model read as plain text (a base model)
TEXT_TEMPLATE = "The capital of {country} is the city of"
CHAT_QUESTION = "What is the capital of {country}?"
CHAT_ANSWER = "The capital of {country} is"


@dataclass(frozen=True)
class FactPair:
    """A clean / corrupt prompt pair and the metric's tokens: answer (clean) and wrong (corrupt); "" = the two
    runs' top tokens (the toy-organism and small-vocabulary defaults)."""

    clean: str
    corrupt: str
    answer: str = ""
    wrong: str = ""


def default_pair(model, seed: int = 0) -> tuple[str, str]:
    """(clean, corrupt) of `default_fact_pair(model, seed)`."""
    pair = default_fact_pair(model, seed)
    return pair.clean, pair.corrupt


def default_fact_pair(model, seed: int = 0) -> FactPair:
    """A meaningful clean / corrupt pair for `model`: on the toy organisms (`speaks_toy_vocab`) a CtxMem recall prompt
    whose context value of the queried entity is swapped (so the answer flips from the clean value to the corrupt
    one); on a real model two public facts, "The capital of France / Italy is the city of" -> " Paris" / " Rome"
    (seed s: the s-th fact of `CAPITALS` against the next one), as an assistant's half-written answer on a chat
    model (an instruction-tuned model reads a plain string as a user turn and would answer it with the same first
    token for both) and as plain text otherwise; on a small vocabulary that knows neither, five of its own words."""
    from interplab.data import toy_vocab
    from interplab.data.ctxmem import CtxMem

    tok = model.tokenizer
    unk = getattr(tok, "unk_token_id", None)
    if toy_vocab.speaks_toy_vocab(tok):
        ex = next(e for e in CtxMem().sample(16, seed=seed, mode="gen") if e.meta["in_context"])
        fmt = "chat" if getattr(tok, "chat_template", None) else "raw"
        clean = ex.prompt_text(fmt)
        e, v = ex.meta["query_entity"], ex.meta["context_value"]
        other = next(x for x in toy_vocab.VALUES if x not in {v, ex.meta["memory_value"]}
                     and x not in dict(ex.meta["pairs"]).values())
        corrupt = clean.replace(f"{e} {v}", f"{e} {other}", 1)
        if len(prompt_ids(model, clean)) == len(prompt_ids(model, corrupt)):
            return FactPair(clean, corrupt)
    if unk is not None and unk in tok(" ".join(FALLBACK_PAIR), add_special_tokens=False)["input_ids"]:
        return FactPair(*_vocabulary_pair(tok, seed))
    facts = [f for f in CAPITALS if all(_one_token(tok, " " + w) for w in f)]
    if len(facts) < 2:
        return FactPair(*FALLBACK_PAIR)
    i = int(seed) % len(facts)       # seeds 0..15: 16 different clean prompts (the Direction page's contexts)
    (c1, a1), (c2, a2) = facts[i], facts[(i + 1) % len(facts)]
    chat = bool(getattr(model, "chat_default", False) and getattr(tok, "chat_template", None))
    clean, corrupt = (_fact_prompt(tok, c, chat) for c in (c1, c2))
    if len(prompt_ids(model, clean)) != len(prompt_ids(model, corrupt)):
        return FactPair(*FALLBACK_PAIR)
    return FactPair(clean, corrupt, " " + a1, " " + a2)


def fact_token_ids(model) -> list[int]:
    """Token ids of the countries and capitals of `CAPITALS` that are one token in `model`'s vocabulary (with the
    leading space): words whose unembeddings are distinct directions, for the Direction page's neighbours."""
    tok = model.tokenizer
    unk = getattr(tok, "unk_token_id", None)
    ids = [tok(" " + w, add_special_tokens=False)["input_ids"] for f in CAPITALS for w in f]
    return list(dict.fromkeys(int(i[0]) for i in ids if len(i) == 1 and i[0] != unk))


def _one_token(tok, text: str) -> bool:
    return len(tok(text, add_special_tokens=False)["input_ids"]) == 1


def _fact_prompt(tok, country: str, chat: bool) -> str:
    if not chat:
        return TEXT_TEMPLATE.format(country=country)
    head = tok.apply_chat_template([{"role": "user", "content": CHAT_QUESTION.format(country=country)}],
                                   add_generation_prompt=True, tokenize=False)
    return head + CHAT_ANSWER.format(country=country)


def _vocabulary_pair(tok, seed: int) -> tuple[str, str]:
    """Five of the tokenizer's own ordinary words with the second one swapped: the default for a vocabulary that
    does not know English (a word-level or synthetic tokenizer), so the default never feeds unknown tokens."""
    import numpy as np

    special = set(tok.all_special_ids)
    words = [w for w, i in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
             if i not in special and w.strip() and " " not in w]
    if len(words) < 6:
        return FALLBACK_PAIR
    pick = np.random.default_rng(seed).choice(len(words), size=6, replace=False)
    clean = [words[i] for i in pick[:5]]
    corrupt = [clean[0], words[pick[5]], *clean[2:]]
    return " ".join(clean), " ".join(corrupt)
