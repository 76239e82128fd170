"""Re-evaluating saved SAEs and judging saved runs (issue 46).

* `sae-eval`: one saved SAE on the held-out dialogues under every position convention
  (`interplab.sae.conventions`: interplab's positions, SAELens's positions, all tokens), the
  assistant-answer positions, and SAELens's own `run_evals` on the same tokens as the reference for
  the SAELens convention; saves its verdicts.
* `sae-verdicts`: the verdicts of saved `sae-pareto` and `sae-steer-sweep` runs
  (`interplab.experiments. sae_verdicts`), recomputed from their committed tables: runs made before
  runs checked themselves get their validity report without being rerun."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from interplab.experiments.registry import register_experiment
from interplab.probes.validity import VALIDITY_RESULT, ValidityReport

__all__ = ["SAEEvalConfig", "SAEVerdictsConfig", "steer_selection"]


@dataclass
class SAEEvalConfig:
    """model: model to load; sae_dir: a saved SAELens directory (its site and massive-position
    factor come from its metadata); data: "" (toy dialogues), "offline-chat" or a chat file; n_eval:
    held-out dialogues (the first n of the data's held-out split); seed: data seed (the one the
    SAE's run used, so the dialogues are the same); micro_batch: dialogues per forward;
    saelens_reference: also run SAELens's `run_evals` on the same tokens; threads: torch threads."""

    model: str = "zoo:toy-chat"
    sae_dir: str = ""
    data: str = ""
    n_eval: int = 64
    seed: int = 0
    micro_batch: int = 8
    saelens_reference: bool = True
    threads: int = 1


@register_experiment(
    "sae-eval",
    config=SAEEvalConfig,
    help="evaluate a saved SAE under interplab's, SAELens's and all-token position conventions "
    "(and SAELens's own run_evals on the same tokens); Delta Loss verdict",
)
def sae_eval(cfg: SAEEvalConfig, run) -> None:
    import pandas as pd
    import torch

    from interplab.core.errors import ConfigError
    from interplab.experiments.sae_verdicts import eval_verdicts
    from interplab.models.loading import load_model
    from interplab.sae import evaluate_sae, load_sae
    from interplab.sae.conventions import evaluate_conventions, saelens_run_evals
    from interplab.sae.data import load_sae_data

    if not cfg.sae_dir:
        raise ConfigError(
            "set sae_dir to a saved SAELens directory (e.g. one written by sae-train or sae-pareto)"
        )
    torch.set_num_threads(cfg.threads)
    model = load_model(cfg.model)
    data = load_sae_data(model, cfg.data, 1, cfg.n_eval, 1, cfg.seed)
    sae = load_sae(cfg.sae_dir)
    metrics = evaluate_sae(model, sae, data.eval, positions="both", micro_batch=cfg.micro_batch)
    conv = evaluate_conventions(model, sae, data.eval, micro_batch=cfg.micro_batch)
    ref = saelens_run_evals(model, sae, data.eval) if cfg.saelens_reference else None
    run.save_table(
        "metrics", pd.DataFrame([{k: v for k, v in metrics.items() if k != "special_token_ids"}])
    )
    run.save_table("conventions", conv.table())
    run.save_json("conventions", dict(conv))
    if ref is not None:
        run.save_json("saelens_run_evals", dict(ref))
    run.save_result(VALIDITY_RESULT, ValidityReport.of(eval_verdicts(metrics, conv, ref)))


@dataclass
class SAEVerdictsConfig:
    """Saved runs to judge (paths of run folders; "" = skip): pareto_run (`sae-pareto`), steer_run
    (a `sae-steer-sweep` of the top <|im_start|> feature) and null_run (the same sweep with
    feature=-2, the random- feature null). n_null_features: random features behind the null (one per
    null run)."""

    pareto_run: str = ""
    steer_run: str = ""
    null_run: str = ""
    n_null_features: int = 1


def steer_selection(config: dict, summary: dict) -> tuple[list[str], list[str]]:
    """(dialogues the top feature was ranked on, prompts its replies are scored on) of a
    `sae-steer-sweep` run, as held-out dialogue ids. Runs record `ranked_on` / `prompts` in their
    summary; older runs ranked on every one of their n_eval held-out dialogues and steered the first
    n_prompts of them."""
    ranked = summary.get("ranked_on")
    prompts = summary.get("prompts")
    if ranked is None:
        ranked = list(range(int(config["n_eval"])))
    if prompts is None:
        prompts = list(range(int(config["n_prompts"])))
    return [f"eval dialogue {i}" for i in ranked], [f"eval dialogue {i}" for i in prompts]


@register_experiment(
    "sae-verdicts",
    config=SAEVerdictsConfig,
    help="verdicts (with validity checks) of saved sae-pareto and sae-steer-sweep runs, from their "
    "committed tables",
)
def sae_verdicts(cfg: SAEVerdictsConfig, run) -> None:
    from interplab.core.errors import ConfigError
    from interplab.experiments.sae_verdicts import pareto_verdicts, steering_verdicts
    from interplab.results.runs import load_run

    verdicts, sources = [], {}
    if cfg.pareto_run:
        pr = load_run(Path(cfg.pareto_run))
        verdicts += pareto_verdicts(pr.table("runs"))
        sources["pareto_run"] = cfg.pareto_run
    if bool(cfg.steer_run) != bool(cfg.null_run):
        raise ConfigError(
            "the steering verdicts need both steer_run (the top feature) and null_run (its null)"
        )
    if cfg.steer_run:
        top, null = load_run(Path(cfg.steer_run)), load_run(Path(cfg.null_run))
        summ, nsumm = top.json("summary"), null.json("summary")
        ranked, prompts = steer_selection(top.config, summ)
        verdicts += steering_verdicts(
            top.table("steering"),
            null.table("steering"),
            ranked_on=ranked,
            prompts=prompts,
            n_null_features=cfg.n_null_features,
            feature=int(summ["feature"]),
            null_feature=int(nsumm["feature"]),
        )
        sources.update(steer_run=cfg.steer_run, null_run=cfg.null_run)
    if not verdicts:
        raise ConfigError(
            "nothing to judge: set pareto_run and/or steer_run + null_run to saved run folders"
        )
    run.save_json("sources", json.loads(json.dumps(sources)))
    run.save_result(VALIDITY_RESULT, ValidityReport.of(verdicts))
