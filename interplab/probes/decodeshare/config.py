"""Settings of the two DecodeShare studies: the intervention study at one layer (`DecodeShareConfig`, run by
`run_study`) and the per-layer scan (`DecodeShareLayersConfig`, run by `scan_layers`). The `decodeshare` and
`decodeshare-layers` experiments take these as their configs."""
from __future__ import annotations

from dataclasses import dataclass, field

from interplab.core.errors import ConfigError

__all__ = ["DecodeShareSetup", "DecodeShareConfig", "DecodeShareLayersConfig", "STUDY_PARTS", "estimator_kwargs",
           "resolve_layer"]

STUDY_PARTS = ("table", "loto", "h3", "alpha", "steer", "patchback", "ranking")


@dataclass
class DecodeShareSetup:
    """Settings shared by both DecodeShare studies: the model and how it is loaded, the tasks, the calibration
    states the subspace is estimated from, the estimator thresholds, the null sizes, batching and the seed."""

    model: str = "zoo:toy-chat"
    backend: str = "bridge"
    dtype: str = "float32"
    format: str = "auto"
    tasks: list[str] = field(default_factory=lambda: ["copy", "rev", "sort", "inc", "mc"])
    n_calib: int = 64
    calib_max_new_tokens: int = 12
    max_states_per_task: int = 20000
    rho: float = 0.95
    tau: float = 1e-3
    m: int = 0
    null_perm_B: int = 2000
    null_rot_B: int = 20
    batch_size: int = 32
    seed: int = 0


@dataclass
class DecodeShareConfig(DecodeShareSetup):
    """Settings of the intervention study (`run_study`, experiment `decodeshare`).

    model: organism or checkpoint (`zoo:toy-chat`, `zoo:toy-base`, a local dir). backend, dtype: how to load it.
    format: prompt format ('auto' = the organism's training format, 'raw' or 'chat').
    tasks: multitask tasks. layer: block whose output is edited (-1 = the middle layer).
    n_calib: calibration prompts per task (train split). n_eval: evaluation examples per task (held-out split).
    calib_max_new_tokens / eval_max_new_tokens: greedy decode lengths. max_states_per_task: cap on decode states.
    rho, tau, m (0 = all tasks), mode ('paper' | 'repo'), empty_fallback_m (0 = none): estimator settings;
    tau_k > 0 replaces tau by tau_k / k (the paper's dimensionless threshold; see SharedSubspaceConfig). The
    default tau_k = 1 (a share of at least the uniform 1/k) is used because at toy scale tau = 1e-3 marks every
    kept component as shared (|S| = k), which leaves no room for the non-shared controls; set tau_k=0 for the
    paper's literal tau.
    alpha: removal strength of the ablation table. variant: 'plain' (decode-only) or 'boundary' (also the last
    prompt token). energy_states: states the energy controls are matched on ('edited' = decode states,
    'boundary' = last prompt token states as in the reference code). kmatch_rule: see `k_matched_control`.
    null_perm_B / null_rot_B: null trials. alphas: the strengths of the matched-energy sweep (part `alpha`,
    `sweep.plan_sweep`; 0 is the baseline, values above 1 are reflections and are flagged).
    metrics: what each condition is scored on, 'fc' (forced choice) and/or 'gen' (generation exact match);
    forced choice costs about twice a generation pass on a real model. steer_scales: steering scales (multiples of
    ||v||). steer_from / steer_to: the diff-of-means task pair (v = mean(to) - mean(from), added to `from`
    prompts). n_boot: bootstrap resamples. batch_size: generation batch. seed: everything else.
    parts: which sections to run (a subset of `STUDY_PARTS`; patchback and ranking are opt-in). patch_windows: the
    patchback decode-step windows (each "0", "0,1", "all", ...; on the command line as a JSON list,
    `--set 'patch_windows=["0","0,1","all"]'`).
    rank_*: the stage-aligned steering ranking (part `ranking`, `ranking.steering_ranking`): rank_n_eval examples
    per task in the ranking sets and in each of rank_real_sets held-out REAL sets (other eval seeds);
    rank_n_caa / rank_n_instr / rank_n_random vectors per pool family; rank_caa_subset examples per bootstrapped CAA
    subset; rank_alpha: the added norm is rank_alpha x the typical residual norm at the layer
    (`interplab.core.scale`, over the last prompt token of the calibration prompts); rank_stage: DECODE/REAL steer
    the first rank_stage generated tokens; rank_top_k: overlap k.
    data: a user file (CSV/JSONL: task, prompt, answer, optional choices and split; docs/data.md) replacing the
    organisms' multitask data (`user_task_sets`); 'real-tasks' = the built-in real-model tasks
    (`interplab.data.decode_tasks`: tasks among capital, language, mc_capital, first_letter, plural, antonym,
    yes_no, addition; chat-templated, replies parsed); empty = the organisms' tasks.
    """
    layer: int = -1
    n_eval: int = 48
    eval_max_new_tokens: int = 12
    tau_k: float = 1.0
    mode: str = "paper"
    empty_fallback_m: int = 0
    alpha: float = 1.0
    variant: str = "plain"
    energy_states: str = "edited"
    kmatch_rule: str = "smallest_k_reaching_target"
    alphas: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0])
    steer_scales: list[float] = field(default_factory=lambda: [0.5, 1.0, 2.0])
    steer_from: str = "copy"
    steer_to: str = "inc"
    n_boot: int = 2000
    parts: list[str] = field(default_factory=lambda: ["table", "loto", "h3", "alpha", "steer"])
    metrics: list[str] = field(default_factory=lambda: ["fc", "gen"])
    patch_windows: list[str] = field(default_factory=lambda: ["0", "0,1", "all"])
    rank_n_eval: int = 32
    rank_real_sets: int = 2
    rank_n_caa: int = 16
    rank_n_instr: int = 16
    rank_n_random: int = 16
    rank_caa_subset: int = 32
    rank_alpha: float = 1.0
    rank_stage: int = 4
    rank_top_k: int = 10
    data: str = ""

    def validate(self) -> None:
        bad = set(self.parts) - set(STUDY_PARTS)
        if bad:
            raise ConfigError(f"unknown parts {sorted(bad)}; use a subset of {','.join(STUDY_PARTS)}")
        if not self.metrics or set(self.metrics) - {"fc", "gen"}:
            raise ConfigError(f"metrics must be a non-empty subset of fc,gen; got {self.metrics}")
        if self.variant not in ("plain", "boundary"):
            raise ConfigError(f"variant must be 'plain' or 'boundary'; got {self.variant!r}")
        if self.energy_states not in ("edited", "boundary"):
            raise ConfigError(f"energy_states must be 'edited' or 'boundary'; got {self.energy_states!r}")


@dataclass
class DecodeShareLayersConfig(DecodeShareSetup):
    """Settings of the per-layer scan (`scan_layers`, experiment `decodeshare-layers`; see DecodeShareConfig for
    the shared fields). layers: layer indices or 'all'. sweep_layer: layer of the tau/rho sensitivity sweep
    (-1 = middle). tau_ks: thresholds to report; 0 = the literal `tau`, x > 0 = tau_k = x (tau = x / k).
    data: a user file or 'real-tasks' (as DecodeShareConfig.data); its calibration rows replace the organisms'
    tasks. from_run: a saved `decodeshare-layers` run to judge again from its tables (no model is loaded; the
    null sizes are the saved run's, the other fields are ignored)."""
    layers: list[int] | str = "all"
    sweep_layer: int = -1
    tau_ks: list[float] = field(default_factory=lambda: [0.0, 1.0])
    data: str = ""
    from_run: str = ""


def resolve_layer(model, layer: int) -> int:
    """`layer`, or the middle layer for a negative value, checked against the model."""
    L = model.n_layers // 2 if layer < 0 else int(layer)
    if not 0 <= L < model.n_layers:
        raise ConfigError(f"layer {layer} is out of range for a {model.n_layers}-layer model")
    return L


def estimator_kwargs(cfg: DecodeShareSetup, mode: str | None = None) -> dict:
    """`shared_subspace` keyword arguments from a config (0 means "unset" for m, empty_fallback_m and tau_k)."""
    return dict(rho=cfg.rho, tau=cfg.tau, m=(cfg.m or None), mode=mode or getattr(cfg, "mode", "paper"),
                seed=cfg.seed, empty_fallback_m=(getattr(cfg, "empty_fallback_m", 0) or None),
                tau_k=(getattr(cfg, "tau_k", 0.0) or None))
