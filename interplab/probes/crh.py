"""CRH: cylinder geometry of concept difference vectors, penalty and sector steering (spec methods/crh.md).

Model-free parts live in `crh_geometry` (cylinder fit, penalty/sector vectors, metrics, Implication-3 test),
`crh_synthetic` (planted-cylinder generator + oracle), `crh_helix` (spiral probe) and `crh_judges`; this module adds
the parts that run a `LabModel`:

* `concept_diffs(model, pairs, layer=L)`: with-concept minus without-concept activations at `resid_post.L`, read at
  each row's last real token (left padding handled by the hook layer's `cache.last`).
* `steer_generate(...)`: many steering conditions, one steering vector per batch row, in as few `generate` calls
  as `max_rows` allows (the `Steer` edit accepts a [b, d] vector).
* `sector_scan`, `penalty_scan`, `baseline_scan`: the CRH protocols on top of it, judged by a pluggable judge.

Read and write sites are the same (`resid_post.L`) unless `offbyone=True` reproduces the repo's B1 bug (write at
`resid_pre.L`, one block earlier than the read)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from interplab.core.errors import ConfigError, DataError, InputError, ShapeError
from interplab.probes.crh_geometry import (  # noqa: F401  (re-exported)
    Cylinder, PairwiseTest, PenaltyMap, SectorMap, activation_auc, activation_margin, angle_between,
    circular_mean, first_activation, fit_cylinder, lrh_null_plane_explained, max_principal_angle, pairwise_test,
    penalty_grid, penalty_vector, procrustes_2d, sector_angles, sector_centre, sector_vectors, steerability_slope,
    strength_grid, suppress_centre, TrigLawScan, trig_law_scan, wrap_angle,
)
from interplab.probes.crh_helix import HelixConfig, HelixFit, fit_helix, planted_helix, planted_line  # noqa: F401
from interplab.probes.crh_judges import (  # noqa: F401
    CONCEPT, GIBBERISH, NORMAL, GibberishFilter, LLMJudge, TokenSetJudge, check_labels,
)
from interplab.probes.crh_synthetic import (  # noqa: F401
    PlantedCylinder, PlantedCylinderConfig, planted_cylinder, synthetic_penalty_map, synthetic_sector_map,
)

POSITIONS = ("all", "prompt", "last_prompt", "decode")


# ------------------------------------------------------------------------------------------------ activations
def _read_site(layer: int, site: str = "resid_post") -> str:
    if site not in ("resid_post", "resid_pre"):
        raise ConfigError(f"CRH reads the residual stream: site must be 'resid_post' or 'resid_pre', got {site!r}")
    return f"{site}.{int(layer)}"


def _write_site(layer: int, site: str, offbyone: bool) -> str:
    if not offbyone:
        return _read_site(layer, site)
    if site != "resid_post":
        raise ConfigError("offbyone=True reproduces the repo: read at resid_post.L, write at resid_pre.L")
    return f"resid_pre.{int(layer)}"


def concept_acts(model, texts: Sequence, *, layer: int, position: str = "last", site: str = "resid_post",
                 batch_size: int = 32) -> np.ndarray:
    """Residual activations [n, d] (float64) at `site.layer`, read at each row's last real token (`position="last"`)
    or averaged over its real tokens (`"mean"`). `texts`: strings or token-id lists."""
    import torch

    texts = list(texts)
    if not texts:
        raise InputError("concept_acts needs at least one text")
    if position not in ("last", "mean"):
        raise ConfigError(f"position must be 'last' or 'mean', got {position!r}")
    name = _read_site(layer, site)
    model.site(name)                                      # SiteError with the valid names if the layer is bad
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            res = model.run(texts[i: i + batch_size], capture=[name], logits=False)
            if position == "last":
                a = res.cache.last(name)
            else:
                x = res.cache[name]
                m = res.batch.attention_mask.to(x.device, x.dtype)[..., None]
                a = (x * m).sum(1) / m.sum(1)
            out.append(a.detach().float().cpu().numpy().astype(np.float64))
    return np.concatenate(out, 0)


def _pairs_to_lists(pairs) -> tuple[list, list]:
    if hasattr(pairs, "columns"):                         # a DataFrame in the repo's pair-CSV schema
        cols = set(pairs.columns)
        need = {"resp_no_concept", "resp_with_concept"}
        if not need <= cols:
            raise DataError(f"pair table needs columns {sorted(need)} (+ optional 'question'); got {sorted(cols)}")
        q = pairs["question"] if "question" in cols else [None] * len(pairs)
        fmt = (lambda qq, r: f"User: {qq}\nAssistant: {r}" if qq is not None else r)
        return ([fmt(a, b) for a, b in zip(q, pairs["resp_no_concept"])],
                [fmt(a, b) for a, b in zip(q, pairs["resp_with_concept"])])
    pairs = list(pairs)
    if not pairs:
        raise InputError("concept_diffs needs at least one (without, with) pair")
    for p in pairs:
        if not (isinstance(p, (tuple, list)) and len(p) == 2):
            raise InputError(f"each pair must be (text_without_concept, text_with_concept); got {p!r:.80}")
    return [p[0] for p in pairs], [p[1] for p in pairs]


def concept_diffs(model, pairs, *, layer: int, position: str = "last", site: str = "resid_post",
                  batch_size: int = 32, return_acts: bool = False):
    """Difference vectors [n, d] = act(with concept) − act(without concept) at `resid_post.layer`, read at each
    row's last real token (spec §2.1). `pairs`: (without, with) texts or token-id lists, or a DataFrame with
    `resp_no_concept`, `resp_with_concept` (+ `question`, rendered as "User: {q}\\nAssistant: {r}", no template).
    With `return_acts=True` returns (diffs, acts_without, acts_with)."""
    no, yes = _pairs_to_lists(pairs)
    a_no = concept_acts(model, no, layer=layer, position=position, site=site, batch_size=batch_size)
    a_yes = concept_acts(model, yes, layer=layer, position=position, site=site, batch_size=batch_size)
    d = a_yes - a_no
    return (d, a_no, a_yes) if return_acts else d


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
class ConceptPairs:
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


# ------------------------------------------------------------------------------------------------- steering
@dataclass
class SteerRun:
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
                             temperature=temperature, seed=seed, return_logits=False)
        texts.extend(truncate_at(out.text, stops))
        calls += 1
        if progress is not None:
            progress(min(1.0, (i + max_rows) / len(prompts)))
    return SteerRun(texts=texts, n_calls=calls, seconds=time.perf_counter() - t0)


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


# ------------------------------------------------------------------------------------------------- baselines
def diffmean_direction(diffs) -> np.ndarray:
    """unit(mean d_i) (the repo's "mean-center" baseline is exactly this, B5)."""
    D = np.asarray(diffs, np.float64)
    m = D.mean(0)
    return m / np.linalg.norm(m)


def pca_direction(diffs, *, center: bool = False, orient: bool = True) -> np.ndarray:
    """Top principal direction of the diff matrix: uncentred SVD as in the repo (`center=False`); `orient=True`
    (fixed, B5) flips it so that ⟨u, mean d⟩ > 0 — the repo leaves the sign arbitrary."""
    D = np.asarray(diffs, np.float64)
    X = D - D.mean(0) if center else D
    w, V = np.linalg.eigh(X.T @ X) if X.shape[1] <= X.shape[0] else (None, None)
    if V is not None:
        u = V[:, -1]
    else:
        w, U = np.linalg.eigh(X @ X.T)
        u = X.T @ U[:, -1]
        u = u / np.linalg.norm(u)
    if orient and float(u @ D.mean(0)) < 0:
        u = -u
    return u


def probe_direction(acts_without, acts_with, *, steps: int = 200, lr: float = 0.1, seed: int = 0) -> np.ndarray:
    """Logistic-regression probe (with = 1, without = 0) on raw activations: bias, BCE, full-batch Adam (lr 0.1,
    200 steps) as in the repo; returns the unit weight vector."""
    import torch

    X = torch.as_tensor(np.concatenate([acts_without, acts_with], 0), dtype=torch.float32)
    y = torch.cat([torch.zeros(len(acts_without)), torch.ones(len(acts_with))])
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(X.shape[1], generator=g) * 0.01).requires_grad_(True)
    b = torch.zeros((), requires_grad=True)
    opt = torch.optim.Adam([w, b], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(X @ w + b, y)
        loss.backward()
        opt.step()
    u = w.detach().double().numpy()
    return u / np.linalg.norm(u)


@dataclass
class BaselineCurves:
    """Baselines vs strength step (spec §5 `draw_line_nopenalty`).

    methods: method names; labels: [n_methods, n_samples, n_strengths]; strengths: [n_strengths] (absolute norms,
    per method the same grid scaled by `scales[m]`, recorded); directions: [n_methods, d]."""

    methods: list[str]
    labels: np.ndarray
    strengths: np.ndarray
    directions: np.ndarray
    config: dict = field(default_factory=dict)

    def rates(self, label: int = 2) -> tuple[np.ndarray, np.ndarray]:
        """Mean and 1.96·SEM across samples of the `label` indicator: each [n_methods, n_strengths]."""
        hit = (self.labels == label).astype(np.float64)
        m = hit.mean(1)
        n = hit.shape[1]
        sem = hit.std(1, ddof=1) / math.sqrt(n) if n > 1 else np.zeros_like(m)
        return m, 1.96 * sem

    def to_frame(self):
        import pandas as pd

        rows = []
        m2, c2 = self.rates(2)
        m3, c3 = self.rates(3)
        for i, name in enumerate(self.methods):
            for k, L in enumerate(self.strengths):
                rows.append({"method": name, "step": k + 1, "strength": float(L), "concept_rate": m2[i, k],
                             "concept_ci": c2[i, k], "gibberish_rate": m3[i, k], "gibberish_ci": c3[i, k]})
        return pd.DataFrame(rows)

    def save(self, path) -> Path:
        from interplab.core.io import write_arrays, write_json

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        write_arrays(path / "baselines.safetensors", {"labels": self.labels, "strengths": self.strengths,
                                                       "directions": self.directions})
        write_json(path / "baselines.json", {"methods": self.methods, "config": self.config})
        return path

    @classmethod
    def load(cls, path) -> "BaselineCurves":
        from interplab.core.io import read_arrays, read_json

        path = Path(path)
        if not (path / "baselines.json").exists():
            raise DataError(f"{path} holds no baselines.json")
        a = read_arrays(path / "baselines.safetensors")
        s = read_json(path / "baselines.json")
        return cls(methods=s["methods"], labels=a["labels"], strengths=a["strengths"], directions=a["directions"],
                   config=s.get("config", {}))


def baseline_scan(model, prompts: Sequence, directions: dict, *, layer: int, judge, strengths,
                  positions="prompt", site: str = "resid_post", max_new_tokens: int = 16, max_rows: int = 256,
                  greedy: bool = True, progress=None) -> BaselineCurves:
    """Steer every prompt with u_m·L_k for each method direction u_m (unit-normalised here) and strength L_k, all
    methods in one batched run. Baseline protocol: `prompt` positions (prefill only), as in the repo's scripts."""
    names = list(directions)
    U = np.stack([np.asarray(directions[n], np.float64).ravel() for n in names])
    U = U / np.linalg.norm(U, axis=1, keepdims=True)
    L = np.asarray(strengths, np.float64).ravel()
    prompts = list(prompts)
    M, S, K = len(names), len(prompts), L.size
    V = U[:, None, None, :] * L[None, None, :, None]                              # [M, 1, K, d]
    V = np.broadcast_to(V, (M, S, K, U.shape[1])).reshape(M * S * K, -1)
    rows_p = [p for _ in range(M) for p in prompts for _ in range(K)]
    run = steer_generate(model, rows_p, V, site=_read_site(layer, site), positions=positions,
                         max_new_tokens=max_new_tokens, max_rows=max_rows, greedy=greedy, progress=progress)
    labels = _judge(judge, run.texts).reshape(M, S, K)
    return BaselineCurves(methods=names, labels=labels, strengths=L, directions=U,
                          config={"layer": layer, "positions": positions, "n_calls": run.n_calls,
                                  "max_new_tokens": max_new_tokens, "model": getattr(model, "name", "?")})


__all__ = [
    # model-facing
    "concept_diffs", "concept_acts", "steer_generate", "SteerRun", "truncate_at", "sector_scan", "penalty_scan", "baseline_scan",
    "BaselineCurves", "diffmean_direction", "pca_direction", "probe_direction", "load_concept_menu",
    "generate_concept_pairs", "ConceptPairs",
    # geometry
    "Cylinder", "fit_cylinder", "penalty_vector", "sector_vectors", "sector_angles", "strength_grid", "penalty_grid",
    "SectorMap", "PenaltyMap", "PairwiseTest", "pairwise_test", "first_activation", "activation_margin",
    "activation_auc", "sector_centre", "suppress_centre", "lrh_null_plane_explained", "steerability_slope",
    "TrigLawScan", "trig_law_scan",
    # helix, judges, synthetic
    "HelixConfig", "HelixFit", "fit_helix", "planted_helix", "planted_line", "GibberishFilter", "TokenSetJudge",
    "LLMJudge", "check_labels", "PlantedCylinderConfig", "PlantedCylinder", "planted_cylinder",
    "synthetic_sector_map", "synthetic_penalty_map",
]
