"""FAST vs block training (paper §4-6 on an organism): train one SAE per method (FAST, BT(F) on packed dialogues,
BT(P) on packed plain text) and architecture with the same budget, the results table (reconstruction, sparsity,
Delta Loss over all positions and over assistant answers), packing leakage, GSNR at the same and at each method's own
parameters, the special-token features and the special-token steering sweep (App. F)."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from interplab.core.errors import ConfigError, DataError
from interplab.core.result import Result
from interplab.sae.data import SAEData
from interplab.sae.features import FeatureStats
from interplab.sae.steering import SteeringSweepResult

__all__ = ["METHOD_LABELS", "SAERecipe", "train_one", "arm_provider", "metrics_row", "SAERun", "leakage_table", "SpecialTokenSteering",
           "special_token_steering", "ComparisonConfig", "FastVsBlockResult", "fast_vs_block"]

METHOD_LABELS = {"fast": "FAST", "bt_f": "BT(F)", "bt_p": "BT(P)"}


@dataclass
class SAERecipe:
    """Settings every SAE of a comparison shares: site, SAE width (expansion = d_sae / d_model), optimisation
    (batch_tokens, lr), sparsity (l1_coefficient, l0_coefficient), BT block length (context_size), seed, and
    exclude_massive (0 = train and evaluate on every position; a factor > 1 leaves out each sequence's massive
    positions, `interplab.sae.training.SAETrainConfig`: needed on a real model, whose first token is an attention
    sink with ~100x the ordinary norm); micro_batch: dialogues per FAST forward, for training and evaluation (padded
    micro-batches equal batch 1; on CPU a real model runs fastest unpadded, micro_batch=1: 531 vs 123 tokens/s for
    SmolLM2 at 32)."""

    site: str = "resid_post.1"
    expansion: int = 8
    batch_tokens: int = 128
    lr: float = 1e-3
    l1_coefficient: float = 1.0
    l0_coefficient: float = 0.5
    context_size: int = 128
    seed: int = 42
    exclude_massive: float = 0.0
    micro_batch: int = 32


def train_one(model: Any, data: SAEData, out_dir: Path, *, method: str, architecture: str, site: str, steps: int,
              batch_tokens: int, lr: float, expansion: int = 8, l1_coefficient: float = 1.0,
              l0_coefficient: float = 0.5, k: int = 16, mode: str = "paper", context_size: int = 128,
              seed: int = 42, checkpoint_steps=(), progress=None, overwrite: bool = False,
              normalize_activations: str = "expected_average_only_in", jumprelu_bandwidth: float = 0.05,
              jumprelu_init_threshold: float = 0.05, exclude_massive: float = 0.0, provider: Any = None,
              micro_batch: int = 32) -> Path:
    """Train one SAE with `method` in {fast, bt_f, bt_p} (the app's and the experiments' common path).

    Toy-scale defaults (chosen on a pilot, not the paper's): inputs normalised to E||x|| = sqrt(d) during training
    (folded back on save), JumpReLU bandwidth / initial threshold 0.05 (the paper's 0.001 barely moves in a few
    hundred steps), everything else paper mode (geometric-median b_dec, unit-norm decoder rows).

    provider: the arm's activations already harvested (`arm_provider`), shared by a sweep's SAEs; None harvests
    `data` for this SAE alone."""
    from interplab.sae.training import train_sae

    if method not in METHOD_LABELS:
        raise ConfigError(f"method must be one of {list(METHOD_LABELS)}, got {method!r}")
    samples = provider if provider is not None else (data.texts if method == "bt_p" else data.train)
    return train_sae(model, samples, site=site, method="fast" if method == "fast" else "block",
                     architecture=architecture, expansion=expansion, steps=steps, batch_tokens=batch_tokens, lr=lr,
                     out_dir=out_dir, l1_coefficient=l1_coefficient, l0_coefficient=l0_coefficient, k=k, mode=mode,
                     context_size=context_size, seed=seed, checkpoint_steps=tuple(checkpoint_steps),
                     progress=progress, overwrite=overwrite, dataset_path=f"{data.source} ({method})",
                     normalize_activations=normalize_activations, jumprelu_bandwidth=jumprelu_bandwidth,
                     jumprelu_init_threshold=jumprelu_init_threshold, exclude_massive=exclude_massive,
                     micro_batch=micro_batch)


def arm_provider(model: Any, data: SAEData, method: str, *, site: str, context_size: int = 128, seed: int = 42,
                 exclude_massive: float = 0.0, micro_batch: int = 32):
    """The training activations of one arm (FAST, BT(F) or BT(P)), harvested once (`providers.CachedProvider`; call
    `.reseeded(s)` per SAE seed): the provider `train_one` would build for that arm, so an SAE trained from it
    equals one trained from the samples, except that every epoch serves the first epoch's harvest."""
    from interplab.sae.providers import CachedProvider
    from interplab.sae.training import SAETrainConfig, make_provider

    if method not in METHOD_LABELS:
        raise ConfigError(f"method must be one of {list(METHOD_LABELS)}, got {method!r}")
    cfg = SAETrainConfig(site=site, method="fast" if method == "fast" else "block", context_size=context_size,
                         seed=seed, exclude_massive=exclude_massive, micro_batch=micro_batch).resolved()
    return CachedProvider(make_provider(model, data.texts if method == "bt_p" else data.train, cfg))


def metrics_row(model: Any, sae_dir: Path, eval_dialogues: list, *, micro_batch: int = 16, **labels) -> dict:
    """One results-table row: reconstruction metrics plus the CE-based metrics over all positions (unsuffixed) and
    over assistant-answer positions only (`_response` keys; `evaluate_sae(positions="both")`). A chat template whose
    answer spans cannot be located gives the all-position metrics only."""
    from interplab.sae.evals import evaluate_sae
    from interplab.sae.steering import template_token_ids
    from interplab.sae.training import load_train_info

    special = template_token_ids(model.tokenizer)
    try:
        r = evaluate_sae(model, sae_dir, eval_dialogues, special_token_ids=special, positions="both",
                         micro_batch=micro_batch)
    except DataError:
        r = evaluate_sae(model, sae_dir, eval_dialogues, special_token_ids=special, micro_batch=micro_batch)
    info = load_train_info(sae_dir)
    return {**labels, **{k: v for k, v in r.items() if not isinstance(v, list)},
            "train_seconds": info.get("train_seconds"), "train_tokens_per_s": info.get("tokens_per_second"),
            "path": str(sae_dir)}


@dataclass
class SAERun(Result):
    """One trained SAE and its evaluation (experiment `sae-train`). metrics: the `metrics_row` (reconstruction,
    ΔCE over all positions and over answers, training speed); sae_path: the SAELens folder, relative to the run
    folder when saved with a run (so it survives the run folder's rename)."""

    metrics: dict
    sae_path: str

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([{**self.metrics, "path": self.sae_path}])


def leakage_table(model: Any, dialogues: list, site: str, context_size: int = 128, separator: str = "bos"):
    """Packing leakage: for every sample that starts inside a BT(F) block, compare its block activations with its
    FAST (per-sample) activations. Rows: block, segment_index (0 = first segment of the block), start column,
    n_tokens compared (the part of the sample inside the block), abs_diff (max |diff|, in the residual's own units:
    ~2.5e4 on SmolLM2, where a sample's first token is an attention sink per sample but not inside a block),
    abs_diff_rel (abs_diff over the typical residual norm of the FAST activations, `core.scale.activation_scale`,
    comparable across models), rel_l2 (mean over tokens of ||a_block - a_fast|| / ||a_fast||)."""
    import pandas as pd
    import torch

    from interplab.core.scale import activation_scale
    from interplab.sae.providers import block_provider, fast_provider

    fast = {int(c.sample[0]): c.acts for c in
            fast_provider(model, dialogues, site=site, shuffle=False).iter_chunks()}
    typical = activation_scale(torch.cat([a.reshape(-1, a.shape[-1]) for a in fast.values()])).typical
    bp = block_provider(model, dialogues, site=site, context_size=context_size, separator=separator, shuffle=False)
    rows = []
    for b, ch in enumerate(bp.iter_chunks()):
        S, P = ch.sample, ch.position
        seg = 0
        prev = None
        for j in range(len(S)):
            s = int(S[j])
            if s >= 0 and s != prev:
                if int(P[j]) == 0:
                    idx = (S == s).nonzero().flatten()
                    a_b, a_f = ch.acts[idx], fast[s][: len(idx)]
                    diff = a_b - a_f
                    rel = (diff.norm(dim=-1) / a_f.norm(dim=-1).clamp_min(1e-12)).mean()
                    worst = float(diff.abs().max())
                    rows.append({"block": b, "segment_index": seg, "start": j, "n_tokens": len(idx),
                                 "abs_diff": worst, "abs_diff_rel": worst / max(typical, 1e-12),
                                 "rel_l2": float(rel)})
                seg += 1
            if s >= 0:
                prev = s
    return pd.DataFrame(rows)


@dataclass
class SpecialTokenSteering(Result):
    """sweep: the generations; table: its rows (without the token ids) with alpha_rel (alpha / the
    typical residual norm) and, for toy data, the exact match of each reply and its task; feature:
    the steered feature; mean_norm: the steering unit, the typical residual norm at the site
    (`interplab.core.scale`: mean norm over positions that are not massive activations); scale: that
    measurement in full (median, all-position mean, massive count); ranked_on / prompts: indices
    into the held-out dialogues the feature was ranked on (the top feature and the null's live set)
    and those whose prompts were steered (empty when a feature index was given)."""

    sweep: SteeringSweepResult
    table: Any  # pandas.DataFrame
    feature: int
    mean_norm: float
    scale: dict = field(default_factory=dict)
    ranked_on: list = field(default_factory=list)
    prompts: list = field(default_factory=list)


def special_token_steering(model: Any, sae_dir: Path, data: SAEData, *, site: str, stats: FeatureStats | None = None,
                           alphas_rel=(0.0, 0.25, 0.5, 1.0, 2.0, 4.0), n_prompts: int = 24, positions: str = "all",
                           max_new_tokens: int = 12, feature: int = -1, null_seed: int = 0) -> SpecialTokenSteering:
    """Paper App. F on the organism: pick the feature most active on <|im_start|> (feature=-1; paper
    ranking) and sweep alpha (multiples of the typical residual norm at the site,
    `interplab.core.scale.activation_scale`, along the unit-norm decoder row) on held-out prompts.
    The unit leaves out massive-activation positions: on a real model (SmolLM2: ~2.5e4 at the first
    token) the all-position mean is several times an ordinary position's norm. feature=-2 steers
    along a random live feature instead (drawn with `null_seed`): the same sweep's null.

    The prompts are the first `n_prompts` held-out dialogues (without their answer). Without
    `stats`, the ranking (and the null's live set) scans only the *other* held-out dialogues, so the
    feature is not chosen on the prompts it is scored on (issue 46; a `stats` passed in is the
    caller's choice and is recorded as ranked on every held-out dialogue)."""
    import torch

    from interplab.core.scale import activation_scale
    from interplab.sae.features import feature_statistics
    from interplab.sae.providers import fast_provider
    from interplab.sae.steering import steering_sweep

    if feature < -2:
        raise ConfigError(f"feature must be >= 0 (an index), -1 (the top <|im_start|> feature) or -2 (a random live "
                          f"feature: the null), got {feature}")
    ranked_on: list = []
    if feature < 0:
        if stats is None:
            ranked_on = list(range(n_prompts, len(data.eval)))
            if not ranked_on:
                raise ConfigError(f"the feature ranking needs held-out dialogues besides the "
                                  f"{n_prompts} steering "
                                  f"prompts; raise n_eval above n_prompts ({len(data.eval)} now)")
            scan = [data.eval[i] for i in ranked_on]
            stats = feature_statistics(model, sae_dir, scan, k=5, site=site)
        else:
            ranked_on = list(range(len(data.eval)))
        im_start = model.tokenizer.convert_tokens_to_ids("<|im_start|>")
        ids = list(map(int, stats.special_ids))
        si = ids.index(im_start) if im_start in ids else int(stats.special_counts.argmax())
        top = int(stats.special_scores[si].argmax())
        if feature == -1:
            feature = top
        else:   # the null: a feature drawn (seeded) among those that fire on the scanned dialogues, not the top one
            import numpy as np

            live = [int(f) for f in np.flatnonzero(np.asarray(stats.density) > 0) if int(f) != top]
            if not live:
                raise ConfigError("no live feature to draw the random control from")
            feature = int(np.random.default_rng(null_seed).choice(live))
    scale = activation_scale(torch.cat([c.acts.reshape(-1, c.acts.shape[-1]) for c in
                                        fast_provider(model, data.eval[:32], site=site, shuffle=False).iter_chunks()]))
    mean_norm = scale.typical
    rel = [float(a) for a in alphas_rel]
    prompts = [d[:-1] for d in data.eval[:n_prompts]]
    sw = steering_sweep(model, sae_dir, prompts, feature=feature, alphas=tuple(a * mean_norm for a in rel),
                        positions=positions, max_new_tokens=max_new_tokens, normalize=True, site=site)
    df = sw.to_frame()
    df["alpha_rel"] = df["alpha"] / mean_norm
    if data.eval_examples is not None:
        exs = data.eval_examples[:n_prompts]
        df["exact_match"] = [t.split() == list(exs[i].response) for t, i in zip(df["text"], df["prompt_idx"])]
        df["task"] = [exs[i].task for i in df["prompt_idx"]]
    elif data.eval_answers is not None:   # the reply still names the public fact the question asks for
        ans = data.eval_answers[:n_prompts]
        df["answer_kept"] = [float(re.search(rf"(?<!\w){re.escape(ans[i].lower())}(?!\w)", t.lower()) is not None)
                             if ans[i] else float("nan") for t, i in zip(df["text"], df["prompt_idx"])]
    sw.rows = df.to_dict("records")
    return SpecialTokenSteering(sw, df.drop(columns=["new_tokens"]), feature, mean_norm,
                                scale.as_dict(), ranked_on, list(range(len(prompts))))


@dataclass
class ComparisonConfig(SAERecipe):
    """FAST vs BT(F) vs BT(P) at one layer (`SAERecipe` plus): architectures; methods (subset of fast, bt_f, bt_p);
    steps (same for all methods); gsnr_batches: mini-batches per GSNR estimate (B = batch_tokens); steer_alphas:
    alphas in units of the typical residual norm at the site (`interplab.core.scale`; the steering direction is the
    unit-norm decoder row);
    steer_prompts: held-out prompts for the sweep; steer_positions: all | template | generated; max_new_tokens:
    generation length."""

    architectures: list[str] = field(default_factory=lambda: ["standard", "jumprelu"])
    methods: list[str] = field(default_factory=lambda: ["fast", "bt_f", "bt_p"])
    steps: int = 600
    gsnr_batches: int = 24
    steer_alphas: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 1.0, 2.0, 4.0])
    steer_prompts: int = 24
    steer_positions: str = "all"
    max_new_tokens: int = 12


@dataclass
class FastVsBlockResult(Result):
    """results: one row per (architecture, method) SAE (metrics_row plus wall_seconds; `path` is the SAE directory);
    leakage: leakage_table of the evaluation dialogues; gsnr: per-tensor GSNR of every method at the same parameters
    and along its own trajectory (half-way checkpoints); special_features: the top features of each special token
    for the steering SAE (FAST JumpReLU, or the first available), whose statistics are `feature_stats`; steering:
    the special-token steering sweep; steering_sae: that SAE's directory."""

    results: Any  # pandas.DataFrame
    leakage: Any
    gsnr: Any
    special_features: Any
    feature_stats: FeatureStats
    steering: SpecialTokenSteering
    steering_sae: str = ""


def _gsnr_table(model: Any, data: SAEData, cfg: ComparisonConfig, dirs: dict, half: int):
    """GSNR of every method's half-way SAE and of the reference method's (same theta), with providers that repeat and
    B = batch_tokens for every method."""
    import pandas as pd
    from sae_lens import TrainingSAE

    from interplab.sae.gsnr import gsnr
    from interplab.sae.providers import block_provider, fast_provider

    provs = {
        "fast": lambda: fast_provider(model, data.train, site=cfg.site, repeat=True, seed=cfg.seed + 1),
        "bt_f": lambda: block_provider(model, data.train, site=cfg.site, context_size=cfg.context_size,
                                       repeat=True, seed=cfg.seed + 1),
        "bt_p": lambda: block_provider(model, data.texts, site=cfg.site, context_size=cfg.context_size,
                                       repeat=True, seed=cfg.seed + 1),
    }
    methods = list(cfg.methods)
    grows = []
    for arch in cfg.architectures:
        ref = "fast" if "fast" in methods else methods[0]
        theta_same = TrainingSAE.load_from_disk(str(dirs[(arch, ref)] / "checkpoints" / f"step_{half}"))
        for m in methods:
            own = TrainingSAE.load_from_disk(str(dirs[(arch, m)] / "checkpoints" / f"step_{half}"))
            for theta_name, sae in ((f"same theta ({METHOD_LABELS[ref]} @ step {half})", theta_same),
                                    (f"own trajectory (@ step {half})", own)):
                g = gsnr(sae, provs[m](), n_batches=cfg.gsnr_batches, batch_tokens=cfg.batch_tokens, seed=cfg.seed)
                g["method"], g["architecture"], g["theta"] = METHOD_LABELS[m], arch, theta_name
                grows.append(g)
    return pd.concat(grows, ignore_index=True)


def fast_vs_block(model: Any, data: SAEData, out_dir, cfg: ComparisonConfig | None = None,
                  on_results: Callable[[Any], None] | None = None) -> FastVsBlockResult:
    """Train every (architecture, method) SAE into `out_dir`/<arch>_<method> (with a half-way checkpoint for GSNR)
    and measure the comparison. `on_results(table)` is called after each SAE with the rows so far (e.g. to save a
    partial table during a long run)."""
    import pandas as pd

    from interplab.sae.features import feature_statistics

    cfg = cfg or ComparisonConfig()
    root = Path(out_dir)
    half = cfg.steps // 2
    rows, dirs = [], {}
    for arch in cfg.architectures:
        for m in cfg.methods:
            t0 = time.perf_counter()
            d = train_one(model, data, root / f"{arch}_{m}", method=m, architecture=arch, site=cfg.site,
                          steps=cfg.steps, batch_tokens=cfg.batch_tokens, lr=cfg.lr, expansion=cfg.expansion,
                          l1_coefficient=cfg.l1_coefficient, l0_coefficient=cfg.l0_coefficient,
                          context_size=cfg.context_size, seed=cfg.seed, checkpoint_steps=(half,))
            dirs[(arch, m)] = d
            rows.append(metrics_row(model, d, data.eval, method=METHOD_LABELS[m], architecture=arch,
                                    wall_seconds=time.perf_counter() - t0))
            if on_results is not None:
                on_results(pd.DataFrame(rows))
    leak = leakage_table(model, data.eval, cfg.site, cfg.context_size)
    gdf = _gsnr_table(model, data, cfg, dirs, half)
    archs, methods = list(cfg.architectures), list(cfg.methods)
    arch_s = "jumprelu" if "jumprelu" in archs else archs[0]
    sdir = dirs[(arch_s, "fast" if "fast" in methods else methods[0])]
    stats = feature_statistics(model, sdir, data.eval, k=5)
    steer = special_token_steering(model, sdir, data, site=cfg.site, stats=stats, alphas_rel=cfg.steer_alphas,
                                   n_prompts=cfg.steer_prompts, positions=cfg.steer_positions,
                                   max_new_tokens=cfg.max_new_tokens)
    return FastVsBlockResult(pd.DataFrame(rows), leak, gdf, stats.special_ranking(5), stats, steer, str(sdir))
