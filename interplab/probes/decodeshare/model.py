"""DecodeShare, model part: decode-time state collection under the KV cache, forced-choice and generation
scoring with decode-only edits. Goes through `LabModel.generate` / `LabModel.run` only; the model-free
estimator and nulls live in `interplab.probes.decodeshare.estimator`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

import numpy as np

from interplab.core.errors import ConfigError, InputError, ShapeError


__all__ = ["resid_site", "collect_decode_states", "collect_decode_states_multi", "collect_prefill_states",
           "ForcedChoiceScores", "score_forced_choice", "GenerationScores", "generate_exact_match", "stop_token_ids"]

DECODE_VARIANTS = ("plain", "boundary")


def resid_site(model, layer: int) -> str:
    """`resid_post.<layer>` after checking the layer index against the model."""
    if not isinstance(layer, (int, np.integer)) or not 0 <= int(layer) < model.n_layers:
        raise ConfigError(f"layer must be an integer in [0, {model.n_layers}); got {layer!r}")
    return f"resid_post.{int(layer)}"


def _chunks(seq: Sequence, size: int):
    if size < 1:
        raise ConfigError(f"batch_size must be >= 1; got {size}")
    for i in range(0, len(seq), size):
        yield seq[i:i + size]


def _subsample(x: np.ndarray, cap: int | None, rng: np.random.Generator) -> np.ndarray:
    if cap is None or len(x) <= cap:
        return x
    return x[np.sort(rng.choice(len(x), cap, replace=False))]


def _prompt_list(name: str, prompts) -> list:
    if isinstance(prompts, str) or not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise InputError(f"prompts of task {name!r} must be a non-empty list of strings or token-id lists")
    return list(prompts)


def collect_decode_states(model, prompts_by_task: Mapping[str, Sequence], *, layer: int, max_new_tokens: int,
                          variant: Literal["plain", "boundary"] = "plain", max_states_per_task: int | None = 20000,
                          seed: int = 0, batch_size: int = 16, edits: Sequence | None = None,
                          stop_tokens: Sequence[int] | None = None) -> dict[str, np.ndarray]:
    """Residual stream after block `layer` at every generated, non-EOS token of greedy KV-cached decoding.

    For each prompt the model generates up to `max_new_tokens` tokens g1..gK; the state of g_s is the one computed
    when g_s is fed back (the decode step that produces the logits of g_{s+1}), so one extra token is generated
    internally to give gK its state. Rows that emitted EOS are not collected from then on (the EOS token's own state
    is never kept; `GenerateOutput.decode_active`). variant="plain" keeps exactly these states (the reference H1
    runner); variant="boundary" also keeps the last prompt token's state, which the boundary loop runs as its first
    decode step (the reference calibration does not capture it). At most `max_states_per_task` states per task are
    kept, drawn at random with `seed`. `edits` (e.g. a SubspaceProjection) are applied during generation.
    `stop_tokens` (default: EOS plus <|im_end|> when the vocabulary has it) also end a row: the state of a stop
    token and everything after it is dropped, which matters for chat organisms that end turns with <|im_end|>.
    Returns task -> float64 array [n_states, d_model]."""
    out = collect_decode_states_multi(model, prompts_by_task, layers=[layer], max_new_tokens=max_new_tokens,
                                      variant=variant, max_states_per_task=max_states_per_task, seed=seed,
                                      batch_size=batch_size, edits=edits, stop_tokens=stop_tokens)
    return out[int(layer)]


def collect_decode_states_multi(model, prompts_by_task: Mapping[str, Sequence], *, layers: Sequence[int],
                                max_new_tokens: int, variant: Literal["plain", "boundary"] = "plain",
                                max_states_per_task: int | None = 20000, seed: int = 0, batch_size: int = 16,
                                edits: Sequence | None = None, stop_tokens: Sequence[int] | None = None
                                ) -> dict[int, dict[str, np.ndarray]]:
    """`collect_decode_states` for several layers from one generation pass: {layer: {task: [n, d]}}. The same
    (row, step) states are kept at every layer. A row also counts as finished at its first token in
    `stop_tokens` (default `stop_token_ids(model)`: EOS plus a chat end-of-turn token such as <|im_end|>)."""
    import torch
    sites = {int(l): resid_site(model, l) for l in layers}
    if not sites:
        raise ConfigError("layers must name at least one layer")
    if variant not in DECODE_VARIANTS:
        raise ConfigError(f"variant must be one of {DECODE_VARIANTS}; got {variant!r}")
    if max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be >= 1; got {max_new_tokens}")
    rng = np.random.default_rng(seed)
    stops = set(stop_tokens if stop_tokens is not None else stop_token_ids(model))
    out: dict[int, dict[str, np.ndarray]] = {l: {} for l in sites}
    for name, prompts in prompts_by_task.items():
        prompts = _prompt_list(name, prompts)
        parts: dict[int, list] = {l: [] for l in sites}
        for chunk in _chunks(prompts, batch_size):
            gen = model.generate(chunk, max_new_tokens=max_new_tokens + 1, capture=list(sites.values()), edits=edits,
                                  chat=False)
            act = gen.decode_active
            if act is not None and act.numel():
                # also stop rows at a non-EOS stop token (e.g. <|im_end|> of a chat organism): the state of
                # new token s is kept only if no stop token occurs among new tokens 0..s
                new = gen.tokens[:, gen.batch.input_ids.shape[1]:][:, :act.shape[1]]
                is_stop = torch.isin(new, torch.as_tensor(sorted(stops), device=new.device))
                act = act & (is_stop.long().cumsum(1) == 0).to(act.device)
            for l, site in sites.items():
                if variant == "boundary":
                    parts[l].append(gen.prefill_cache.last(site).detach().double().cpu().numpy())
                if act is not None and act.numel():
                    x = gen.decode_cache[site]
                    parts[l].append(x[act.to(x.device)].detach().double().cpu().numpy())
        n = sum(len(p) for p in parts[next(iter(sites))])
        keep = None
        if max_states_per_task is not None and n > max_states_per_task:
            keep = np.sort(rng.choice(n, max_states_per_task, replace=False))
        for l in sites:
            x = np.concatenate(parts[l], 0) if parts[l] else np.zeros((0, model.d_model))
            out[l][str(name)] = x if keep is None else x[keep]
    return out


def collect_prefill_states(model, prompts_by_task: Mapping[str, Sequence], *, layer: int,
                           max_states_per_task: int | None = 20000, seed: int = 0, batch_size: int = 32,
                           edits: Sequence | None = None) -> dict[str, np.ndarray]:
    """Residual stream after block `layer` at each prompt's last token (one state per prompt, from one uncached
    forward). Use `match_state_counts(decode, prefill)` to equalise counts with a decode set."""
    site = resid_site(model, layer)
    rng = np.random.default_rng(seed)
    out = {}
    for name, prompts in prompts_by_task.items():
        prompts = _prompt_list(name, prompts)
        parts = [model.run(chunk, capture=[site], edits=edits, logits=False, chat=False).cache.last(site)
                 .detach().double().cpu().numpy() for chunk in _chunks(prompts, batch_size)]
        out[str(name)] = _subsample(np.concatenate(parts, 0), max_states_per_task, rng)
    return out


def _encode_prompt(model, p) -> list[int]:
    if isinstance(p, str):
        ids = model.tokenizer(p)["input_ids"]
    else:
        ids = [int(t) for t in p]
    if not ids:
        raise InputError("empty prompt")
    return list(ids)


def _is_candidate(c) -> bool:
    return isinstance(c, str) or (isinstance(c, (list, tuple)) and len(c) > 0
                                  and all(isinstance(t, (int, np.integer)) for t in c))


def _encode_words(model, text) -> list[int]:
    if isinstance(text, str):
        return list(model.tokenizer(text, add_special_tokens=False)["input_ids"]) if text.strip() else []
    return [int(t) for t in text]


@dataclass
class ForcedChoiceScores:
    """Teacher-forced candidate scores: logprobs [n, C] (sum over each candidate's tokens), pred [n] (argmax),
    gold [n] (-1 when unknown), correct [n] bool, and the edit budget (forwards / positions edited)."""
    logprobs: np.ndarray
    pred: np.ndarray
    gold: np.ndarray
    correct: np.ndarray
    n_edited: int = 0

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean()) if len(self.correct) else float("nan")

    def margin(self) -> np.ndarray:
        """gold log-prob minus the best wrong candidate's."""
        lp = self.logprobs.copy()
        g = lp[np.arange(len(lp)), self.gold]
        lp[np.arange(len(lp)), self.gold] = -np.inf
        return g - lp.max(1)

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"example": np.arange(len(self.pred)), "pred": self.pred, "gold": self.gold,
                             "correct": self.correct, "gold_logprob": self.logprobs[np.arange(len(self.pred)),
                                                                                      np.maximum(self.gold, 0)]})


def score_forced_choice(model, prompts: Sequence, candidates: Sequence, gold: Sequence[int] | None = None, *,
                        edits: Sequence | None = None, answer_prefix: str | Sequence[int] | None = None,
                        batch_size: int = 64) -> ForcedChoiceScores:
    """Forced choice by teacher-forced candidate log-probs.

    prompts: strings (tokenised with the model's special tokens) or token-id lists. candidates: one list of
    candidate continuations shared by all prompts, or one list per prompt (strings or token-id lists; multi-token
    candidates score the sum of their token log-probs). answer_prefix: teacher-forced before every candidate and not
    scored (e.g. "ans"). Edits are given in generation terms (phases/positions relative to the prompt) and are
    re-targeted with `teacher_forced`, so a decode-only edit touches the answer prefix and candidate tokens (as in
    the reference loop) but no prompt token; the uncached forward over prompt + candidate computes exactly what a
    KV-cached teacher-forced loop computes (tested)."""
    import torch

    from interplab.interventions.projection import teacher_forced

    prompts = list(prompts)
    if not prompts:
        raise InputError("score_forced_choice needs at least one prompt")
    candidates = list(candidates)
    if candidates and all(_is_candidate(c) for c in candidates):
        cands = [candidates] * len(prompts)  # one candidate list shared by every prompt
    else:
        cands = [list(c) for c in candidates]
    if len(cands) != len(prompts):
        raise ShapeError(f"{len(cands)} candidate lists for {len(prompts)} prompts")
    C = len(cands[0])
    if C < 1 or any(len(c) != C for c in cands):
        raise ShapeError("every prompt needs the same (non-zero) number of candidates")
    pre = _encode_words(model, answer_prefix) if answer_prefix is not None else []
    rows, core, start = [], [], []
    for p, cs in zip(prompts, cands):
        pid = _encode_prompt(model, p)
        for c in cs:
            cid = _encode_words(model, c)
            if not cid:
                raise InputError(f"candidate {c!r} encodes to no tokens")
            rows.append(pid + pre + cid)
            core.append(len(pid))
            start.append(len(pid) + len(pre))
    edits = list(edits or [])
    scores = np.empty(len(rows))
    n_before = [getattr(e, "n_edited", 0) for e in edits]
    for i0 in range(0, len(rows), batch_size):
        sl = slice(i0, i0 + batch_size)
        chunk = rows[sl]
        wrapped = [teacher_forced(e, core[sl]) for e in edits]
        # only the positions that predict a candidate token are unembedded: the last k of each left-padded row
        k = max(len(r) - s0 for r, s0 in zip(chunk, start[sl])) + 1
        out = model.run(chunk, edits=wrapped, logits=True, logits_last=k)
        lp = torch.log_softmax(out.logits.to(torch.float64), -1)
        for j, r in enumerate(chunk):
            n = len(r) - start[i0 + j]  # candidate tokens, predicted by the n positions before the last one
            cols = torch.arange(k - 1 - n, k - 1, device=lp.device)
            toks = torch.as_tensor(r[-n:], device=lp.device)
            scores[i0 + j] = float(lp[j, cols, toks].sum())
    logprobs = scores.reshape(len(prompts), C)
    pred = logprobs.argmax(1)
    g = np.full(len(prompts), -1) if gold is None else np.asarray(gold, dtype=np.int64).reshape(-1)
    if g.shape[0] != len(prompts):
        raise ShapeError(f"gold has {g.shape[0]} entries for {len(prompts)} prompts")
    n_edited = sum(getattr(e, "n_edited", 0) - b for e, b in zip(edits, n_before))
    return ForcedChoiceScores(logprobs, pred, g, (pred == g) & (g >= 0), int(n_edited))


@dataclass
class GenerationScores:
    """Free greedy generation scored by exact match of the tokens before the first stop token.

    tokens: generated ids per example (up to and including the stop token); texts: decoded answers; correct [n];
    stopped [n] (a stop token was emitted); lengths [n] (tokens before the stop)."""
    tokens: list[list[int]]
    texts: list[str]
    correct: np.ndarray
    stopped: np.ndarray
    lengths: np.ndarray
    n_edited: int = 0

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean()) if len(self.correct) else float("nan")

    @property
    def stop_rate(self) -> float:
        return float(self.stopped.mean()) if len(self.stopped) else float("nan")

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame({"example": np.arange(len(self.texts)), "text": self.texts, "correct": self.correct,
                             "stopped": self.stopped, "length": self.lengths})


def stop_token_ids(model) -> list[int]:
    """The model's stop tokens: `LabModel.stop_token_ids` (EOS plus the generation config's eos ids) when present,
    else EOS; plus the chat end-of-turn token <|im_end|> when the vocabulary has one."""
    ids: list[int] = []
    st = getattr(model, "stop_token_ids", None)
    if st is not None:
        ids = [int(t) for t in (st.tolist() if hasattr(st, "tolist") else st)]
    elif model.eos_token_id is not None:
        ids = [int(model.eos_token_id)]
    conv = getattr(model.tokenizer, "convert_tokens_to_ids", None)
    im_end = conv("<|im_end|>") if conv is not None else None
    unk = getattr(model.tokenizer, "unk_token_id", None)
    if isinstance(im_end, int) and im_end != unk and im_end not in ids:
        ids.append(im_end)
    return ids


def generate_exact_match(model, prompts: Sequence, answers: Sequence, *, max_new_tokens: int,
                         edits: Sequence | None = None, batch_size: int = 16,
                         stop_tokens: Sequence[int] | None = None) -> GenerationScores:
    """Greedy KV-cached generation with `edits`; an example is correct when the tokens before the first stop token
    (EOS, or <|im_end|> for chat organisms) equal the answer's tokens exactly and a stop token was emitted.
    Generation continues past <|im_end|> when it is not the tokenizer's EOS, but only the part before it is scored."""
    prompts, answers = list(prompts), list(answers)
    if len(prompts) != len(answers):
        raise ShapeError(f"{len(prompts)} prompts but {len(answers)} answers")
    stops = set(stop_tokens if stop_tokens is not None else stop_token_ids(model))
    edits = list(edits or [])
    n_before = [getattr(e, "n_edited", 0) for e in edits]
    toks_all, texts, correct, stopped, lengths = [], [], [], [], []
    for i0 in range(0, len(prompts), batch_size):
        chunk = prompts[i0:i0 + batch_size]
        gen = model.generate([_encode_prompt(model, p) for p in chunk], max_new_tokens=max_new_tokens, edits=edits)
        for j, new in enumerate(gen.new_tokens):
            cut = next((i for i, t in enumerate(new) if t in stops), None)
            body = new if cut is None else new[:cut]
            ans = _encode_words(model, answers[i0 + j])
            toks_all.append(list(new))
            texts.append(model.tokenizer.decode(body, skip_special_tokens=False).strip())
            stopped.append(cut is not None)
            lengths.append(len(body))
            correct.append(cut is not None and body == ans)
    n_edited = sum(getattr(e, "n_edited", 0) - b for e, b in zip(edits, n_before))
    return GenerationScores(toks_all, texts, np.asarray(correct, bool), np.asarray(stopped, bool),
                            np.asarray(lengths, np.int64), int(n_edited))
