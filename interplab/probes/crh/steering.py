"""CRH steering through a model: many steering conditions, one steering vector per batch row, in as few `generate`
calls as `max_rows` allows (the `Steer` edit accepts a [b, d] vector), and the two CRH protocols on top of it,
`sector_scan` (spec §2.3) and `penalty_scan` (§4, Implication 1), judged by a pluggable judge (`judges`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from interplab.core.errors import ConfigError, InputError, ShapeError
from interplab.core.result import Result
from interplab.probes.crh.cylinder import Cylinder
from interplab.probes.crh.diffs import _read_site, _write_site
from interplab.probes.crh.judges import check_labels
from interplab.probes.crh.sectors import (PenaltyMap, SectorMap, penalty_grid, penalty_vector, sector_angles,
                                          sector_vectors, strength_grid)

POSITIONS = ("all", "prompt", "last_prompt", "decode")


@dataclass
class SteerRun(Result):
    """Texts of a batched steering run, in row order, with the number of generate calls used."""

    texts: list[str]
    n_calls: int
    seconds: float


END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>")


def _stop_strings(model, stop_strings) -> tuple[str, ...]:
    if stop_strings is not None:
        return tuple(stop_strings)
    vocab = model.tokenizer.get_vocab()
    return tuple(s for s in END_OF_TURN if s in vocab)


def truncate_at(texts: Sequence[str], stops: Sequence[str]) -> list[str]:
    """Cut each text at the first occurrence of any stop string (the end of the assistant turn)."""
    out = []
    for t in texts:
        cut = min([i for i in (t.find(s) for s in stops) if i >= 0], default=len(t))
        out.append(t[:cut].strip())
    return out


def steer_generate(model, prompts: Sequence, vectors, *, site: str, positions="all", max_new_tokens: int = 16,
                   max_rows: int = 256, greedy: bool = True, temperature: float = 1.0, seed: int | None = 0,
                   stop_strings: Sequence[str] | None = None,
                   progress: Callable[[float], None] | None = None) -> SteerRun:
    """Generate one continuation per (prompt, vector) row: prompts [n] (str or ids), vectors [n, d] (one steering
    vector per row; a zero row is an unsteered control). Rows are generated in chunks of `max_rows` per `generate`
    call, each row steered by its own vector via `Steer(site, vectors[chunk], positions)` (pads never steered).
    Texts are cut at the first end-of-turn string (`stop_strings`; default: whichever of <|im_end|>, <|eot_id|>,
    <end_of_turn> the vocabulary has), so only the assistant's answer is judged."""
    import time

    import torch

    from interplab.interventions import Steer

    prompts = list(prompts)
    V = torch.as_tensor(np.array(vectors), dtype=model.dtype) if not hasattr(vectors, "detach") else \
        vectors.to(model.dtype)
    if V.ndim != 2 or V.shape[0] != len(prompts) or V.shape[1] != model.d_model:
        raise ShapeError(f"vectors must be [n_rows={len(prompts)}, d_model={model.d_model}]; got {tuple(V.shape)}")
    if positions not in POSITIONS and not isinstance(positions, (int, list, tuple)) and not callable(positions):
        raise ConfigError(f"positions must be one of {POSITIONS}, an int, a list or a callable")
    stops = _stop_strings(model, stop_strings)
    t0 = time.perf_counter()
    texts: list[str] = []
    calls = 0
    for i in range(0, len(prompts), max_rows):
        chunk = V[i: i + max_rows].to(model.device)
        edit = Steer(site, chunk, positions=positions)
        out = model.generate(prompts[i: i + max_rows], max_new_tokens=max_new_tokens, edits=[edit], greedy=greedy,
                             temperature=None if greedy else temperature, seed=seed, return_logits=False,
                             chat=False)
        texts.extend(truncate_at(out.text, stops))
        calls += 1
        if progress is not None:
            progress(min(1.0, (i + max_rows) / len(prompts)))
    return SteerRun(texts=texts, n_calls=calls, seconds=time.perf_counter() - t0)


def continuation_nll(model, prompts: Sequence, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
    """Fluency of steered replies: each text's mean per-token negative log-likelihood (nats) as the continuation of
    its prompt under the *unsteered* model; NaN for an empty text. A steered reply that still reads as language to
    the model scores near the unsteered replies; one that "elicits" by breaking the model scores far above them.
    prompts: strings (raw text) or token-id lists, as given to `steer_generate`."""
    import torch

    prompts, texts = list(prompts), list(texts)
    if len(prompts) != len(texts):
        raise ShapeError(f"{len(prompts)} prompts but {len(texts)} texts; pass one prompt per text")
    tok = model.tokenizer
    out = np.full(len(texts), np.nan)
    for s in range(0, len(texts), batch_size):
        rows, ns, idx = [], [], []
        for i in range(s, min(s + batch_size, len(texts))):
            cont = tok.encode(texts[i], add_special_tokens=False) if texts[i] else []
            if not cont:
                continue
            p = prompts[i]
            pid = list(tok.encode(p)) if isinstance(p, str) else [int(t) for t in p]
            rows.append(pid + list(cont))
            ns.append(len(cont))
            idx.append(i)
        if not rows:
            continue
        K = max(ns) + 1
        with torch.no_grad():
            logits = model.run(rows, logits_last=K, chat=False).logits.float()
        logp = torch.log_softmax(logits, -1)
        for j, (i, n) in enumerate(zip(idx, ns)):
            tgt = torch.as_tensor(rows[j][-n:], device=logp.device)
            lp = logp[j, K - 1 - n: K - 1].gather(-1, tgt[:, None]).squeeze(-1)
            out[i] = float(-lp.mean())
    return out


def reply_nll(model, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
    """Fluency of replies on their own: `continuation_nll` after a neutral context (a chat model's generation prompt
    for an empty user turn, else its BOS / EOS token). The question is left out on purpose: a steered reply is off
    the question's topic by design, and conditioning on the question would count that against its fluency."""
    tok = model.tokenizer
    if getattr(model, "chat_default", False):
        ctx = model.apply_chat_template([{"role": "user", "content": ""}], add_generation_prompt=True)
    else:
        start = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        if start is None:
            raise InputError(f"{getattr(model, 'name', 'the model')}'s tokenizer has neither a BOS nor an EOS token "
                             "to start a reply from; score replies with continuation_nll(prompts=...) instead")
        ctx = [int(start)]
    return continuation_nll(model, [ctx] * len(texts), texts, batch_size=batch_size)


def _judge(judge, texts: list[str]) -> np.ndarray:
    if not callable(judge):
        raise ConfigError("judge must be a callable list[str] -> labels in {1, 2, 3}")
    return check_labels(judge(texts), len(texts))


def sector_scan(model, prompts: Sequence, cylinder: Cylinder, *, layer: int, judge, gamma: float = 45.0,
                n_bins: int = 24, strengths=None, positions="all", site: str = "resid_post", offbyone: bool = False,
                max_new_tokens: int = 16, max_rows: int = 256, greedy: bool = True, keep_texts: bool = True,
                progress=None) -> SectorMap:
    """Sector steering (spec §2.3): for every prompt, bin β_k (n_bins around the normal plane) and strength L, steer
    with v = L[cos γ·û + sin γ(cos β·ê1 + sin β·ê2)] at `resid_post.layer` (the site the diffs were read from) and
    judge the continuation. gamma in degrees. strengths default: k·L_max/25, k = 1..25, L_max = 3‖a‖.

    All (bin × strength) conditions of all prompts go through `steer_generate` in chunks of `max_rows` rows.
    Returns a SectorMap (labels [n_prompts, n_bins, n_strengths]; AUC, minimal activating strength, centres)."""
    prompts = list(prompts)
    if not prompts:
        raise InputError("sector_scan needs at least one prompt")
    if cylinder.d != model.d_model:
        raise ShapeError(f"cylinder lives in d={cylinder.d}, the model's residual width is {model.d_model}")
    L = strength_grid(3.0 * cylinder.axis_norm) if strengths is None else np.asarray(strengths, np.float64).ravel()
    V = sector_vectors(cylinder, gamma_deg=gamma, n_bins=n_bins, strengths=L)        # [K, B, d]
    S, B, K = len(prompts), n_bins, L.size
    rows_v = np.broadcast_to(np.transpose(V, (1, 0, 2))[None], (S, B, K, V.shape[-1])).reshape(S * B * K, -1)
    rows_p = [p for p in prompts for _ in range(B * K)]
    write = _write_site(layer, site, offbyone)
    run = steer_generate(model, rows_p, rows_v, site=write, positions=positions, max_new_tokens=max_new_tokens,
                         max_rows=max_rows, greedy=greedy, progress=progress)
    labels = _judge(judge, run.texts).reshape(S, B, K)
    cfg = {"layer": layer, "read_site": _read_site(layer, site), "write_site": write, "offbyone": offbyone,
           "positions": positions if isinstance(positions, str) else repr(positions), "gamma_deg": gamma,
           "n_bins": n_bins, "max_new_tokens": max_new_tokens, "greedy": greedy, "n_calls": run.n_calls,
           "seconds": run.seconds, "model": getattr(model, "name", "?"), "judge": repr(judge)[:200]}
    return SectorMap(labels=labels, strengths=L, bin_angles=sector_angles(n_bins), gamma_deg=gamma, config=cfg,
                     texts=run.texts if keep_texts else None)


def penalty_scan(model, prompts: Sequence, diffs, axis, *, layer: int, judge, strengths=None, ps=None,
                 positions="all", site: str = "resid_post", offbyone: bool = False, max_new_tokens: int = 16,
                 max_rows: int = 256, greedy: bool = True, keep_texts: bool = False, progress=None) -> PenaltyMap:
    """Penalty steering (spec §4, Implication 1): prompt i is steered with v_i(L, p) built from its own diff vector
    diffs[i] and the axis, for every p in `ps` (default linspace(0, 1, 20)) and L in `strengths` (default
    k·3‖a‖/25 with ‖a‖ = ‖mean diffs‖ — pass the train diffmean's norm explicitly when diffs are test diffs).
    Mode `all` (every real position, prefill and decode) as in the repo's penalty scripts."""
    prompts = list(prompts)
    D = np.asarray(diffs, np.float64)
    if D.ndim != 2 or D.shape[0] != len(prompts):
        raise ShapeError(f"diffs must be [n_prompts={len(prompts)}, d]; got {D.shape}")
    u = np.asarray(axis, np.float64).ravel()
    L = strength_grid(3.0 * float(np.linalg.norm(D.mean(0)))) if strengths is None else \
        np.asarray(strengths, np.float64).ravel()
    P = penalty_grid(20) if ps is None else np.asarray(ps, np.float64).ravel()
    # v[s, p, k] = penalty_vector(D[s], u, L[k], P[p]) → [S, P, K, d]
    V = penalty_vector(D[:, None, None, :], u, L[None, None, :], P[None, :, None])
    S, NP, K = len(prompts), P.size, L.size
    rows_p = [p for p in prompts for _ in range(NP * K)]
    write = _write_site(layer, site, offbyone)
    run = steer_generate(model, rows_p, V.reshape(S * NP * K, -1), site=write, positions=positions,
                         max_new_tokens=max_new_tokens, max_rows=max_rows, greedy=greedy, progress=progress)
    labels = _judge(judge, run.texts).reshape(S, NP, K)
    cos = (D @ (u / np.linalg.norm(u))) / np.linalg.norm(D, axis=1)
    cfg = {"layer": layer, "read_site": _read_site(layer, site), "write_site": write, "offbyone": offbyone,
           "positions": positions if isinstance(positions, str) else repr(positions), "max_new_tokens": max_new_tokens,
           "greedy": greedy, "n_calls": run.n_calls, "seconds": run.seconds, "model": getattr(model, "name", "?")}
    return PenaltyMap(labels=labels, ps=P, strengths=L, cos_theta=cos, config=cfg,
                      texts=run.texts if keep_texts else None)
