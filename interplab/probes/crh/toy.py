"""CRH concept data for the toy organisms (`interplab.data.concepts`): (without, with) pairs and steered prompts as
token ids of a model (raw or chat format), and the spiral probe's one-token prompt pairs."""
from __future__ import annotations

from dataclasses import dataclass

from interplab.core.errors import ConfigError
from interplab.zoo.cards import model_format  # shared with the atlas parts of other methods


@dataclass
class ConceptData:
    """One concept for a model study. train_pairs / test_pairs: (without, with) inputs (text or
    token ids) whose last-real-token difference is the concept diff; test_prompts: the steered
    prompts, one per test pair (same order); words: the concept's surface tokens (the judge's token
    set); build_words: the words its with-concept texts were built from when they differ from the
    judge's (`concept_pairs.split_words`; empty = the same words or unknown); control_pairs /
    control_name: the train pairs of a concept-free pseudo-concept (`concept_pairs.control_pairs`)
    whose difference vector steers this concept's prompts as a matched-norm control (None = no
    control arm)."""

    name: str
    words: tuple
    train_pairs: list
    test_pairs: list
    test_prompts: list
    build_words: tuple = ()
    control_pairs: list | None = None
    control_name: str = ""


def _chat_ids(model, messages, *, gen_prompt: bool) -> list[int]:
    return model.apply_chat_template(messages, add_generation_prompt=gen_prompt)


def _word_mapping(model, concept: str, vocab: dict, vocab_fallback: bool) -> dict[str, str]:
    """Toy word -> the model's own token for every word the concept's data needs (identity on a toy organism;
    with `vocab_fallback`, the toy words mapped onto the model's first plain words in id order)."""
    from interplab.data import toy_vocab as tv
    from interplab.data.concepts import CONCEPTS

    needed = set(tv.FILLER) | set(CONCEPTS[concept]) | {tv.SEP}
    if needed <= set(vocab):
        return {w: w for w in needed}
    if not vocab_fallback:
        raise ConfigError(f"{model.name} lacks the toy concept words (e.g. {sorted(needed - set(vocab))[:4]}); "
                          "use a toy organism (zoo:toy-chat), the paper's concepts on a real chat model "
                          "(`interplab run crh-concepts --set model=...`, or data=offline here), or set "
                          "vocab_fallback=true for a smoke run")
    special = set(getattr(model.tokenizer, "all_special_tokens", [])) | {"system", "user", "assistant"}
    pool = [w for w, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if w not in special and w.isalnum()]
    toy_all = sorted(set(tv.FILLER) | {t for ts in CONCEPTS.values() for t in ts} | {tv.SEP})
    if len(pool) < len(toy_all):
        raise ConfigError(f"vocab_fallback needs {len(toy_all)} plain words, {model.name} has {len(pool)}")
    full = dict(zip(toy_all, pool))
    return {w: full[w] for w in needed}


def toy_concept_data(model, concept: str, *, n_train: int = 100, n_test: int = 8, seed: int = 0,
                     read_at: str = "end", vocab_fallback: bool = False, fmt: str = "auto") -> ConceptData:
    """Pairs and prompts for one toy concept (interplab.data.concepts), as token ids of `model`.

    fmt: 'chat' (the checkpoint's chat template: user turn, assistant turn, closing <|im_end|>), 'raw'
    (`<bos> q.. sep response.. <eos>`, the toy-base format) or 'auto' (`model_format`). train/test pairs share no
    seed (test = seed + 10_000). A pair is the same uninstructed question answered without / with the concept's
    tokens; the test prompt is that question up to the answer (chat: with the assistant generation prompt)."""
    from interplab.data.concepts import CONCEPTS, Concepts

    if concept not in CONCEPTS:
        raise ConfigError(f"unknown toy concept {concept!r}; known: {list(CONCEPTS)}")
    if read_at not in ("end", "last_response"):
        raise ConfigError(f"read_at must be 'end' or 'last_response', got {read_at!r}")
    vocab = model.tokenizer.get_vocab()
    mapping = _word_mapping(model, concept, vocab, vocab_fallback)
    gen = Concepts()
    fmt = model_format(model) if fmt == "auto" else fmt
    if fmt not in ("raw", "chat"):
        raise ConfigError(f"fmt must be 'auto', 'raw' or 'chat', got {fmt!r}")
    tok = model.tokenizer

    def m(words):
        return " ".join(mapping[w] for w in words)

    def ids_of(words):
        return [vocab[mapping[w]] for w in words]

    def pair_ids(no, yes):
        out = []
        for ex in (no, yes):
            if fmt == "chat":
                msgs = [{"role": "user", "content": m(ex.user)}, {"role": "assistant", "content": m(ex.response)}]
                ids = _chat_ids(model, msgs, gen_prompt=False)
                end = tok.convert_tokens_to_ids("<|im_end|>")
            else:
                bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
                ids = bos + ids_of(ex.user) + ids_of(ex.response) + [tok.eos_token_id]
                end = tok.eos_token_id
            if read_at == "last_response":
                ids = ids[: max(i for i, t in enumerate(ids) if t == end)]
            out.append(ids)
        return tuple(out)

    def prompt_ids(ex):
        if fmt == "chat":
            return _chat_ids(model, [{"role": "user", "content": m(ex.user)}], gen_prompt=True)
        return ([tok.bos_token_id] if tok.bos_token_id is not None else []) + ids_of(ex.user)

    train = [pair_ids(a, b) for a, b in gen.pairs(n_train, seed=seed, concept=concept)]
    test_raw = gen.pairs(n_test, seed=seed + 10_000, concept=concept)
    test = [pair_ids(a, b) for a, b in test_raw]
    prompts = [prompt_ids(a) for a, _ in test_raw]
    return ConceptData(name=concept, words=tuple(mapping[w] for w in CONCEPTS[concept]), train_pairs=train,
                       test_pairs=test, test_prompts=prompts)


#: the `crh-spiral` experiment's default prompt pair: (concept_ori, concept_tgt, question)
SPIRAL_DEFAULT_PAIR = ("animal", "color", "the big day")


def toy_spiral_prompts(concept_ori: str, concept_tgt: str, question: str = "the big day") -> tuple[list, list]:
    """Chat messages of the toy concept task (system `mention <concept>`, user `<question> sep`) for two concepts:
    a prompt pair differing in one token."""
    from interplab.data import toy_vocab as tv
    from interplab.data.concepts import CONCEPTS

    for c in (concept_ori, concept_tgt):
        if c not in CONCEPTS:
            raise ConfigError(f"unknown toy concept {c!r}; known: {list(CONCEPTS)}")
    if concept_ori == concept_tgt:
        raise ConfigError("concept_ori and concept_tgt must differ")
    user = f"{question} {tv.SEP}".strip()
    return tuple([{"role": "system", "content": f"{tv.MENTION} {c}"}, {"role": "user", "content": user}]
                 for c in (concept_ori, concept_tgt))
