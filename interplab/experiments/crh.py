"""CRH experiments (method: `interplab.probes.crh`).

* `crh-synthetic`: `synthetic_study` — planted-cylinder recovery against the spec's thresholds, the LRH null, the
  Implication-3 replica, penalty monotonicity and the spiral probe. Model-free, seconds.
* `crh-toy`: `run_concept_study` on a chat organism's toy concepts (default `zoo:toy-chat`, concepts from
  `interplab.data.concepts`): cylinder statistics per concept and layer; at one steering layer the penalty heatmaps,
  sector maps, the implication tests and the baselines vs strength.
* `crh-spiral`: `spiral_probe` (spec §2.4) on one toy prompt pair differing in one token: norm-constrained steering
  vectors per budget w, helix fits (fixed + faithful) and two controls (the LRH line; the trajectory flattened to its
  top-2 PCs)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from interplab.core import progress
from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure
from interplab.probes.crh import ConceptStudyConfig, SyntheticStudyConfig

__all__ = ["CRHToyConfig", "CRHConceptsConfig", "CRHSpiralConfig"]


@register_experiment("crh-synthetic", config=SyntheticStudyConfig,
                     help="CRH planted-cylinder recovery (axis/plane/radius/sector centre vs spec thresholds), "
                          "LRH null, Implication-3 replica, penalty monotonicity, spiral probe. Model-free.")
def crh_synthetic(cfg: SyntheticStudyConfig, run) -> None:
    from interplab.figures.crh import (cylinder_scene, helix_figure, pairwise_scatter, penalty_heatmaps,
                                       sector_polar, synthetic_recovery_figure)
    from interplab.probes.crh import synthetic_study

    study = synthetic_study(cfg)
    run.save_result("study", study)                 # the typed result; the tables below are views of it
    run.save_table("recovery", study.recovery)
    run.save_json("summary", study.summary())
    save_figure(run, "recovery", synthetic_recovery_figure(study.recovery))
    save_figure(run, "cylinder_scene", cylinder_scene(study.example_cylinder,
                                                     sector_auc=study.example_sector_map.population_auc,
                                                     sample_diff=study.example_sample_diff))
    save_figure(run, "sector_map", sector_polar(study.example_sector_map))
    save_figure(run, "penalty_tied", penalty_heatmaps(study.penalty_tied_facilitating, exclude_step1=False))
    save_figure(run, "impl3_tied", pairwise_scatter(study.impl3_tied))
    save_figure(run, "impl3_independent", pairwise_scatter(study.impl3_independent))
    save_figure(run, "helix", helix_figure(study.helix_n1_0))


@dataclass
class CRHToyConfig(ConceptStudyConfig):
    """The study's settings (`ConceptStudyConfig`) plus the data: model: zoo name or checkpoint dir; concepts: names
    from interplab.data.concepts (empty = all six); n_train, n_test: pairs per concept (train: diffs for the
    cylinder; test: steered samples); read_at: 'end' (the closing <|im_end|> of the assistant turn, same token in
    both rows) or 'last_response' (the last response word, as the repo's last token; mixes in token identity, B10);
    vocab_fallback: map toy words onto the model's own vocabulary when they are missing (smoke runs on random
    checkpoints only); fmt: 'auto' (the organism card's data format), 'raw' or 'chat'.
    Real data (docs/data.md): data=offline: the offline pairs of `interplab.data.concept_pairs`
    (concepts = lexicon keys or paper ids, empty = all 25; n_train + n_test pairs each); data: a
    pair file (concept, question, resp_no_concept, resp_with_concept; n_train caps the train pairs
    per concept); concepts=paper: the paper's 100 concepts (package data; n_concepts caps them)
    elicited from the model on `questions` (a file of AlpacaEval rows; empty = the hub) with
    max_new_tokens_pairs-token greedy answers. control (data=offline): also fit the cylinder
    statistics of that many pseudo-concepts (`concept_pairs.control_pairs`: 8 random nouns each,
    seeds seed+1, seed+2, ...) at every layer, the empirical null of the geometry
    (`tables/control_stats.csv`; never steered). held_out_judge (data=offline): the concept's words
    are split (`concept_pairs.split_words`) into those that build the pairs and those the judge
    looks for; false = every word both builds and judges (the issue-28 pairs)."""

    model: str = "zoo:toy-chat"
    concepts: list[str] = field(default_factory=list)
    n_train: int = 100
    n_test: int = 10
    read_at: str = "end"
    vocab_fallback: bool = False
    fmt: str = "auto"
    data: str = ""
    questions: str = ""
    n_concepts: int = 0
    max_new_tokens_pairs: int = 32
    control: int = 0
    held_out_judge: bool = True


def _concept_data(cfg: CRHToyConfig, model) -> tuple[list, list[str]]:
    """The study's ConceptData: a user pair file (data=...), the paper's concepts elicited on questions
    (concepts=paper, questions=... a file with `instruction`/`question` rows, or empty = the AlpacaEval hub),
    else the toy concepts."""
    from interplab.probes.crh.real_data import paper_concept_data, user_concept_data

    if cfg.data == "offline":
        from interplab.data.concept_pairs import offline_concept_pairs

        rows = offline_concept_pairs(cfg.concepts, n_pairs=cfg.n_train + cfg.n_test, seed=cfg.seed,
                                     held_out_judge=cfg.held_out_judge)
        data = user_concept_data(rows, n_test=cfg.n_test, seed=cfg.seed, model=model)
        return data, [d.name for d in data]
    if cfg.data:
        from interplab.data.user import user_records

        data = user_concept_data(user_records("crh", cfg.data), n_test=cfg.n_test, seed=cfg.seed,
                                 max_train=cfg.n_train, model=model)
        if cfg.concepts:
            data = [d for d in data if d.name in set(cfg.concepts)]
        return data, [d.name for d in data]
    if list(cfg.concepts) == ["paper"]:
        from interplab.data.adapters.crh_concepts import alpaca_questions, paper_concepts

        rows = paper_concepts(limit=cfg.n_concepts or None)
        qs = list(alpaca_questions(cfg.questions or None, limit=cfg.n_train + cfg.n_test, seed=cfg.seed))
        data = paper_concept_data(model, rows, qs, n_test=cfg.n_test, seed=cfg.seed,
                                  max_new_tokens=cfg.max_new_tokens_pairs)
        return data, [d.name for d in data]
    from interplab.data.concepts import CONCEPT_NAMES
    from interplab.probes.crh import toy_concept_data

    names = list(cfg.concepts) or list(CONCEPT_NAMES)
    return [toy_concept_data(model, n, n_train=cfg.n_train, n_test=cfg.n_test, seed=cfg.seed + 17 * i,
                             read_at=cfg.read_at, vocab_fallback=cfg.vocab_fallback, fmt=cfg.fmt)
            for i, n in enumerate(names)], names


@dataclass
class CRHConceptsConfig(CRHToyConfig):
    """`crh-toy`'s settings with the real-model defaults (issues 28 §1 and 46, docs/crh.md "On a
    real model"): the offline pairs of 25 paper concepts (`data=offline`, 25 train + 5 test pairs
    each, held-out judge words) on SmolLM2-135M-Instruct, cylinder statistics at every layer,
    strengths up to 1.0 × the residual norm at the steering block (4 steps), 3 penalty values, 8
    sectors, 20-token replies, every reply scored for fluency.

    select_concepts: that many concepts (a seeded draw, `selection.split_concepts`) choose the read
    position among `select_positions`, the steering block among `select_layers` and the strength
    step (`choose_read`: diffmean steering, the highest fluent concept rate); the study scores the
    other concepts only. 0 = no selection: the study runs at `position` and `steer_layer` on every
    concept, and the verdicts flag the settings as not held out. control_arm: steer each scored
    concept's prompts with a pseudo-concept's diffmean at the diffmean's norms (the baselines'
    `control` method; pseudo-concept i is `control_pairs(seed=seed + 1 + i)`), and read its cylinder
    at every layer (`tables/control_stats.csv`). The run saves its verdicts as `validity`
    (`probes.crh.verdicts`)."""

    model: str = "real:smollm2-135m-instruct"
    data: str = "offline"
    n_train: int = 25
    n_test: int = 5
    steer_layer: int = 10
    position: str = "mean"
    strength_unit: str = "resid"
    penalty_lmax: float = 1.0
    baseline_lmax: float = 1.0
    n_strengths: int = 4
    n_p: int = 3
    n_bins: int = 8
    max_new_tokens: int = 20
    fluency: bool = True
    select_concepts: int = 5
    select_positions: list[str] = field(default_factory=lambda: ["last", "mean"])
    select_layers: list[int] = field(default_factory=lambda: [5, 10, 15])
    control_arm: bool = True


def _held_out_settings(cfg: CRHConceptsConfig, model, data: list):
    """(scored concepts with their control pairs, the ReadChoice or None, the study config at the
    chosen settings): the selection concepts choose the read position, block and step and are then
    left out."""
    from dataclasses import replace

    from interplab.data.concept_pairs import control_pairs
    from interplab.probes.crh.real_data import user_concept_data
    from interplab.probes.crh.selection import choose_read, split_concepts

    choice = None
    if cfg.select_concepts > 0:
        sel, data = split_concepts(data, cfg.select_concepts, seed=cfg.seed)
        choice = choose_read(model, sel, positions=cfg.select_positions, layers=cfg.select_layers,
                             lmax=cfg.baseline_lmax, n_strengths=cfg.n_strengths,
                             max_new_tokens=cfg.max_new_tokens, max_rows=cfg.max_rows,
                             scored=[c.name for c in data])
        cfg = replace(cfg, position=choice.position, steer_layer=choice.layer)
    if cfg.control_arm:
        if cfg.data != "offline":
            from interplab.core.errors import ConfigError

            raise ConfigError("control_arm steers the offline pairs' pseudo-concepts; set "
                              "data=offline (or control_arm=false)")
        out = []
        for i, c in enumerate(data):
            rows = control_pairs(cfg.n_train + cfg.n_test, seed=cfg.seed + 1 + i)
            (ctl,) = user_concept_data(rows, n_test=cfg.n_test, seed=cfg.seed, model=model)
            out.append(replace(c, control_pairs=ctl.train_pairs,
                               control_name=f"pseudo-concept {i + 1} ({', '.join(ctl.words)})"))
        data = out
    return data, choice, cfg


def _control_stats(cfg: CRHToyConfig, model, layers: list[int]):
    """Cylinder statistics of the no-concept control pairs (same n as a concept's train set) at `layers`."""
    import pandas as pd

    from interplab.core.errors import ConfigError
    from interplab.data.concept_pairs import control_pairs
    from interplab.probes.crh import concept_diffs_by_layer, fit_cylinder
    from interplab.probes.crh.real_data import user_concept_data

    if cfg.data != "offline":
        raise ConfigError("control=N is the null of the offline pairs; set data=offline (or control=0)")
    rows = []
    for i in range(int(cfg.control)):
        (c,) = user_concept_data(control_pairs(cfg.n_train + cfg.n_test, seed=cfg.seed + 1 + i), n_test=cfg.n_test,
                                 seed=cfg.seed, model=model)
        by = concept_diffs_by_layer(model, c.train_pairs, layers=layers, position=cfg.position)
        rows += [{"concept": c.name, "control": i, "layer": L, **fit_cylinder(by[L][0], seed=cfg.seed).summary()}
                 for L in layers]
    return pd.DataFrame(rows)


@register_experiment("crh-toy", config=CRHToyConfig,
                     help="CRH on a chat organism's toy concepts: cylinder stats per concept × layer, penalty "
                          "heatmaps, sector maps, Implication-3 test, baselines vs strength.")
def crh_toy(cfg: CRHToyConfig, run) -> None:
    _concept_study(cfg, run)


@register_experiment("crh-concepts", config=CRHConceptsConfig,
                     help="CRH on a real chat model (default SmolLM2-135M-Instruct): 25 paper concepts from offline "
                          "pairs, cylinder stats per layer vs the LRH null, sector / penalty steering against "
                          "diffmean (CAA) / PCA / probe baselines with the unsteered null and a fluency measure.")
def crh_concepts(cfg: CRHConceptsConfig, run) -> None:
    _concept_study(cfg, run)


def _stage_log(bar):
    """run_concept_study's log lines, also counted as progress: one stage for the cylinders, one per concept
    steered."""
    def log(msg: str) -> None:
        print(msg)
        if msg.startswith("[crh] cylinders") or ": penalty/sector/baselines" in msg:
            bar.advance()
            bar.phase("steering")
    return log


def _concept_study(cfg: CRHToyConfig, run) -> None:
    import pandas as pd

    import interplab
    from interplab.figures.crh import (baseline_curves, cylinder_scene, cylinder_stats_figure, pairwise_scatter,
                                       penalty_heatmaps, sector_polar, trig_law_figure)
    from interplab.probes.crh import model_format, run_concept_study

    t0 = time.perf_counter()
    model = interplab.load_model(cfg.model)
    data, names = _concept_data(cfg, model)
    choice, run_cfg = None, cfg
    if isinstance(cfg, CRHConceptsConfig) and cfg.steer:
        data, choice, run_cfg = _held_out_settings(cfg, model, data)
        names = [c.name for c in data]
        if choice is not None:
            run.save_result("read_choice", choice)
            run.save_table("read_selection", choice.table())
    with progress.task(1 + len(data) * bool(cfg.steer), "stages", phase="cylinders") as bar:   # progress.json
        study = run_concept_study(model, data, run_cfg, log=_stage_log(bar))
    run.save_result("study", study)                 # the typed result; the tables below are views of it
    run.save_table("cylinder_stats", study.stats)
    if cfg.control > 0:
        run.save_table("control_stats", _control_stats(cfg, model, sorted(set(study.stats["layer"]))))
    elif study.control_stats is not None:
        run.save_table("control_stats", study.control_stats)
    save_figure(run, "cylinder_score", cylinder_stats_figure(study.stats, value="cylinder_score"))
    save_figure(run, "plane_explained", cylinder_stats_figure(study.stats, value="plane_explained"))
    L, c0 = study.steer_layer, study.concepts[names[0]]
    source = cfg.data or ("paper" if list(cfg.concepts) == ["paper"] else "toy")
    summary = {"model": cfg.model, "steer_layer": L, "data": source,
               "format": model_format(model) if cfg.fmt == "auto" else cfg.fmt, **study.summary()}
    if study.steered:
        run.save_table("penalty_labels", study.pooled_penalty.to_frame())
        run.save_table("sector_bins", pd.concat([c.sector.bins_frame().assign(concept=n)
                                                 for n, c in study.concepts.items()]))
        run.save_table("baselines", pd.concat([c.baselines.to_frame().assign(concept=n)
                                               for n, c in study.concepts.items()]))
        save_figure(run, "penalty_heatmaps", penalty_heatmaps(study.pooled_penalty))
        save_figure(run, "sector_map", sector_polar(c0.sector, title=f"Sector map — {names[0]}, layer {L}"))
        save_figure(run, "cylinder_scene", cylinder_scene(c0.cylinder, sector_auc=c0.sector.population_auc,
                                                         sample_diff=None))
        save_figure(run, "baselines", baseline_curves(study.pooled_baselines()))
        for level, tr in study.trig.items():
            if tr is not None:
                run.save_table(f"trig_law_{level}", tr.to_frame())
                save_figure(run, f"trig_law_{level}", trig_law_figure(tr, title=f"Implication 2 ({level}-level S)"))
        if study.pairwise is not None:
            run.save_table("pairwise", study.pairwise.to_frame())
            save_figure(run, "pairwise", pairwise_scatter(study.pairwise))
        if cfg.fluency:
            from interplab.figures.crh import elicitation_curves
            from interplab.probes.crh.elicitation import elicitation_frame, elicitation_summary, sector_holdout

            el = elicitation_frame(study)
            es = elicitation_summary(el, seed=cfg.seed)
            run.save_table("elicitation", el)
            run.save_table("elicitation_summary", es)
            if cfg.n_test >= 2:
                sh, summary["sector_holdout"] = sector_holdout(study, seed=cfg.seed)
                run.save_table("sector_holdout", sh)
            save_figure(run, "elicitation", elicitation_curves(es))
            summary["fluency_threshold_nll"] = el.attrs["fluency_threshold"]
            summary["strength_unit"] = {n: c.unit for n, c in study.concepts.items()}
            if isinstance(cfg, CRHConceptsConfig):
                _save_verdicts(run, study, choice, es, run_cfg, summary)
    summary["seconds"] = time.perf_counter() - t0
    run.save_json("summary", summary)


def _save_verdicts(run, study, choice, es, cfg, summary: dict) -> None:
    """The run's verdicts (`probes.crh.verdicts`) as `validity`. Without a held-out selection the
    strength step is the diffmean's best on the scored concepts, recorded as chosen on them (the
    held-out check then fails)."""
    from interplab.probes.crh.selection import in_sample_choice
    from interplab.probes.crh.verdicts import crh_verdicts
    from interplab.probes.validity import ValidityReport

    if choice is None:
        d = es[es["method"] == "diffmean"]
        step = int(d.loc[d["fluent_concept_rate"].idxmax(), "step"])
        choice = in_sample_choice(cfg.position, study.steer_layer, step, list(study.concepts))
    report = ValidityReport.of(crh_verdicts(study, choice, seed=cfg.seed))
    run.save_result("validity", report)
    summary["read_choice"] = choice.summary()
    summary["validity"] = report.outcomes


@dataclass
class CRHSpiralConfig:
    """model: zoo name, real model or checkpoint dir; concept_ori / concept_tgt: two toy concepts (the prompts
    `mention <concept>` (system) + `<question> sep` (user) differ in that one token), or two offline concepts of a
    real chat model by lexicon key or paper id (`real_spiral_prompts`: the assistant's reply ends in one word of
    each, e.g. temperature, wetland); question: filler words for toy concepts (empty = "the big day"), a user
    question for offline concepts (empty = "What is the capital of France?" with its answer);
    layer: block L (steering and Δ at resid_pre.L; -1 = ⌊n_layers/2⌋); w_min, w_max, w_step: norm budgets
    w = w_min, w_min + w_step, …, w_max (repo default 0.1…3.0 step 0.1); steps, lr, temperature, eps: the repo's
    optimisation; modes: helix-fit modes ('fixed', 'faithful')."""

    model: str = "zoo:toy-chat"
    concept_ori: str = "animal"
    concept_tgt: str = "color"
    question: str = ""
    layer: int = -1
    w_min: float = 0.1
    w_max: float = 3.0
    w_step: float = 0.1
    steps: int = 20
    lr: float = 0.1
    temperature: float = 0.7
    eps: float = 1e-6
    modes: list[str] = field(default_factory=lambda: ["fixed", "faithful"])


@register_experiment("crh-spiral", config=CRHSpiralConfig,
                     help="CRH spiral probe (§2.4) on a chat organism: norm-constrained steering vectors optimised "
                          "for one prompt pair, helix fits (fixed + faithful) vs the LRH line.")
def crh_spiral(cfg: CRHSpiralConfig, run) -> None:
    import pandas as pd

    import interplab
    from interplab.figures.crh import helix_figure, steering_vectors_figure
    from interplab.probes.crh import budget_grid, spiral_probe, toy_spiral_prompts

    ws = budget_grid(cfg.w_min, cfg.w_max, cfg.w_step)
    model = interplab.load_model(cfg.model)
    L = model.n_layers // 2 if cfg.layer < 0 else int(cfg.layer)
    from interplab.data.concepts import CONCEPT_NAMES

    if cfg.concept_ori in CONCEPT_NAMES and cfg.concept_tgt in CONCEPT_NAMES:
        ori, tgt = toy_spiral_prompts(cfg.concept_ori, cfg.concept_tgt, cfg.question or "the big day")
    else:
        from interplab.probes.crh.real_data import real_spiral_prompts

        ori, tgt = real_spiral_prompts(model, cfg.concept_ori, cfg.concept_tgt, cfg.question)
    t0 = time.perf_counter()
    sp = spiral_probe(model, ori, tgt, L, modes=tuple(cfg.modes), ws=ws, steps=cfg.steps, lr=cfg.lr,
                      temperature=cfg.temperature, eps=cfg.eps)
    secs = time.perf_counter() - t0
    sv = sp.vectors
    tok = model.tokenizer
    run.save_result("spiral", sp)                   # the typed result; the tables below are views of it
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
    from interplab.probes.crh.verdicts import spiral_verdicts
    from interplab.probes.validity import ValidityReport

    run.save_result("validity", ValidityReport.of(spiral_verdicts(sp)))
    save_figure(run, "optimisation", steering_vectors_figure(sv))
    for k, fit in sp.fits.items():
        save_figure(run, f"helix_{k}", helix_figure(fit))
    if "fixed" in sp.reference_fits:
        save_figure(run, "reference_helix_fixed", helix_figure(sp.reference_fits["fixed"],
                                                              title="LRH reference line w·dist·Δ̂ (control), fixed fit"))
