"""Experiment `atlas`: every method and lens of one model on shared axes (interplab.probes.lenses.atlas), for each
model in `models`; entries "planted:truth", "planted:decodeshare", "planted:crh" build the validation organism
(interplab.zoo.validation) into the run folder and score the atlas against its planted truth.

    interplab run atlas                                      # toy-chat and the three validation organisms
    interplab run atlas --set models=zoo:toy-chat --set reference=zoo:toy-base
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from interplab.core import progress
from interplab.core.errors import ConfigError
from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure
from interplab.probes.lenses.atlas import AtlasConfig

def _planted() -> tuple[str, ...]:
    """"planted:<method>" for every method that declares a validation organism (interplab.methods)."""
    from interplab.zoo.validation import validation_kinds

    return tuple(f"planted:{k}" for k in validation_kinds())


PLANTED = _planted()


@dataclass
class AtlasExperimentConfig(AtlasConfig):
    """Config of `atlas`: every AtlasConfig field (interplab.probes.lenses.atlas: n_truth_items, truth_solver,
    n_decode_prompts, n_concept_pairs, concept, directions, top_k, n_boot, n_perm, batch_size, seed), plus:

    models: zoo names, checkpoint paths or "planted:<method>" (a method's validation organism, built in the run
    folder: truth, decodeshare, crh).
    reference: a model whose per-layer PR minus each model's is shown as the PR change ("" = none).
    direction_layer: resid_post.L of the direction methods (-1 = automatic: planted site, SAE layer, middle).
    Your own inputs (docs/data.md; "" = the built-in ones): clean / corrupt: the patching / DLA prompt pair;
    truth_data: a Truth-Score file (text, label); decode_data: a DecodeShare file (task, prompt, answer);
    crh_data: a CRH pair file, of which `concept` is used (the first concept when `concept` is not in it).
    They apply to every model that is not a validation organism (those keep their planted data)."""

    direction_layer: int = -1          # AtlasConfig's None ("automatic") as a value the command line can set
    models: list[str] = field(default_factory=lambda: ["zoo:toy-chat", *PLANTED])
    reference: str = ""
    backend: str = "bridge"
    device: str = "cpu"
    dtype: str = "float32"
    clean: str = ""
    corrupt: str = ""
    truth_data: str = ""
    decode_data: str = ""
    crh_data: str = ""
    threads: int = 1
    figure_formats: list[str] = field(default_factory=lambda: ["html"])

    def atlas_config(self) -> AtlasConfig:
        """The AtlasConfig part of this config (validated)."""
        own = {f.name: getattr(self, f.name) for f in fields(AtlasConfig)}
        own["direction_layer"] = None if self.direction_layer < 0 else self.direction_layer
        return AtlasConfig(**own).validate()

    def __post_init__(self):
        if not self.models:
            raise ConfigError("models must name at least one model")
        if self.backend not in ("bridge", "nnsight"):
            raise ConfigError(f"backend must be 'bridge' or 'nnsight', got {self.backend!r}")
        bad = [m for m in self.models if m.startswith("planted:") and m not in PLANTED]
        if bad:
            raise ConfigError(f"unknown validation organisms {bad}; use {list(PLANTED)}")
        if bool(self.clean) != bool(self.corrupt):
            raise ConfigError("give both clean and corrupt (the lens pair) or neither")
        from pathlib import Path

        gone = [f"{k}={v}" for k, v in (("truth_data", self.truth_data), ("decode_data", self.decode_data),
                                        ("crh_data", self.crh_data)) if v and not Path(v).is_file()]
        if gone:
            raise ConfigError(f"no such file: {', '.join(gone)} (give a path to a CSV or JSONL file; docs/data.md)")


def _load(name: str, cfg: AtlasExperimentConfig, run):
    import interplab
    from interplab.zoo.validation import validation_organism

    if name.startswith("planted:"):
        name = str(validation_organism(name.split(":")[1], run.path / "organisms" / name.replace(":", "-")))
    return interplab.load_model(name, backend=cfg.backend, device=cfg.device, dtype=cfg.dtype)


def _key(name: str) -> str:
    """A model's name as an artifact name (letters, digits, . _ - + =): "zoo:toy-chat" -> "toy-chat",
    "real:smollm2-135m-instruct" -> "smollm2-135m-instruct", "planted:truth" -> "planted-truth", a path -> its
    parts joined by "_"."""
    for prefix in ("zoo:", "real:"):
        name = name.removeprefix(prefix)
    return name.replace("planted:", "planted-").replace(":", "-").replace("/", "_").strip("_")


def result_name(model: str) -> str:
    """The name under which an atlas run saves `model`'s Atlas (`load_run(path).result(result_name(m))`)."""
    return f"atlas_{_key(model)}"


@register_experiment("atlas", config=AtlasExperimentConfig,
                     help="One model's atlas: Truth-Score, per-head patching and DLA maps, PR vs patching per "
                          "layer, SAE / decode-shared / CRH direction overlaps and their agreement; on validation "
                          "organisms scored against the planted truth.")
def atlas_experiment(cfg: AtlasExperimentConfig, run) -> None:
    import pandas as pd
    import torch

    from interplab.figures import atlas as F
    from interplab.probes.lenses.atlas import atlas, default_inputs
    from interplab.probes.lenses.atlas_inputs import with_user_data
    from interplab.probes.lenses.atlas_validity import atlas_verdicts
    from interplab.probes.validity import VALIDITY_RESULT, ValidityReport, Verdict

    torch.set_num_threads(max(1, cfg.threads))
    acfg = cfg.atlas_config()
    reference = _load(cfg.reference, cfg, run) if cfg.reference else None
    summary, tables = {"config": asdict(cfg), "models": {}}, {"agreement": [], "overlaps": [], "planted": []}
    verdicts = []
    for name in progress.track(cfg.models, "models", label=str):   # progress.json: models done, method running
        model = _load(name, cfg, run)
        inputs = None
        if not name.startswith("planted:") and (cfg.clean or cfg.truth_data or cfg.decode_data or cfg.crh_data):
            inputs = with_user_data(
                model, default_inputs(model, acfg), clean=cfg.clean, corrupt=cfg.corrupt, truth_data=cfg.truth_data,
                decode_data=cfg.decode_data, crh_data=cfg.crh_data, concept=cfg.concept,
                n_items=acfg.n_truth_items, n_decode=acfg.n_decode_prompts, n_pairs=acfg.n_concept_pairs,
                seed=acfg.seed)
        a = atlas(model, acfg, inputs=inputs, reference=reference)
        key = _key(name)
        run.save_result(result_name(name), a)
        # one report per run: with several models each claim names its model
        for v in atlas_verdicts(a):
            if len(cfg.models) > 1:
                v = Verdict(v.method, f"{key}: {v.claim}", v.measured, v.supported, v.checks,
                            v.note)
            verdicts.append(v)
        for t in tables:
            df = getattr(a, t)
            if len(df):
                tables[t].append(df.assign(model=key))
        for m in a.head_maps:
            save_figure(run, f"{key}_heads_{m}", F.atlas_head_map(a, m), cfg.figure_formats)
        if a.layer_maps:
            save_figure(run, f"{key}_layers", F.atlas_layer_figure(a), cfg.figure_formats)
        if len(a.overlaps):
            save_figure(run, f"{key}_overlaps", F.atlas_overlap_figure(a), cfg.figure_formats)
        summary["models"][key] = {
            "model": name, "site": a.site, "pair": a.pair, "answer": a.answer, "wrong": a.wrong,
            "top_heads": {m: a.top_heads(m, cfg.top_k) for m in a.head_maps},
            "layer_maps": {k: [float(x) for x in v] for k, v in a.layer_maps.items()},
            "planted_passed": bool(a.planted["passed"].all()) if len(a.planted) else None,
            "lens_metrics": a.lens_metrics,
            "unavailable": a.unavailable, "timings": a.timings}
    for t, frames in tables.items():
        if frames:
            run.save_table(t, pd.concat(frames, ignore_index=True))
    run.save_json("summary", summary)
    run.save_result(VALIDITY_RESULT, ValidityReport.of(verdicts))
