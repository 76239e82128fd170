"""Experiment `lenses-facts`: the lenses over many clean / corrupt fact pairs, aggregated over pairs (issue 27 §3;
docs/lenses.md, "Lenses over many fact pairs").

    interplab run lenses-facts --set model=real:smollm2-135m-instruct --set n_pairs=50
    interplab run lenses-facts --set model=real:gemma-3-270m --set known=all
    interplab run lenses-facts --set model=./my-model --set pairs=my_pairs.csv     # clean, corrupt, answer, wrong
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from interplab.core.errors import ConfigError, InterplabError
from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure

KNOWN_MODES = ("shipped", "compute", "all")


@dataclass
class FactLensExpConfig:
    """Config of `lenses-facts` (the lens study of `interplab.probes.lenses.facts` on world-fact pairs)."""

    model: str = field(default="real:smollm2-135m-instruct", metadata={"help": "model (real:NAME, zoo name, local "
                                                                               "checkpoint, hub id)"})
    backend: str = field(default="bridge", metadata={"help": "bridge or nnsight"})
    n_pairs: int = field(default=50, metadata={"help": "pairs to study (the first n of the seeded, relation-mixed "
                                                       "list; 0 = all)"})
    seed: int = field(default=0, metadata={"help": "pair-building seed (partners, order) and bootstrap / split seed"})
    known: str = field(default="shipped", metadata={"help": "which world facts may form pairs: 'shipped' (the "
                                                            "model's shipped closed-book filter), a shipped filter "
                                                            "by name (e.g. smollm2-135m-instruct), 'compute' (answer "
                                                            "them closed-book now), 'all'"})
    pairs: str = field(default="", metadata={"help": "your own pairs instead of world facts: a CSV/JSONL with "
                                                     "columns clean, corrupt, answer, wrong"})
    sites: list[str] = field(default_factory=lambda: ["resid_pre", "attn_z"],
                             metadata={"help": "exact grids: resid_pre (layer x position), attn_z (per head, all "
                                               "positions)"})
    ig_steps: int = field(default=8, metadata={"help": "integrated-gradients points of attribution patching"})
    top_k: int = field(default=10, metadata={"help": "heads in a top set (top heads, bootstrap frequency, split "
                                                     "halves)"})
    n_boot: int = field(default=1000, metadata={"help": "bootstrap resamples of the pairs"})
    n_splits: int = field(default=200, metadata={"help": "random half splits of the pairs"})
    min_span: float = field(default=1.0, metadata={"help": "pairs whose clean - corrupt logit difference is below "
                                                           "this are left out of the patching aggregates"})
    truth_map: str = field(default="shipped", metadata={"help": "a Truth-Score map to compare the head maps with: "
                                                               "'shipped' (the committed world-facts truth-scores "
                                                               "run of this model, if there is one), a truth-scores "
                                                               "run folder, or '' (none)"})
    batch_size: int = field(default=32, metadata={"help": "patched copies of a prompt per forward"})
    from_run: str = field(default="", metadata={
        "help": "a lenses-facts run folder whose saved per-pair reads (`study`) are re-aggregated "
                "instead of running the model (same model, sites, ig_steps and min_span; top_k, "
                "n_boot, n_splits and seed apply)"})
    device: str = field(default="cpu", metadata={"help": "device"})
    dtype: str = field(default="float32", metadata={"help": "model dtype"})

    def __post_init__(self):
        if self.backend not in ("bridge", "nnsight"):
            raise ConfigError(f"backend must be 'bridge' or 'nnsight', got {self.backend!r}")
        if self.n_pairs < 0:
            raise ConfigError(f"n_pairs must be >= 0 (0 = all), got {self.n_pairs}")
        if isinstance(self.sites, str):
            self.sites = [s for s in self.sites.split(",") if s]

    def study_config(self):
        from interplab.probes.lenses.facts import FactLensConfig

        return FactLensConfig(sites=list(self.sites), ig_steps=self.ig_steps, batch_size=self.batch_size,
                              top_k=self.top_k, n_boot=self.n_boot, n_splits=self.n_splits, min_span=self.min_span,
                              seed=self.seed).validate()


def build_pairs(cfg: FactLensExpConfig, model) -> tuple[list, dict]:
    """The pairs of `cfg` for `model` and a note of where they came from (a user's file or the world facts)."""
    from interplab.data.fact_pairs import fact_pairs, pairs_from_rows
    from interplab.data.world_facts import known_facts, load_facts, load_known, shipped_known

    limit = cfg.n_pairs or None
    if cfg.pairs:
        from interplab.data.files import read_records

        pairs, dropped = pairs_from_rows(model.tokenizer, read_records(cfg.pairs), source=cfg.pairs)
        return pairs[:limit], {"data": cfg.pairs, "dropped_rows": dropped}
    if cfg.known not in KNOWN_MODES and cfg.known not in shipped_known():
        raise ConfigError(f"known must be one of {KNOWN_MODES} or a shipped filter {shipped_known()}, got "
                          f"{cfg.known!r}")
    facts = load_facts()
    if cfg.known == "shipped":
        keep = load_known(cfg.model, facts)
    elif cfg.known == "compute":
        keep = known_facts(model, facts, max_new_tokens=16)["known"]
    elif cfg.known == "all":
        keep = None
    else:
        keep = load_known(cfg.known, facts)
    n_known = len(facts) if keep is None else int(keep.sum())
    pairs = fact_pairs(model.tokenizer, n=limit, seed=cfg.seed, known=keep, facts=facts)
    return pairs, {"data": "world facts (interplab.data.fact_pairs)", "known": cfg.known, "n_known_facts": n_known}


def _same_model(a: str, b: str) -> bool:
    from interplab.models.real import PREFIX, real_model

    def key(name: str) -> str:
        try:
            return real_model(name).name if name.startswith(PREFIX) else name
        except InterplabError:
            return name

    return key(a) == key(b)


def truth_map(cfg: FactLensExpConfig, shape: tuple[int, int]):
    """(Truth-Score map [L, H], where it came from) for `cfg.truth_map`, or (None, why not). 'shipped' looks for a
    committed truth-scores run of this model on world facts with distractors (results/truth-scores-<model>/); a
    folder must be a truth-scores run (its facts_map or truth_scores result) of a model with this head grid."""
    import json
    from pathlib import Path

    from interplab.results import load_run
    from interplab.results.runs import shipped_runs

    if not cfg.truth_map:
        return None, "not asked for (truth_map='')"
    if cfg.truth_map == "shipped":
        found = []
        for d in shipped_runs("truth-scores"):
            c = json.loads((d / "config.json").read_text()).get("config", {})
            if (d / "facts_map").is_dir() and c.get("distractors") and _same_model(c.get("model", ""), cfg.model):
                found.append(d)
        if not found:
            return None, f"no committed world-facts truth-scores run of {cfg.model} (run truth-scores on it)"
        run_dir = found[-1]
    else:
        run_dir = Path(cfg.truth_map).expanduser()
        if not run_dir.is_dir():
            raise ConfigError(f"truth_map={cfg.truth_map!r}: no such run folder (give a truth-scores run, "
                              "'shipped' or '')")
    run = load_run(run_dir)
    name = next((n for n in ("facts_map", "truth_scores") if n in run.result_names), None)
    if name is None:
        raise ConfigError(f"truth_map={str(run_dir)!r} holds no Truth-Score map (facts_map or truth_scores result); "
                          "give a truth-scores run folder")
    res = run.result(name)
    m = (res.scores if name == "facts_map" else res).scores
    if tuple(m.shape) != tuple(shape):
        raise ConfigError(f"truth_map={str(run_dir)!r} is a {m.shape[0]} x {m.shape[1]} map; this model has "
                          f"{shape[0]} x {shape[1]} heads: give a run of the same model")
    try:
        rel = str(run_dir.resolve().relative_to(Path(__file__).resolve().parents[2]))
    except ValueError:
        rel = str(run_dir)
    return m, rel


def reuse_study(cfg: FactLensExpConfig):
    """(study, source note) of `cfg.from_run`: the saved per-pair reads of an earlier lenses-facts
    run, with this config's aggregate settings (top_k, n_boot, n_splits, seed). The settings that
    shaped the reads must match."""
    import dataclasses
    from pathlib import Path

    from interplab.results import load_run

    d = Path(cfg.from_run).expanduser()
    if not (d / "study").is_dir():
        raise ConfigError(f"from_run={cfg.from_run!r} is not a lenses-facts run folder with a "
                          "saved `study` (give a run made by `interplab run lenses-facts`)")
    old = load_run(d)
    study = old.result("study")
    if not _same_model(str(study.model), cfg.model):
        raise ConfigError(f"from_run={cfg.from_run!r} studied {study.model}, not "
                          f"model={cfg.model!r}: set model to the run's model")
    sc = study.config
    asked = {"sites": list(cfg.sites), "ig_steps": cfg.ig_steps, "min_span": cfg.min_span}
    clash = {k: (getattr(sc, k), v) for k, v in asked.items() if getattr(sc, k) != v}
    if clash:
        raise ConfigError(f"from_run={cfg.from_run!r} read its pairs with other settings {clash} "
                          "(saved, asked): set them as the run did, or run the model again")
    study = dataclasses.replace(study, config=dataclasses.replace(
        sc, top_k=cfg.top_k, n_boot=cfg.n_boot, n_splits=cfg.n_splits, seed=cfg.seed).validate())
    before = old.json("summary") if "summary" in old.json_names else {}
    keep = {k: before[k] for k in ("data", "known", "n_known_facts", "dropped_rows") if k in before}
    return study, {**keep, "from_run": str(d)}


@register_experiment("lenses-facts", config=FactLensExpConfig,
                     help="Logit lens, activation and attribution patching and DLA over many clean / corrupt "
                          "world-fact pairs, with bootstrap intervals over pairs and top-head stability.")
def lenses_facts(cfg: FactLensExpConfig, run) -> None:
    import numpy as np

    import interplab
    from interplab.figures.lenses import (answer_rank_figure, attribution_rho_figure, dla_figure,
                                          head_frequency_figure, patching_figure)
    from interplab.probes.lenses.facts import fact_lens_study
    from interplab.probes.lenses.facts_validity import fact_verdicts
    from interplab.probes.validity import VALIDITY_RESULT, ValidityReport

    study_cfg = cfg.study_config()
    if cfg.from_run:
        study, source = reuse_study(cfg)
    else:
        model = interplab.load_model(cfg.model, backend=cfg.backend, device=cfg.device,
                                     dtype=cfg.dtype)
        pairs, source = build_pairs(cfg, model)
        study = fact_lens_study(model, pairs, study_cfg)
    run.save_result("study", study)
    run.save_json("summary", {"config": asdict(cfg), **source, **study.summary()})
    run.save_table("pairs", study.pairs)
    run.save_table("rank_per_layer", study.rank_per_layer())
    run.save_table("heads", study.to_frame())
    run.save_table("attribution_per_pair", study.attribution)
    run.save_table("attribution_summary", study.attribution_summary())
    save_figure(run, "answer_rank", answer_rank_figure(study.rank_per_layer()))
    save_figure(run, "attribution_rho", attribution_rho_figure(study.attribution[study.attribution["pair"].isin(
        np.flatnonzero(study.included))]))
    n_inc = int(study.included.sum())
    if n_inc == 0:
        run.save_result(VALIDITY_RESULT, ValidityReport.of([]))
        return
    save_figure(run, "dla_heads", dla_figure(study.dla_of(study.included),
                                             title=f"Direct logit attribution · mean over {n_inc} pairs · "
                                                   "answer − wrong"))
    import pandas as pd

    kinds = ["dla"] + (["patching"] if "attn_z" in cfg.sites else [])
    run.save_table("top_heads", pd.concat([study.top_heads(k) for k in kinds], ignore_index=True))
    agreement = [dict(study.split_half(k)) for k in kinds]
    if "attn_z" in cfg.sites:
        agreement.append({"map": "patching vs dla", **study.map_agreement()})
    run.save_table("agreement", pd.DataFrame(agreement))
    tmap, tsource = truth_map(cfg, (study.n_layers, study.n_heads))
    maps = study.head_agreement({"truth": tmap} if tmap is not None else None)
    run.save_table("map_agreement", maps)
    run.save_json("map_agreement", {"truth_map": tsource, "rows": maps.to_dict(orient="records")})
    run.save_result(VALIDITY_RESULT, ValidityReport.of(fact_verdicts(study, maps)))
    for k in kinds:
        save_figure(run, f"top{cfg.top_k}_frequency_{k}", head_frequency_figure(
            study.top_k_frequency(k), k=study_cfg.top_k, n_kv_heads=study.n_kv_heads,
            title=f"{k}: top-{study_cfg.top_k} heads across bootstrap resamples of {n_inc} pairs"))
    if "resid_pre" in cfg.sites:
        run.save_table("resid_roles", study.role_map())
        save_figure(run, "patching_resid_roles", patching_figure(
            study.mean_patching("resid_pre"), title=f"Activation patching · resid_pre by token role · mean over "
                                                    f"{n_inc} pairs"))
    if "attn_z" in cfg.sites:
        save_figure(run, "patching_heads", patching_figure(
            study.mean_patching("attn_z"), title=f"Activation patching · attn_z per head (all positions) · mean "
                                                 f"over {n_inc} pairs"))
