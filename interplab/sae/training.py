"""SAE training on SAELens's `SAETrainer`, with the FAST paper's options.

Everything architectural (SAE classes, losses, schedulers, dead-feature tracking, `mixing_buffer`, save/load) is
SAELens 6.54. interplab adds only what FAST needs (method spec §6A):

* the activation source (`fast_provider` = one chat-templated dialogue per sequence, or `block_provider` = SAELens
  block packing) feeding SAELens's `mixing_buffer` (fill -> shuffle -> serve half -> refill);
* geometric-median `b_dec` initialisation (Weiszfeld; removed from SAELens in v6);
* optional unit-norm decoder rows with the parallel gradient component removed before each step (5.x semantics);
* metadata (model, site, training mode, truncation, chat-template hash), saved with `save_inference_model` so that
  `sae_lens.SAE.load_from_disk(out_dir)` loads the directory unchanged.

Two labelled training modes: ``mode="paper"`` (5.x semantics: geometric-median b_dec, unit-norm decoder,
JumpReLU bandwidth/threshold 0.001, `apply_b_dec_to_input=False`) and ``mode="native"`` (SAELens-6 defaults: zero
b_dec, no decoder constraint, `decoder_init_norm` 0.1). Individual fields override the mode.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from interplab.core.errors import ConfigError, DataError, InputError, ShapeError
from interplab.core.io import write_arrays, write_json, write_table

ARCHITECTURES = ("standard", "jumprelu", "topk", "batchtopk", "gated")
METHODS = ("fast", "block", "activations")
TRAIN_CONFIG_FILENAME = "interplab_train.json"
TRAIN_LOG_FILENAME = "training_log.csv"


@dataclass
class SAETrainConfig:
    """Everything that determines one SAE training run (saved as interplab_train.json next to the SAE).

    site: interplab site the SAE reads (`resid_post.L`; residual-width sites only).
    method: "fast" (one dialogue per sequence), "block" (SAELens block packing; BT(F) on dialogues, BT(P) on
        texts) or "activations" (data is already an iterator of [n, d] activation tensors).
    architecture: SAELens training architecture: standard | jumprelu | topk | batchtopk | gated.
    expansion: d_sae = expansion * d_model (ignored when d_sae is given).
    d_sae: explicit dictionary width.
    steps: optimiser steps; training tokens = steps * batch_tokens.
    batch_tokens: activation rows per step (paper: 128).
    lr, lr_end: Adam learning rate and end value of the schedule (lr_end None -> lr / 10, SAELens's runner rule).
    lr_scheduler: SAELens scheduler name ("constant", "cosineannealing", ...); lr_warm_up_steps, lr_decay_steps as
        in SAELens.
    mode: "paper" (5.x semantics) or "native" (SAELens-6 defaults); fills the None fields below.
    b_dec_init: "geometric_median" | "mean" | "zeros" (None -> geometric_median in paper mode, zeros in native).
    b_dec_init_tokens: rows of the first buffer used for the b_dec initialisation.
    normalize_decoder: unit-norm decoder rows after every step, parallel gradient removed before it
        (None -> True in paper mode).
    decoder_init_norm: SAELens decoder init norm (None -> 1.0 with normalize_decoder, else 0.1).
    apply_b_dec_to_input: subtract b_dec from the input before encoding (paper: False).
    normalize_activations: "none" (paper) or "expected_average_only_in" (SAELens: inputs scaled so that
        E||x|| = sqrt(d_in) during training; the factor is estimated from the b_dec-init rows and folded into the
        weights at the end, so the saved SAE takes raw activations). Makes sparsity coefficients scale-free.
    l1_coefficient, l1_warm_up_steps: Standard / Gated sparsity (paper: 5, 10k warm-up).
    l0_coefficient, l0_warm_up_steps: JumpReLU sparsity (paper: 0.01, 10k warm-up).
    jumprelu_bandwidth, jumprelu_init_threshold: None -> 0.001 / 0.001 in paper mode, 0.05 / 0.01 native.
    k: TopK / BatchTopK active features.
    buffer_tokens: mixing-buffer size in rows (None -> 16 * batch_tokens).
    mix_fraction: fraction of the buffer kept for mixing (SAELens `mixing_buffer`, FAST: 0.5).
    dead_feature_window, feature_sampling_window: SAELens dead-feature bookkeeping windows (steps).
    truncate, context_size, separator, micro_batch, exclude_token_ids, shuffle: provider settings (see providers).
    exclude_massive: 0 = train on every position; a factor > 1 leaves out each sequence's massive positions (norm
        above factor x its median norm; `interplab.core.scale.massive_mask`), recorded in the SAE's metadata so that
        evaluation and splicing leave them out too (a real model's attention sink: SmolLM2's first token).
    seed: seeds SAE init, sample shuffle and buffer permutations.
    checkpoint_steps: steps after which the *training* SAE is saved under out_dir/checkpoints/step_N (GSNR
        along the trajectory).
    log_every: write a training-log row every this many steps.
    device: SAE device.
    model_name, dataset_path: metadata labels (model_name defaults to the model's name).
    """

    site: str = "resid_post.0"
    method: str = "fast"
    architecture: str = "jumprelu"
    expansion: int = 8
    d_sae: int | None = None
    steps: int = 200
    batch_tokens: int = 128
    lr: float = 3e-4
    lr_end: float | None = None
    lr_scheduler: str = "constant"
    lr_warm_up_steps: int = 0
    lr_decay_steps: int = 0
    mode: str = "paper"
    b_dec_init: str | None = None
    b_dec_init_tokens: int = 2048
    normalize_decoder: bool | None = None
    decoder_init_norm: float | None = None
    apply_b_dec_to_input: bool = False
    normalize_activations: str = "none"
    l1_coefficient: float = 5.0
    l1_warm_up_steps: int = 0
    l0_coefficient: float = 0.01
    l0_warm_up_steps: int = 0
    jumprelu_bandwidth: float | None = None
    jumprelu_init_threshold: float | None = None
    k: int = 16
    buffer_tokens: int | None = None
    mix_fraction: float = 0.5
    dead_feature_window: int = 1000
    feature_sampling_window: int = 2000
    truncate: int = 8192
    context_size: int = 128
    separator: str = "bos"
    micro_batch: int = 32
    exclude_token_ids: tuple[int, ...] = ()
    exclude_massive: float = 0.0
    shuffle: bool = True
    seed: int = 42
    checkpoint_steps: tuple[int, ...] = ()
    log_every: int = 10
    device: str = "cpu"
    model_name: str | None = None
    dataset_path: str | None = None

    def resolved(self) -> "SAETrainConfig":
        """A copy with the mode-dependent None fields filled in and every value validated."""
        c = SAETrainConfig(**{f.name: getattr(self, f.name) for f in fields(self)})
        if c.mode not in ("paper", "native"):
            raise ConfigError(f"mode must be 'paper' or 'native', got {c.mode!r}")
        if c.architecture not in ARCHITECTURES:
            raise ConfigError(f"architecture must be one of {ARCHITECTURES}, got {c.architecture!r}")
        if c.method not in METHODS:
            raise ConfigError(f"method must be one of {METHODS}, got {c.method!r}")
        paper = c.mode == "paper"
        if c.b_dec_init is None:
            c.b_dec_init = "geometric_median" if paper else "zeros"
        if c.b_dec_init not in ("geometric_median", "mean", "zeros"):
            raise ConfigError(f"b_dec_init must be geometric_median|mean|zeros, got {c.b_dec_init!r}")
        if c.normalize_decoder is None:
            c.normalize_decoder = paper
        if c.decoder_init_norm is None:
            c.decoder_init_norm = 1.0 if c.normalize_decoder else 0.1
        if c.jumprelu_bandwidth is None:
            c.jumprelu_bandwidth = 0.001 if paper else 0.05
        if c.jumprelu_init_threshold is None:
            c.jumprelu_init_threshold = 0.001 if paper else 0.01
        if c.lr_end is None:
            c.lr_end = c.lr / 10
        if c.buffer_tokens is None:
            c.buffer_tokens = 16 * c.batch_tokens
        for name in ("steps", "batch_tokens", "expansion", "b_dec_init_tokens", "log_every", "micro_batch"):
            if getattr(c, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(c, name)}")
        if c.buffer_tokens < c.batch_tokens:
            raise ConfigError(f"buffer_tokens ({c.buffer_tokens}) must be >= batch_tokens ({c.batch_tokens})")
        if not 0.0 <= c.mix_fraction < 1.0:
            raise ConfigError(f"mix_fraction must be in [0, 1), got {c.mix_fraction}")
        if c.normalize_activations not in ("none", "expected_average_only_in"):
            raise ConfigError("normalize_activations must be 'none' or 'expected_average_only_in', "
                              f"got {c.normalize_activations!r}")
        if c.separator not in ("bos", "none"):
            raise ConfigError(f"separator must be 'bos' or 'none', got {c.separator!r}")
        c.exclude_token_ids = tuple(int(i) for i in c.exclude_token_ids)
        c.exclude_massive = float(c.exclude_massive or 0.0)
        if c.exclude_massive and not c.exclude_massive > 1:
            raise ConfigError(f"exclude_massive must be 0 (keep every position) or a factor > 1 of the median norm, "
                              f"got {c.exclude_massive}")
        c.checkpoint_steps = tuple(sorted(int(s) for s in c.checkpoint_steps))
        return c

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------------------------
# FAST-specific additions to SAELens


@torch.no_grad()
def geometric_median(points: torch.Tensor, maxiter: int = 100, ftol: float = 1e-20, eps: float = 1e-6) -> torch.Tensor:
    """Weiszfeld's algorithm (as in SAELens 5.x `compute_geometric_median`): argmin_y sum_i ||x_i - y||.

    points: [n, d]. Stops after `maxiter` iterations or when the objective improves by less than ftol * objective."""
    if points.ndim != 2 or points.shape[0] == 0:
        raise ShapeError(f"geometric_median needs a non-empty [n, d] tensor, got {tuple(points.shape)}")
    x = points.double()
    median = x.mean(0)
    obj = torch.linalg.vector_norm(x - median, dim=1).sum()
    for _ in range(maxiter):
        dist = torch.linalg.vector_norm(x - median, dim=1).clamp_min(eps)
        w = 1.0 / dist
        median = (w[:, None] * x).sum(0) / w.sum()
        new_obj = torch.linalg.vector_norm(x - median, dim=1).sum()
        if abs(obj - new_obj) <= ftol * obj:
            obj = new_obj
            break
        obj = new_obj
    return median.to(points.dtype)


def _remove_parallel_grad(W_dec: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    def hook(grad: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            w = W_dec.detach()
            w_hat = w / w.norm(dim=-1, keepdim=True).clamp_min(1e-8)
            par = (grad * w_hat).sum(-1, keepdim=True)
            return grad - par * w_hat
    return hook


@torch.no_grad()
def normalize_decoder_rows(sae: Any) -> None:
    sae.W_dec.data /= sae.W_dec.data.norm(dim=-1, keepdim=True).clamp_min(1e-8)


def build_training_sae(cfg: SAETrainConfig, d_in: int):
    """The SAELens TrainingSAE for a resolved config (seeded)."""
    from sae_lens import (BatchTopKTrainingSAE, BatchTopKTrainingSAEConfig, GatedTrainingSAE,
                          GatedTrainingSAEConfig, JumpReLUTrainingSAE, JumpReLUTrainingSAEConfig,
                          StandardTrainingSAE, StandardTrainingSAEConfig, TopKTrainingSAE, TopKTrainingSAEConfig)

    d_sae = int(cfg.d_sae or cfg.expansion * d_in)
    common = dict(d_in=int(d_in), d_sae=d_sae, dtype="float32", device=cfg.device,
                  apply_b_dec_to_input=cfg.apply_b_dec_to_input, decoder_init_norm=cfg.decoder_init_norm,
                  normalize_activations=cfg.normalize_activations)
    a = cfg.architecture
    if a == "standard":
        scfg = StandardTrainingSAEConfig(**common, l1_coefficient=cfg.l1_coefficient,
                                         l1_warm_up_steps=cfg.l1_warm_up_steps)
        cls = StandardTrainingSAE
    elif a == "gated":
        scfg = GatedTrainingSAEConfig(**common, l1_coefficient=cfg.l1_coefficient, l1_warm_up_steps=cfg.l1_warm_up_steps)
        cls = GatedTrainingSAE
    elif a == "jumprelu":
        scfg = JumpReLUTrainingSAEConfig(**common, l0_coefficient=cfg.l0_coefficient,
                                         l0_warm_up_steps=cfg.l0_warm_up_steps,
                                         jumprelu_bandwidth=cfg.jumprelu_bandwidth,
                                         jumprelu_init_threshold=cfg.jumprelu_init_threshold)
        cls = JumpReLUTrainingSAE
    elif a == "topk":
        scfg = TopKTrainingSAEConfig(**common, k=int(cfg.k))
        cls = TopKTrainingSAE
    else:
        scfg = BatchTopKTrainingSAEConfig(**common, k=float(cfg.k))
        cls = BatchTopKTrainingSAE
    torch.manual_seed(cfg.seed)
    return cls(scfg)


def _make_trainer_class():
    from sae_lens import SAETrainer

    class _InterplabTrainer(SAETrainer):
        """SAETrainer + (optional) 5.x decoder constraint + a per-step log + trajectory checkpoints.

        Only public seams are used: `step` is wrapped; the parallel-gradient removal is a gradient hook on W_dec,
        so it runs inside SAELens's `_train_step` after `backward()` and before clipping and `optimizer.step()`."""

        def __init__(self, *a, icfg: SAETrainConfig, progress=None, out_dir: Path | None = None, **kw):
            super().__init__(*a, **kw)
            self.icfg = icfg
            self.progress = progress
            self.out_dir = out_dir
            self.log_rows: list[dict] = []
            self._t0 = time.perf_counter()
            self._hook = None
            if icfg.normalize_decoder:
                normalize_decoder_rows(self.sae)
                self._hook = self.sae.W_dec.register_hook(_remove_parallel_grad(self.sae.W_dec))

        def step(self, batch):
            if batch.ndim != 2 or batch.shape[1] != self.sae.cfg.d_in:
                raise ShapeError(f"activation batch must be [n, {self.sae.cfg.d_in}], got {tuple(batch.shape)}")
            out = super().step(batch)
            if self.icfg.normalize_decoder:
                normalize_decoder_rows(self.sae)
            s = self.n_training_steps + 1  # fit() increments after step()
            if s % self.icfg.log_every == 0 or s == 1 or s * self.cfg.train_batch_size_samples >= self.cfg.total_training_samples:
                with torch.no_grad():
                    x, xh = out.sae_in.float(), out.sae_out.float()
                    err = (xh - x).pow(2).sum(-1)
                    var = (x - x.mean(0)).pow(2).sum(-1)
                    row = {"step": s, "tokens": self.n_training_samples, "loss": float(out.loss),
                           "l0": float((out.feature_acts != 0).float().sum(-1).mean()),
                           "explained_variance": float(1 - err.mean() / var.mean().clamp_min(1e-12)),
                           "dead_features": int(self.dead_neurons.sum()),
                           "lr": float(self.optimizer.param_groups[0]["lr"]),
                           "seconds": time.perf_counter() - self._t0}
                    for k, v in out.losses.items():
                        row[k] = float(v)
                self.log_rows.append(row)
                if self.progress is not None:
                    self.progress(s, self.icfg.steps, row)
            if self.out_dir is not None and s in self.icfg.checkpoint_steps:
                self.sae.save_model(str(self.out_dir / "checkpoints" / f"step_{s}"))
            return out

        def close(self):
            if self._hook is not None:
                self._hook.remove()
                self._hook = None

    return _InterplabTrainer


class _CountingIterator:
    """Wraps the served batches; raises a helpful error when finite data runs out before `steps`."""

    def __init__(self, it: Iterator[torch.Tensor], steps: int):
        self.it, self.steps, self.n = it, steps, 0

    def __iter__(self):
        return self

    def __next__(self):
        try:
            b = next(self.it)
        except StopIteration:
            raise DataError(
                f"the activation source ran out after {self.n} of {self.steps} steps; pass more data, fewer steps, "
                "or a provider with repeat=True") from None
        self.n += 1
        return b


def _peek_rows(it: Iterator[torch.Tensor], n_rows: int) -> tuple[torch.Tensor, Iterator[torch.Tensor]]:
    """Read chunks until >= n_rows rows; return them concatenated and an iterator that replays them first."""
    chunks, n = [], 0
    for c in it:
        if c.ndim != 2:
            raise ShapeError(f"activation chunks must be [n, d_in], got {tuple(c.shape)}")
        chunks.append(c)
        n += c.shape[0]
        if n >= n_rows:
            break
    if not chunks:
        raise DataError("the activation source produced no activations")
    return torch.cat(chunks)[:n_rows], itertools.chain(chunks, it)


def _metadata(sae, cfg: SAETrainConfig, provider: Any, model: Any) -> None:
    from interplab.sae.chat import chat_template_hash
    from interplab.sae.sites import site_to_hook_name

    md = sae.cfg.metadata
    name = cfg.model_name or (getattr(model, "name", None) if model is not None else None)
    md.model_name = str(name) if name is not None else "unknown"
    md.hook_name = site_to_hook_name(cfg.site)
    md.hook_head_index = None
    md.interplab_site = cfg.site
    pmode = getattr(provider, "mode", None)
    md.training_data_mode = {"fast": "fast_sequential", "block": "block"}.get(pmode or cfg.method, cfg.method)
    if md.training_data_mode == "block":
        md.context_size = int(cfg.context_size)
        md.sequence_separator = cfg.separator
        md.prepend_bos = True
        md.block_data = getattr(provider, "data_kind", None)  # "dialogues" (BT(F)) or "texts" (BT(P))
    else:
        md.context_size = None
        md.prepend_bos = False
    md.truncation_len = int(cfg.truncate) if md.training_data_mode == "fast_sequential" else None
    tok = getattr(model, "tokenizer", None) if model is not None else None
    md.chat_template_hash = chat_template_hash(tok) if tok is not None else None
    md.exclude_special_tokens = list(cfg.exclude_token_ids) or False
    md.exclude_massive = float(cfg.exclude_massive)
    md.dataset_path = cfg.dataset_path or ""
    md.model_from_pretrained_kwargs = {}
    md.training_mode = "paper-faithful (5.x semantics)" if cfg.mode == "paper" else "SAELens-6 native"
    md.b_dec_init = cfg.b_dec_init
    md.normalize_decoder = bool(cfg.normalize_decoder)
    md.training_tokens = int(cfg.steps * cfg.batch_tokens)
    md.buffer_tokens = int(cfg.buffer_tokens)
    md.mix_fraction = float(cfg.mix_fraction)
    md.seed = int(cfg.seed)
    md.interplab = "interplab.sae.train_sae"


def train_sae(model: Any, data: Any, *, site: str | None = None, method: str = "fast",
              architecture: str = "jumprelu", expansion: int = 8, steps: int = 200, batch_tokens: int = 128,
              lr: float = 3e-4, out_dir: str | Path, progress: Callable[[int, int, dict], None] | None = None,
              overwrite: bool = False, config: SAETrainConfig | None = None, **kwargs: Any) -> Path:
    """Train an SAE with SAELens's `SAETrainer` and save it as an SAELens directory; returns `out_dir`.

    model: a `LabModel` (needed for methods "fast" and "block"; may be None for method="activations").
    data: dialogues (lists of {"role", "content"} messages), plain texts (block training, BT(P)), a provider from
        `fast_provider` / `block_provider`, or (method="activations") an iterator of [n, d] activation tensors.
    site, method, architecture, expansion, steps, batch_tokens, lr and **kwargs: fields of `SAETrainConfig`.
    config: a full SAETrainConfig instead of the keyword fields (keywords given explicitly are ignored then).
    progress: called as progress(step, total_steps, log_row) every `log_every` steps.

    out_dir holds cfg.json + sae_weights.safetensors (SAELens inference format; `SAE.load_from_disk` loads it),
    sparsity.safetensors (log10 feature density, key "sparsity"), interplab_train.json and training_log.csv.
    """
    from sae_lens import SAETrainer  # noqa: F401  (import error surfaces here, not mid-training)
    from sae_lens.config import SAETrainerConfig
    from sae_lens.training.mixing_buffer import mixing_buffer

    if config is None:
        config = SAETrainConfig(site=site or "resid_post.0", method=method, architecture=architecture,
                                expansion=expansion, steps=steps, batch_tokens=batch_tokens, lr=lr, **kwargs)
    elif site is not None:
        config = SAETrainConfig(**{**config.to_dict(), "site": site})
    cfg = config.resolved()
    out_dir = Path(out_dir)
    if (out_dir / "cfg.json").exists() and not overwrite:
        from interplab.core.errors import ResultsError
        raise ResultsError(f"{out_dir} already holds an SAE; pass overwrite=True or choose another out_dir")

    provider = make_provider(model, data, cfg)
    given = getattr(provider, "exclude_massive", None)
    if given is not None and float(given) != cfg.exclude_massive:
        raise ConfigError(f"the provider leaves out massive positions at factor {given} but the config says "
                          f"exclude_massive={cfg.exclude_massive}; build the provider from the same config "
                          "(training.make_provider) so the SAE's metadata is true")
    torch.manual_seed(cfg.seed)
    source: Iterator[torch.Tensor] = iter(provider)
    n_init = cfg.b_dec_init_tokens if (cfg.b_dec_init != "zeros" or cfg.normalize_activations != "none") else 1
    first, source = _peek_rows(source, n_init)
    d_in = int(first.shape[1])
    if model is not None and getattr(model, "d_model", d_in) != d_in:
        raise ShapeError(f"activations have width {d_in} but the model's d_model is {model.d_model}")

    sae = build_training_sae(cfg, d_in)
    scale = None
    if cfg.normalize_activations == "expected_average_only_in":
        scale = float(d_in ** 0.5 / first.float().norm(dim=-1).mean().clamp_min(1e-12))
        first = first * scale  # b_dec lives in the scaled space during training
    with torch.no_grad():
        if cfg.b_dec_init == "geometric_median":
            sae.b_dec.data.copy_(geometric_median(first.float()).to(sae.b_dec))
        elif cfg.b_dec_init == "mean":
            sae.b_dec.data.copy_(first.float().mean(0).to(sae.b_dec))
    _metadata(sae, cfg, provider, model)

    torch.manual_seed(cfg.seed)  # mixing_buffer draws its permutations from the global RNG
    served = mixing_buffer(cfg.buffer_tokens, cfg.batch_tokens, source, mix_fraction=cfg.mix_fraction)
    tcfg = SAETrainerConfig(total_training_samples=cfg.steps * cfg.batch_tokens,
                            train_batch_size_samples=cfg.batch_tokens, lr=cfg.lr, lr_end=cfg.lr_end,
                            lr_scheduler_name=cfg.lr_scheduler, lr_warm_up_steps=cfg.lr_warm_up_steps,
                            lr_decay_steps=cfg.lr_decay_steps, device=cfg.device,
                            dead_feature_window=cfg.dead_feature_window,
                            feature_sampling_window=cfg.feature_sampling_window, n_checkpoints=0,
                            checkpoint_path=None, save_final_checkpoint=False)
    Trainer = _make_trainer_class()
    trainer = Trainer(cfg=tcfg, sae=sae, data_provider=_CountingIterator(served, cfg.steps), icfg=cfg,
                      progress=progress, out_dir=out_dir)
    if scale is not None:  # estimated from the first rows; fit() keeps it and folds it into the weights at the end
        trainer.activation_scaler.scaling_factor = scale
    t0 = time.perf_counter()
    try:
        import contextlib
        import io
        with contextlib.redirect_stderr(io.StringIO()):  # SAELens's tqdm bar
            trainer.fit()
    finally:
        trainer.close()
        served.close()  # offline pitfall 8
    seconds = time.perf_counter() - t0

    out_dir.mkdir(parents=True, exist_ok=True)
    sae.save_inference_model(str(out_dir))
    write_arrays(out_dir / "sparsity.safetensors", {"sparsity": trainer.log_feature_sparsity.float()})
    info = cfg.to_dict()
    info.update(d_in=d_in, d_sae=int(sae.cfg.d_sae), train_seconds=seconds, activation_scale=scale,
                tokens_per_second=cfg.steps * cfg.batch_tokens / max(seconds, 1e-9),
                provider=getattr(provider, "describe", lambda: {})())
    write_json(out_dir / TRAIN_CONFIG_FILENAME, info)
    import pandas as pd
    write_table(out_dir / TRAIN_LOG_FILENAME, pd.DataFrame(trainer.log_rows))
    return out_dir


class _TensorSource:
    mode = "activations"

    def __init__(self, data: Iterable[torch.Tensor]):
        self.data = data

    def __iter__(self):
        for t in self.data:
            if not isinstance(t, torch.Tensor):
                raise InputError(f"method='activations' needs an iterator of tensors, got {type(t).__name__}")
            yield t.detach().float()

    def describe(self):
        return {"mode": "activations"}


def make_provider(model: Any, data: Any, cfg: SAETrainConfig):
    """The activation provider `train_sae` trains from: `data` itself when it is a provider, else the FAST or block
    provider of `cfg` (method, site, truncation, packing, exclusions, seed) over the samples `data`. Build it once
    and wrap it in `providers.CachedProvider` to train several SAEs from one harvest."""
    from interplab.sae import providers as P

    if isinstance(data, P.ActivationProvider):
        return data
    if cfg.method == "activations" or isinstance(data, torch.Tensor):
        if isinstance(data, torch.Tensor):
            if data.ndim != 2:
                raise ShapeError(f"an activation tensor must be [n, d], got {tuple(data.shape)}")
            data = [data]
        return _TensorSource(data)
    if model is None:
        raise InputError(f"method={cfg.method!r} harvests activations from a model; pass model=LabModel "
                         "(or method='activations' with an iterator of activation tensors)")
    if cfg.method == "fast":
        return P.fast_provider(model, data, site=cfg.site, truncate=cfg.truncate, micro_batch=cfg.micro_batch,
                               exclude_token_ids=cfg.exclude_token_ids, exclude_massive=cfg.exclude_massive,
                               shuffle=cfg.shuffle, seed=cfg.seed,
                               repeat=True)
    return P.block_provider(model, data, site=cfg.site, context_size=cfg.context_size, separator=cfg.separator,
                            micro_batch=max(1, cfg.micro_batch // 2), shuffle=cfg.shuffle, seed=cfg.seed, repeat=True,
                            truncate=cfg.truncate, exclude_token_ids=cfg.exclude_token_ids,
                            exclude_massive=cfg.exclude_massive)


def load_train_info(sae_dir: str | Path) -> dict:
    """interplab_train.json of a directory written by train_sae ({} for SAEs trained elsewhere)."""
    from interplab.core.io import read_json

    p = Path(sae_dir) / TRAIN_CONFIG_FILENAME
    return read_json(p) if p.exists() else {}


def load_training_log(sae_dir: str | Path):
    import pandas as pd
    from interplab.core.io import read_table

    p = Path(sae_dir) / TRAIN_LOG_FILENAME
    return read_table(p) if p.exists() else pd.DataFrame()
