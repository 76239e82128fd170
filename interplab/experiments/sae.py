"""FAST SAE experiments: one training run (`sae-train`) and the FAST vs BT(F) vs BT(P) comparison
(`sae-fast-vs-block`: results table, GSNR same-theta and own-trajectory, special-token steering sweep).

Data for the toy organisms: dialogues are the toy task generators' examples (interplab/data) rendered with the
chat template (`Example.messages()`); BT(P)'s "pretraining text" is the same task family in the raw, untemplated
format (`Example.text("raw")`), the toy analogue of the Pile. Train and evaluation samples come from disjoint
splits (the crc32 held-out bucket)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure

METHOD_LABELS = {"fast": "FAST", "bt_f": "BT(F)", "bt_p": "BT(P)"}


def toy_dialogues(n: int, seed: int = 0, split: str = "train", tasks: dict | None = None) -> list:
    """n toy-task examples (weighted like the toy organisms' mixture), deterministic in seed."""
    import numpy as np

    from interplab.data.examples import sample_examples
    from interplab.data.toy_tasks import toy_task_fns
    from interplab.zoo.recipes.toy import TOY_WEIGHTS

    w = dict(tasks or TOY_WEIGHTS)
    fns = toy_task_fns()
    names = sorted(w)
    p = np.array([w[t] for t in names], dtype=float)
    p /= p.sum()
    counts = np.random.default_rng(seed).multinomial(n, p)
    exs = []
    for i, (t, c) in enumerate(zip(names, counts)):
        if c:
            exs += sample_examples(fns[t], int(c), seed * 1000 + i, split=split)
    order = np.random.default_rng(seed + 1).permutation(len(exs))
    return [exs[i] for i in order]


def generic_dialogues(model: Any, n: int, seed: int = 0) -> list:
    """Fallback dialogues for models without toy vocabulary: random words from the tokenizer's vocabulary."""
    import random

    tok = model.tokenizer
    special = set(getattr(tok, "all_special_tokens", []) or [])
    words = [w for w in tok.get_vocab() if w not in special and w.isalnum()][:200] or ["a", "b"]
    rng = random.Random(seed)
    say = lambda: " ".join(rng.choice(words) for _ in range(rng.randint(3, 10)))
    return [[{"role": "user", "content": say()}, {"role": "assistant", "content": say()}] for _ in range(n)]


def experiment_data(model: Any, n_train: int, n_eval: int, n_text: int, seed: int = 0) -> dict:
    """{"train": dialogues, "eval": dialogues, "texts": plain texts, "eval_examples": Examples or None}."""
    try:
        from interplab.data.toy_vocab import toy_vocab

        vocab = toy_vocab()
        if all(w in model.tokenizer.get_vocab() for w in list(vocab)[:50]):
            tr = toy_dialogues(n_train, seed, "train")
            ev = toy_dialogues(n_eval, seed + 7, "test")
            tx = toy_dialogues(n_text, seed + 13, "train")
            return {"train": [e.messages() for e in tr], "eval": [e.messages() for e in ev],
                    "texts": [e.text("raw") for e in tx], "eval_examples": ev}
    except Exception:  # noqa: BLE001 - fall back to generic data for non-toy models
        pass
    tr = generic_dialogues(model, n_train, seed)
    ev = generic_dialogues(model, n_eval, seed + 7)
    tx = [" ".join(m["content"] for m in d) for d in generic_dialogues(model, n_text, seed + 13)]
    return {"train": tr, "eval": ev, "texts": tx, "eval_examples": None}


@dataclass
class SAERecipe:
    """Settings shared by the SAE training experiments (model, site, SAE width, optimisation, sparsity, threads)."""

    model: str = "zoo:toy-chat"
    site: str = "resid_post.1"
    expansion: int = 8
    batch_tokens: int = 128
    lr: float = 1e-3
    l1_coefficient: float = 1.0
    l0_coefficient: float = 0.5
    context_size: int = 128
    seed: int = 42
    threads: int = 1


@dataclass
class SAETrainRunConfig(SAERecipe):
    """One SAE training run.

    model: model to load. site: SAE site. method: fast | bt_f | bt_p. architecture: standard | jumprelu | topk |
    batchtopk | gated. expansion: d_sae / d_model. steps, batch_tokens, lr: training budget. l1_coefficient,
    l0_coefficient, k: sparsity. mode: paper | native. context_size: block length (BT). n_train, n_eval: samples.
    seed: data and SAE seed. threads: torch threads."""

    method: str = "fast"
    architecture: str = "jumprelu"
    steps: int = 400
    k: int = 16
    mode: str = "paper"
    n_train: int = 400
    n_eval: int = 64


def train_one(model: Any, data: dict, out_dir: Path, *, method: str, architecture: str, site: str, steps: int,
              batch_tokens: int, lr: float, expansion: int = 8, l1_coefficient: float = 1.0,
              l0_coefficient: float = 0.5, k: int = 16, mode: str = "paper", context_size: int = 128,
              seed: int = 42, checkpoint_steps=(), progress=None, overwrite: bool = False,
              normalize_activations: str = "expected_average_only_in", jumprelu_bandwidth: float = 0.05,
              jumprelu_init_threshold: float = 0.05) -> Path:
    """Train one SAE with `method` in {fast, bt_f, bt_p} (the app's and the experiments' common path).

    Toy-scale defaults (chosen on a pilot, not the paper's): inputs normalised to E||x|| = sqrt(d) during training
    (folded back on save), JumpReLU bandwidth / initial threshold 0.05 (the paper's 0.001 barely moves in a few
    hundred steps), everything else paper mode (geometric-median b_dec, unit-norm decoder rows)."""
    from interplab.core.errors import ConfigError
    from interplab.sae import train_sae

    if method not in METHOD_LABELS:
        raise ConfigError(f"method must be one of {list(METHOD_LABELS)}, got {method!r}")
    samples = data["texts"] if method == "bt_p" else data["train"]
    return train_sae(model, samples, site=site, method="fast" if method == "fast" else "block",
                     architecture=architecture, expansion=expansion, steps=steps, batch_tokens=batch_tokens, lr=lr,
                     out_dir=out_dir, l1_coefficient=l1_coefficient, l0_coefficient=l0_coefficient, k=k, mode=mode,
                     context_size=context_size, seed=seed, checkpoint_steps=tuple(checkpoint_steps),
                     progress=progress, overwrite=overwrite, dataset_path=f"interplab toy tasks ({method})",
                     normalize_activations=normalize_activations, jumprelu_bandwidth=jumprelu_bandwidth,
                     jumprelu_init_threshold=jumprelu_init_threshold)


def metrics_row(model: Any, sae_dir: Path, eval_dialogues: list, **labels) -> dict:
    """One results-table row: reconstruction metrics plus the CE-based metrics over all positions (unsuffixed) and
    over assistant-answer positions only (`_response` keys; `evaluate_sae(positions="both")`). A chat template whose
    answer spans cannot be located gives the all-position metrics only."""
    from interplab.core.errors import DataError
    from interplab.sae import evaluate_sae, load_train_info
    from interplab.sae.steering import template_token_ids

    special = template_token_ids(model.tokenizer)
    try:
        r = evaluate_sae(model, sae_dir, eval_dialogues, special_token_ids=special, positions="both")
    except DataError:
        r = evaluate_sae(model, sae_dir, eval_dialogues, special_token_ids=special)
    info = load_train_info(sae_dir)
    return {**labels, **{k: v for k, v in r.items() if not isinstance(v, list)},
            "train_seconds": info.get("train_seconds"), "train_tokens_per_s": info.get("tokens_per_second"),
            "path": str(sae_dir)}


@register_experiment("sae-train", config=SAETrainRunConfig,
                     help="train one SAE (FAST or block) on SAELens and evaluate it (FAST metrics, Delta Loss over all "
                          "positions and over assistant answers)")
def sae_train(cfg: SAETrainRunConfig, run) -> None:
    import pandas as pd
    import torch

    import interplab

    torch.set_num_threads(cfg.threads)
    model = interplab.load_model(cfg.model)
    data = experiment_data(model, cfg.n_train, cfg.n_eval, cfg.n_train, cfg.seed)
    out = Path(run.path) / "sae"
    train_one(model, data, out, method=cfg.method, architecture=cfg.architecture, site=cfg.site, steps=cfg.steps,
              batch_tokens=cfg.batch_tokens, lr=cfg.lr, expansion=cfg.expansion, l1_coefficient=cfg.l1_coefficient,
              l0_coefficient=cfg.l0_coefficient, k=cfg.k, mode=cfg.mode, context_size=cfg.context_size, seed=cfg.seed)
    row = metrics_row(model, out, data["eval"], method=METHOD_LABELS[cfg.method], architecture=cfg.architecture)
    row["path"] = run.relative(out)
    run.save_table("metrics", pd.DataFrame([row]))


@dataclass
class FastVsBlockConfig(SAERecipe):
    """FAST vs BT(F) vs BT(P) at one layer.

    model, site: organism and SAE site (a middle layer). architectures: comma-separated. methods: comma-separated
    subset of fast,bt_f,bt_p. steps, batch_tokens, lr, expansion, l1_coefficient, l0_coefficient: SAE training
    (same for all methods). context_size: BT block length. n_train, n_text, n_eval: dialogues for FAST/BT(F), plain
    texts for BT(P), held-out evaluation dialogues. gsnr_batches: mini-batches per GSNR estimate (B =
    batch_tokens). steer_alphas: comma-separated alphas in units of the mean residual norm at the site (the
    steering direction is the unit-norm decoder row); steer_prompts: held-out prompts for the sweep;
    steer_positions: all | template | generated; max_new_tokens: generation length. threads: torch threads."""

    architectures: str = "standard,jumprelu"
    methods: str = "fast,bt_f,bt_p"
    steps: int = 600
    n_train: int = 600
    n_text: int = 600
    n_eval: int = 96
    gsnr_batches: int = 24
    steer_alphas: str = "0,0.25,0.5,1,2,4"
    steer_prompts: int = 24
    steer_positions: str = "all"
    max_new_tokens: int = 12


def leakage_table(model: Any, dialogues: list, site: str, context_size: int = 128, separator: str = "bos"):
    """Packing leakage: for every sample that starts inside a BT(F) block, compare its block activations with its
    FAST (per-sample) activations. Rows: block, segment_index (0 = first segment of the block), start column,
    n_tokens compared (the part of the sample inside the block), abs_diff (max |diff|), rel_l2 (mean over tokens
    of ||a_block - a_fast|| / ||a_fast||)."""
    import pandas as pd
    import torch

    from interplab.sae import block_provider, fast_provider

    fast = {int(c.sample[0]): c.acts for c in
            fast_provider(model, dialogues, site=site, shuffle=False).iter_chunks()}
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
                    rel = ((a_b - a_f).norm(dim=-1) / a_f.norm(dim=-1).clamp_min(1e-12)).mean()
                    rows.append({"block": b, "segment_index": seg, "start": j, "n_tokens": len(idx),
                                 "abs_diff": float((a_b - a_f).abs().max()), "rel_l2": float(rel)})
                seg += 1
            if s >= 0:
                prev = s
    return pd.DataFrame(rows)


def special_token_steering(model: Any, sae_dir: Path, data: dict, *, site: str, stats=None,
                           alphas_rel: str = "0,0.25,0.5,1,2,4", n_prompts: int = 24, positions: str = "all",
                           max_new_tokens: int = 12, feature: int = -1):
    """Paper App. F on the organism: pick the feature most active on <|im_start|> (feature=-1; paper ranking) and
    sweep alpha (multiples of the mean residual norm at the site, along the unit-norm decoder row) on held-out
    prompts. Returns (SteeringSweepResult, table with alpha_rel and exact_match when examples are known, feature,
    mean residual norm)."""
    import torch

    from interplab.sae import fast_provider
    from interplab.sae.features import feature_statistics
    from interplab.sae.steering import steering_sweep

    if feature < 0:
        if stats is None:
            stats = feature_statistics(model, sae_dir, data["eval"], k=5, site=site)
        im_start = model.tokenizer.convert_tokens_to_ids("<|im_start|>")
        ids = list(map(int, stats.special_ids))
        si = ids.index(im_start) if im_start in ids else int(stats.special_counts.argmax())
        feature = int(stats.special_scores[si].argmax())
    norms = torch.cat([c.acts.norm(dim=-1) for c in
                       fast_provider(model, data["eval"][:32], site=site, shuffle=False).iter_chunks()])
    mean_norm = float(norms.mean())
    rel = [float(a) for a in str(alphas_rel).split(",")]
    prompts = [d[:-1] for d in data["eval"][:n_prompts]]
    sw = steering_sweep(model, sae_dir, prompts, feature=feature, alphas=tuple(a * mean_norm for a in rel),
                        positions=positions, max_new_tokens=max_new_tokens, normalize=True, site=site)
    df = sw.to_frame()
    df["alpha_rel"] = df["alpha"] / mean_norm
    if data.get("eval_examples") is not None:
        exs = data["eval_examples"][:n_prompts]
        df["exact_match"] = [t.split() == list(exs[i].response) for t, i in zip(df["text"], df["prompt_idx"])]
        df["task"] = [exs[i].task for i in df["prompt_idx"]]
    sw.rows = df.to_dict("records")
    return sw, df, feature, mean_norm


@dataclass
class SteerSweepConfig:
    """Special-token steering sweep with an existing SAE directory.

    model: organism. sae_dir: SAELens directory ("" -> error). feature: -1 = the top <|im_start|> feature.
    alphas: multiples of the mean residual norm. n_prompts, n_eval: held-out prompts / dialogues scanned for the
    ranking. positions: all | template | generated. max_new_tokens: reply length cap. threads: torch threads."""

    model: str = "zoo:toy-chat"
    sae_dir: str = ""
    feature: int = -1
    alphas: str = "0,0.25,0.5,1,2,4"
    n_prompts: int = 48
    n_eval: int = 128
    positions: str = "all"
    max_new_tokens: int = 12
    seed: int = 42
    threads: int = 1


@register_experiment("sae-steer-sweep", config=SteerSweepConfig,
                     help="special-token feature steering: alpha sweep with stored generations and exact match")
def sae_steer_sweep(cfg: SteerSweepConfig, run) -> None:
    import torch

    import interplab
    from interplab.core.errors import ConfigError
    from interplab.figures.sae import steering_sweep_figure
    from interplab.sae import load_sae
    from interplab.sae._util import sae_site

    if not cfg.sae_dir:
        raise ConfigError("set sae_dir to an SAELens directory (e.g. one written by sae-train)")
    torch.set_num_threads(cfg.threads)
    model = interplab.load_model(cfg.model)
    data = experiment_data(model, 4, cfg.n_eval, 4, cfg.seed)
    site = sae_site(load_sae(cfg.sae_dir))
    sw, df, feature, mean_norm = special_token_steering(
        model, Path(cfg.sae_dir), data, site=site, alphas_rel=cfg.alphas, n_prompts=cfg.n_prompts,
        positions=cfg.positions, max_new_tokens=cfg.max_new_tokens, feature=cfg.feature)
    sw.save(Path(run.path) / "steering")
    run.save_table("steering", df.drop(columns=["new_tokens"]))
    save_figure(run, "steering", steering_sweep_figure(sw))
    run.save_json("summary", {"feature": feature, "mean_residual_norm": mean_norm, "sae_dir": cfg.sae_dir,
                              "site": site})


@register_experiment("sae-fast-vs-block", config=FastVsBlockConfig,
                     help="FAST vs BT(F) vs BT(P) SAEs: log2 MSE, MSE_st, EV, L0, Delta Loss, CE score (all positions "
                          "and assistant answers only); GSNR; "
                          "special-token steering sweep")
def sae_fast_vs_block(cfg: FastVsBlockConfig, run) -> None:
    import pandas as pd
    import torch

    import interplab
    from interplab.figures.sae import gsnr_figure, metrics_grid_figure, special_token_heatmap, steering_sweep_figure
    from interplab.sae import block_provider, fast_provider, gsnr
    from interplab.sae.features import feature_statistics

    torch.set_num_threads(cfg.threads)
    model = interplab.load_model(cfg.model)
    data = experiment_data(model, cfg.n_train, cfg.n_eval, cfg.n_text, cfg.seed)
    archs = [a.strip() for a in cfg.architectures.split(",") if a.strip()]
    methods = [m.strip() for m in cfg.methods.split(",") if m.strip()]
    root = Path(run.path) / "saes"
    half = cfg.steps // 2
    rows, dirs = [], {}
    for arch in archs:
        for m in methods:
            t0 = time.perf_counter()
            d = train_one(model, data, root / f"{arch}_{m}", method=m, architecture=arch, site=cfg.site,
                          steps=cfg.steps, batch_tokens=cfg.batch_tokens, lr=cfg.lr, expansion=cfg.expansion,
                          l1_coefficient=cfg.l1_coefficient, l0_coefficient=cfg.l0_coefficient,
                          context_size=cfg.context_size, seed=cfg.seed, checkpoint_steps=(half,))
            dirs[(arch, m)] = d
            rows.append(metrics_row(model, d, data["eval"], method=METHOD_LABELS[m], architecture=arch,
                                    wall_seconds=time.perf_counter() - t0) | {"path": run.relative(d)})
            run.save_table("results", pd.DataFrame(rows), overwrite=True)
    df = pd.DataFrame(rows)
    save_figure(run, "results", metrics_grid_figure(df), overwrite=True)
    from interplab.figures.sae import leakage_figure

    leak = leakage_table(model, data["eval"], cfg.site, cfg.context_size)
    run.save_table("leakage", leak, overwrite=True)
    save_figure(run, "leakage", leakage_figure(leak, "rel_l2"), overwrite=True)

    # GSNR: providers with repeat, B = batch_tokens for every method
    provs = {
        "fast": lambda: fast_provider(model, data["train"], site=cfg.site, repeat=True, seed=cfg.seed + 1),
        "bt_f": lambda: block_provider(model, data["train"], site=cfg.site, context_size=cfg.context_size,
                                       repeat=True, seed=cfg.seed + 1),
        "bt_p": lambda: block_provider(model, data["texts"], site=cfg.site, context_size=cfg.context_size,
                                       repeat=True, seed=cfg.seed + 1),
    }
    from sae_lens import TrainingSAE

    grows = []
    for arch in archs:
        ref = "fast" if "fast" in methods else methods[0]
        theta_same = TrainingSAE.load_from_disk(str(dirs[(arch, ref)] / "checkpoints" / f"step_{half}"))
        for m in methods:
            own = TrainingSAE.load_from_disk(str(dirs[(arch, m)] / "checkpoints" / f"step_{half}"))
            for theta_name, sae in ((f"same theta ({METHOD_LABELS[ref]} @ step {half})", theta_same),
                                    (f"own trajectory (@ step {half})", own)):
                g = gsnr(sae, provs[m](), n_batches=cfg.gsnr_batches, batch_tokens=cfg.batch_tokens, seed=cfg.seed)
                g["method"], g["architecture"], g["theta"] = METHOD_LABELS[m], arch, theta_name
                grows.append(g)
    gdf = pd.concat(grows, ignore_index=True)
    run.save_table("gsnr", gdf, overwrite=True)
    for arch in archs:
        save_figure(run, f"gsnr_{arch}", gsnr_figure(gdf[gdf.architecture == arch], facet="theta",
                                                    title=f"GSNR per parameter, {arch}"), overwrite=True)

    # special-token features of the FAST JumpReLU SAE (or the first available) and the steering sweep
    arch_s = "jumprelu" if "jumprelu" in archs else archs[0]
    sdir = dirs[(arch_s, "fast" if "fast" in methods else methods[0])]
    stats = feature_statistics(model, sdir, data["eval"], k=5)
    stats.save(Path(run.path) / "feature_stats")
    run.save_table("special_token_features", stats.special_ranking(5), overwrite=True)
    save_figure(run, "special_token_features", special_token_heatmap(stats), overwrite=True)
    sw, df_sw, feature, mean_norm = special_token_steering(
        model, sdir, data, site=cfg.site, stats=stats, alphas_rel=cfg.steer_alphas, n_prompts=cfg.steer_prompts,
        positions=cfg.steer_positions, max_new_tokens=cfg.max_new_tokens)
    sw.save(Path(run.path) / "steering")
    run.save_table("steering", df_sw.drop(columns=["new_tokens"]), overwrite=True)
    save_figure(run, "steering", steering_sweep_figure(sw), overwrite=True)
    run.save_json("summary", {"steering_feature": feature, "steering_token": "<|im_start|>",
                              "mean_residual_norm": mean_norm,
                              "sae_for_steering": run.relative(sdir)}, overwrite=True)
