"""Late-Stage LoRA k sweep (spec methods/hyperfit_geometry.md §2.6): LoRA on the last k blocks (k = 1..L) and the
early-stage control (first k, k = 1..L-1), each trained on the hyperfitting data under a time / epoch budget, then
evaluated on held-out prompts (greedy TTR, rep-n) and teacher-forced agreement / entropy against the base."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from interplab.core.errors import ConfigError
from interplab.core.result import Result
from interplab.probes.hyperfit.repetition import GenerationMetricsConfig, generation_metrics, ttr
from interplab.probes.stats import bootstrap_ci
from interplab.probes.hyperfit.evaluation import teacher_forced_summary
from interplab.probes.hyperfit.inputs import context_prompts, generate_continuations

__all__ = ["KSweepConfig", "KSweepResult", "k_sweep"]


@dataclass
class KSweepConfig:
    """max_epochs / budget_s: per-placement training budget; lr, lora_r, lora_alpha: LoRA settings; n_prompts held-out
    prompts (`prompts_per_text` windows of `context_tokens` tokens per text) generate `new_tokens` greedy tokens;
    tf_texts: texts for the teacher-forced agreement / entropy; early: also train the first-k control.
    ks: the block counts to train (empty = every k = 1..L; on a 30-block model each placement costs minutes, so a
    real-model run names a few); the early-stage control uses the same ks below L. stop_loss: the hyperfitting stop
    rule (epoch-mean training loss); seed: adapter init and batch order; train_batch_size: windows per step."""

    max_epochs: int = 300
    budget_s: float = 120.0
    lr: float = 5e-3
    lora_r: int = 16
    lora_alpha: float = 32.0
    n_prompts: int = 100
    prompts_per_text: int = 1
    tf_texts: int = 32
    context_tokens: int = 32
    new_tokens: int = 96
    batch_size: int = 50
    early: bool = True
    ks: list[int] = field(default_factory=list)
    stop_loss: float = 0.05
    seed: int = 0
    train_batch_size: int = 8

    def validate(self, n_layers: int) -> "KSweepConfig":
        bad = [k for k in self.ks if not 1 <= int(k) <= n_layers]
        if bad or len(set(self.ks)) != len(self.ks):
            raise ConfigError(f"ks must be distinct block counts in 1..{n_layers} (the model's blocks), got "
                              f"{list(self.ks)}; leave it empty for every k")
        return self


@dataclass
class KSweepResult(Result):
    """frame: one row per placement (k, placement, layers, trainable_params, final_loss, converged, epochs, seconds,
    ttr, rep2, rep3, diversity, entropy, top1_agreement)."""

    config: KSweepConfig
    frame: object  # pandas.DataFrame

    def to_frame(self):
        return self.frame.copy()


def k_sweep(base, seqs: list[list[int]], texts: Sequence[str], cfg: KSweepConfig | None = None,
            progress=None) -> KSweepResult:
    """Train and evaluate every placement (late k = 1..L, then early k = 1..L-1) on the hyperfitting sequences."""
    import tempfile
    from dataclasses import fields

    import pandas as pd

    from interplab.models.loading import load_model
    from interplab.train.hyperfit import hyperfit

    cfg = KSweepConfig(**{f.name: getattr(cfg, f.name) for f in fields(KSweepConfig)}) if cfg else KSweepConfig()
    say = progress or (lambda msg: None)
    L = base.n_layers
    cfg.validate(L)
    ks = sorted(int(k) for k in cfg.ks) if cfg.ks else list(range(1, L + 1))
    prompts = context_prompts(base, texts, cfg.context_tokens, per_text=cfg.prompts_per_text)[:cfg.n_prompts]
    tf = list(texts[:cfg.tf_texts])
    plans = [("late", k) for k in ks] + ([("early", k) for k in ks if k < L] if cfg.early else [])
    rows = []
    for place, k in plans:
        say(f"LoRA {place} k={k}")
        spec = f"last:{k}" if place == "late" else f"first:{k}"
        res = hyperfit(base, seqs, method="lora", lora_layers=spec, lr=cfg.lr, max_epochs=cfg.max_epochs,
                       lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha, max_time_s=cfg.budget_s,
                       stop_loss=cfg.stop_loss, seed=cfg.seed, batch_size=cfg.train_batch_size)
        with tempfile.TemporaryDirectory() as tmp:
            res.model.save_pretrained(tmp)
            base.tokenizer.save_pretrained(tmp)
            m = load_model(tmp, device=str(base.device))
            g, t = generate_continuations(m, prompts, max_new_tokens=cfg.new_tokens, batch_size=cfg.batch_size)
            tfs = teacher_forced_summary(base, tf, target=m)
        met = generation_metrics(g, t)
        window = GenerationMetricsConfig().window  # the same TTR window generation_metrics used for "ttr"
        _, lo, hi = bootstrap_ci([ttr(s[:window], None) for s in g], B=2000, seed=cfg.seed)
        rows.append({"k": k, "placement": place, "layers": ",".join(map(str, res.lora_layers)),
                     "trainable_params": res.trainable_params, "final_loss": res.final_loss,
                     "converged": res.converged, "epochs": res.epochs, "seconds": res.seconds,
                     **{c: met[c] for c in ("ttr", "rep2", "rep3", "diversity")}, "ttr_lo": lo, "ttr_hi": hi,
                     **tfs})
    return KSweepResult(cfg, pd.DataFrame(rows))
