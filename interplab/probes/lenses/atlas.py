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
plus the top-k overlap. On a validation organism (`interplab.zoo.validation`) the planted truth is scored in
`Atlas.planted`. A method that does not apply to the model is listed in `Atlas.unavailable` with its reason.

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

from interplab.core.errors import ConfigError, InterplabError, ShapeError
from interplab.core.result import Result
from interplab.probes import stats
from interplab.probes.lenses.atlas_inputs import AtlasInputs, atlas_inputs

HEAD_MAPS = ("truth", "patching", "dla")
LAYER_MAPS = ("pr", "pr_change", "patching_resid")
HEAD_LABELS = {"truth": "Truth Score (held-out accuracy)", "patching": "patching effect (normalised)",
               "dla": "direct logit attribution"}
LAYER_LABELS = {"pr": "participation ratio", "pr_change": "PR change vs reference",
                "patching_resid": "max |patching effect| over positions (resid_pre)"}


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
    agreement: one row per pair of maps (axis, map_a, map_b, rho, lo, hi, p, n, topk_overlap).
    overlaps: one row per pair of direction sets (a, b, k_a, k_b, max_cos, angle_deg, best, baseline_max_cos).
    planted: ground-truth checks on a validation organism (check, method, value, target, passed); empty otherwise.
    unavailable: method -> why it does not apply to this model. planted_heads: [(layer, head)] of a truth organism.
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
        """How strongly each head is implicated by map `name`: the Truth Score itself, |effect| for patching and DLA."""
        m = self.head_maps[name]
        return m if name == "truth" else np.abs(m)

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
    if z.clean_metric == z.corrupt_metric:
        for k in ("patching", "patching_resid"):
            missing[k] = "the clean and corrupt prompts give the same metric, so no patch can restore anything"
    else:
        heads["patching"] = z.normalized
        r = activation_patching(model, clean, corrupt, sites=["resid_pre"], positions="each", **kw)["resid_pre"]
        layers["patching_resid"] = np.abs(r.normalized).max(axis=1)
    heads["dla"] = direct_logit_attribution(model, [clean], pair.answer, pair.wrong).heads[0]
    return info


def layer_participation(model, texts, *, batch_size: int = 32) -> np.ndarray:
    """[n_layers] participation ratio (hyperfit `participation_ratio`) of resid_post.L over every real token of
    `texts` but each row's first (a <bos> or template token whose outlier norm would dominate the spectrum)."""
    import torch

    from interplab.probes.hyperfit import participation_ratio

    sites = [f"resid_post.{i}" for i in range(model.n_layers)]
    rows: dict[str, list] = {s: [] for s in sites}
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            out = model.run(list(texts[i:i + batch_size]), capture=sites, logits=False, chat=False)
            mask = out.batch.attention_mask.bool().clone()
            first = mask.float().argmax(1)
            mask[torch.arange(mask.shape[0]), first] = False
            for s in sites:
                rows[s].append(out.cache[s][mask.to(out.cache[s].device)].double().cpu().numpy())
    X = {s: np.concatenate(v) for s, v in rows.items()}
    if next(iter(X.values())).shape[0] < 3:
        raise ShapeError("the participation ratio needs at least 3 tokens; give longer or more texts")
    return np.array([participation_ratio(X[s]) for s in sites])


def _directions(model, inp: AtlasInputs, cfg: AtlasConfig, missing: dict, timings: dict) -> dict[str, np.ndarray]:
    """The direction sets at resid_post.L: SAE decoder rows, the decode-shared basis, the CRH axis and plane."""
    out: dict[str, np.ndarray] = {}
    layer = inp.direction_layer
    if inp.sae_decoder is not None:
        W = inp.sae_decoder / np.linalg.norm(inp.sae_decoder, axis=1, keepdims=True).clip(1e-12)
        out["sae"] = W.T

    def decodeshare():
        from interplab.probes.decodeshare import collect_decode_states, shared_subspace

        dec = collect_decode_states(model, inp.decode_prompts, layer=layer, max_new_tokens=inp.decode_max_new_tokens,
                                    seed=cfg.seed)
        ss = shared_subspace(dec, seed=cfg.seed)
        if ss.basis.shape[1]:
            out["decodeshare"] = ss.basis
        else:
            missing["decodeshare"] = "the estimator found no component shared by every task at this layer"

    def crh():
        from interplab.probes.crh import concept_diffs, fit_cylinder

        cyl = fit_cylinder(concept_diffs(model, inp.concept_pairs, layer=layer), seed=cfg.seed)
        out["crh_axis"], out["crh_plane"] = cyl.axis[:, None], cyl.plane

    if inp.decode_prompts:
        _step("decodeshare", missing, timings, decodeshare)
    if inp.concept_pairs:
        _step("crh", missing, timings, crh)
    return out


def span_cos(vectors: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """[n] cosine between each unit column of `vectors` [d, n] and span(basis) [d, k]: ‖Qᵀv‖ (1 = inside)."""
    q, _ = np.linalg.qr(np.asarray(basis, np.float64))
    v = np.asarray(vectors, np.float64)
    v = v / np.linalg.norm(v, axis=0, keepdims=True).clip(1e-12)
    return np.linalg.norm(q.T @ v, axis=0)


def direction_overlaps(dirs: dict[str, np.ndarray], seed: int = 0) -> pd.DataFrame:
    """Every pair of direction sets: max cosine (SAE: the best feature's cosine to the other span; subspaces:
    cos of the smallest principal angle), and the same statistic against a Haar-random span of the other's size."""
    from interplab.probes.decodeshare import haar_basis

    cols = ["a", "b", "k_a", "k_b", "max_cos", "angle_deg", "best", "baseline_max_cos"]
    names = list(dirs)
    rows = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if {a, b} == {"crh_axis", "crh_plane"}:
                continue  # orthogonal by construction
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


def map_agreement(head: dict, layer: dict, *, top_k: int, n_boot: int, n_perm: int, seed: int) -> pd.DataFrame:
    """Spearman ρ (bootstrap interval, permutation p) between every pair of head maps (by strength: the Truth
    Score, |patching|, |DLA|) and between the layer maps, with the top-k overlap |A ∩ B| / k of head maps."""
    cols = ["axis", "map_a", "map_b", "rho", "lo", "hi", "p", "n", "topk_overlap"]
    rows = []
    strength = {k: (v if k == "truth" else np.abs(v)) for k, v in head.items()}
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
                rows.append({"axis": axis, "map_a": a, "map_b": b, **r, "topk_overlap": ov})
    return pd.DataFrame(rows, columns=cols)


def planted_checks(kind: str, truth: dict, head: dict, dirs: dict) -> pd.DataFrame:
    """Score the atlas against a validation organism's planted truth: planted-head recovery of every head map
    (AUROC, worst rank, all planted heads in the top |planted| + 2), the decode-shared basis vs the planted P
    (largest principal angle), the CRH axis vs the planted axis and the plane vs the planted plane."""
    from interplab.probes.decodeshare import principal_angles
    from interplab.probes.truth.validation import planted_recovery

    cols = ["check", "method", "value", "target", "passed"]
    rows = []
    if kind == "truth":
        if not head:
            rows.append({"check": "a head map computed", "method": "", "value": float("nan"), "target": "a map",
                         "passed": False})
        for name, m in head.items():
            mask = np.zeros(m.shape, bool)
            for layer, h in truth["planted_heads"]:
                mask[layer, h] = True
            rec = planted_recovery(m if name == "truth" else np.abs(m), mask)
            rows += [{"check": "auroc planted vs other heads", "method": name, "value": rec["auroc"],
                      "target": ">= 0.95", "passed": rec["auroc"] >= 0.95},
                     {"check": "all planted heads in top |planted|+2", "method": name, "value": rec["all_in_top"],
                      "target": "= 1", "passed": rec["all_in_top"] == 1.0}]
    elif kind == "decodeshare" and "decodeshare" not in dirs:
        rows.append({"check": "decode-shared subspace estimated", "method": "decodeshare", "value": float("nan"),
                     "target": "a basis", "passed": False})
    elif kind == "crh" and "crh_axis" not in dirs:
        rows.append({"check": "CRH cylinder fitted", "method": "crh", "value": float("nan"), "target": "an axis",
                     "passed": False})
    elif kind == "decodeshare":
        P = np.zeros((dirs["decodeshare"].shape[0], len(truth["planted_dims"])))
        for j, d in enumerate(truth["planted_dims"]):
            P[d, j] = 1.0
        ang = float(principal_angles(dirs["decodeshare"], P).max())
        rows.append({"check": "largest principal angle to planted P (deg)", "method": "decodeshare", "value": ang,
                     "target": "<= 15", "passed": ang <= 15.0})
    elif kind == "crh":
        cos = float(dirs["crh_axis"][:, 0] @ truth["axis"])
        ax = float(np.degrees(np.arccos(np.clip(cos, -1, 1))))
        pl = float(principal_angles(dirs["crh_plane"], np.stack([truth["e1"], truth["e2"]], 1)).max())
        rows += [{"check": "angle axis to planted axis (deg)", "method": "crh", "value": ax, "target": "<= 10",
                  "passed": ax <= 10.0},
                 {"check": "largest principal angle plane to planted plane (deg)", "method": "crh", "value": pl,
                  "target": "<= 15", "passed": pl <= 15.0}]
    return pd.DataFrame(rows, columns=cols)


def _step(name: str, missing: dict, timings: dict, fn):
    """Run one method; a typed interplab error means "does not apply here" and is recorded, not raised."""
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
    if inp.truth_items:
        from interplab.probes.truth import truth_scores

        ts = _step("truth", missing, timings, lambda: truth_scores(
            model, inp.truth_items, solver=cfg.truth_solver, seed=cfg.seed + 42, capture_batch_size=cfg.batch_size))
        if ts is not None:
            heads = {"truth": ts.scores, **heads}
    pr = _step("pr", missing, timings, lambda: layer_participation(model, inp.texts, batch_size=cfg.batch_size))
    if pr is not None:
        layers = {"pr": pr, **layers}
        if reference is not None:
            ref = _step("pr_change", missing, timings,
                        lambda: layer_participation(reference, inp.texts, batch_size=cfg.batch_size))
            if ref is not None and ref.shape == pr.shape:
                layers = {"pr": pr, "pr_change": ref - pr, **{k: v for k, v in layers.items() if k != "pr"}}
    dirs = {}
    if cfg.directions:
        dirs = _directions(model, inp, cfg, missing, timings)
    else:
        for k in ("sae", "decodeshare", "crh"):
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
                 timings=timings, config=cfg)
