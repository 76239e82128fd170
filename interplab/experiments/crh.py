"""CRH experiments.

* `crh-synthetic`: the planted-cylinder generator (spec §7A) over seeds — axis / plane / radius / azimuth /
  sector-centre recovery against the spec's thresholds, the LRH null, the Implication-3 replica (independent vs
  tied sectors), penalty monotonicity and the spiral probe. Model-free, seconds.
* `crh-toy`: concept difference vectors of a chat organism (default `zoo:toy-chat`, concepts from
  `interplab.data.concepts`): axis, plane, cylinder score per concept and layer; at one steering layer the
  penalty heatmaps (strength × p), sector maps, the Implication-3 pairwise test and the baselines (diffmean,
  PCA sign-fixed, logistic probe) vs strength. Judge: the concept's token set (+ gibberish filter).

* `crh-spiral`: the spiral probe (spec §2.4) on one prompt pair of a chat organism: two concept instructions
  differing in one token; norm-constrained steering vectors optimised per budget w, helix fits (fixed +
  faithful) of the trajectory and of two controls (the LRH reference line; the trajectory flattened to its top-2
  PCs).

`run_concept_study(model, concepts, cfg)` is the model-generic core (any `ConceptData`), used by `crh-toy` and by
the tests on random checkpoints."""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np

from interplab.core.errors import ConfigError, InputError
from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure

__all__ = ["CRHSyntheticConfig", "CRHToyConfig", "CRHSpiralConfig", "toy_spiral_prompts", "ConceptData", "toy_concept_data", "run_concept_study",
           "synthetic_study"]


# ------------------------------------------------------------------------------------------------ synthetic
@dataclass
class CRHSyntheticConfig:
    """n_seeds: planted cylinders to draw (one per seed); d, n_train: generator dimension and train size;
    gamma_deg, n_bins, n_strengths: sector-scan protocol (L ∈ (0, 6]); impl3_concepts, impl3_test: size of the
    Implication-3 replica (concepts × test samples each); n_perm: permutations; seed: base seed."""

    n_seeds: int = 20
    d: int = 64
    n_train: int = 200
    gamma_deg: float = 45.0
    n_bins: int = 24
    n_strengths: int = 25
    impl3_concepts: int = 12
    impl3_test: int = 50
    n_perm: int = 500
    seed: int = 0


def synthetic_study(cfg: CRHSyntheticConfig) -> dict:
    """Run the synthetic checks; returns {'recovery': DataFrame, 'impl3': {...}, 'examples': {...}}."""
    import pandas as pd

    from interplab.probes.crh import (
        activation_margin, angle_between, fit_cylinder, fit_helix, max_principal_angle, pairwise_test,
        planted_cylinder, planted_helix, planted_line, procrustes_2d, sector_vectors, synthetic_penalty_map,
        synthetic_sector_map, wrap_angle,
    )

    L = np.linspace(6.0 / cfg.n_strengths, 6.0, cfg.n_strengths)
    rows = []
    example = {}
    for i in range(cfg.n_seeds):
        s = cfg.seed + i
        org = planted_cylinder(seed=s, d=cfg.d, n_train=cfg.n_train)
        cyl = fit_cylinder(org.train, seed=s)
        null = fit_cylinder(planted_cylinder(seed=s, d=cfg.d, n_train=cfg.n_train, lrh_null=True).train, seed=s)
        ref = np.stack([org.train @ org.e1, org.train @ org.e2], 1)
        xy = cyl.xy @ procrustes_2d(cyl.xy, ref)
        az = np.degrees(np.abs(wrap_angle(np.arctan2(xy[:, 1], xy[:, 0]) - org.phi_train)))
        sm, _ = synthetic_sector_map(org, cyl, gamma_deg=cfg.gamma_deg, n_bins=cfg.n_bins, strengths=L)
        c = org.to_planted_angle(sm.centre, cyl.plane)
        sup = org.to_planted_angle(sm.suppress, cyl.plane)
        rows.append({
            "seed": s, "axis_deg": angle_between(cyl.axis, org.u), "plane_deg": max_principal_angle(cyl.plane, org.plane),
            "radius": cyl.radius, "radius_rel_err": abs(cyl.radius / org.expected_radius - 1),
            "azimuth_deg": float(np.median(az)), "centre_deg": abs(math.degrees(wrap_angle(c - org.psi0))),
            "facilitate_suppress_sep_deg": abs(math.degrees(wrap_angle(c - sup))),
            "plane_explained": cyl.plane_explained, "null_plane_explained": null.plane_explained,
            "cylinder_score": cyl.cylinder_score, "null_cylinder_score": null.cylinder_score,
        })
        if i == 0:
            example = {"organism": org, "cylinder": cyl, "sector_map": sm}
    rec = pd.DataFrame(rows)

    def replica(sector):
        D, M, G = [], [], []
        for c in range(cfg.impl3_concepts):
            org = planted_cylinder(seed=cfg.seed * 1000 + c, n_test=cfg.impl3_test, sector=sector, d=cfg.d,
                                   n_train=cfg.n_train)
            cyl = fit_cylinder(org.train, seed=c, n_null=2)
            v = sector_vectors(cyl, gamma_deg=cfg.gamma_deg, n_bins=cfg.n_bins, strengths=L)[:, 0]
            lab = org.judge(np.broadcast_to(v[:, None, :], (L.size, cfg.impl3_test, cfg.d)))
            M.append(activation_margin(lab.T, L))
            D.append(org.test)
            G.append(np.full(cfg.impl3_test, c))
        return pairwise_test(np.concatenate(D), np.concatenate(M), groups=np.concatenate(G), n_perm=cfg.n_perm,
                             seed=cfg.seed)

    impl3 = {k: replica(k) for k in ("independent", "tied")}
    pen = {}
    for name, off in (("tied_facilitating", 0.0), ("tied_suppressing", 180.0)):
        org = planted_cylinder(seed=cfg.seed, sector="tied", tie_offset_deg=off, n_test=40, d=cfg.d,
                               n_train=cfg.n_train)
        pen[name] = synthetic_penalty_map(org, strengths=L)
    helix = {f"helix_n{n}": fit_helix(planted_helix(30, n, seed=cfg.seed)) for n in (0.7, 1.0)}
    helix["line"] = fit_helix(planted_line(30, seed=cfg.seed))
    helix["faithful_n1.0"] = fit_helix(planted_helix(30, 1.0, seed=cfg.seed), mode="faithful")
    return {"recovery": rec, "impl3": impl3, "penalty": pen, "helix": helix, "examples": example}


@register_experiment("crh-synthetic", config=CRHSyntheticConfig,
                     help="CRH planted-cylinder recovery (axis/plane/radius/sector centre vs spec thresholds), "
                          "LRH null, Implication-3 replica, penalty monotonicity, spiral probe. Model-free.")
def crh_synthetic(cfg: CRHSyntheticConfig, run) -> None:
    from interplab.figures.crh import (cylinder_scene, helix_figure, pairwise_scatter, penalty_heatmaps,
                                       sector_polar, synthetic_recovery_figure)

    out = synthetic_study(cfg)
    rec = out["recovery"]
    run.save_table("recovery", rec)
    summary = {
        "n_seeds": cfg.n_seeds,
        "max": {k: float(rec[k].max()) for k in ("axis_deg", "plane_deg", "radius_rel_err", "azimuth_deg",
                                                 "centre_deg")},
        "median": {k: float(rec[k].median()) for k in ("axis_deg", "plane_deg", "radius_rel_err", "azimuth_deg",
                                                       "centre_deg", "plane_explained", "null_plane_explained",
                                                       "cylinder_score", "null_cylinder_score")},
        "min_facilitate_suppress_sep_deg": float(rec["facilitate_suppress_sep_deg"].min()),
        "impl3": {k: {"r": v.r, "p_perm": v.p_perm, "n_pairs": int(v.x.size)} for k, v in out["impl3"].items()},
        "helix": {k: v.summary() for k, v in out["helix"].items()},
        "penalty_label2_rate_at_Lmax": {k: ((v.labels == 2).mean(0)[:, -1]).tolist() for k, v in out["penalty"].items()},
    }
    thr = {"axis_deg": 6, "plane_deg": 6, "radius_rel_err": 0.10, "azimuth_deg": 8, "centre_deg": 15}
    summary["pass"] = {k: bool(summary["max"][k] < t) for k, t in thr.items()}
    run.save_json("summary", summary)
    ex = out["examples"]
    save_figure(run, "recovery", synthetic_recovery_figure(rec))
    save_figure(run, "cylinder_scene", cylinder_scene(ex["cylinder"], sector_auc=ex["sector_map"].population_auc,
                                                     sample_diff=ex["organism"].test[0]))
    save_figure(run, "sector_map", sector_polar(ex["sector_map"]))
    save_figure(run, "penalty_tied", penalty_heatmaps(out["penalty"]["tied_facilitating"], exclude_step1=False))
    save_figure(run, "impl3_tied", pairwise_scatter(out["impl3"]["tied"]))
    save_figure(run, "impl3_independent", pairwise_scatter(out["impl3"]["independent"]))
    save_figure(run, "helix", helix_figure(out["helix"]["helix_n1.0"]))


# ------------------------------------------------------------------------------------------------ model organisms
@dataclass
class ConceptData:
    """One concept for a model study. train_pairs / test_pairs: (without, with) inputs (text or token ids) whose
    last-real-token difference is the concept diff; test_prompts: the steered prompts, one per test pair (same
    order); words: the concept's surface tokens (the judge's token set)."""

    name: str
    words: tuple
    train_pairs: list
    test_pairs: list
    test_prompts: list


@dataclass
class CRHToyConfig:
    """model: zoo name or checkpoint dir; concepts: names from interplab.data.concepts (empty = all six);
    n_train, n_test: pairs per concept (train: diffs for the cylinder; test: steered samples);
    layers: layers for the cylinder statistics (empty = all); steer_layer: layer of the steering experiments
    (-1 = ⌊n_layers/2⌋); read_at: 'end' (the closing <|im_end|> of the assistant turn, same token in both rows)
    or 'last_response' (the last response word, as the repo's last token; mixes in token identity, B10);
    n_p, n_strengths: penalty grid sizes (p = linspace(0, 1, n_p); L_k = k·L_max/n_strengths);
    penalty_lmax: L_max / ‖a‖ for penalty and sector scans (repo: 3); baseline_lmax: for baselines (repo: 5);
    n_bins, gamma_deg: sector scan; max_new_tokens: generation length; max_rows: rows per generate call;
    n_perm: Implication-3 permutations; steer: run the steering parts (false = geometry only);
    vocab_fallback: map toy words onto the model's own vocabulary when they are missing (smoke runs on random
    checkpoints only); fmt: 'auto' (the organism card's data format), 'raw' or 'chat'; seed."""

    model: str = "zoo:toy-chat"
    concepts: list[str] = field(default_factory=list)
    n_train: int = 100
    n_test: int = 10
    layers: list[int] = field(default_factory=list)
    steer_layer: int = -1
    read_at: str = "end"
    n_p: int = 6
    n_strengths: int = 10
    penalty_lmax: float = 3.0
    baseline_lmax: float = 5.0
    n_bins: int = 12
    gamma_deg: float = 45.0
    max_new_tokens: int = 12
    max_rows: int = 512
    n_perm: int = 1000
    steer: bool = True
    vocab_fallback: bool = False
    fmt: str = "auto"
    seed: int = 0


def _chat_ids(model, messages, *, gen_prompt: bool) -> list[int]:
    return model.apply_chat_template(messages, add_generation_prompt=gen_prompt)


def model_format(model) -> str:
    """'raw' or 'chat': the data format a zoo organism was trained on (its card), else 'chat' when the tokenizer
    has a chat template, else 'raw'."""
    import json
    from pathlib import Path

    card = Path(str(getattr(model, "path", "") or "")) / "card.json"
    if card.exists():
        try:
            fmt = json.loads(card.read_text()).get("recipe", {}).get("data", {}).get("format")
            if fmt in ("raw", "chat"):
                return fmt
        except (OSError, ValueError):
            pass
    return "chat" if getattr(model.tokenizer, "chat_template", None) else "raw"


def toy_concept_data(model, concept: str, *, n_train: int = 100, n_test: int = 8, seed: int = 0,
                     read_at: str = "end", vocab_fallback: bool = False, fmt: str = "auto") -> ConceptData:
    """Pairs and prompts for one toy concept (interplab.data.concepts), as token ids of `model`.

    fmt: 'chat' (the checkpoint's chat template: user turn, assistant turn, closing <|im_end|>), 'raw'
    (`<bos> q.. sep response.. <eos>`, the toy-base format) or 'auto' (`model_format`). train/test pairs share no
    seed (test = seed + 10_000). A pair is the same uninstructed question answered without / with the concept's
    tokens; the test prompt is that question up to the answer (chat: with the assistant generation prompt)."""
    from interplab.data import toy_vocab as tv
    from interplab.data.concepts import CONCEPTS, Concepts

    if concept not in CONCEPTS:
        raise ConfigError(f"unknown toy concept {concept!r}; known: {list(CONCEPTS)}")
    if read_at not in ("end", "last_response"):
        raise ConfigError(f"read_at must be 'end' or 'last_response', got {read_at!r}")
    vocab = model.tokenizer.get_vocab()
    needed = set(tv.FILLER) | set(CONCEPTS[concept]) | {tv.SEP}
    mapping = {w: w for w in needed}
    if not needed <= set(vocab):
        if not vocab_fallback:
            raise ConfigError(f"{model.name} lacks the toy concept words (e.g. {sorted(needed - set(vocab))[:4]}); "
                              "use a toy organism (zoo:toy-chat) or set vocab_fallback=true for a smoke run")
        special = set(getattr(model.tokenizer, "all_special_tokens", [])) | {"system", "user", "assistant"}
        pool = [w for w, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if w not in special and w.isalnum()]
        toy_all = sorted(set(tv.FILLER) | {t for ts in CONCEPTS.values() for t in ts} | {tv.SEP})
        if len(pool) < len(toy_all):
            raise ConfigError(f"vocab_fallback needs {len(toy_all)} plain words, {model.name} has {len(pool)}")
        full = dict(zip(toy_all, pool))
        mapping = {w: full[w] for w in needed}
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


def run_concept_study(model, concepts: Sequence[ConceptData], cfg: CRHToyConfig, *, log=print) -> dict:
    """The CRH study on a model (see module docstring). Returns a dict of results (frames and result objects)."""
    import pandas as pd

    from interplab.probes.crh import (
        PenaltyMap, SectorMap, TokenSetJudge, baseline_scan, concept_diffs, diffmean_direction, fit_cylinder,
        pairwise_test, pca_direction, penalty_grid, penalty_scan, probe_direction, sector_scan, steerability_slope,
        strength_grid, trig_law_scan,
    )

    if not concepts:
        raise InputError("run_concept_study needs at least one concept")
    layers = [int(x) for x in cfg.layers] or list(range(model.n_layers))
    steer_layer = model.n_layers // 2 if cfg.steer_layer < 0 else int(cfg.steer_layer)
    if steer_layer not in layers:
        layers.append(steer_layer)
    stats, cylinders, test_diffs, acts = [], {}, {}, {}
    t0 = time.perf_counter()
    for c in concepts:
        for L in sorted(layers):
            d, a_no, a_yes = concept_diffs(model, c.train_pairs, layer=L, return_acts=True)
            cyl = fit_cylinder(d, seed=cfg.seed, meta={"concept": c.name, "layer": L, "site": f"resid_post.{L}"})
            cylinders[(c.name, L)] = cyl
            dt = concept_diffs(model, c.test_pairs, layer=L)
            cos_t = dt @ cyl.axis / np.linalg.norm(dt, axis=1)
            stats.append({"concept": c.name, "layer": L, **cyl.summary(), "test_mean_cos_theta": float(cos_t.mean())})
            if L == steer_layer:
                test_diffs[c.name] = dt
                acts[c.name] = (a_no, a_yes, d)
    stats = pd.DataFrame(stats)
    log(f"[crh] cylinders for {len(concepts)} concepts × {len(layers)} layers in {time.perf_counter() - t0:.1f}s")
    out = {"stats": stats, "cylinders": cylinders, "steer_layer": steer_layer}
    if not cfg.steer:
        return out

    ps = penalty_grid(cfg.n_p)
    pen_maps, sec_maps, base, margins, groups, D_all = {}, {}, {}, [], [], []
    trig = {"cos": [], "S_concept": [], "S_sample": [], "anorm": []}
    for gi, c in enumerate(concepts):
        cyl = cylinders[(c.name, steer_layer)]
        judge = TokenSetJudge(c.words)
        Lp = strength_grid(cfg.penalty_lmax * cyl.axis_norm, cfg.n_strengths)
        t = time.perf_counter()
        pm = penalty_scan(model, c.test_prompts, test_diffs[c.name], cyl.axis, layer=steer_layer, judge=judge,
                          strengths=Lp, ps=ps, max_new_tokens=cfg.max_new_tokens, max_rows=cfg.max_rows,
                          keep_texts=True)
        sm = sector_scan(model, c.test_prompts, cyl, layer=steer_layer, judge=judge, gamma=cfg.gamma_deg,
                         n_bins=cfg.n_bins, strengths=Lp, max_new_tokens=cfg.max_new_tokens, max_rows=cfg.max_rows)
        a_no, a_yes, d_tr = acts[c.name]
        dirs = {"diffmean": diffmean_direction(d_tr), "pca": pca_direction(d_tr),
                "probe": probe_direction(a_no, a_yes, seed=cfg.seed)}
        Lb = strength_grid(cfg.baseline_lmax * cyl.axis_norm, cfg.n_strengths)
        bc = baseline_scan(model, c.test_prompts, dirs, layer=steer_layer, judge=judge, strengths=Lb,
                           max_new_tokens=cfg.max_new_tokens, max_rows=cfg.max_rows)
        pen_maps[c.name], sec_maps[c.name], base[c.name] = pm, sm, bc
        margins.append(pm.margins(0))
        trig["cos"].append(pm.cos_theta)
        trig["S_concept"].append(np.full(len(c.test_prompts), steerability_slope(pm.labels[:, 0, :])))
        trig["S_sample"].append(steerability_slope(pm.labels[:, 0, None, :]))
        trig["anorm"].append(np.full(len(c.test_prompts), cyl.axis_norm))
        groups += [gi] * len(c.test_prompts)
        D_all.append(test_diffs[c.name])
        log(f"[crh] {c.name}: penalty/sector/baselines in {time.perf_counter() - t:.1f}s; "
            f"label-2 rate penalty {float((pm.labels == 2).mean()):.3f}, sector {float((sm.labels == 2).mean()):.3f}")
    # pooled over concepts on the step axis (strengths differ per concept by ‖a‖; the repo pools by step too)
    names = [c.name for c in concepts]
    steps = np.arange(1, cfg.n_strengths + 1, dtype=np.float64)
    pooled_pen = PenaltyMap(labels=np.concatenate([pen_maps[n].labels for n in names]), ps=ps, strengths=steps,
                            cos_theta=np.concatenate([pen_maps[n].cos_theta for n in names]),
                            config={"pooled_over": names, "strengths": "step index"})
    pooled_sec = SectorMap(labels=np.concatenate([sec_maps[n].labels for n in names]), strengths=steps,
                           bin_angles=sec_maps[names[0]].bin_angles, gamma_deg=cfg.gamma_deg,
                           config={"pooled_over": names, "note": "bins of different concepts live in different "
                                                                 "planes; the pooled map is a summary only"})
    M = np.concatenate(margins)
    try:
        pt = pairwise_test(np.concatenate(D_all), M, groups=np.asarray(groups), n_perm=cfg.n_perm, seed=cfg.seed)
    except Exception as e:  # noqa: BLE001 - too few activated samples is a result, not a crash
        pt = None
        log(f"[crh] Implication-3 test not computable: {e}")
    trig_res = {}
    cos = np.concatenate(trig["cos"])
    for level in ("concept", "sample"):
        try:
            trig_res[level] = trig_law_scan(np.sqrt(np.clip(1 - cos**2, 0, 1)), cos,
                                            np.concatenate(trig[f"S_{level}"]), np.concatenate(trig["anorm"]),
                                            n_perm=100, seed=cfg.seed)
        except Exception as e:  # noqa: BLE001 - constant steerability (e.g. nothing activates) is a result
            trig_res[level] = None
            log(f"[crh] Implication-2 scan ({level}) not computable: {e}")
    out.update({"penalty": pen_maps, "sector": sec_maps, "baselines": base, "pooled_penalty": pooled_pen,
                "pooled_sector": pooled_sec, "pairwise": pt, "margins": M, "trig": trig_res})
    return out


@register_experiment("crh-toy", config=CRHToyConfig,
                     help="CRH on a chat organism's toy concepts: cylinder stats per concept × layer, penalty "
                          "heatmaps, sector maps, Implication-3 test, baselines vs strength.")
def crh_toy(cfg: CRHToyConfig, run) -> None:
    import pandas as pd

    import interplab
    from interplab.data.concepts import CONCEPT_NAMES
    from interplab.figures.crh import (baseline_curves, cylinder_scene, cylinder_stats_figure, pairwise_scatter,
                                       penalty_heatmaps, sector_polar, trig_law_figure)

    model = interplab.load_model(cfg.model)
    names = list(cfg.concepts) or list(CONCEPT_NAMES)
    data = [toy_concept_data(model, n, n_train=cfg.n_train, n_test=cfg.n_test, seed=cfg.seed + 17 * i,
                             read_at=cfg.read_at, vocab_fallback=cfg.vocab_fallback, fmt=cfg.fmt)
            for i, n in enumerate(names)]
    res = run_concept_study(model, data, cfg)
    run.save_table("cylinder_stats", res["stats"])
    save_figure(run, "cylinder_score", cylinder_stats_figure(res["stats"], value="cylinder_score"))
    save_figure(run, "plane_explained", cylinder_stats_figure(res["stats"], value="plane_explained"))
    L = res["steer_layer"]
    c0 = names[0]
    summary = {"model": cfg.model, "steer_layer": L, "format": model_format(model) if cfg.fmt == "auto" else cfg.fmt,
               "cylinder": res["stats"].groupby("layer")[["plane_explained", "null_plane_explained",
                                                          "cylinder_score", "mean_cos_theta"]].mean().to_dict()}
    if cfg.steer:
        pp, ps_ = res["pooled_penalty"], res["pooled_sector"]
        run.save_table("penalty_labels", pp.to_frame())
        run.save_table("sector_bins", pd.concat([res["sector"][n].bins_frame().assign(concept=n) for n in names]))
        run.save_table("baselines", pd.concat([res["baselines"][n].to_frame().assign(concept=n) for n in names]))
        save_figure(run, "penalty_heatmaps", penalty_heatmaps(pp))
        save_figure(run, "sector_map", sector_polar(res["sector"][c0], title=f"Sector map — {c0}, layer {L}"))
        cyl = res["cylinders"][(c0, L)]
        save_figure(run, "cylinder_scene", cylinder_scene(cyl, sector_auc=res["sector"][c0].population_auc,
                                                         sample_diff=None))
        bl = res["baselines"]
        from interplab.probes.crh import BaselineCurves

        pooled_b = BaselineCurves(methods=bl[c0].methods, labels=np.concatenate([bl[n].labels for n in names], 1),
                                  strengths=np.arange(1.0, cfg.n_strengths + 1), directions=bl[c0].directions)
        save_figure(run, "baselines", baseline_curves(pooled_b))
        r2, r3 = pp.rates(2), pp.rates(3)
        m2, _ = pooled_b.rates(2)
        summary.update({
            "penalty_max_label2_rate": float(np.nanmax(r2)), "penalty_max_label3_rate": float(np.nanmax(r3)),
            "penalty_label2_rate_by_p_at_top_step": dict(zip([f"{p:.2f}" for p in pp.ps], r2[-1].tolist())),
            "sector_label2_rate": float((ps_.labels == 2).mean()),
            "sector_auc_range_per_concept": {n: [float(res["sector"][n].population_auc.min()),
                                                 float(res["sector"][n].population_auc.max())] for n in names},
            "baseline_label2_rate_at_top_step": dict(zip(pooled_b.methods, m2[:, -1].tolist())),
            "n_activated_samples": int((res["margins"] != 0).sum()), "n_samples": int(res["margins"].size),
        })
        for level, tr in res["trig"].items():
            if tr is not None:
                run.save_table(f"trig_law_{level}", tr.to_frame())
                save_figure(run, f"trig_law_{level}", trig_law_figure(tr, title=f"Implication 2 ({level}-level S)"))
                summary[f"impl2_{level}"] = {"max_r": tr.global_r, "a": tr.global_a, "p": tr.global_p,
                                             "perm_p": tr.perm_p, "n_used": tr.n_used,
                                             "n_negative_cos": tr.n_negative_cos}
            else:
                summary[f"impl2_{level}"] = None
        pt = res["pairwise"]
        if pt is not None:
            run.save_table("pairwise", pt.to_frame())
            save_figure(run, "pairwise", pairwise_scatter(pt))
            summary["impl3"] = {"r": pt.r, "p_perm": pt.p_perm, "n_pairs": int(pt.x.size)}
        else:
            summary["impl3"] = None
    run.save_json("summary", summary)


# ------------------------------------------------------------------------------------------------ spiral probe
@dataclass
class CRHSpiralConfig:
    """model: zoo name or checkpoint dir; concept_ori / concept_tgt: the two instructions' concepts (the prompts
    `mention <concept>` (system) + `<question> sep` (user) differ in that one token); question: filler words;
    layer: block L (steering and Δ at resid_pre.L; -1 = ⌊n_layers/2⌋); w_min, w_max, w_step: norm budgets
    w = w_min, w_min + w_step, …, w_max (repo default 0.1…3.0 step 0.1); steps, lr, temperature, eps: the repo's
    optimisation; modes: helix-fit modes ('fixed', 'faithful')."""

    model: str = "zoo:toy-chat"
    concept_ori: str = "animal"
    concept_tgt: str = "color"
    question: str = "the big day"
    layer: int = -1
    w_min: float = 0.1
    w_max: float = 3.0
    w_step: float = 0.1
    steps: int = 20
    lr: float = 0.1
    temperature: float = 0.7
    eps: float = 1e-6
    modes: list[str] = field(default_factory=lambda: ["fixed", "faithful"])


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


@register_experiment("crh-spiral", config=CRHSpiralConfig,
                     help="CRH spiral probe (§2.4) on a chat organism: norm-constrained steering vectors optimised "
                          "for one prompt pair, helix fits (fixed + faithful) vs the LRH line.")
def crh_spiral(cfg: CRHSpiralConfig, run) -> None:
    import pandas as pd

    import interplab
    from interplab.figures.crh import helix_figure, steering_vectors_figure
    from interplab.probes.crh_spiral import spiral_probe

    if not cfg.w_step > 0 or not cfg.w_max >= cfg.w_min >= 0:
        raise ConfigError("need w_step > 0 and 0 ≤ w_min ≤ w_max")
    ws = np.round(np.arange(cfg.w_min, cfg.w_max + cfg.w_step / 2, cfg.w_step), 10)
    model = interplab.load_model(cfg.model)
    L = model.n_layers // 2 if cfg.layer < 0 else int(cfg.layer)
    ori, tgt = toy_spiral_prompts(cfg.concept_ori, cfg.concept_tgt, cfg.question)
    t0 = time.perf_counter()
    sp = spiral_probe(model, ori, tgt, L, modes=tuple(cfg.modes), ws=ws, steps=cfg.steps, lr=cfg.lr,
                      temperature=cfg.temperature, eps=cfg.eps)
    secs = time.perf_counter() - t0
    sv = sp.vectors
    tok = model.tokenizer
    run.save_table("spiral_vectors", sv.to_frame())
    run.save_table("loss_curves", pd.DataFrame([{"w": w, "step": s, "loss": float(sv.losses[i, s])}
                                                for i, w in enumerate(sv.ws) for s in range(sv.losses.shape[1])]))
    run.save_arrays("spiral", {"vectors": sv.vectors, "reference": sv.reference, "ws": sv.ws, "delta": sv.delta,
                               "losses": sv.losses})
    summary = {"model": cfg.model, "layer": L, "site": f"resid_pre.{L}", "seconds": secs,
               **sv.summary(), "src": tok.convert_ids_to_tokens(sv.src_tokens),
               "dst": tok.convert_ids_to_tokens(sv.dst_tokens),
               "loss_text": tok.convert_ids_to_tokens(sv.loss_ids),
               "loss_init_mean": float(sv.losses[:, 0].mean()), "loss_final_mean": float(sv.losses[:, -1].mean()),
               "max_p_dst": float(sv.p_dst.max()), "w_at_max_p_dst": float(sv.ws[int(np.argmax(sv.p_dst))]),
               "cos_to_delta": dict(zip([f"{w:g}" for w in sv.ws], sv.cos_to_reference().tolist())),
               "helix": {k: v.summary() for k, v in sp.fits.items()},
               "helix_explained": {k: v.explained.tolist() for k, v in sp.fits.items()},
               "reference_helix": {k: v.summary() for k, v in sp.reference_fits.items()},
               "planar_helix": {k: v.summary() for k, v in sp.planar_fits.items()}}
    run.save_json("summary", summary)
    save_figure(run, "optimisation", steering_vectors_figure(sv))
    for k, fit in sp.fits.items():
        save_figure(run, f"helix_{k}", helix_figure(fit))
    if "fixed" in sp.reference_fits:
        save_figure(run, "reference_helix_fixed", helix_figure(sp.reference_fits["fixed"],
                                                              title="LRH reference line w·dist·Δ̂ (control), fixed fit"))
