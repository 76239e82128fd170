"""FAST SAE experiments: one training run (`sae-train`), the FAST vs BT(F) vs BT(P) comparison
(`sae-fast-vs-block`: results table, GSNR same-theta and own-trajectory, special-token steering sweep) and the
special-token steering sweep of an existing SAE (`sae-steer-sweep`). The method lives in `interplab.sae`
(`sae_data`, `train_one`, `metrics_row`, `fast_vs_block`, `special_token_steering`); these wrappers load the model,
save the results and draw the figures."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from interplab.core import progress
from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure
from interplab.sae.compare import (METHOD_LABELS, ComparisonConfig, SAERecipe, SAERun, fast_vs_block, metrics_row,
                                   special_token_steering, train_one)
from interplab.sae.data import load_sae_data

__all__ = ["SAETrainRunConfig", "FastVsBlockConfig", "SteerSweepConfig", "SAESyntheticConfig", "steering_summary"]


def _load(name: str, threads: int):
    import torch

    from interplab.models.loading import load_model

    torch.set_num_threads(threads)
    return load_model(name)


@dataclass
class SAEModel:
    """model: model to load. threads: torch threads. data: "" = the toy dialogues, "offline-chat" = the built-in chat
    set for a real chat model (`interplab.data.chat_corpus`), or a chat file of your own (`messages` JSONL or
    user/assistant CSV; docs/data.md)."""

    model: str = "zoo:toy-chat"
    threads: int = 1
    data: str = ""


def _sae_data(cfg, model, n_train: int, n_eval: int, n_text: int):
    return load_sae_data(model, cfg.data, n_train, n_eval, n_text, cfg.seed)


@dataclass
class SAETrainRunConfig(SAERecipe, SAEModel):
    """One SAE training run (`SAERecipe`, `SAEModel`).

    method: fast | bt_f | bt_p. architecture: standard | jumprelu | topk | batchtopk | gated. steps: training
    budget. k: TopK sparsity. mode: paper | native. n_train, n_eval: samples."""

    method: str = "fast"
    architecture: str = "jumprelu"
    steps: int = 400
    k: int = 16
    mode: str = "paper"
    n_train: int = 400
    n_eval: int = 64


@register_experiment("sae-train", config=SAETrainRunConfig,
                     help="train one SAE (FAST or block) on SAELens and evaluate it (FAST metrics, Delta Loss over all "
                          "positions and over assistant answers)")
def sae_train(cfg: SAETrainRunConfig, run) -> None:
    model = _load(cfg.model, cfg.threads)
    data = _sae_data(cfg, model, cfg.n_train, cfg.n_eval, cfg.n_train)
    out = Path(run.path) / "sae"
    with progress.task(cfg.steps, "steps", phase="training") as bar:   # a job's progress.json
        train_one(model, data, out, method=cfg.method, architecture=cfg.architecture, site=cfg.site,
                  steps=cfg.steps, batch_tokens=cfg.batch_tokens, lr=cfg.lr, expansion=cfg.expansion,
                  l1_coefficient=cfg.l1_coefficient, l0_coefficient=cfg.l0_coefficient, k=cfg.k, mode=cfg.mode,
                  context_size=cfg.context_size, seed=cfg.seed, exclude_massive=cfg.exclude_massive,
                  micro_batch=cfg.micro_batch, progress=lambda step, total, row: bar.update(step, total))
    row = metrics_row(model, out, data.eval, method=METHOD_LABELS[cfg.method], architecture=cfg.architecture,
                      micro_batch=cfg.micro_batch)
    res = SAERun({k: v for k, v in row.items() if k != "path"}, run.relative(out))
    run.save_result("run", res)                    # the typed result; the table below is a view of it
    run.save_table("metrics", res.to_frame())


@dataclass
class FastVsBlockConfig(ComparisonConfig, SAEModel):
    """FAST vs BT(F) vs BT(P) at one layer (`ComparisonConfig`, `SAEModel`). n_train, n_text, n_eval: dialogues for
    FAST/BT(F), plain texts for BT(P), held-out evaluation dialogues."""

    n_train: int = 600
    n_text: int = 600
    n_eval: int = 96


@dataclass
class SteerSweepConfig(SAEModel):
    """Special-token steering sweep with an existing SAE directory.

    sae_dir: SAELens directory ("" -> error). feature: -1 = the top <|im_start|> feature, -2 = a
    random live feature (drawn with seed: the null the top feature is compared with), else an index.
    alphas: multiples of the typical residual norm at the site (`interplab.core.scale`:
    massive-activation positions left out). n_prompts: the first held-out dialogues, steered;
    n_eval: held-out dialogues in all; the ranking scans the n_eval − n_prompts that are not
    prompts. positions: all | template | generated. max_new_tokens: reply length cap."""

    sae_dir: str = ""
    feature: int = -1
    alphas: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 1.0, 2.0, 4.0])
    n_prompts: int = 48
    n_eval: int = 128
    positions: str = "all"
    max_new_tokens: int = 12
    seed: int = 42


@register_experiment("sae-steer-sweep", config=SteerSweepConfig,
                     help="special-token feature steering: alpha sweep with stored generations and exact match")
def sae_steer_sweep(cfg: SteerSweepConfig, run) -> None:
    from interplab.core.errors import ConfigError
    from interplab.figures.sae import steering_sweep_figure
    from interplab.sae import load_sae, sae_site

    if not cfg.sae_dir:
        raise ConfigError("set sae_dir to an SAELens directory (e.g. one written by sae-train)")
    model = _load(cfg.model, cfg.threads)
    data = _sae_data(cfg, model, 4, cfg.n_eval, 4)
    site = sae_site(load_sae(cfg.sae_dir))
    res = special_token_steering(model, Path(cfg.sae_dir), data, site=site, alphas_rel=cfg.alphas,
                                 n_prompts=cfg.n_prompts, positions=cfg.positions,
                                 max_new_tokens=cfg.max_new_tokens, feature=cfg.feature, null_seed=cfg.seed)
    run.save_result("steering_sweep", res.sweep)
    run.save_table("steering", res.table)
    run.save_table("steering_summary", steering_summary(res.table))
    save_figure(run, "steering", steering_sweep_figure(res.sweep))
    run.save_json("summary", {"feature": res.feature, "mean_residual_norm": res.mean_norm, "sae_dir": cfg.sae_dir,
                              "site": site, "steering_unit": res.scale, "ranked_on": res.ranked_on,
                              "prompts": res.prompts})
    if cfg.feature == -1:   # judges its sweet spot; the feature effect needs the null run
        from interplab.experiments.sae_verdicts import steering_verdicts
        from interplab.probes.validity import VALIDITY_RESULT, ValidityReport

        def ids(xs):   # as sae-verdicts names them
            return [f"eval dialogue {i}" for i in xs]
        verdicts = steering_verdicts(res.table, None, ranked_on=ids(res.ranked_on),
                                     prompts=ids(res.prompts), feature=res.feature)
        if verdicts:
            run.save_result(VALIDITY_RESULT, ValidityReport.of(verdicts))


STEER_METRICS = ("target_activation", "answer_kept", "exact_match", "distinct_ratio", "repeated_3gram_frac",
                 "reply_len")


def steering_summary(table):
    """One row per steering strength (alpha_rel): n prompts and, for every per-reply metric present, its mean with a
    95 % percentile-bootstrap interval over prompts (`interplab.probes.stats.intervals`; replies are the unit, so no
    normal approximation on a handful of them). answer_kept / exact_match count only prompts that have an answer."""
    import pandas as pd

    from interplab.probes.stats import intervals

    rows = []
    for a, g in table.groupby("alpha_rel", sort=True):
        row = {"alpha_rel": float(a), "n": int(len(g))}
        for m in STEER_METRICS:
            if m in g:
                v = pd.to_numeric(g[m], errors="coerce").dropna()
                if len(v) >= 2:
                    ci = intervals(v.to_numpy(float), method="bootstrap")
                    row.update({m: ci["mean"], f"{m}_lo": ci["lo"], f"{m}_hi": ci["hi"], f"n_{m}": int(len(v))})
        rows.append(row)
    return pd.DataFrame(rows)


@register_experiment("sae-fast-vs-block", config=FastVsBlockConfig,
                     help="FAST vs BT(F) vs BT(P) SAEs: log2 MSE, MSE_st, EV, L0, Delta Loss, CE score (all positions "
                          "and assistant answers only); GSNR; special-token steering sweep")
def sae_fast_vs_block(cfg: FastVsBlockConfig, run) -> None:
    from interplab.figures.sae import (gsnr_figure, leakage_figure, metrics_grid_figure, special_token_heatmap,
                                       steering_sweep_figure)

    model = _load(cfg.model, cfg.threads)
    data = _sae_data(cfg, model, cfg.n_train, cfg.n_eval, cfg.n_text)

    def relative(df):
        return df.assign(path=[run.relative(p) for p in df["path"]])

    res = fast_vs_block(model, data, Path(run.path) / "saes", cfg,
                        on_results=lambda df: run.save_table("results", relative(df), overwrite=True))
    run.save_table("results", relative(res.results), overwrite=True)
    save_figure(run, "results", metrics_grid_figure(res.results), overwrite=True)
    run.save_table("leakage", res.leakage, overwrite=True)
    save_figure(run, "leakage", leakage_figure(res.leakage, "rel_l2"), overwrite=True)
    run.save_table("gsnr", res.gsnr, overwrite=True)
    for arch in cfg.architectures:
        save_figure(run, f"gsnr_{arch}", gsnr_figure(res.gsnr[res.gsnr.architecture == arch], facet="theta",
                                                    title=f"GSNR per parameter, {arch}"), overwrite=True)
    run.save_result("feature_stats", res.feature_stats)
    run.save_table("special_token_features", res.special_features, overwrite=True)
    save_figure(run, "special_token_features", special_token_heatmap(res.feature_stats), overwrite=True)
    run.save_result("steering_sweep", res.steering.sweep)
    run.save_table("steering", res.steering.table, overwrite=True)
    save_figure(run, "steering", steering_sweep_figure(res.steering.sweep), overwrite=True)
    run.save_json("summary", {"steering_feature": res.steering.feature, "steering_token": "<|im_start|>",
                              "mean_residual_norm": res.steering.mean_norm, "steering_unit": res.steering.scale,
                              "sae_for_steering": run.relative(res.steering_sae)}, overwrite=True)


@dataclass
class SAESyntheticConfig:
    """Sequential synthetic benchmark (`interplab.sae.sequential.SequentialConfig`; fields with the same names).
    architecture: SAE architecture; steps, batch, lr, k: training; seeds: SAE seeds per arm; eval_tokens: FAST
    tokens for evaluation; ks: TopK sweep for the matched-L0 comparison (empty = k only); carry, inner_bos_magnitude, context_size: how packing changes the activations;
    threads: torch threads."""

    architecture: str = "topk"
    steps: int = 800
    batch: int = 256
    lr: float = 3e-3
    k: int = 4
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    ks: list[int] = field(default_factory=list)
    eval_tokens: int = 20_000
    carry: float = 0.7
    inner_bos_magnitude: float = 0.5
    context_size: int = 64
    data_seed: int = 0
    threads: int = 1


@register_experiment("sae-synthetic", config=SAESyntheticConfig,
                     help="FAST vs BT(F) vs BT(P) SAEs on a sequential synthetic benchmark with known features "
                          "(special-token, position, topic carry-over): MCC and per-feature recovery, t intervals")
def sae_synthetic(cfg: SAESyntheticConfig, run) -> None:
    import torch

    from interplab.figures.sae import SYNTHETIC_METRICS, sequential_l0_figure, sequential_truth_figure
    from interplab.probes.stats import intervals
    from interplab.sae.sequential import SequentialConfig, sequential_benchmark

    torch.set_num_threads(cfg.threads)
    scfg = SequentialConfig(architecture=cfg.architecture, steps=cfg.steps, batch=cfg.batch, lr=cfg.lr, k=cfg.k,
                            seeds=tuple(int(s) for s in cfg.seeds), ks=tuple(int(k) for k in cfg.ks),
                            eval_tokens=cfg.eval_tokens, carry=cfg.carry,
                            inner_bos_magnitude=cfg.inner_bos_magnitude, context_size=cfg.context_size,
                            data_seed=cfg.data_seed)
    res = sequential_benchmark(scfg, progress=lambda s: print(f"  training {s}", flush=True))
    run.save_result("sequential", res)
    run.save_table("sequential", res.table)
    cols = (*SYNTHETIC_METRICS, "sae_l0", "f1", "f1_packed")
    summary = {f"{arm}/k={k}": {m: intervals(g[m]) for m in cols}
               for (arm, k), g in res.table.groupby(["arm", "k"], sort=False)}
    run.save_json("summary", summary)
    first_k = res.table["k"].iloc[0]
    save_figure(run, "sequential_truth", sequential_truth_figure(res.table[res.table["k"] == first_k]))
    if res.table["k"].nunique() > 1:
        for m in ("mcc", "rec_bos", "explained_variance", "explained_variance_packed"):
            save_figure(run, f"l0_{m}", sequential_l0_figure(res.table, m))
