"""Hyperfitting controls (spec methods/hyperfit_geometry.md §2.4, §4.3, §4.6; issue 17 part 3): is the per-layer
participation-ratio growth (ΔDim) specific to hyperfitting?

Arms, each trained from the same base on the same windows, `seeds` times:
  hyperfit        Adam (weight decay 0), constant lr, until the epoch-mean training loss < stop_loss (cap max_epochs)
  finetune        the usual recipe (AdamW with weight decay, warm-up + cosine) for the same number of steps as the
                  hyperfit run of the same seed, early-stopped at the usual criterion on held-out windows (best weights)
  finetune-steps  the same run's weights at the end of the step budget (steps matched to hyperfit, no early stop)
  shuffled        hyperfitting (same optimiser, stop rule and cap) on the windows with tokens permuted within each
  late-lora       optional: Late-Stage LoRA to the same stop rule (`lora_seeds`; empty = skipped)

For every trained model: ‖ΔW‖_F against the base (total and per block; `interplab.train.hyperfit_controls.
weight_change`) and the per-layer geometry against the base (`compute_layer_geometry`: PR, ΔDim, cos, L2 on
held-out texts), then Student-t intervals across seeds (`interplab.probes.stats.intervals`).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from interplab.core.errors import ConfigError, ShapeError
from interplab.core.result import Result
from interplab.probes.hyperfit.geometry import compute_layer_geometry
from interplab.probes.stats import intervals

__all__ = ["ControlsConfig", "HyperfitControlsResult", "hyperfit_controls", "summarize_controls", "ARMS"]

ARMS = ("hyperfit", "finetune", "finetune-steps", "shuffled", "late-lora")


@dataclass
class ControlsConfig:
    """Settings of `hyperfit_controls`.

    seeds: training seeds of every arm (shuffling, batch order; the shuffled arm's permutation too).
    lr, stop_loss, max_epochs: the hyperfitting recipe (Adam, weight decay 0, constant lr; text-hyperfit's).
    shuffled_max_epochs: epoch cap of the shuffled arm (same optimiser and stop rule); None = max_epochs.
    batch_size, seq_len: as in the text-hyperfit recipe.
    ft_lr, ft_weight_decay, ft_warmup_frac, ft_min_lr_ratio, ft_patience: the ordinary fine-tuning recipe
        (`interplab.train.hyperfit_controls.FinetuneConfig`); its step budget is the hyperfit run's.
    lora_seeds: seeds of the Late-Stage LoRA arm (empty = skip); lora_layers, lora_lr, lora_max_epochs,
        lora_budget_s: its placement, constant lr, epoch cap and wall-clock cap (None = none).
    method: how the hyperfit, finetune and shuffled arms are parametrised: "full" (every weight) or "lora" (peft
        adapters of rank 16, alpha 32 on `arm_lora_layers`, merged back; a 135M model's full fine-tuning costs
        ~15 s per step on 2 CPU cores, so a real-model run compares the arms under LoRA); `lr` and `ft_lr` are
        then the adapters' learning rates.
    save_dtype: every trained model is rounded to this dtype before it is measured ("float16" = as the shipped
        descendants are stored, so a reused shipped model and retrained seeds are comparable; "float32" = off).
    geometry_batch, max_tokens: `compute_layer_geometry` settings (texts truncated to max_tokens; BOS excluded).
    """

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    lr: float = 1e-3
    stop_loss: float = 0.05
    max_epochs: int = 300
    shuffled_max_epochs: int | None = None
    batch_size: int = 8
    seq_len: int = 128
    ft_lr: float = 1e-3
    ft_weight_decay: float = 0.1
    ft_warmup_frac: float = 0.1
    ft_min_lr_ratio: float = 0.1
    ft_patience: int = 3
    lora_seeds: list[int] = field(default_factory=list)
    lora_layers: str = "last:2"
    lora_lr: float = 1e-2
    lora_max_epochs: int = 500
    lora_budget_s: float | None = None
    method: str = "full"
    arm_lora_layers: str = "last:5"
    save_dtype: str = "float16"
    geometry_batch: int = 16
    max_tokens: int | None = 128

    def validate(self) -> "ControlsConfig":
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds must be distinct and non-empty, got {self.seeds}")
        if self.save_dtype not in ("float16", "bfloat16", "float32"):
            raise ConfigError(f"save_dtype must be float16, bfloat16 or float32, got {self.save_dtype!r}")
        if self.method not in ("full", "lora"):
            raise ConfigError(f"method must be 'full' or 'lora' (how the arms are trained), got {self.method!r}")
        if self.max_epochs < 1 or self.lr <= 0 or self.stop_loss <= 0 or self.ft_patience < 1:
            raise ConfigError("need max_epochs >= 1, lr > 0, stop_loss > 0 and ft_patience >= 1")
        return self


_RUN_COLS = ["arm", "seed", "steps", "epochs", "final_train_loss", "converged", "seconds", "source", "heldout_loss"]
_GEO_COLS = ["arm", "seed", "layer", "site", "pr_a", "pr_b", "delta_pr", "cos", "l2"]
_W_COLS = ["arm", "seed", "group", "delta_fro", "base_fro", "rel"]


@dataclass
class HyperfitControlsResult(Result):
    """runs: one row per (arm, seed): steps, epochs, final_train_loss, converged (stop rule met; for finetune: early
    stopping fired), seconds, source, plus the fine-tuning run's stop_step / best_step / val losses.
    geometry: per (arm, seed, site, layer) the `compute_layer_geometry` row against the base.
    weights: per (arm, seed, group) ‖ΔW‖_F (delta_fro), the base's norm and their ratio; group "total" included.
    summary: Student-t intervals across seeds, one row per (arm, quantity, site, layer|group): mean, lo, hi, n.
    histories: per (arm, seed, epoch) the training loss (epoch mean) and, for the fine-tuning run, the held-out
    loss that early stopping watched (epoch 0 = before training)."""

    config: ControlsConfig
    runs: Any  # pandas.DataFrame
    geometry: Any
    weights: Any
    summary: Any
    histories: Any = None
    base: str = ""

    def __post_init__(self):
        for name, cols in (("runs", _RUN_COLS), ("geometry", _GEO_COLS), ("weights", _W_COLS)):
            missing = [c for c in cols if c not in getattr(self, name).columns]
            if missing:
                raise ShapeError(f"HyperfitControlsResult.{name} lacks columns {missing}")

    def to_frame(self):
        return self.summary.copy()

    def delta_dim(self, arm: str, site: str = "resid_post", layer: int | None = None) -> dict:
        """The interval row of ΔDim for one arm at one site / layer (default: the last layer)."""
        s = self.summary[(self.summary["quantity"] == "delta_pr") & (self.summary["arm"] == arm)
                         & (self.summary["site"] == site)]
        if s.empty:
            raise ConfigError(f"no ΔDim rows for arm {arm!r} at site {site!r}; arms: {sorted(set(self.runs['arm']))}")
        row = s[s["layer"] == (s["layer"].max() if layer is None else layer)]
        return row.iloc[0].to_dict()


def summarize_controls(geometry, weights, runs=None):
    """Student-t intervals across seeds: ΔDim (and the target PR) per arm × site × layer, ‖ΔW‖_F per arm × group,
    the fine-tuning stop points and, per arm × layer, ΔDim per unit of total ‖ΔW‖_F."""
    import pandas as pd

    rows = []
    for (arm, site, layer), g in geometry.groupby(["arm", "site", "layer"], sort=False):
        for q in ("delta_pr", "delta_pr_std", "pr_b", "cos", "l2"):
            if q not in g.columns:  # delta_pr_std: geometry measured before issue 46
                continue
            rows.append({"arm": arm, "quantity": q, "site": site, "layer": int(layer), "group": "",
                         **intervals(g[q].to_numpy())})
        tot = weights[(weights["group"] == "total")].set_index(["arm", "seed"])["delta_fro"]
        # an early-stopped fine-tune that kept its step-0 weights has ΔW = 0: no ratio there, not a warning
        per = [r.delta_pr / tot.loc[(arm, r.seed)] if tot.loc[(arm, r.seed)] > 0 else float("nan")
               for r in g.itertuples()]
        rows.append({"arm": arm, "quantity": "delta_pr_per_dW", "site": site, "layer": int(layer), "group": "",
                     **intervals(per)})
    for (arm, group), g in weights.groupby(["arm", "group"], sort=False):
        for q in ("delta_fro", "rel"):
            rows.append({"arm": arm, "quantity": q, "site": "", "layer": -1, "group": group,
                         **intervals(g[q].to_numpy())})
    if runs is not None:
        for arm, g in runs.groupby("arm", sort=False):
            for q in ("steps", "epochs", "final_train_loss", "heldout_loss", "stop_step", "best_step"):
                if q in g.columns and g[q].notna().any():
                    rows.append({"arm": arm, "quantity": q, "site": "", "layer": -1, "group": "",
                                 **intervals(g[q].astype(float).to_numpy())})
    return pd.DataFrame(rows)


def _rounded(hf, dtype: str):
    """The model's weights rounded to `dtype` (as a shipped descendant is stored), back in float32."""
    import torch

    if dtype == "float32":
        return hf.float().eval()
    return hf.to(getattr(torch, dtype)).float().eval()


def _measure(base, base_hf, hf, tok, texts, cfg: ControlsConfig, arm: str, seed: int, heldout) -> tuple:
    """(geometry rows, weight rows, held-out loss) of one trained HF model against the base."""
    from interplab.models.loading import load_model
    from interplab.train.hyperfit_controls import heldout_loss, weight_change

    hf = _rounded(hf, cfg.save_dtype)
    w = weight_change(base_hf, hf).assign(arm=arm, seed=seed)
    loss = heldout_loss(hf, heldout, tok.pad_token_id if tok.pad_token_id is not None else 0)
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        m = load_model(tmp, device=str(base.device))
        geo = compute_layer_geometry(base, m, texts, batch_size=cfg.geometry_batch, max_tokens=cfg.max_tokens)
    return geo.frame.assign(arm=arm, seed=seed), w, loss


def _history(arm, seed, rows) -> list[dict]:
    keep = ("epoch", "step", "train_loss", "val_loss")
    return [{"arm": arm, "seed": seed, **{k: h.get(k, float("nan")) for k in keep}} for h in rows]


def _hyperfit_row(arm, seed, res, source="trained") -> dict:
    return {"arm": arm, "seed": seed, "steps": res.steps, "epochs": res.epochs, "final_train_loss": res.final_loss,
            "converged": bool(res.converged), "seconds": res.seconds, "source": source,
            "trainable_params": res.trainable_params}


def hyperfit_controls(base, seqs: Sequence[Sequence[int]], heldout_seqs: Sequence[Sequence[int]],
                      texts: Sequence[str], cfg: ControlsConfig | None = None, *, reuse_hyperfit=None,
                      progress: Callable[[str], None] | None = None) -> HyperfitControlsResult:
    """Train every arm for every seed from `base` (a LabModel with a checkpoint path) on `seqs` (token-id windows),
    early-stop the fine-tuning arm on `heldout_seqs`, and measure ‖ΔW‖ and per-layer geometry on `texts`.
    reuse_hyperfit: an already hyperfitted LabModel (e.g. zoo:text-hyperfit, whose saved HyperfitResult gives its
    steps), or a list of them, used as the hyperfit arm's first seeds (in order) instead of retraining them."""
    import pandas as pd

    from interplab.models.loading import load_hf_model
    from interplab.train.hyperfit import RESULT_DIR, HyperfitResult, hyperfit
    from interplab.train.hyperfit_controls import FinetuneConfig, finetune_early_stopping, shuffle_within_windows

    from dataclasses import fields

    # a subclass (an experiment's config) is narrowed to ControlsConfig so the saved result loads by its type hint
    cfg = ControlsConfig(**{f.name: getattr(cfg, f.name) for f in fields(ControlsConfig)}) if cfg else ControlsConfig()
    cfg.validate()
    say = progress or (lambda msg: None)
    import torch

    base_hf = load_hf_model(Path(base.path), device="cpu", dtype=torch.float32)
    tok = base.tokenizer
    hf_kw = dict(lr=cfg.lr, stop_loss=cfg.stop_loss, batch_size=cfg.batch_size, seq_len=cfg.seq_len)
    arm_kw = dict(method="lora", lora_layers=cfg.arm_lora_layers) if cfg.method == "lora" else {}
    reused = [] if reuse_hyperfit is None else (list(reuse_hyperfit) if isinstance(reuse_hyperfit, (list, tuple))
                                                else [reuse_hyperfit])
    runs, geos, ws, hist = [], [], [], []

    def measure(hf, arm, seed):
        g, w, loss = _measure(base, base_hf, hf, tok, texts, cfg, arm, seed, heldout_seqs)
        geos.append(g)
        ws.append(w)
        runs[-1]["dW_total"] = float(w.loc[w["group"] == "total", "delta_fro"].iloc[0])
        runs[-1]["heldout_loss"] = loss

    for i, seed in enumerate(cfg.seeds):
        if i < len(reused):
            prev = HyperfitResult.load(Path(reused[i].path) / RESULT_DIR)
            runs.append(_hyperfit_row("hyperfit", seed, prev, source=str(reused[i].name)))
            hist += _history("hyperfit", seed, prev.history)
            hf_a = load_hf_model(Path(reused[i].path), device="cpu", dtype=torch.float32)
        else:
            say(f"hyperfit seed {seed}")
            res = hyperfit(base, seqs, max_epochs=cfg.max_epochs, seed=seed, **hf_kw, **arm_kw)
            runs.append(_hyperfit_row("hyperfit", seed, res))
            hist += _history("hyperfit", seed, res.history)
            hf_a = res.model
        steps = int(runs[-1]["steps"])
        measure(hf_a, "hyperfit", seed)
        say(f"finetune seed {seed} ({steps} steps)")
        ft = finetune_early_stopping(base, seqs, heldout_seqs, steps=steps, config=FinetuneConfig(
            lr=cfg.ft_lr, weight_decay=cfg.ft_weight_decay, warmup_frac=cfg.ft_warmup_frac,
            min_lr_ratio=cfg.ft_min_lr_ratio, batch_size=cfg.batch_size, seq_len=cfg.seq_len, seed=seed,
            patience=cfg.ft_patience, run_to_end=True,
            lora_layers=cfg.arm_lora_layers if cfg.method == "lora" else None))
        h = ft.to_frame()
        hist += _history("finetune", seed, h.to_dict("records"))
        spe = max(1, -(-len(seqs) // cfg.batch_size))
        common = {"seed": seed, "converged": ft.early_stopped, "seconds": ft.seconds, "source": "trained",
                  "stop_step": ft.stop_step, "best_step": ft.best_step, "initial_val_loss": ft.initial_val_loss,
                  "best_val_loss": ft.best_val_loss, "final_val_loss": float(h["val_loss"].iloc[-1]),
                  "trainable_params": ft.trainable_params}
        at_best = h[h["step"] == ft.best_step]["train_loss"]
        runs.append({**common, "arm": "finetune", "steps": ft.best_step, "epochs": ft.best_step / spe,
                     "final_train_loss": float(at_best.iloc[0]) if len(at_best) else float("nan")})
        measure(ft.model, "finetune", seed)
        runs.append({**common, "arm": "finetune-steps", "steps": ft.steps, "epochs": ft.steps / spe,
                     "final_train_loss": float(h["train_loss"].iloc[-1])})
        measure(ft.final_model, "finetune-steps", seed)
        say(f"shuffled seed {seed}")
        res = hyperfit(base, shuffle_within_windows(seqs, seed), seed=seed,
                       max_epochs=cfg.shuffled_max_epochs or cfg.max_epochs, **hf_kw, **arm_kw)
        runs.append(_hyperfit_row("shuffled", seed, res))
        hist += _history("shuffled", seed, res.history)
        measure(res.model, "shuffled", seed)
    for seed in cfg.lora_seeds:
        say(f"late-lora seed {seed}")
        res = hyperfit(base, seqs, method="lora", lora_layers=cfg.lora_layers, max_epochs=cfg.lora_max_epochs,
                       max_time_s=cfg.lora_budget_s, seed=seed, **{**hf_kw, "lr": cfg.lora_lr})
        runs.append(_hyperfit_row("late-lora", seed, res))
        hist += _history("late-lora", seed, res.history)
        measure(res.model, "late-lora", seed)
    run_df = pd.DataFrame(runs)
    geo_df = pd.concat(geos, ignore_index=True)
    w_df = pd.concat(ws, ignore_index=True)
    return HyperfitControlsResult(cfg, run_df, geo_df, w_df, summarize_controls(geo_df, w_df, run_df),
                                  histories=pd.DataFrame(hist), base=str(getattr(base, "name", "")))
