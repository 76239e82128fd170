"""Ground truth for SAE training: interplab's trainer against SAELens's own `train_toy_sae` on synthetic activations
with known features (`sae_lens.synthetic`: FeatureDictionary, ActivationGenerator, eval_sae_on_synthetic_data).

Both arms get the same TrainingSAE (`build_training_sae`, same seed, so the same initial weights), the same data
stream (one ActivationGenerator/FeatureDictionary, re-seeded per arm), the same number of samples, batch size and
constant learning rate; both are saved as SAELens inference models and scored by `eval_sae_on_synthetic_data` on the
same held-out draw. The data stream has its own RNG and the mixing buffer passes batches through, so the two
arms see identical batches: any gap is the trainer's. interplab's arm runs through `train_sae(method="activations")` (its SAELens mixing buffer, its
trainer subclass); `mode="native"` so the SAE-level defaults equal SAELens's (zero b_dec, no decoder constraint).
Method spec: ../shared/methods/fast_sae.md (training, §6A); ground-truth metrics: SAELens synthetic evals (MCC =
Hungarian-matched |cos| of decoder rows vs true features; F1 of latents as feature detectors).
"""
from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd
import torch

from interplab.core.errors import ConfigError, ShapeError
from interplab.core.record import Record
from interplab.core.result import Result
from interplab.sae.training import ARCHITECTURES, SAETrainConfig, build_training_sae, train_sae

__all__ = ["SyntheticConfig", "SyntheticComparison", "synthetic_data", "synthetic_metrics",
           "SyntheticMetrics", "compare_with_saelens"]


@dataclass
class SyntheticConfig:
    """num_features true features in hidden_dim dimensions (orthogonalised unit vectors, SAELens default), each firing
    independently with probability firing_prob and magnitude mean_magnitude ± std_magnitude; the SAE has d_sae
    latents (default num_features). steps × batch samples at constant lr; eval_samples held-out samples; l1 / l0
    coefficients and k per architecture as in SAETrainConfig. interplab_buffer: give interplab's arm its default
mixing buffer (16 batches, half kept) instead of pass-through, so the arms see the same samples in a different
order and the comparison includes the buffer's effect (and seed noise)."""
    num_features: int = 32
    hidden_dim: int = 16
    firing_prob: float = 0.08
    mean_magnitude: float = 1.0
    std_magnitude: float = 0.2
    d_sae: int | None = None
    steps: int = 600
    batch: int = 256
    lr: float = 3e-3
    l1_coefficient: float = 1.0
    l0_coefficient: float = 1.0
    k: int = 3
    eval_samples: int = 20_000
    data_seed: int = 0
    interplab_buffer: bool = False

    def validate(self) -> None:
        if min(self.num_features, self.hidden_dim, self.steps, self.batch, self.eval_samples) <= 0:
            raise ConfigError("num_features, hidden_dim, steps, batch and eval_samples must be positive")
        if not 0 < self.firing_prob < 1:
            raise ConfigError(f"firing_prob must be in (0, 1), got {self.firing_prob}")


def synthetic_data(cfg: SyntheticConfig):
    """(FeatureDictionary, ActivationGenerator) for `cfg` (seeded by data_seed)."""
    from sae_lens.synthetic import ActivationGenerator, FeatureDictionary

    cfg.validate()
    fd = FeatureDictionary(cfg.num_features, cfg.hidden_dim, seed=cfg.data_seed)
    gen = ActivationGenerator(cfg.num_features, cfg.firing_prob, std_firing_magnitudes=cfg.std_magnitude,
                              mean_firing_magnitudes=cfg.mean_magnitude)
    return fd, gen


class _IsolatedGenerator:
    """An ActivationGenerator drawing from its own torch RNG state (seeded), so the data stream does not depend on
    what else consumes the global RNG (a mixing buffer's permutations, SAE init): both arms then see the same
    batches in the same order. Callable like the module (`train_toy_sae` calls it) and with `.sample`."""

    def __init__(self, gen, seed: int):
        self.gen = gen
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.state = torch.get_rng_state()

    def sample(self, n: int) -> torch.Tensor:
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self.state)
            out = self.gen.sample(n)
            self.state = torch.get_rng_state()
        return out

    __call__ = sample


def _stream(fd, gen: _IsolatedGenerator, batch: int):
    """Endless [batch, hidden_dim] activations from `gen` through the dictionary."""
    while True:
        with torch.no_grad():  # closed before the yield: a no_grad held across it would switch off the trainer's grad
            x = fd(gen.sample(batch)).detach()
        yield x


class SyntheticMetrics(Record):
    """`synthetic_metrics`: mcc, uniqueness, f1, precision, recall, sae_l0, true_l0, dead_latents, shrinkage,
    explained_variance."""

    KEYS = ("mcc", "uniqueness", "f1", "precision", "recall", "sae_l0", "true_l0", "dead_latents", "shrinkage",
            "explained_variance")


def synthetic_metrics(sae, fd, gen, n: int, seed: int) -> SyntheticMetrics:
    """`eval_sae_on_synthetic_data` on n fresh samples (seeded): mcc, uniqueness, f1, precision, recall, sae_l0,
    true_l0, dead_latents, shrinkage, explained_variance."""
    from sae_lens.synthetic import eval_sae_on_synthetic_data

    torch.manual_seed(seed)
    r = eval_sae_on_synthetic_data(sae, fd, gen, num_samples=n)
    c = r.classification
    return SyntheticMetrics(mcc=r.mcc, uniqueness=r.uniqueness, f1=float(c.f1_score), precision=float(c.precision),
                            recall=float(c.recall), sae_l0=r.sae_l0, true_l0=r.true_l0,
                            dead_latents=int(r.dead_latents), shrinkage=r.shrinkage,
                            explained_variance=r.explained_variance)


def _train_cfg(cfg: SyntheticConfig, architecture: str, seed: int) -> SAETrainConfig:
    # buffer = one batch and mix_fraction 0: the mixing buffer passes batches through unchanged (train_toy_sae has
    # none), so both arms train on identical batches
    buf = dict(buffer_tokens=None, mix_fraction=0.5) if cfg.interplab_buffer else dict(buffer_tokens=cfg.batch,
                                                                                        mix_fraction=0.0)
    return SAETrainConfig(method="activations", architecture=architecture, mode="native",
                          d_sae=cfg.d_sae or cfg.num_features, steps=cfg.steps, batch_tokens=cfg.batch, lr=cfg.lr,
                          **buf,
                          lr_end=cfg.lr, l1_coefficient=cfg.l1_coefficient, l0_coefficient=cfg.l0_coefficient,
                          k=cfg.k, seed=seed, log_every=max(1, cfg.steps)).resolved()


def _train_interplab(cfg: SyntheticConfig, fd, gen, architecture: str, seed: int, out: Path):
    from sae_lens import SAE

    tcfg = _train_cfg(cfg, architecture, seed)
    train_sae(None, _stream(fd, _IsolatedGenerator(gen, seed), cfg.batch), config=tcfg, out_dir=out, overwrite=True)
    return SAE.load_from_disk(str(out))


def _train_saelens(cfg: SyntheticConfig, fd, gen, architecture: str, seed: int, out: Path):
    from sae_lens import SAE
    from sae_lens.synthetic.training import train_toy_sae

    tcfg = _train_cfg(replace(cfg, interplab_buffer=False), architecture, seed)
    sae = build_training_sae(tcfg, cfg.hidden_dim)
    train_toy_sae(sae, fd, _IsolatedGenerator(gen, seed), training_samples=cfg.steps * cfg.batch, batch_size=cfg.batch, lr=cfg.lr)
    sae.save_inference_model(str(out))  # the same inference form interplab saves (BatchTopK -> JumpReLU etc.)
    return SAE.load_from_disk(str(out))


@dataclass
class SyntheticComparison(Result):
    """One row per (architecture, seed, trainer ∈ {interplab, saelens}) with the `synthetic_metrics` columns;
    ``config``: the SyntheticConfig as a dict."""
    table: pd.DataFrame
    config: dict

    def __post_init__(self):
        need = {"architecture", "seed", "trainer", "mcc", "f1"}
        if not need <= set(self.table.columns):
            raise ShapeError(f"synthetic comparison table needs columns {sorted(need)}")

    def to_frame(self) -> pd.DataFrame:
        return self.table

    def ratios(self) -> pd.DataFrame:
        """Per architecture: mean MCC and F1 of each trainer over seeds and the interplab / SAELens ratio."""
        g = self.table.groupby(["architecture", "trainer"])[["mcc", "f1", "sae_l0", "explained_variance"]].mean()
        w = g.unstack("trainer")
        out = pd.DataFrame({"mcc_interplab": w[("mcc", "interplab")], "mcc_saelens": w[("mcc", "saelens")],
                            "f1_interplab": w[("f1", "interplab")], "f1_saelens": w[("f1", "saelens")],
                            "l0_interplab": w[("sae_l0", "interplab")], "l0_saelens": w[("sae_l0", "saelens")]})
        out["mcc_ratio"] = out.mcc_interplab / out.mcc_saelens
        out["f1_ratio"] = out.f1_interplab / out.f1_saelens
        return out.reset_index()


def compare_with_saelens(cfg: SyntheticConfig | None = None, *, architectures=ARCHITECTURES, seeds=(0,),
                         workdir: str | Path | None = None) -> SyntheticComparison:
    """Train every architecture with interplab's `train_sae` and with SAELens's `train_toy_sae` on the same synthetic
    stream and budget, and score both against the true features (see the module docstring)."""
    cfg = cfg or SyntheticConfig()
    cfg.validate()
    bad = set(architectures) - set(ARCHITECTURES)
    if bad:
        raise ConfigError(f"unknown architectures {sorted(bad)}; use some of {ARCHITECTURES}")
    fd, gen = synthetic_data(cfg)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(workdir or tmp)
        for a in architectures:
            for s in seeds:
                for trainer, fn in (("interplab", _train_interplab), ("saelens", _train_saelens)):
                    sae = fn(cfg, fd, gen, a, int(s), root / f"{a}_{s}_{trainer}")
                    m = synthetic_metrics(sae, fd, gen, cfg.eval_samples, seed=10_000 + int(s))
                    rows.append({"architecture": a, "seed": int(s), "trainer": trainer, **m})
    return SyntheticComparison(table=pd.DataFrame(rows), config=asdict(replace(cfg)))
