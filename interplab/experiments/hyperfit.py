"""Hyperfitting experiments (spec methods/hyperfit_geometry.md §5.3): the paper's diversity table with the
entropy-matched temperature control and the static-injection alpha sweep, per-layer geometry, rank reordering, and the
Late-Stage LoRA k sweep.

    interplab run hyperfit-eval --set n_prompts=200
    interplab run hyperfit-geometry
    interplab run hyperfit-ranks
    interplab run hyperfit-ksweep --set budget_s=90
    interplab run hyperfit-controls

The method lives in `interplab.probes.hyperfit` (`evaluate_settings`, `geometry_report`, `rank_reordering`,
`k_sweep` take loaded models and texts, so scripts can run them on any checkpoints); these wrappers load the models,
save the results and draw the figures.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from interplab.core import progress
from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure
from interplab.probes.hyperfit.controls import ControlsConfig, hyperfit_controls
from interplab.probes.hyperfit.verdicts import (controls_verdicts, eval_verdicts, geometry_verdicts,
                                                ksweep_verdicts)
from interplab.probes.validity import VALIDITY_RESULT, ValidityReport
from interplab.probes.hyperfit import (EvalConfig, GeometryReportConfig, KSweepConfig, evaluate_settings,
                                       geometry_report, heldout_texts, k_sweep, rank_reordering)

__all__ = ["HyperfitEvalConfig", "GeometryConfig", "RanksConfig", "HyperfitKSweepConfig", "TrainHyperfitConfig",
           "HyperfitControlsConfig"]


@dataclass
class HyperfitModels:
    """base: the base model. targets: hyperfitted / LoRA models (the first is the one T* and the static delta are
    computed from). device: "cpu" or "cuda". threads: torch CPU threads."""

    base: str = "zoo:text-base"
    targets: list[str] = field(default_factory=lambda: ["zoo:text-hyperfit", "zoo:text-late-lora",
                                                        "zoo:text-full-lora"])
    device: str = "cpu"
    threads: int = 1


def _load(name: str, device: str):
    from interplab.models.loading import load_model

    return load_model(name, device=device)


def _models(cfg: HyperfitModels) -> tuple[Any, dict]:
    torch.set_num_threads(max(1, int(cfg.threads)))
    base = _load(cfg.base, cfg.device)
    targets = {}
    for name in cfg.targets:
        short = _target_name(name)
        if short in targets:
            from interplab.core.errors import ConfigError

            raise ConfigError(f"two targets are both called {short!r}; give each its own folder name")
        targets[short] = _load(name, cfg.device)
    _check_descendants(base, targets, cfg)
    return base, targets


def _target_name(name: str) -> str:
    """A target's short name, which names its rows and artifacts (never a path): the zoo name's tail, a checkpoint
    folder's name, or for a `hyperfit-train` run's checkpoint/ the run folder's name."""
    parts = name.split(":")[-1].rstrip("/").split("/")
    return parts[-2] if parts[-1] == "checkpoint" and len(parts) > 1 else parts[-1]


def _check_descendants(base, targets: dict, cfg: HyperfitModels) -> None:
    """Every target must read the base's vocabulary (a hyperfitted copy of it); else say how to make one."""
    from interplab.core.errors import ConfigError

    bad = [n for n, m in targets.items() if m.d_vocab != base.d_vocab or m.n_layers != base.n_layers]
    if bad:
        raise ConfigError(
            f"targets {bad} are not descendants of base={cfg.base} (their vocabulary or depth differs). Hyperfit "
            f"the base first: `interplab run hyperfit-train --set base={cfg.base}` saves checkpoint/ in its run "
            "folder; pass that folder's checkpoint/ as targets=...")


@dataclass
class HyperfitEvalConfig(EvalConfig, HyperfitModels):
    """The paper's table on held-out prompts: `EvalConfig` (the method's settings) and `HyperfitModels`."""


@register_experiment("hyperfit-eval", config=HyperfitEvalConfig,
                     help="Hyperfitting table: base greedy, base sampled at the entropy-matched T* (5 seeds), static "
                          "vocabulary injection alpha sweep, hyperfitted and LoRA models (TTR, rep-n, agreement, "
                          "entropy)")
def run_hyperfit_eval(cfg: HyperfitEvalConfig, run) -> None:
    from interplab.figures.geometry import (diversity_bars_figure, entropy_temperature_figure,
                                            static_injection_figure)

    base, targets = _models(cfg)
    res = evaluate_settings(base, targets, heldout_texts(), cfg, progress=print)
    run.save_result("eval", res)
    run.save_result(VALIDITY_RESULT, ValidityReport.of(eval_verdicts(res)))
    save_figure(run, "diversity", diversity_bars_figure(res.table))
    save_figure(run, "entropy_temperature", entropy_temperature_figure(res.match))
    refs = {r["setting"]: r["ttr"] for _, r in res.table.iterrows() if r["kind"] in ("base", "target")}
    save_figure(run, "static_injection", static_injection_figure(res.sweep, "ttr", references=refs,
                                                                spearman=res.spearman.get("ttr")))


@dataclass
class GeometryConfig(GeometryReportConfig, HyperfitModels):
    """Per-layer geometry of base vs each target (`GeometryReportConfig`, `HyperfitModels`); n_texts: held-out
    texts; data: a text file of your own (a `text` column; docs/data.md) instead of the offline corpus's held-out
    split (empty)."""

    n_texts: int = 200
    data: str = ""


@register_experiment("hyperfit-geometry", config=GeometryConfig,
                     help="Per-layer participation ratio (DeltaDim), effective rank, cos and L2 of base vs hyperfitted "
                          "models, pre- and post-final-norm, with/without BOS, teacher-forced and on generated tokens")
def run_hyperfit_geometry(cfg: GeometryConfig, run) -> None:
    from interplab.figures.geometry import cos_l2_figure, eigen_spectrum_figure, pr_by_layer_figure

    base, targets = _models(cfg)
    if cfg.data:
        from interplab.probes.hyperfit.inputs import user_texts

        texts = user_texts(cfg.data, cfg.n_texts)
    else:
        texts = heldout_texts(cfg.n_texts)
    with progress.task(0, "stages", phase="layer geometry"):     # progress.json: what is running, for how long
        report = geometry_report(base, targets, texts, cfg)
    df = report.frame
    run.save_table("geometry", df)
    cols = ["target", "site", "tokens", "bos", "pr_std_a", "pr_std_b", "delta_pr_std", "pr_a",
            "pr_b", "delta_pr", "pr_loo_a", "pr_loo_b", "pr_std_loo_a", "pr_std_loo_b", "cos", "l2"]
    last = df[(df["layer"] == base.n_layers - 1)][cols]
    run.save_table("delta_dim_last_block", last)
    run.save_result(VALIDITY_RESULT, ValidityReport.of(geometry_verdicts(df)))
    for name, res in report.main.items():
        tag = _artifact_tag(name)  # a target may be a checkpoint path; artifact names take no slashes
        run.save_result(f"geometry_{tag}", res)
        save_figure(run, f"pr_by_layer_{tag}", pr_by_layer_figure(res, name_a="base", name_b=name))
        save_figure(run, f"cos_l2_{tag}", cos_l2_figure(res))
        save_figure(run, f"spectrum_{tag}", eigen_spectrum_figure(res, name_a="base", name_b=name))


def _artifact_tag(name: str) -> str:
    import re

    tag = re.sub(r"[^A-Za-z0-9._+=-]+", "_", name.rstrip("/").rsplit("/", 1)[-1].replace("zoo:", ""))
    return tag.lstrip(".-") or "target"


@dataclass
class RanksConfig(HyperfitModels):
    """Rank reordering of each target vs the base: teacher-forced on `tf_texts` held-out texts; along the target's
    greedy generations (`new_tokens` tokens) from `n_prompts` held-out prompts of `context_tokens` tokens. static_k:
    K of the static delta."""

    n_prompts: int = 200
    context_tokens: int = 32
    new_tokens: int = 96
    batch_size: int = 50
    tf_texts: int = 64
    static_k: int = 500


@register_experiment("hyperfit-ranks", config=RanksConfig,
                     help="Rank reordering: override rate, base-rank histogram {1, 2-10, 11-200, >200}, top-1 "
                          "agreement, Kendall tau on top-50, context dependence, logit-lens entry layer")
def run_hyperfit_ranks(cfg: RanksConfig, run) -> None:
    import pandas as pd

    from interplab.figures.geometry import context_dependence_figure, lens_entry_figure, rank_histogram_figure

    base, targets = _models(cfg)
    texts = heldout_texts()
    rows, hists = [], []
    for name, m in targets.items():
        r = rank_reordering(base, m, texts, texts=texts[:cfg.tf_texts], context_tokens=cfg.context_tokens,
                            max_new_tokens=cfg.new_tokens, static_k=cfg.static_k, batch_size=cfg.batch_size,
                            prompts_per_text=3, max_prompts=cfg.n_prompts)
        run.save_result(f"ranks_{name}", r)
        rows.append({"target": name, **r.summary})
        hists.append(r.histogram_frame().assign(target=name))
        save_figure(run, f"rank_histogram_{name}", rank_histogram_figure(r, title=f"{name}: base rank of chosen tokens"))
        save_figure(run, f"context_dependence_{name}", context_dependence_figure(r.token_frame(base.tokenizer)))
        save_figure(run, f"lens_entry_{name}", lens_entry_figure(r))
    run.save_table("summary", pd.DataFrame(rows))
    run.save_table("histograms", pd.concat(hists, ignore_index=True))


@dataclass
class HyperfitKSweepConfig(KSweepConfig):
    """Late-Stage LoRA k sweep (`KSweepConfig`) of `base`, trained on `n_sequences` windows of the text-hyperfit
    recipe's data; device / threads as in `HyperfitModels`."""

    base: str = "zoo:text-base"
    n_sequences: int = 32
    device: str = "cpu"
    threads: int = 1


@register_experiment("hyperfit-ksweep", config=HyperfitKSweepConfig,
                     help="Late-Stage LoRA sweep over k (last k blocks) with the early-stage control (first k): TTR, "
                          "repetition, agreement and trainable parameters")
def run_hyperfit_ksweep(cfg: HyperfitKSweepConfig, run) -> None:
    from interplab.figures.geometry import k_sweep_figure
    from interplab.zoo.recipes.hyperfit import HYPERFIT_DATA, hyperfit_sequences

    torch.set_num_threads(max(1, int(cfg.threads)))
    base = _load(cfg.base, cfg.device)
    seqs = hyperfit_sequences(base.tokenizer, {**HYPERFIT_DATA, "n_sequences": cfg.n_sequences})
    res = k_sweep(base, seqs, heldout_texts(), cfg, progress=print)
    run.save_result("k_sweep", res)
    run.save_result(VALIDITY_RESULT, ValidityReport.of(ksweep_verdicts(res)))
    save_figure(run, "k_sweep_ttr", k_sweep_figure(res.frame, "ttr"))


@dataclass
class TrainHyperfitConfig:
    """Hyperfit any checkpoint on the text-hyperfit recipe's data (or `n_sequences` of it) and save the merged
    checkpoint into the run directory (checkpoint/). method: full | lora; lora_layers: last:k | first:k | all;
    lora_r / lora_alpha: adapter rank and scaling numerator. text: a UTF-8 text file to hyperfit on instead (its
    blank-line separated paragraphs, tokenized into one stream, cut into `n_sequences` seeded 128-token windows;
    "" = the recipe's pydoc corpus). seed: the adapter init and batch-order seed (the windows stay the same, so
    seeds are repeats of one recipe); batch_size: windows per step."""

    base: str = "zoo:text-base"
    method: str = "full"
    lora_layers: str = "last:2"
    lora_r: int = 16
    lora_alpha: float = 32.0
    n_sequences: int = 32
    lr: float = 1e-3
    stop_loss: float = 0.05
    max_epochs: int = 300
    budget_s: float | None = None
    text: str = ""
    seed: int = 0
    batch_size: int = 8
    threads: int = 1

    def __post_init__(self):
        from pathlib import Path

        from interplab.core.errors import ConfigError

        if self.text and not Path(self.text).expanduser().is_file():
            raise ConfigError(f"text={self.text!r}: no such file (give a UTF-8 text file, or '' for the recipe's "
                              "corpus)")
        if self.n_sequences < 1 or self.batch_size < 1:
            raise ConfigError(f"n_sequences and batch_size must be >= 1, got {self.n_sequences}, {self.batch_size}")


@register_experiment("hyperfit-train", config=TrainHyperfitConfig,
                     help="Hyperfit a checkpoint (full or LoRA) on held-in text windows; saves the merged checkpoint "
                          "and the loss history")
def run_hyperfit_train(cfg: TrainHyperfitConfig, run) -> None:
    from interplab.figures.geometry import training_dashboard_figure
    from interplab.train.hyperfit import hyperfit
    from interplab.zoo.recipes.hyperfit import HYPERFIT_DATA, hyperfit_sequences

    torch.set_num_threads(max(1, int(cfg.threads)))
    base = _load(cfg.base, "cpu")
    seqs = hyperfit_sequences(base.tokenizer, {**HYPERFIT_DATA, "n_sequences": cfg.n_sequences,
                                               **({"text_file": cfg.text} if cfg.text else {})})
    res = hyperfit(base, seqs, method=cfg.method, lora_layers=cfg.lora_layers, lora_r=cfg.lora_r,
                   lora_alpha=cfg.lora_alpha, lr=cfg.lr, stop_loss=cfg.stop_loss,
                   max_epochs=cfg.max_epochs, max_time_s=cfg.budget_s, seed=cfg.seed, batch_size=cfg.batch_size,
                   out_dir=Path(run.path) / "checkpoint")
    # the folder is renamed when the run finishes: record the checkpoint relative to it (as
    # run.relative does)
    res = dataclasses.replace(res, checkpoint=run.relative(res.checkpoint) if res.checkpoint else None)
    run.save_result("hyperfit", res)               # the typed result; the table and JSON below are views of it
    run.save_table("history", res.to_frame())
    run.save_json("hyperfit", res.to_dict())
    save_figure(run, "training", training_dashboard_figure(res.to_frame(), stop_loss=cfg.stop_loss))


@dataclass
class HyperfitControlsConfig(ControlsConfig):
    """Hyperfitting controls (`ControlsConfig`: arms, seeds, recipes) from `base` on the text-hyperfit recipe's
    `n_sequences` windows, with `n_heldout` other windows of the same stream for the fine-tuning arm's early stopping
    and `n_texts` held-out texts for the geometry. reuse: already hyperfitted models (comma-separated; a zoo name
    or a `hyperfit-train` checkpoint) used as the hyperfit arm's first seeds, in order (their recipe must match:
    lr, stop_loss, batch_size, seq_len, method, LoRA blocks, seed and the windows); empty = retrain every seed."""

    base: str = "zoo:text-base"
    reuse: str = "zoo:text-hyperfit"
    n_sequences: int = 32
    n_heldout: int = 16
    n_texts: int = 200
    device: str = "cpu"
    threads: int = 1

    @property
    def reuse_names(self) -> list[str]:
        return [r.strip() for r in str(self.reuse or "").split(",") if r.strip()]


def _trained_windows(model) -> dict:
    """The windows a reused model was hyperfitted on: the `hyperfit-train` run that saved it (config.json beside its
    checkpoint/ folder) names them; a zoo descendant is the recipe's."""
    import json

    from interplab.results.runs import CONFIG_FILE
    from interplab.zoo.recipes.hyperfit import HYPERFIT_DATA

    manifest = Path(model.path).parent / CONFIG_FILE
    if manifest.is_file():
        conf = json.loads(manifest.read_text()).get("config", {})
        return {"n_sequences": conf.get("n_sequences"), "text": conf.get("text", "")}
    return {"n_sequences": HYPERFIT_DATA["n_sequences"], "text": ""}


def _check_reuse(model, cfg: HyperfitControlsConfig, seed: int) -> None:
    from interplab.core.errors import ConfigError
    from interplab.train.hyperfit import RESULT_DIR, HyperfitResult

    prev = HyperfitResult.load(Path(model.path) / RESULT_DIR).config
    mine = {"lr": cfg.lr, "stop_loss": cfg.stop_loss, "batch_size": cfg.batch_size, "seq_len": cfg.seq_len,
            "method": cfg.method, "seed": seed}
    if cfg.method == "lora":
        mine["lora_layers"] = cfg.arm_lora_layers
    bad = {k: (getattr(prev, k), v) for k, v in mine.items() if getattr(prev, k) != v}
    windows = _trained_windows(model)
    for k, v in {"n_sequences": cfg.n_sequences, "text": ""}.items():
        if windows[k] != v:
            bad[k] = (windows[k], v)
    if bad:
        raise ConfigError(f"{model.name} was trained with other settings than this run's hyperfit arm "
                          f"(theirs, ours): {bad}; drop it from reuse= to retrain that seed instead")


@register_experiment("hyperfit-controls", config=HyperfitControlsConfig,
                     help="Is the per-layer PR growth specific to hyperfitting? Hyperfitting vs ordinary fine-tuning "
                          "(same steps, early stopping) vs hyperfitting on token-shuffled windows (and optionally "
                          "Late-Stage LoRA): ||dW|| and per-layer DeltaDim with t intervals over seeds")
def run_hyperfit_controls(cfg: HyperfitControlsConfig, run) -> None:
    from interplab.figures.geometry import delta_dim_by_arm_figure, weight_change_figure
    from interplab.zoo.recipes.hyperfit import HYPERFIT_DATA, hyperfit_windows

    torch.set_num_threads(max(1, int(cfg.threads)))
    base = _load(cfg.base, cfg.device)
    if len(cfg.reuse_names) > len(cfg.seeds):
        from interplab.core.errors import ConfigError

        raise ConfigError(f"reuse names {len(cfg.reuse_names)} models for {len(cfg.seeds)} seeds; give at most one "
                          "per seed")
    reuse = [_load(name, cfg.device) for name in cfg.reuse_names]
    for model, seed in zip(reuse, cfg.seeds):
        _check_reuse(model, cfg, seed)
    seqs, held = hyperfit_windows(base.tokenizer, {**HYPERFIT_DATA, "n_sequences": cfg.n_sequences,
                                                   "seq_len": cfg.seq_len}, cfg.n_heldout)
    res = hyperfit_controls(base, seqs, held, heldout_texts(cfg.n_texts), cfg, reuse_hyperfit=reuse,
                            progress=print)
    run.save_result("controls", res)
    run.save_result(VALIDITY_RESULT, ValidityReport.of(controls_verdicts(res)))
    run.save_table("runs", res.runs)
    run.save_table("summary", res.summary)
    run.save_table("histories", res.histories)
    save_figure(run, "delta_dim_by_arm", delta_dim_by_arm_figure(res.summary))
    save_figure(run, "weight_change", weight_change_figure(res.summary))
