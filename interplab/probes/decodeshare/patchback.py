"""DecodeShare patchback (spec methods/decodeshare.md, "Patchback"; §6 issue 3; test 11; figure 10).

Flip set F = examples that greedy generation answers correctly at baseline and wrongly under the decode-only
removal of the shared subspace (`SubspaceProjection(layer, Q_S, alpha)`). For every window W of decode steps and
every patch source, each example of F is regenerated under [ablation, patchback] with the patchback writing
Pi (h_donor[s] - h_abl) back at the steps of W (`SubspacePatchback`); rescue rate = #correct / |F|.

Patch sources:
  * ``same-example``: Pi = Q_S Q_S^T, donor = the example's own baseline decode states. With W = all this is an
    identity by construction (§6 issue 3): at every step the ablated state's removed component is restored exactly,
    so the whole run equals the baseline up to rounding. It is a consistency check, not evidence.
  * ``transfer``: Pi = Q_S Q_S^T, donor = the baseline decode states of another example of the same task (drawn
    among that task's baseline-correct examples, never itself). This is the informative number.
  * ``transfer (same length)``: as ``transfer`` but the donor's answer has the same number of tokens (tests whether
    what the shared component carries is answer-length / stop information; rows with no such donor count as not
    rescued and are reported in info["transfer_missing"]).
  * controls ``<name> (same-example)``: the example's own baseline states patched through another subspace of the
    same size (e.g. non-shared components, a Haar-random subspace), so what is written back is not what was removed.
  * control ``random in span (norm-matched)`` (spec "Controls"): through Q_S, but the written shared component is a
    random vector of span(Q_S) whose norm equals the same-example donor's shared component ‖Q_Sᵀ h_donor[s]‖ at every
    step — right subspace, right energy, wrong content.

Everything runs through `LabModel.generate` (KV cache, left-padded batches; each batch gets its own patchback
holding its rows' donors). Decode step s is the state of generated token s+1 (the one fed at KV-cached step s);
steps are counted per row, so W = {0} patches every row's first decode step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from interplab.core.errors import ConfigError, InputError, ShapeError
from interplab.core.result import Result
from interplab.probes.decodeshare.model import _chunks, _encode_prompt, _encode_words, resid_site, stop_token_ids
from interplab.probes.stats import bootstrap_ci

__all__ = ["DecodeRecord", "record_generation", "PatchbackResult", "patchback_rescue", "pick_transfer_donors",
           "patchback_controls", "random_span_states"]

# patch source name -> the ablation condition whose basis it patches through (see `build_bases`)
CONTROL_BASES = {"non-shared": "var-matched", "haar": "haar"}


@dataclass
class DecodeRecord:
    """One greedy generation pass over n prompts.

    new_tokens: generated ids per example (up to and including the model's stop token); correct [n] (exact match of
    the tokens before the first stop token, as `generate_exact_match`); states [n, K, d] float64: resid_post.layer
    at decode steps 0..K-1 (zero where invalid); valid [n, K]: the row was still generating at that step."""
    new_tokens: list
    correct: np.ndarray
    states: np.ndarray
    valid: np.ndarray


def patchback_controls(bases: Mapping[str, Any]) -> dict:
    """{patch source: basis} of the control patches: the same-example donor patched through the variance-matched
    non-shared basis and through the Haar basis of the ablation table (`build_bases` output, name -> `Condition`);
    missing or skipped ones are left out."""
    return {name: bases[key].basis for name, key in CONTROL_BASES.items()
            if key in bases and bases[key].basis is not None}


def _score(new: Sequence[int], answer: Sequence[int], stops: set) -> bool:
    cut = next((i for i, t in enumerate(new) if t in stops), None)
    return cut is not None and list(new[:cut]) == list(answer)


def record_generation(model, prompts: Sequence, answers: Sequence, *, layer: int, max_new_tokens: int,
                      edits: Sequence = (), row_edits: Callable[[int, int], Sequence] | None = None,
                      batch_size: int = 16, stop_tokens: Sequence[int] | None = None) -> DecodeRecord:
    """Greedy KV-cached generation with `edits` (plus `row_edits(i0, i1)` for the batch of prompts i0..i1-1, e.g. a
    per-row patchback), recording correctness and the decode states at `resid_post.layer`. K = max_new_tokens - 1
    (the last generated token is never fed back)."""
    import torch

    prompts, answers = list(prompts), list(answers)
    if len(prompts) != len(answers):
        raise ShapeError(f"{len(prompts)} prompts but {len(answers)} answers")
    site = resid_site(model, layer)
    stops = set(stop_tokens if stop_tokens is not None else stop_token_ids(model))
    K = max_new_tokens - 1
    n, d = len(prompts), model.d_model
    states = np.zeros((n, K, d))
    valid = np.zeros((n, K), dtype=bool)
    toks, correct = [], []
    i0 = 0
    for chunk in _chunks(prompts, batch_size):
        i1 = i0 + len(chunk)
        ed = list(edits) + list(row_edits(i0, i1) if row_edits is not None else [])
        gen = model.generate([_encode_prompt(model, p) for p in chunk], max_new_tokens=max_new_tokens,
                             capture=[site], edits=ed)
        act = gen.decode_active
        if act is not None and act.numel():
            x = gen.decode_cache[site].detach().to(torch.float64).cpu().numpy()
            a = act.cpu().numpy()
            states[i0:i1, :x.shape[1]] = np.where(a[..., None], x, 0.0)
            valid[i0:i1, :a.shape[1]] = a
        for j, new in enumerate(gen.new_tokens):
            toks.append(list(new))
            correct.append(_score(new, _encode_words(model, answers[i0 + j]), stops))
        i0 = i1
    return DecodeRecord(toks, np.asarray(correct, bool), states, valid)


def pick_transfer_donors(tasks: Sequence[str], ok: np.ndarray, targets: Sequence[int], *, seed: int = 0,
                         keys: Sequence | None = None) -> np.ndarray:
    """For each target index, a donor index of the same task (and the same `keys` value, e.g. answer length, when
    given) among `ok` examples, never the target itself (-1 when there is none). Deterministic for a seed."""
    tasks = np.asarray(tasks)
    ok = np.asarray(ok, bool)
    kk = np.zeros(len(tasks)) if keys is None else np.asarray(keys)
    rng = np.random.default_rng(seed)
    out = np.full(len(targets), -1, dtype=np.int64)
    for j, i in enumerate(targets):
        pool = np.flatnonzero(ok & (tasks == tasks[i]) & (kk == kk[i]))
        pool = pool[pool != i]
        if len(pool):
            out[j] = int(rng.choice(pool))
    return out


@dataclass
class PatchbackResult(Result):
    """Rescue rates.

    table: one row per (source, window, task incl. 'all'): n_flip, n_rescued, rescue_rate with a 95% bootstrap CI
    (lo, hi), identical_rate (patched tokens == baseline tokens), patch_k, n_edited (patched positions), n_no_donor
    (flipped rows without a donor; left unpatched, so counted as not rescued).
    examples: per flipped example and condition: rescued, identical, donor. info: settings and the baseline /
    ablation accuracies."""
    table: pd.DataFrame
    examples: pd.DataFrame
    info: dict = field(default_factory=dict)

    def to_frame(self):
        return self.table

    def rate(self, source: str, window: str = "all", task: str = "all") -> float:
        from interplab.interventions.patchback import window_label

        t = self.table
        r = t[(t["source"] == source) & (t["window"] == window_label(window)) & (t["task"] == task)]
        if r.empty:
            raise InputError(f"no rescue rate for source={source!r}, window={window!r}, task={task!r}")
        return float(r["rescue_rate"].iloc[0])


def _flatten(prompts_by_task: Mapping[str, Sequence], answers_by_task: Mapping[str, Sequence]):
    """One list of prompts / answers / task names / index within the task over every task, in task order."""
    names = [str(t) for t in prompts_by_task]
    if set(names) != {str(t) for t in answers_by_task}:
        raise InputError("prompts_by_task and answers_by_task must have the same tasks")
    prompts, answers, tasks, idx_in_task = [], [], [], []
    for t in prompts_by_task:
        ps, as_ = list(prompts_by_task[t]), list(answers_by_task[t])
        if len(ps) != len(as_) or not ps:
            raise InputError(f"task {t!r}: {len(ps)} prompts and {len(as_)} answers (need the same, >= 1)")
        prompts += ps
        answers += as_
        tasks += [str(t)] * len(ps)
        idx_in_task += list(range(len(ps)))
    return names, prompts, answers, tasks, idx_in_task


def random_span_states(Q: np.ndarray, states: np.ndarray, seed: int) -> np.ndarray:
    """[n, K, d] random vectors of span(Q) with, at every (row, step), the norm of Qᵀ states[row, step]."""
    Qo = np.linalg.qr(Q)[0]
    norms = np.linalg.norm(states @ Qo, axis=-1, keepdims=True)  # [n, K, 1]
    z = np.random.default_rng(seed).standard_normal((*states.shape[:2], Qo.shape[1]))
    z /= np.maximum(np.linalg.norm(z, axis=-1, keepdims=True), 1e-300)
    return (z * norms) @ Qo.T


def _patch_sources(model, Q, flip, base: DecodeRecord, tasks, answers, *, controls, transfer: bool,
                   transfer_same_length: bool, random_span: bool, seed: int):
    """[(source name, patch basis, donor index per flipped row, donor states or None = the baseline's)] and the
    number of rows without a donor."""
    sources: list[tuple] = [("same-example", Q, flip, None)]
    missing = {}
    if transfer:
        donors_t = pick_transfer_donors(tasks, base.correct, flip, seed=seed)
        missing["transfer"] = int((donors_t < 0).sum())
        sources.append(("transfer", Q, donors_t, None))
    if transfer_same_length:
        lengths = [len(_encode_words(model, a)) for a in answers]
        donors_l = pick_transfer_donors(tasks, base.correct, flip, seed=seed, keys=lengths)
        missing["transfer (same length)"] = int((donors_l < 0).sum())
        sources.append(("transfer (same length)", Q, donors_l, None))
    for name, b in (controls or {}).items():
        b = np.asarray(b, float)
        if b.ndim != 2 or b.shape[0] != model.d_model:
            raise ShapeError(f"control basis {name!r} must be [d_model={model.d_model}, k]; got {b.shape}")
        sources.append((f"{name} (same-example)", b, flip, None))
    if random_span:
        sources.append(("random in span (norm-matched)", Q, flip, random_span_states(Q, base.states, seed)))
    return sources, missing


def patchback_rescue(model, prompts_by_task: Mapping[str, Sequence], answers_by_task: Mapping[str, Sequence], *,
                     layer: int, ablation_basis, alpha: float = 1.0, controls: Mapping[str, Any] | None = None,
                     windows: Sequence = ("0", "0,1", "all"), transfer: bool = True,
                     transfer_same_length: bool = True, random_span: bool = True, max_new_tokens: int = 12,
                     batch_size: int = 32, stop_tokens: Sequence[int] | None = None, seed: int = 0,
                     n_boot: int = 2000, progress: Callable[[str], None] | None = None) -> PatchbackResult:
    """Rescue rates of decode-only shared-subspace removal by patchback (module doc).

    ablation_basis: Q_S [d, k] removed by `SubspaceProjection(layer, Q_S, alpha, phases=("decode",))`.
    controls: {name: basis [d, k_c]} patched with the same-example donor instead of Q_S (e.g. "non-shared",
    "haar"). windows: decode-step windows ("0", "0,1", "all", or lists of steps). transfer /
    transfer_same_length: include the transfer-donor sources. random_span: include the norm-matched random-vector-in-
    span(Q_S) control. Generation settings as `generate_exact_match`."""
    from interplab.interventions.patchback import window_label
    from interplab.interventions.projection import SubspaceProjection

    say = progress or (lambda msg: None)
    names, prompts, answers, tasks, idx_in_task = _flatten(prompts_by_task, answers_by_task)
    if max_new_tokens < 2:
        raise ConfigError("patchback needs max_new_tokens >= 2 (decode steps exist only after the first token)")
    wins = [window_label(w) for w in windows]
    if not wins:
        raise ConfigError("windows must name at least one decode-step window")
    Q = np.asarray(ablation_basis, float)
    if Q.ndim != 2 or Q.shape[0] != model.d_model or Q.shape[1] == 0:
        raise ShapeError(f"ablation_basis must be [d_model={model.d_model}, k >= 1]; got {Q.shape}")
    gen_kw = dict(layer=layer, max_new_tokens=max_new_tokens, batch_size=batch_size, stop_tokens=stop_tokens)
    abl = SubspaceProjection(layer, Q, alpha, phases=("decode",))

    say("patchback: baseline")
    base = record_generation(model, prompts, answers, **gen_kw)
    say("patchback: ablation")
    ab = record_generation(model, prompts, answers, edits=[abl], **gen_kw)
    flip = np.flatnonzero(base.correct & ~ab.correct)
    tasks_a = np.asarray(tasks)
    info = {"layer": int(layer), "alpha": float(alpha), "k_ablation": int(Q.shape[1]), "variant": "plain",
            "windows": wins, "n_examples": len(prompts), "baseline_acc": float(base.correct.mean()),
            "ablation_acc": float(ab.correct.mean()), "n_flip": int(len(flip)),
            "n_flip_by_task": {t: int((tasks_a[flip] == t).sum()) for t in names},
            "max_new_tokens": int(max_new_tokens), "seed": int(seed),
            "controls": {n: int(np.asarray(b).shape[1]) for n, b in (controls or {}).items()}}
    if len(flip) == 0:
        say("patchback: the ablation flipped no example; nothing to rescue")
        return PatchbackResult(pd.DataFrame(columns=TABLE_COLUMNS), pd.DataFrame(columns=EXAMPLE_COLUMNS), info)

    sources, info["transfer_missing"] = _patch_sources(model, Q, flip, base, tasks, answers, controls=controls,
                                                       transfer=transfer, transfer_same_length=transfer_same_length,
                                                       random_span=random_span, seed=seed)
    f_prompts = [prompts[i] for i in flip]
    f_answers = [answers[i] for i in flip]
    rows, per = [], []
    for src, basis, donor_idx, states in sources:
        for w in wins:
            say(f"patchback: {src}, W = {w}")
            rec, n_ed = _patched_run(model, abl, base, basis, donor_idx, w, f_prompts, f_answers, gen_kw,
                                     states=states)
            ident = np.array([rec.new_tokens[j] == base.new_tokens[i] for j, i in enumerate(flip)])
            in_task = np.asarray(idx_in_task)
            per.append(pd.DataFrame({"source": src, "window": w, "task": tasks_a[flip], "example": in_task[flip],
                                     "rescued": rec.correct.astype(float), "identical": ident.astype(float),
                                     "donor": [int(in_task[d]) if d >= 0 else -1 for d in donor_idx]}))
            for task in ["all"] + [t for t in names if (tasks_a[flip] == t).any()]:
                sel = np.ones(len(flip), bool) if task == "all" else tasks_a[flip] == task
                m, lo, hi = bootstrap_ci(rec.correct[sel].astype(float), B=n_boot, seed=seed)
                rows.append({"source": src, "window": w, "task": task, "n_flip": int(sel.sum()),
                             "n_rescued": int(rec.correct[sel].sum()), "rescue_rate": m, "lo": lo, "hi": hi,
                             "identical_rate": float(ident[sel].mean()), "patch_k": int(basis.shape[1]),
                             "n_edited": int(n_ed) if task == "all" else np.nan,
                             "n_no_donor": int((donor_idx[sel] < 0).sum())})
    return PatchbackResult(pd.DataFrame(rows, columns=TABLE_COLUMNS), pd.concat(per, ignore_index=True), info)


TABLE_COLUMNS = ["source", "window", "task", "n_flip", "n_rescued", "rescue_rate", "lo", "hi", "identical_rate",
                 "patch_k", "n_edited", "n_no_donor"]
EXAMPLE_COLUMNS = ["source", "window", "task", "example", "rescued", "identical", "donor"]


def _patched_run(model, abl, base: DecodeRecord, basis, donor_idx, window, prompts, answers, gen_kw, *,
                 states: np.ndarray | None = None):
    """Regenerate the flipped rows under [ablation, patchback from their donors through `basis` on `window`];
    returns the record and the number of positions patched. `states` replaces the baseline's donor states."""
    from interplab.interventions.patchback import SubspacePatchback

    ok = donor_idx >= 0
    src = base.states if states is None else states
    don = np.where(ok[:, None, None], src[np.maximum(donor_idx, 0)], 0.0)
    dval = base.valid[np.maximum(donor_idx, 0)] & ok[:, None]
    made: list = []

    def row_edits(i0, i1):
        e = SubspacePatchback(gen_kw["layer"], basis, don[i0:i1], dval[i0:i1], window=window)
        made.append(e)
        return [e]

    rec = record_generation(model, prompts, answers, edits=[abl], row_edits=row_edits, **gen_kw)
    return rec, sum(e.n_edited for e in made)
