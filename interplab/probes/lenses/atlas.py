"""The atlas: for one model, the six methods and the lenses on shared axes, and how much they agree (issue 18 item 4).

- layer x head: the Truth-Score map (spec truth_scores.md §2.2, fast L-BFGS solver by default), the per-head
  activation-patching effect (attn_z of each head patched at every position, denoising, normalised: 1 = the head
  alone restores the clean logit difference) and the per-head direct logit attribution of the clean prompt;
- layer: the participation ratio of resid_post.L (hyperfit_geometry.md's PR, optionally its change against a
  reference model) next to where patching matters (max over positions of |normalised resid_pre.L effect|);
- directions at resid_post.L: the shipped SAE's decoder rows, the decode-shared subspace (decodeshare.md
  Algorithm 1) and the CRH concept axis and normal plane (crh.md §2.3), compared by max |cos| / principal angles,
  each against a Haar-random subspace of the same dimension.

Agreement between maps is Spearman's ρ with a bootstrap interval and a permutation p (`stats.spearman_interval`)
plus the top-k overlap, and the same ρ with depth partialled out against a null that keeps the
layer structure (heads permuted within their layer; phase-randomised layer profiles),
Holm-corrected over the pairs (`map_agreement`); `probes.lenses.atlas_validity.atlas_verdicts`
turns it into verdicts. On a validation organism (`interplab.zoo.validation`) the planted truth is
scored in `Atlas.planted`. A method that does not apply to the model is listed in
`Atlas.unavailable` with its reason.

The atlas imports no method: each method declares what it adds (maps, directions, its data, its planted check) as
an `AtlasPart` (`interplab.probes.atlas_contract`) named by its `MethodSpec.atlas`, and the atlas resolves the parts
through `interplab.methods` (`atlas_parts`). What is the atlas's own: the lens pair, patching, DLA, the shipped
SAE's decoder rows (read from its files), the agreement statistics and the direction overlaps.

    >>> from interplab.probes.lenses.atlas import atlas
    >>> a = atlas(model)
    >>> a.head_maps["patching"].shape, a.agreement, a.unavailable
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from interplab.core import progress
from interplab.core.errors import ConfigError, InterplabError, ShapeError
from interplab.core.result import Result
from interplab.probes import stats
from interplab.probes.atlas_contract import AtlasContext, AtlasPart
from interplab.probes.lenses.atlas_inputs import AtlasInputs, atlas_inputs, atlas_parts
from interplab.probes.lenses.depth import DEPTH_NULLS, depth_partialled

_LENS_HEADS = {"patching": "patching effect (normalised)", "dla": "direct logit attribution"}
_LENS_LAYERS = {"patching_resid": "max |patching effect| over positions (resid_pre)"}


def _ordered_parts() -> list[AtlasPart]:
    """The methods' parts in the order the atlas computes them: head maps, then layer maps, then directions."""
    return sorted(atlas_parts(), key=lambda p: p.axis)


def _head_labels() -> dict[str, str]:
    return {**{k: v for p in _ordered_parts() for k, v in p.head_maps.items()}, **_LENS_HEADS}


def _layer_labels() -> dict[str, str]:
    return {**{k: v for p in _ordered_parts() for k, v in p.layer_maps.items()}, **_LENS_LAYERS}


def _signed() -> set[str]:
    """Head maps read as they are (a part's signed maps); every other map is read by |value|."""
    return {k for p in atlas_parts() if p.signed for k in p.head_maps}


_DERIVED = {"HEAD_MAPS": lambda: tuple(_head_labels()), "LAYER_MAPS": lambda: tuple(_layer_labels()),
            "HEAD_LABELS": _head_labels, "LAYER_LABELS": _layer_labels}


def __getattr__(name: str):
    """HEAD_MAPS, LAYER_MAPS, HEAD_LABELS, LAYER_LABELS (the methods' maps first, then the lenses'), and the
    functions a method's part still offers here under their old names (`layer_participation`)."""
    if name in _DERIVED:
        return _DERIVED[name]()
    if not name.startswith("_"):
        for part in atlas_parts():
            if name in part.exports:
                return part.exports[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class AtlasConfig:
    """What the atlas runs.

    n_truth_items: verification prompts behind the Truth-Score map; truth_solver: "lbfgs" (fast) or "adamw" (the
    authors' recipe). n_decode_prompts: prompts per multitask task for the decode-shared subspace; n_concept_pairs
    and concept: the CRH concept data (toy organisms). direction_layer: the block whose output (resid_post.L) the
    direction methods read (None: the planted site, else the shipped SAE's layer, else the middle layer).
    directions: run the direction methods at all. top_k: heads compared by the top-k overlap. n_boot / n_perm:
    bootstrap and permutation draws of each agreement. batch_size: forwards of the patching grid and the captures.
    """

    n_truth_items: int = 128
    truth_solver: str = "lbfgs"
    n_decode_prompts: int = 16
    n_concept_pairs: int = 48
    concept: str = "animal"
    direction_layer: int | None = None
    directions: bool = True
    top_k: int = 5
    n_boot: int = 2000
    n_perm: int = 2000
    batch_size: int = 32
    seed: int = 0

    def validate(self) -> "AtlasConfig":
        if self.n_truth_items < 10 or self.n_decode_prompts < 2 or self.n_concept_pairs < 4:
            raise ConfigError("need n_truth_items >= 10, n_decode_prompts >= 2 and n_concept_pairs >= 4")
        if self.truth_solver not in ("lbfgs", "adamw"):
            raise ConfigError(f"truth_solver must be 'lbfgs' or 'adamw', got {self.truth_solver!r}")
        if self.top_k < 1 or self.n_boot < 100 or self.n_perm < 100 or self.batch_size < 1:
            raise ConfigError("need top_k >= 1, n_boot >= 100, n_perm >= 100 and batch_size >= 1")
        return self


@dataclass
class Atlas(Result):
    """One model's atlas.

    head_maps: name -> [n_layers, n_heads] (truth, patching, dla: those that apply). layer_maps: name -> [n_layers]
    (pr, pr_change, patching_resid). directions: name -> [d_model, k] columns (decodeshare: orthonormal basis;
    crh_axis: [d, 1]; crh_plane: [d, 2]) read at `site`; the SAE's decoder rows enter the overlaps but are not
    stored (sae_name: the shipped SAE folder they came from, "" = none).
    agreement: one row per pair of maps (`map_agreement`: axis, map_a, map_b, rho, lo, hi, p, n,
    topk_overlap and the depth-partialled rho_partial, p_partial, p_iid, null, n_eff, p_holm,
    correction).
    overlaps: one row per pair of direction sets (a, b, k_a, k_b, max_cos, angle_deg, best, baseline_max_cos).
    planted: ground-truth checks on a validation organism (check, method, value, target, passed); empty otherwise.
    unavailable: method -> why it does not apply to this model. planted_heads: [(layer, head)] of a truth organism.
    lens_metrics: the lens pair's unpatched metrics {"clean", "corrupt"} (logit answer − wrong;
    patching is normalised by their difference), {} when patching did not run.
    """

    model: str
    head_maps: dict[str, np.ndarray]
    layer_maps: dict[str, np.ndarray]
    directions: dict[str, np.ndarray]
    agreement: pd.DataFrame
    overlaps: pd.DataFrame
    planted: pd.DataFrame
    unavailable: dict = field(default_factory=dict)
    site: str = ""
    pair: list = field(default_factory=list)
    answer: str = ""
    wrong: str = ""
    sae_name: str = ""
    planted_kind: str = ""
    planted_heads: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    config: AtlasConfig | None = None
    lens_metrics: dict = field(default_factory=dict)

    def __post_init__(self):
        shapes = {np.asarray(v).shape for v in self.head_maps.values()}
        if len(shapes) > 1 or any(len(s) != 2 for s in shapes):
            raise ShapeError(f"head maps must all be [n_layers, n_heads], got {shapes}")
        n = {np.asarray(v).shape for v in self.layer_maps.values()}
        if len(n) > 1 or any(len(s) != 1 for s in n):
            raise ShapeError(f"layer maps must all be [n_layers], got {n}")
        self.head_maps = {k: np.asarray(v, np.float64) for k, v in self.head_maps.items()}
        self.layer_maps = {k: np.asarray(v, np.float64) for k, v in self.layer_maps.items()}

    def strength(self, name: str) -> np.ndarray:
        """How strongly each head is implicated by map `name`: a signed map (the Truth Score) itself, else |effect|
        (patching, DLA)."""
        m = self.head_maps[name]
        return m if name in _signed() else np.abs(m)

    def top_heads(self, name: str, k: int = 5) -> list[tuple[int, int]]:
        """The k heads with the largest `strength` (ties broken by position)."""
        s = self.strength(name)
        order = np.argsort(-s.ravel(), kind="stable")[:k]
        return [(int(i // s.shape[1]), int(i % s.shape[1])) for i in order]

    def to_frame(self) -> pd.DataFrame:
        """One row per (map, layer, head): value, strength and rank (1 = strongest)."""
        rows = []
        for name, m in self.head_maps.items():
            s = self.strength(name)
            rank = stats.rankdata(-s.ravel()).reshape(s.shape)
            for (layer, head), v in np.ndenumerate(m):
                rows.append({"map": name, "layer": layer, "head": head, "value": float(v),
                             "strength": float(s[layer, head]), "rank": float(rank[layer, head])})
        return pd.DataFrame(rows, columns=["map", "layer", "head", "value", "strength", "rank"])


# --------------------------------------------------------------------------------------------- the maps
def _lens_maps(model, inp: AtlasInputs, cfg: AtlasConfig, heads: dict, layers: dict, missing: dict) -> dict:
    """Per-head patching (attn_z, all positions), per-layer resid_pre patching and per-head DLA of the pair."""
    from interplab.probes.lenses.common import make_pair, token_strings
    from interplab.probes.lenses.dla import direct_logit_attribution
    from interplab.probes.lenses.patching import activation_patching

    clean, corrupt = inp.pair
    pair = make_pair(model, clean, corrupt, inp.answer, inp.wrong)
    info = {"answer": token_strings(model, [pair.answer])[0],
            "wrong": "" if pair.wrong is None else token_strings(model, [pair.wrong])[0]}
    kw = dict(answer=pair.answer, wrong=pair.wrong, batch_size=cfg.batch_size)
    z = activation_patching(model, clean, corrupt, sites=["attn_z"], positions="all", **kw)["attn_z"]
    info["lens_metrics"] = {"clean": float(z.clean_metric), "corrupt": float(z.corrupt_metric)}
    if z.clean_metric == z.corrupt_metric:
        for k in ("patching", "patching_resid"):
            missing[k] = "the clean and corrupt prompts give the same metric, so no patch can restore anything"
    else:
        heads["patching"] = z.normalized
        r = activation_patching(model, clean, corrupt, sites=["resid_pre"], positions="each", **kw)["resid_pre"]
        layers["patching_resid"] = np.abs(r.normalized).max(axis=1)
    heads["dla"] = direct_logit_attribution(model, [clean], pair.answer, pair.wrong).heads[0]
    return info


def _contribute(part: AtlasPart, model, inp: AtlasInputs, ctx: AtlasContext) -> dict:
    """One part's maps and directions (None values dropped: a step that did not apply); a part whose data field is
    empty is not computed (and not timed)."""
    data = inp.method_data(part)
    if part.fields and not data[next(iter(part.fields))]:
        return {}
    out = {k: v for k, v in (part.compute(model, data, ctx) or {}).items() if v is not None}
    undeclared = set(out) - {*part.head_maps, *part.layer_maps, *part.directions}
    if undeclared:
        raise ConfigError(f"the atlas part of {part.method!r} returned {sorted(undeclared)}, which it does not declare "
                          "in head_maps, layer_maps or directions")
    return out


def span_cos(vectors: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """[n] cosine between each unit column of `vectors` [d, n] and span(basis) [d, k]: ‖Qᵀv‖ (1 = inside)."""
    q, _ = np.linalg.qr(np.asarray(basis, np.float64))
    v = np.asarray(vectors, np.float64)
    v = v / np.linalg.norm(v, axis=0, keepdims=True).clip(1e-12)
    return np.linalg.norm(q.T @ v, axis=0)


def direction_overlaps(dirs: dict[str, np.ndarray], seed: int = 0) -> pd.DataFrame:
    """Every pair of direction sets: max cosine (SAE: the best feature's cosine to the other span; subspaces:
    cos of the smallest principal angle), and the same statistic against a Haar-random span of the other's size.
    Two sets of one method (e.g. the CRH axis and its normal plane, orthogonal by construction) are not compared."""
    from interplab.probes.linalg import haar_basis

    cols = ["a", "b", "k_a", "k_b", "max_cos", "angle_deg", "best", "baseline_max_cos"]
    names = list(dirs)
    parts = atlas_parts()
    rows = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if any({a, b} <= set(p.directions) for p in parts):
                continue  # one method's own sets are related by construction
            A, Bm = dirs[a], dirs[b]
            rand = haar_basis(Bm.shape[0], Bm.shape[1], seed=seed + 104_729)  # not a seed the data used
            if a == "sae":
                c, c0 = span_cos(A, Bm), span_cos(A, rand)
                best, mx, base = f"feature {int(c.argmax())}", float(c.max()), float(c0.max())
            else:
                mx = float(np.linalg.svd(np.linalg.qr(A)[0].T @ np.linalg.qr(Bm)[0], compute_uv=False).max())
                base = float(np.linalg.svd(np.linalg.qr(A)[0].T @ rand, compute_uv=False).max())
                best = ""
            mx = min(mx, 1.0)
            rows.append({"a": a, "b": b, "k_a": A.shape[1], "k_b": Bm.shape[1], "max_cos": mx,
                         "angle_deg": float(np.degrees(np.arccos(mx))), "best": best, "baseline_max_cos": base})
    return pd.DataFrame(rows, columns=cols)


AGREEMENT_COLS = ["axis", "map_a", "map_b", "rho", "lo", "hi", "p", "n", "topk_overlap",
                  "rho_partial", "p_partial", "p_iid", "null", "n_eff", "p_holm", "correction"]
def map_agreement(head: dict, layer: dict, *, top_k: int, n_boot: int, n_perm: int, seed: int) -> pd.DataFrame:
    """Agreement of every pair of head maps (by strength: the Truth Score, |patching|, |DLA|) and
    of the layer maps: Spearman ρ with an i.i.d. bootstrap interval and permutation p (rho, lo,
    hi, p: cells taken as independent, kept for comparison), the top-k overlap |A ∩ B| / k of head
    maps, and the reading with depth partialled out (`depth_partialled`: rho_partial, p_partial
    against the structure-keeping null, p_iid the same statistic against an i.i.d. shuffle, null,
    n_eff) with p_partial Holm-adjusted over every pair of the table (p_holm; `correction` says
    over how many): the pairs are read together."""
    rows = []
    strength = _strengths(head)
    for axis, maps in (("layer x head", strength), ("layer", layer)):
        names = list(maps)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                r = stats.spearman_interval(maps[a], maps[b], B=n_boot, n_perm=n_perm, seed=seed)
                ov = float("nan")
                if axis == "layer x head" and np.ptp(maps[a]) > 0 and np.ptp(maps[b]) > 0:  # ties: no top-k
                    k = min(top_k, maps[a].size)
                    ta = set(np.argsort(-maps[a].ravel(), kind="stable")[:k])
                    tb = set(np.argsort(-maps[b].ravel(), kind="stable")[:k])
                    ov = len(ta & tb) / k
                t = depth_partialled(axis, maps[a], maps[b], n_perm=n_perm, seed=seed)
                rows.append({"axis": axis, "map_a": a, "map_b": b, **r, "topk_overlap": ov,
                             "rho_partial": t.rho_partial, "p_partial": t.p, "p_iid": t.p_iid,
                             "null": DEPTH_NULLS[axis], "n_eff": t.n_eff})
    out = pd.DataFrame(rows, columns=AGREEMENT_COLS)
    out["p_holm"] = stats.holm_adjust(out["p_partial"].to_numpy(float)) if len(out) else []
    m = int(np.isfinite(out["p_partial"].to_numpy(float)).sum()) if len(out) else 0
    out["correction"] = f"holm over {m} pairs"
    return out


def _strengths(head: dict) -> dict:
    signed = _signed()
    return {k: (v if k in signed else np.abs(v)) for k, v in head.items()}


def planted_checks(kind: str, truth: dict, head: dict, dirs: dict) -> pd.DataFrame:
    """Score the atlas against a validation organism's planted truth, by the part whose planted kind `kind` is:
    planted-head recovery of every head map (truth: AUROC, worst rank, all planted heads in the top |planted| + 2),
    the decode-shared basis vs the planted P (largest principal angle), the CRH axis vs the planted axis and the
    plane vs the planted plane."""
    cols = ["check", "method", "value", "target", "passed"]
    part = next((p for p in atlas_parts() if p.planted is not None and kind in p.planted_kinds.values()), None)
    rows = [] if part is None else part.planted(truth, _strengths(head), dirs)
    return pd.DataFrame(rows, columns=cols)


def _step(name: str, missing: dict, timings: dict, fn):
    """Run one method; a typed interplab error means "does not apply here" and is recorded, not raised."""
    progress.set_phase(name)      # a job's progress.json says which method is running
    t0 = time.perf_counter()
    try:
        return fn()
    except InterplabError as exc:
        missing[name] = str(exc).split("\n")[0]
        return None
    finally:
        timings[name] = round(time.perf_counter() - t0, 3)


def default_inputs(model, cfg: AtlasConfig) -> AtlasInputs:
    """The inputs `atlas` feeds each method when none are given: `atlas_inputs` sized by `cfg`."""
    return atlas_inputs(model, n_items=cfg.n_truth_items, n_decode=cfg.n_decode_prompts, n_pairs=cfg.n_concept_pairs,
                        concept=cfg.concept, direction_layer=cfg.direction_layer, seed=cfg.seed)


def atlas(model, config: AtlasConfig | None = None, *, inputs: AtlasInputs | None = None, reference=None,
          **overrides) -> Atlas:
    """The atlas of `model` (module docstring). `inputs` overrides what each method is fed (default
    `atlas_inputs(model, ...)`); `reference`: a second LabModel whose per-layer PR minus this model's is added as
    `pr_change` (e.g. a hyperfitted descendant). Keyword overrides set AtlasConfig fields."""
    cfg = dataclasses.replace(config or AtlasConfig(), **overrides).validate()
    inp = inputs or default_inputs(model, cfg)
    missing, timings, heads, layers = dict(inp.missing), {}, {}, {}
    info = _step("patching", missing, timings, lambda: _lens_maps(model, inp, cfg, heads, layers, missing)) or {}
    if "patching" in missing and "dla" not in heads:
        missing.setdefault("dla", missing["patching"])
    ctx = AtlasContext(seed=cfg.seed, n_items=cfg.n_truth_items, n_decode=cfg.n_decode_prompts,
                       n_pairs=cfg.n_concept_pairs, concept=cfg.concept, solver=cfg.truth_solver,
                       batch_size=cfg.batch_size, layer=inp.direction_layer, texts=inp.texts, reference=reference,
                       planted=inp.planted, step=lambda name, fn: _step(name, missing, timings, fn))
    parts = _ordered_parts()
    part_heads, part_layers, dirs = {}, {}, {}
    for part in parts:
        if part.axis < 2:
            for name, v in _contribute(part, model, inp, ctx).items():
                (part_heads if name in part.head_maps else part_layers if name in part.layer_maps else dirs)[name] = v
    heads, layers = {**part_heads, **heads}, {**part_layers, **layers}
    if cfg.directions:
        if inp.sae_decoder is not None:
            W = inp.sae_decoder / np.linalg.norm(inp.sae_decoder, axis=1, keepdims=True).clip(1e-12)
            dirs = {"sae": W.T, **dirs}
        for part in parts:
            if part.axis == 2:
                dirs.update(_contribute(part, model, inp, ctx))
    else:
        dirs = {}
        for k in ("sae", *(p.method for p in parts if p.axis == 2)):
            missing.setdefault(k, "direction methods switched off (directions=False)")
    kind, truth = inp.planted or ("", {})
    overlaps = direction_overlaps(dirs, seed=cfg.seed)
    dirs.pop("sae", None)  # a copy of the SAE's decoder is not kept in the result: `sae_name` says which SAE it was
    return Atlas(model=str(model.name), head_maps=heads, layer_maps=layers, directions=dirs,
                 agreement=map_agreement(heads, layers, top_k=cfg.top_k, n_boot=cfg.n_boot, n_perm=cfg.n_perm,
                                         seed=cfg.seed),
                 overlaps=overlaps, planted=planted_checks(kind, truth, heads, dirs), sae_name=inp.sae_name,
                 unavailable=missing, site=f"resid_post.{inp.direction_layer}",
                 pair=[str(p) for p in (inp.pair or ())], answer=info.get("answer", ""), wrong=info.get("wrong", ""),
                 planted_kind=kind, planted_heads=[list(h) for h in truth.get("planted_heads", [])],
                 timings=timings, config=cfg, lens_metrics=info.get("lens_metrics", {}))
