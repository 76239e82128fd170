"""Experiments `patching` and `logit-lens`: typed config -> the lens API (interplab.probes.lenses) -> run folder.

    interplab run patching --set model=zoo:toy-chat --set sites=resid_pre,attn_z
    interplab run logit-lens --set model=zoo:toy-chat
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from interplab.core.errors import ConfigError
from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure


def _check_common(cfg) -> None:
    if cfg.backend not in ("bridge", "nnsight"):
        raise ConfigError(f"backend must be 'bridge' or 'nnsight', got {cfg.backend!r}")


@dataclass
class PatchingExperimentConfig:
    """Config of `patching`.

    model: zoo name, local checkpoint or hub id. clean / corrupt: the prompt pair ("" = the model's default pair: on
    toy organisms a CtxMem recall prompt whose context value is swapped, on a real model "The capital of France /
    Italy is ..." with answers " Paris" / " Rome"). answer / wrong: metric tokens ("" = the default pair's answers,
    or for a given pair the clean and corrupt runs' top tokens). sites, positions, direction, batch_size: the grid
    (PatchingConfig). attribution: also run attribution patching ("gradient" and "ig") on the same grid and compare.
    """

    model: str = "zoo:toy-chat"
    clean: str = ""
    corrupt: str = ""
    answer: str = ""
    wrong: str = ""
    sites: list[str] = field(default_factory=lambda: ["resid_pre", "attn_z"])
    positions: str = "each"
    direction: str = "denoise"
    batch_size: int = 32
    attribution: bool = True
    ig_steps: int = 8
    backend: str = "bridge"
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self):
        _check_common(self)
        if bool(self.clean) != bool(self.corrupt):
            raise ConfigError("give both clean and corrupt prompts, or neither (the default pair)")


def _pair(cfg, model) -> tuple[str, str]:
    from interplab.probes.lenses import default_pair

    return (cfg.clean, cfg.corrupt) if cfg.clean else default_pair(model)


def patching_size(cfg: PatchingExperimentConfig, model):
    """The work of a `patching` run: one patched forward per cell (the metric unembeds only the last position),
    the two unpatched runs, and for attribution a forward + backward (about 3 forwards) per gradient pass and
    ig_steps of them for IG."""
    from interplab.core.progress import WorkSize
    from interplab.models.cost import forward_flops
    from interplab.probes.lenses import PatchingConfig
    from interplab.probes.lenses.common import prompt_ids
    from interplab.probes.lenses.patching import grid_size

    clean, corrupt = _pair(cfg, model)
    n = len(prompt_ids(model, corrupt if cfg.direction == "denoise" else clean))
    pc = PatchingConfig(sites=list(cfg.sites), positions=cfg.positions, direction=cfg.direction,
                        batch_size=cfg.batch_size).validate()
    cells = grid_size(model, n, pc)
    flops = forward_flops(model, n, rows=cells, unembedded=1) + forward_flops(model, n, rows=2)
    forwards = cells + 2
    if cfg.attribution:
        extra = 3 * (1 + cfg.ig_steps) + 4          # gradient + IG passes, and their unpatched runs
        flops += forward_flops(model, n, rows=extra)
        forwards += extra
    return WorkSize(cells, "cells", forwards=forwards, tokens=forwards * n, flops=flops,
                    detail=f"{n}-token prompts; {cells:,} patched forwards ({' + '.join(cfg.sites)}, positions="
                           f"{cfg.positions}, batches of {cfg.batch_size})")


@register_experiment("patching", config=PatchingExperimentConfig, size=patching_size,
                     help="Activation patching over sites x layers x positions (x heads), and attribution patching "
                          "(gradient, IG) on the same grid with their rank correlation to the exact values.")
def patching(cfg: PatchingExperimentConfig, run) -> None:
    import interplab
    from interplab.figures.lenses import attribution_scatter, patching_figure
    from interplab.probes.lenses import (FactPair, PatchingConfig, activation_patching, attribution_patching,
                                         compare_to_exact, default_fact_pair)

    model = interplab.load_model(cfg.model, backend=cfg.backend, device=cfg.device, dtype=cfg.dtype)
    # the default pair brings its answers (" Paris" / " Rome" on a real model); a given pair uses the given tokens
    pair = FactPair(cfg.clean, cfg.corrupt) if cfg.clean else default_fact_pair(model)
    clean, corrupt = pair.clean, pair.corrupt
    pc = PatchingConfig(sites=list(cfg.sites), positions=cfg.positions, direction=cfg.direction,
                        batch_size=cfg.batch_size)
    kw = dict(answer=cfg.answer or pair.answer or None, wrong=cfg.wrong or pair.wrong or None)
    exact = activation_patching(model, clean, corrupt, pc, **kw)
    run.save_result("exact", exact)
    for kind, r in exact.results.items():
        save_figure(run, f"patching_{kind}", patching_figure(r))
    summary = {"config": asdict(cfg), "clean": clean, "corrupt": corrupt, "answer": exact.answer,
               "wrong": exact.wrong, "clean_metric": next(iter(exact.results.values())).clean_metric,
               "corrupt_metric": next(iter(exact.results.values())).corrupt_metric}
    if cfg.attribution:
        tables = []
        for method in ("gradient", "ig"):
            approx = attribution_patching(model, clean, corrupt, sites=list(cfg.sites), positions=cfg.positions,
                                          direction=cfg.direction, method=method, ig_steps=cfg.ig_steps, **kw)
            run.save_result(f"attribution_{method}", approx)
            tables.append(compare_to_exact(approx, exact))
            for kind in cfg.sites:
                save_figure(run, f"{method}_vs_exact_{kind}", attribution_scatter(approx[kind], exact[kind]))
        import pandas as pd

        comparison = pd.concat(tables, ignore_index=True)
        run.save_table("attribution_vs_exact", comparison)
        summary["attribution_vs_exact"] = comparison.to_dict(orient="records")
    run.save_json("summary", summary)


@dataclass
class LogitLensExperimentConfig:
    """Config of `logit-lens`.

    model; prompt ("" = the clean prompt of the model's default pair); top_k; target ("" = none);
    tuned_steps: > 0 also trains a tuned lens for that many steps on `tuned_prompts` CtxMem / default prompts
    (n_tuned_prompts of them) and saves it next to the logit lens; dla: also save the direct logit attribution of
    the top token (minus `target` when given) at the last position."""

    model: str = "zoo:toy-chat"
    prompt: str = ""
    top_k: int = 5
    target: str = ""
    tuned_steps: int = 0
    n_tuned_prompts: int = 32
    dla: bool = True
    backend: str = "bridge"
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self):
        _check_common(self)
        if self.top_k < 1 or self.tuned_steps < 0 or self.n_tuned_prompts < 1:
            raise ConfigError("need top_k >= 1, tuned_steps >= 0 and n_tuned_prompts >= 1")


def _tuned_prompts(cfg, model) -> list[str]:
    from interplab.probes.lenses import default_pair

    return [default_pair(model, seed=s)[0] for s in range(cfg.n_tuned_prompts)]


def logit_lens_size(cfg: LogitLensExperimentConfig, model):
    """The work of a `logit-lens` run: with tuned_steps, the tuned lens's training steps (each: every layer's
    translated residuals through the unembedding, forward and backward, over every training token); else one
    forward (the lens and DLA)."""
    from interplab.core.progress import WorkSize
    from interplab.models.cost import forward_flops
    from interplab.probes.lenses.common import prompt_ids

    prompt = cfg.prompt or _pair(cfg, model)[0]
    n = len(prompt_ids(model, prompt))
    if not cfg.tuned_steps:
        return WorkSize(1, "forwards", forwards=2, tokens=2 * n, flops=forward_flops(model, n, rows=2),
                        detail=f"a {n}-token prompt: one forward for the lens, one for DLA")
    tokens = sum(len(prompt_ids(model, p)) for p in _tuned_prompts(cfg, model))
    per_step = 3 * 2.0 * (model.n_layers - 1) * tokens * model.d_model * (model.d_model + model.d_vocab)
    return WorkSize(cfg.tuned_steps, "steps", forwards=1 + cfg.n_tuned_prompts, tokens=tokens,
                    flops=per_step * cfg.tuned_steps + forward_flops(model, tokens),
                    detail=f"tuned lens: {cfg.tuned_steps} steps x {model.n_layers - 1} layers x {tokens} tokens "
                           f"x {model.d_vocab:,} vocabulary (streamed one layer at a time)")


@register_experiment("logit-lens", config=LogitLensExperimentConfig, size=logit_lens_size,
                     help="Logit lens (and optionally a tuned lens) per layer and position, plus direct logit "
                          "attribution per head and MLP.")
def logit_lens_experiment(cfg: LogitLensExperimentConfig, run) -> None:
    import interplab
    from interplab.figures.lenses import dla_figure, logit_lens_figure
    from interplab.probes.lenses import default_pair, direct_logit_attribution, logit_lens, train_tuned_lens

    model = interplab.load_model(cfg.model, backend=cfg.backend, device=cfg.device, dtype=cfg.dtype)
    prompt = cfg.prompt or default_pair(model)[0]
    target = cfg.target or None
    ll = logit_lens(model, prompt, top_k=cfg.top_k, target=target)
    run.save_result("logit_lens", ll)
    save_figure(run, "logit_lens_top1", logit_lens_figure(ll))
    save_figure(run, "logit_lens_kl", logit_lens_figure(ll, value="kl"))
    summary = {"config": asdict(cfg), "prompt": prompt, "final_top1": ll.top_tokens[-1][-1][0],
               "kl_last_position": dict(zip(map(int, ll.layers), map(float, ll.kl[:, -1])))}
    if cfg.tuned_steps:
        lens = train_tuned_lens(model, _tuned_prompts(cfg, model), steps=cfg.tuned_steps)
        run.save_result("tuned_lens", lens)
        tl = logit_lens(model, prompt, top_k=cfg.top_k, target=target, tuned=lens)
        run.save_result("tuned_logit_lens", tl)
        save_figure(run, "tuned_lens_kl", logit_lens_figure(tl, value="kl"))
        summary["tuned_kl_last_position"] = dict(zip(map(int, tl.layers), map(float, tl.kl[:, -1])))
    if cfg.dla:
        answer = int(ll.top_ids[-1, -1, 0])
        d = direct_logit_attribution(model, prompt, answer, target)
        run.save_result("dla", d)
        save_figure(run, "dla", dla_figure(d))
        summary.update(dla_total=float(d.total[0]), dla_component_sum=float(d.component_sum[0]))
    run.save_json("summary", summary)
