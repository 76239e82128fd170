"""Hyperfitting experiments (spec methods/hyperfit_geometry.md §5.3): the paper's diversity table with the
entropy-matched temperature control and the static-injection alpha sweep, per-layer geometry, rank reordering, and the
Late-Stage LoRA k sweep.

    interplab run hyperfit-eval --set n_prompts=200
    interplab run hyperfit-geometry
    interplab run hyperfit-ranks
    interplab run hyperfit-ksweep --set budget_s=90

The building blocks (`evaluate_settings`, `geometry_report`, `k_sweep`) take loaded models and texts, so scripts can
run them on any checkpoints.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from interplab.core.errors import ConfigError, DataError, InputError
from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure

__all__ = [
    "HyperfitEvalConfig", "HyperfitEvalResult", "evaluate_settings", "heldout_texts", "base_ranks_of",
    "teacher_forced_summary", "GeometryConfig", "geometry_report", "RanksConfig", "KSweepConfig", "k_sweep",
    "TrainHyperfitConfig",
]

METRIC_COLUMNS = ("ttr", "rep2", "rep3", "rep4", "diversity", "distinct2", "distinct3", "self_bleu4", "loop_rate",
                  "word_ttr", "word_rep2", "word_rep3")


def _split(s: str) -> list[str]:
    return [p.strip() for p in str(s).split(",") if p.strip()]


def heldout_texts(n: int | None = None, sources: Sequence[str] = ("pydoc",), heldout_frac: float = 0.1,
                  corpus_seed: int = 0) -> list[str]:
    """Held-out paragraphs of the offline corpus (the split no zoo text organism trained on)."""
    from interplab.data.corpus import load_corpus

    held = load_corpus(tuple(sources), heldout_frac, corpus_seed).heldout
    return held if n is None else held[:n]


def _load(name: str, device: str):
    import interplab

    return interplab.load_model(name, device=device)


# ----------------------------------------------------------------------------------------------------------------
# building blocks
# ----------------------------------------------------------------------------------------------------------------
def base_ranks_of(base, prompts: list[list[int]], gens: list[list[int]], batch_size: int = 32,
                  exclude_eos: bool = True) -> np.ndarray:
    """Base-model rank of every generated token given the same prefix: [n_prompts, n_new] (teacher-forced). With
    `exclude_eos` the EOS logit is removed first, matching generations whose length was pinned by suppressing EOS."""
    from interplab.probes.hyperfit import token_ranks

    out = []
    for i in range(0, len(prompts), batch_size):
        P = [len(p) for p in prompts[i:i + batch_size]]
        G = [len(g) for g in gens[i:i + batch_size]]
        if len(set(P)) != 1 or len(set(G)) != 1:
            raise InputError("base_ranks_of needs equal prompt lengths and equal generation lengths per batch")
        p, g = P[0], G[0]
        seqs = [a + b for a, b in zip(prompts[i:i + batch_size], gens[i:i + batch_size])]
        with torch.no_grad():
            z = base.run(seqs).logits[:, p - 1:p - 1 + g].float()
        if exclude_eos and getattr(base, "eos_token_id", None) is not None:
            z[..., base.eos_token_id] = float("-inf")
        out.append(token_ranks(z, torch.tensor([s[p:] for s in seqs], device=z.device)).cpu())
    return torch.cat(out).numpy()


def teacher_forced_summary(base, texts, *, transform=None, target=None, batch_size: int = 16,
                           max_tokens: int | None = None) -> dict[str, float]:
    """Mean entropy and top-1 agreement with the base over teacher-forced positions of `texts`, for the base's
    logits passed through `transform(z)` (e.g. z / T, z + alpha * delta) or for a `target` model."""
    from interplab.probes.hyperfit import _tf_batches, entropy

    h, agree, n = 0.0, 0.0, 0
    for zb, zt, _ in _tf_batches(base, target, texts, batch_size, max_tokens):
        z = zt if target is not None else (transform(zb) if transform is not None else zb)
        h += float(entropy(z).sum())
        agree += float((z.argmax(-1) == zb.argmax(-1)).sum())
        n += zb.shape[0]
    if n == 0:
        raise InputError("no teacher-forced positions")
    return {"entropy": h / n, "top1_agreement": agree / n}


@dataclass
class HyperfitSetup:
    """Settings every base-vs-targets experiment shares.

    base: the base model. targets: comma-separated hyperfitted / LoRA models (the first is the one T* and the static
    delta are computed from). n_prompts: held-out prompts (each contributes its first `context_tokens` tokens).
    new_tokens: generated tokens per prompt (exactly; EOS suppressed). batch_size: generation batch.
    device: "cpu" or "cuda". threads: torch CPU threads."""

    base: str = "zoo:text-base"
    targets: str = "zoo:text-hyperfit,zoo:text-late-lora,zoo:text-full-lora"
    n_prompts: int = 200
    context_tokens: int = 32
    new_tokens: int = 96
    batch_size: int = 50
    device: str = "cpu"
    threads: int = 1


@dataclass
class TeacherForcedSetup(HyperfitSetup):
    """tf_texts: held-out texts for teacher-forced statistics (entropy, agreement, T*, static delta). static_k: K of
    the static delta."""

    tf_texts: int = 64
    static_k: int = 500


@dataclass
class HyperfitEvalConfig(TeacherForcedSetup):
    """The paper's table on held-out prompts (shared fields: `HyperfitSetup`, `TeacherForcedSetup`).

    seeds: sampling seeds for the T* (and T=1) rows. alphas: static-injection strengths (comma-separated; the paper's
    0.01-0.5 plus 1 and 2). sample_t1: also sample the base at T = 1.
    prompts_per_text: non-overlapping context windows taken per held-out text (the offline corpus has ~100 held-out
    paragraphs long enough for one 32-token window; 200 prompts need a second window from some of them).
    """

    prompts_per_text: int = 3
    seeds: int = 5
    alphas: str = "0.01,0.02,0.05,0.1,0.2,0.5,1,2"
    sample_t1: bool = True


@dataclass
class HyperfitEvalResult:
    """table: one row per setting (metrics of the generations, teacher-forced entropy and top-1 agreement with the
    base, gen_top1 = fraction of generated tokens that are the base's greedy choice given the same prefix; sampled
    settings carry mean and `<metric>_sd` over seeds). sweep: the static-injection rows with alpha.
    spearman: {"ttr": rho, "diversity": rho} of alpha vs metric. match: the TemperatureMatch.
    examples: {setting: [first generations as text]}. ranks: {setting: base ranks [n_prompts, n_new]}."""

    config: Any
    table: Any
    sweep: Any
    spearman: dict
    match: Any
    examples: dict = field(default_factory=dict)
    ranks: dict = field(default_factory=dict)

    def to_frame(self):
        return self.table.copy()

    def save(self, path) -> Path:
        from interplab.core.io import write_arrays, write_json, write_table

        path = Path(path)
        write_table(path / "table.csv", self.table)
        write_table(path / "sweep.csv", self.sweep)
        write_json(path / "eval.json", {"config": asdict(self.config) if hasattr(self.config, "__dataclass_fields__")
                                        else self.config, "spearman": self.spearman, "match": asdict(self.match),
                                        "examples": self.examples})
        if self.ranks:
            write_arrays(path / "ranks.safetensors", {k: np.asarray(v) for k, v in self.ranks.items()})
        return path

    @classmethod
    def load(cls, path) -> "HyperfitEvalResult":
        from interplab.probes.hyperfit import TemperatureMatch
        from interplab.core.io import read_arrays, read_json, read_table

        path = Path(path)
        if not (path / "eval.json").exists():
            raise DataError(f"{path} has no eval.json")
        meta = read_json(path / "eval.json")
        ranks = read_arrays(path / "ranks.safetensors") if (path / "ranks.safetensors").exists() else {}
        return cls(meta["config"], read_table(path / "table.csv"), read_table(path / "sweep.csv"), meta["spearman"],
                   TemperatureMatch(**meta["match"]), meta.get("examples", {}), ranks)


def _metrics(gens, texts) -> dict:
    from interplab.probes.genmetrics import generation_metrics

    return generation_metrics(gens, texts)


def _mean_sd(rows: list[dict]) -> dict:
    out = {}
    for k in rows[0]:
        vals = [r[k] for r in rows]
        if all(isinstance(v, (int, float, np.floating)) for v in vals):
            out[k] = float(np.mean(vals))
            out[f"{k}_sd"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
        else:
            out[k] = vals[0]
    return out


def evaluate_settings(base, targets: dict, texts: Sequence[str], cfg: HyperfitEvalConfig | None = None,
                      progress=None) -> HyperfitEvalResult:
    """Generate from every setting on the same held-out prompts and measure the table (see HyperfitEvalResult)."""
    import pandas as pd

    from interplab.interventions.logit_bias import LogitTemperature, StaticLogitBias
    from interplab.probes.hyperfit import (compare_teacher_forced, context_prompts, generate_continuations,
                                           match_temperature, per_position_matched_temperature, static_delta)

    cfg = cfg or HyperfitEvalConfig()
    if not targets:
        raise ConfigError("evaluate_settings needs at least one target model")
    say = progress or (lambda msg: None)
    prompts = context_prompts(base, texts, cfg.context_tokens, per_text=cfg.prompts_per_text)[:cfg.n_prompts]
    tf = list(texts[:cfg.tf_texts])
    primary_name, primary = next(iter(targets.items()))
    rows, examples, ranks = [], {}, {}

    def add(name, kind, gens, gtexts, tfs, extra=None):
        r = base_ranks_of(base, prompts, gens, cfg.batch_size)
        ranks[name] = r
        row = {"setting": name, "kind": kind, **_metrics(gens, gtexts), **tfs,
               "gen_top1": float((r == 1).mean()), **(extra or {})}
        examples[name] = gtexts[:5]
        return row

    say("base greedy")
    g, t = generate_continuations(base, prompts, max_new_tokens=cfg.new_tokens, batch_size=cfg.batch_size)
    tf_base = teacher_forced_summary(base, tf)
    rows.append(add("base greedy", "base", g, t, tf_base, {"temperature": 1.0}))

    say("entropy-matched temperature")
    match = match_temperature(base, primary, tf)
    per_pos = per_position_matched_temperature(base, primary, tf).summary()
    temps = [("T*", match.T)] + ([("T=1", 1.0)] if cfg.sample_t1 else [])
    for label, T in temps:
        per_seed = []
        tf_T = teacher_forced_summary(base, tf, transform=lambda z, T=T: z / T)
        for s in range(cfg.seeds):
            say(f"base sampled at {label} seed {s}")
            g, t = generate_continuations(base, prompts, max_new_tokens=cfg.new_tokens, greedy=False, temperature=T,
                                          seed=1000 * s, batch_size=cfg.batch_size)
            per_seed.append(add(f"base sampled {label}", "temperature", g, t, tf_T, {"temperature": T}))
        row = _mean_sd(per_seed)
        row["setting"] = f"base sampled {label}={T:.3f}" if label == "T*" else "base sampled T=1"
        row["n_seeds"] = cfg.seeds
        ranks[row["setting"]] = ranks.pop(f"base sampled {label}")
        examples[row["setting"]] = examples.pop(f"base sampled {label}")
        rows.append(row)
    say("greedy at T* (identical to base greedy by construction)")
    g_t, _ = generate_continuations(base, prompts[:min(8, len(prompts))], max_new_tokens=cfg.new_tokens,
                                    edits=[LogitTemperature(match.T)], batch_size=cfg.batch_size)
    g_0, _ = generate_continuations(base, prompts[:min(8, len(prompts))], max_new_tokens=cfg.new_tokens,
                                    batch_size=cfg.batch_size)
    greedy_identical = g_t == g_0

    say("static injection")
    comp = compare_teacher_forced(base, primary, tf)
    delta = static_delta(comp, cfg.static_k)
    sweep_rows = []
    for a in [float(x) for x in _split(cfg.alphas)]:
        say(f"static injection alpha={a}")
        g, t = generate_continuations(base, prompts, max_new_tokens=cfg.new_tokens, edits=[StaticLogitBias(delta, a)],
                                      batch_size=cfg.batch_size)
        d = delta.to(base.device)
        row = add(f"static α={a:g}", "static", g, t,
                  teacher_forced_summary(base, tf, transform=lambda z, a=a, d=d: z + a * d), {"alpha": a})
        rows.append(row)
        sweep_rows.append(row)
    for name, m in targets.items():
        say(f"target {name}")
        g, t = generate_continuations(m, prompts, max_new_tokens=cfg.new_tokens, batch_size=cfg.batch_size)
        rows.append(add(name, "target", g, t, teacher_forced_summary(base, tf, target=m)))
    table = pd.DataFrame(rows)
    sweep = pd.DataFrame(sweep_rows)
    spear = {}
    for suffix, part in (("", sweep), ("_le0.5", sweep[sweep["alpha"] <= 0.5] if len(sweep) else sweep)):
        if len(part) >= 3:
            for metric in ("ttr", "diversity", "rep2"):
                rho = part["alpha"].corr(part[metric], method="spearman")  # pandas' own (no scipy needed)
                spear[metric + suffix] = float(rho) if rho == rho else float("nan")
    spear["greedy_at_T*_identical_to_base"] = bool(greedy_identical)
    spear["T*"] = match.T
    spear.update({f"per_position_{k}": v for k, v in per_pos.items()})
    return HyperfitEvalResult(cfg, table, sweep, spear, match, examples, ranks)


# ----------------------------------------------------------------------------------------------------------------
# registered experiments
# ----------------------------------------------------------------------------------------------------------------
def _models(cfg) -> tuple[Any, dict]:
    torch.set_num_threads(max(1, int(cfg.threads)))
    base = _load(cfg.base, cfg.device)
    targets = {name.split(":")[-1]: _load(name, cfg.device) for name in _split(cfg.targets)}
    return base, targets


@register_experiment("hyperfit-eval", config=HyperfitEvalConfig,
                     help="Hyperfitting table: base greedy, base sampled at the entropy-matched T* (5 seeds), static "
                          "vocabulary injection alpha sweep, hyperfitted and LoRA models (TTR, rep-n, agreement, "
                          "entropy)")
def run_hyperfit_eval(cfg: HyperfitEvalConfig, run) -> None:
    from interplab.figures.geometry import (diversity_bars_figure, entropy_temperature_figure,
                                            static_injection_figure)

    base, targets = _models(cfg)
    texts = heldout_texts()
    res = evaluate_settings(base, targets, texts, cfg, progress=print)
    run.save_table("table", res.table)
    run.save_table("sweep", res.sweep)
    run.save_json("summary", {"spearman": res.spearman, "match": asdict(res.match), "examples": res.examples})
    run.save_arrays("ranks", {k.replace(" ", "_"): np.asarray(v) for k, v in res.ranks.items()})
    save_figure(run, "diversity", diversity_bars_figure(res.table))
    save_figure(run, "entropy_temperature", entropy_temperature_figure(res.match))
    refs = {r["setting"]: r["ttr"] for _, r in res.table.iterrows() if r["kind"] in ("base", "target")}
    save_figure(run, "static_injection", static_injection_figure(res.sweep, "ttr", references=refs,
                                                                spearman=res.spearman.get("ttr")))


@dataclass
class GeometryConfig(HyperfitSetup):
    """Per-layer geometry of base vs each target: teacher-forced on held-out texts with and without BOS, and on the
    target's own greedy generations (prompt + generated tokens). n_texts: held-out texts; n_prompts / new_tokens:
    generations for the generated-token geometry (0 = skip); max_tokens: truncate texts (None = context)."""

    n_prompts: int = 100
    batch_size: int = 16
    n_texts: int = 200
    max_tokens: int | None = 128


def geometry_report(base, targets: dict, texts: Sequence[str], cfg: GeometryConfig | None = None):
    """DataFrame of layer_geometry rows for every target x {teacher-forced no BOS, with BOS, generated tokens}, and
    {target: LayerGeometryResult} of the main (no-BOS teacher-forced) setting."""
    import pandas as pd

    from interplab.probes.geometry import compute_layer_geometry
    from interplab.probes.hyperfit import context_prompts, generate_continuations

    cfg = cfg or GeometryConfig()
    frames, main = [], {}
    for name, m in targets.items():
        for tokens, bos in (("teacher_forced", False), ("teacher_forced", True)):
            res = compute_layer_geometry(base, m, texts, exclude_bos=not bos, batch_size=cfg.batch_size,
                                         max_tokens=cfg.max_tokens)
            if not bos:
                main[name] = res
            frames.append(res.frame.assign(target=name, tokens=tokens, bos=bos))
        if cfg.n_prompts:
            prompts = context_prompts(m, texts, cfg.context_tokens, per_text=3)[:cfg.n_prompts]
            gens, _ = generate_continuations(m, prompts, max_new_tokens=cfg.new_tokens, batch_size=cfg.batch_size)
            seqs = [p + g for p, g in zip(prompts, gens)]
            res = compute_layer_geometry(base, m, seqs, exclude_bos=True, batch_size=cfg.batch_size)
            frames.append(res.frame.assign(target=name, tokens="generated", bos=False))
    return pd.concat(frames, ignore_index=True), main


@register_experiment("hyperfit-geometry", config=GeometryConfig,
                     help="Per-layer participation ratio (DeltaDim), effective rank, cos and L2 of base vs hyperfitted "
                          "models, pre- and post-final-norm, with/without BOS, teacher-forced and on generated tokens")
def run_hyperfit_geometry(cfg: GeometryConfig, run) -> None:
    from interplab.figures.geometry import cos_l2_figure, eigen_spectrum_figure, pr_by_layer_figure

    base, targets = _models(cfg)
    texts = heldout_texts(cfg.n_texts)
    df, main = geometry_report(base, targets, texts, cfg)
    run.save_table("geometry", df)
    last = df[(df["layer"] == base.n_layers - 1)][["target", "site", "tokens", "bos", "pr_a", "pr_b", "delta_pr",
                                                    "cos", "l2"]]
    run.save_table("delta_dim_last_block", last)
    for name, res in main.items():
        res.save(Path(run.path) / "geometry" / name)
        save_figure(run, f"pr_by_layer_{name}", pr_by_layer_figure(res, name_a="base", name_b=name))
        save_figure(run, f"cos_l2_{name}", cos_l2_figure(res))
        save_figure(run, f"spectrum_{name}", eigen_spectrum_figure(res, name_a="base", name_b=name))


@dataclass
class RanksConfig(TeacherForcedSetup):
    """Rank reordering of each target vs the base (teacher-forced on held-out texts; along the target's greedy
    generations from `n_prompts` held-out prompts). Fields: `HyperfitSetup`, `TeacherForcedSetup`."""


@register_experiment("hyperfit-ranks", config=RanksConfig,
                     help="Rank reordering: override rate, base-rank histogram {1, 2-10, 11-200, >200}, top-1 "
                          "agreement, Kendall tau on top-50, context dependence, logit-lens entry layer")
def run_hyperfit_ranks(cfg: RanksConfig, run) -> None:
    import pandas as pd

    from interplab.figures.geometry import context_dependence_figure, lens_entry_figure, rank_histogram_figure
    from interplab.probes.hyperfit import rank_reordering

    base, targets = _models(cfg)
    texts = heldout_texts()
    rows, hists = [], []
    for name, m in targets.items():
        r = rank_reordering(base, m, texts, texts=texts[:cfg.tf_texts], context_tokens=cfg.context_tokens,
                            max_new_tokens=cfg.new_tokens, static_k=cfg.static_k, batch_size=cfg.batch_size,
                            prompts_per_text=3, max_prompts=cfg.n_prompts)
        r.save(Path(run.path) / "ranks" / name)
        rows.append({"target": name, **r.summary})
        hists.append(r.histogram_frame().assign(target=name))
        save_figure(run, f"rank_histogram_{name}", rank_histogram_figure(r, title=f"{name}: base rank of chosen tokens"))
        save_figure(run, f"context_dependence_{name}", context_dependence_figure(r.token_frame(base.tokenizer)))
        save_figure(run, f"lens_entry_{name}", lens_entry_figure(r))
    run.save_table("summary", pd.DataFrame(rows))
    run.save_table("histograms", pd.concat(hists, ignore_index=True))


@dataclass
class KSweepConfig:
    """Late-Stage LoRA k sweep: LoRA on the last k blocks (k = 1..L) and the early-stage control (first k, k = 1..L-1),
    each trained on the hyperfitting data for at most `budget_s` seconds / `max_epochs` epochs, then evaluated on
    `n_prompts` held-out prompts (greedy TTR, rep-n) and teacher-forced agreement/entropy. n_sequences: hyperfitting
    windows (from the text-hyperfit recipe's data). lr, lora_r, lora_alpha: LoRA settings."""

    base: str = "zoo:text-base"
    n_sequences: int = 32
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
    device: str = "cpu"
    threads: int = 1


def k_sweep(base, seqs: list[list[int]], texts: Sequence[str], cfg: KSweepConfig, progress=None):
    """Train and evaluate every placement; returns a DataFrame (k, placement, layers, trainable_params, final_loss,
    converged, epochs, ttr, rep2, rep3, diversity, top1_agreement, entropy)."""
    import tempfile

    import pandas as pd

    import interplab
    from interplab.probes.hyperfit import context_prompts, generate_continuations
    from interplab.train.hyperfit import hyperfit

    say = progress or (lambda msg: None)
    L = base.n_layers
    prompts = context_prompts(base, texts, cfg.context_tokens, per_text=cfg.prompts_per_text)[:cfg.n_prompts]
    tf = list(texts[:cfg.tf_texts])
    plans = [("late", k) for k in range(1, L + 1)] + ([("early", k) for k in range(1, L)] if cfg.early else [])
    rows = []
    for place, k in plans:
        say(f"LoRA {place} k={k}")
        spec = f"last:{k}" if place == "late" else f"first:{k}"
        res = hyperfit(base, seqs, method="lora", lora_layers=spec, lr=cfg.lr, max_epochs=cfg.max_epochs,
                       lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha, max_time_s=cfg.budget_s)
        with tempfile.TemporaryDirectory() as tmp:
            res.model.save_pretrained(tmp)
            base.tokenizer.save_pretrained(tmp)
            m = interplab.load_model(tmp, device=str(base.device))
            g, t = generate_continuations(m, prompts, max_new_tokens=cfg.new_tokens, batch_size=cfg.batch_size)
            tfs = teacher_forced_summary(base, tf, target=m)
        met = _metrics(g, t)
        rows.append({"k": k, "placement": place, "layers": ",".join(map(str, res.lora_layers)),
                     "trainable_params": res.trainable_params, "final_loss": res.final_loss,
                     "converged": res.converged, "epochs": res.epochs, "seconds": res.seconds,
                     **{c: met[c] for c in ("ttr", "rep2", "rep3", "diversity")}, **tfs})
    return pd.DataFrame(rows)


@register_experiment("hyperfit-ksweep", config=KSweepConfig,
                     help="Late-Stage LoRA sweep over k (last k blocks) with the early-stage control (first k): TTR, "
                          "repetition, agreement and trainable parameters")
def run_hyperfit_ksweep(cfg: KSweepConfig, run) -> None:
    from interplab.figures.geometry import k_sweep_figure
    from interplab.zoo.recipes.hyperfit import HYPERFIT_DATA, hyperfit_sequences

    torch.set_num_threads(max(1, int(cfg.threads)))
    base = _load(cfg.base, cfg.device)
    seqs = hyperfit_sequences(base.tokenizer, {**HYPERFIT_DATA, "n_sequences": cfg.n_sequences})
    df = k_sweep(base, seqs, heldout_texts(), cfg, progress=print)
    run.save_table("k_sweep", df)
    save_figure(run, "k_sweep_ttr", k_sweep_figure(df, "ttr"))


@dataclass
class TrainHyperfitConfig:
    """Hyperfit any checkpoint on the text-hyperfit recipe's data (or `n_sequences` of it) and save the merged
    checkpoint into the run directory (checkpoint/). method: full | lora; lora_layers: last:k | first:k | all."""

    base: str = "zoo:text-base"
    method: str = "full"
    lora_layers: str = "last:2"
    n_sequences: int = 32
    lr: float = 1e-3
    stop_loss: float = 0.05
    max_epochs: int = 300
    budget_s: float | None = None
    threads: int = 1


@register_experiment("hyperfit-train", config=TrainHyperfitConfig,
                     help="Hyperfit a checkpoint (full or LoRA) on held-in text windows; saves the merged checkpoint "
                          "and the loss history")
def run_hyperfit_train(cfg: TrainHyperfitConfig, run) -> None:
    from interplab.figures.geometry import training_dashboard_figure
    from interplab.train.hyperfit import hyperfit
    from interplab.zoo.recipes.hyperfit import HYPERFIT_DATA, hyperfit_sequences

    torch.set_num_threads(max(1, int(cfg.threads)))
    base = _load(cfg.base, "cpu")
    seqs = hyperfit_sequences(base.tokenizer, {**HYPERFIT_DATA, "n_sequences": cfg.n_sequences})
    res = hyperfit(base, seqs, method=cfg.method, lora_layers=cfg.lora_layers, lr=cfg.lr, stop_loss=cfg.stop_loss,
                   max_epochs=cfg.max_epochs, max_time_s=cfg.budget_s, out_dir=Path(run.path) / "checkpoint")
    run.save_table("history", res.to_frame())
    run.save_json("hyperfit", res.to_dict())
    save_figure(run, "training", training_dashboard_figure(res.to_frame(), stop_loss=cfg.stop_loss))
