"""A method page's headline experiment on the sidebar's model (issue 48): the settings it runs with, its size before
launch, and the panel that launches it as a job or opens a saved run, labelled with the model that made it.

    picked = page_model("ds")
    study, run_model, run = loaded_model_job("decodeshare", "study", "ds_real", picked=picked,
                                             model=picked.load(stop=False),
                                             settings=model_settings("decodeshare", picked, data="real-tasks"),
                                             label="Run the DecodeShare study")

Settings (`model_settings`): the model, the sidebar's backend / device / dtype where the experiment takes them, and
the settings the method documents for a real model (`MethodSpec.model_defaults`; a model without an entry of its
own gets the documented real model's). Sizes (`SIZES`): counted from the experiment's own data and settings, for
the experiments that declare no size of their own; the estimate is the job panel's."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from interplab.app.jobs_view import job_panel
from interplab.core.errors import InputError

__all__ = ["MODEL_FIELDS", "is_organism", "run_model_name", "runs_of", "model_settings", "known_facts_setting",
           "loaded_model_job", "SIZES"]


MODEL_FIELDS = ("model", "target", "base")     # the config field naming the model a run computes on, by precedence


def is_organism(picked) -> bool:
    """Does the sidebar's model read the toy language (a zoo organism, or a checkpoint with its word-level
    vocabulary)? Then a page computes on the methods' toy data in place; any other model gets the real-model
    data and settings as a job. A model that does not load is not an organism (its page offers saved runs)."""
    if picked.name.startswith("zoo:"):
        return True
    model, _ = picked.try_load()
    return model is not None and len(model.tokenizer) <= 1000 and "sep" in model.tokenizer.get_vocab()


def run_model_name(config: dict) -> str | None:
    """The model a run computed on: its config's `model`, `target` (gating) or `base` (hyperfitting), or the one
    model of an atlas run (`models`)."""
    for f in MODEL_FIELDS:
        if config.get(f):
            return str(config[f])
    models = config.get("models")
    return str(models[0]) if isinstance(models, list) and len(models) == 1 else None


def runs_of(experiment: str, name: str) -> list[str]:
    """The user's finished runs of `experiment` made with model `name` (`run_model_name`), newest first."""
    from interplab.core.errors import InterplabError
    from interplab.results.runs import CONFIG_FILE, list_runs, read_json

    try:
        runs = list_runs(experiment)
    except (OSError, InterplabError):
        return []
    out = []
    for p in list(runs["path"])[::-1] if len(runs) else []:
        try:
            if run_model_name(read_json(Path(p) / CONFIG_FILE).get("config", {}) or {}) == name:
                out.append(str(p))
        except (OSError, ValueError, AttributeError):
            continue
    return out


def _documented(experiment: str, field: str, name: str) -> dict[str, str]:
    """The real-model settings the method documents for `experiment`, for any model that is not an organism and has
    no entry of its own (the runner applies an own entry itself): those of its documented real model."""
    from interplab.methods import method_of_experiment

    spec = method_of_experiment(experiment)
    conds = dict(spec.model_defaults.get(experiment, {})) if spec is not None else {}
    if name.startswith("zoo:") or f"{field}={name}" in conds:
        return {}
    for cond, extra in conds.items():
        k, _, v = cond.partition("=")
        if k == field and v.startswith("real:"):
            return {kv.partition("=")[0]: kv.partition("=")[2] for kv in extra}
    return {}


def model_settings(experiment: str, picked, field: str = "model", **extra) -> dict[str, str]:
    """`--set` settings of `experiment` on the sidebar's model (`PageModel`): the model in `field`, the sidebar's
    backend / device / dtype where the experiment takes them, the documented real-model settings (`_documented`),
    then `extra` (a page's own choices win)."""
    import dataclasses

    from interplab.experiments.registry import get_experiment

    fields = {f.name for f in dataclasses.fields(get_experiment(experiment).config)}
    out = {field: picked.name}
    out.update({k: str(getattr(picked, k)) for k in ("backend", "device", "dtype") if k in fields})
    out.update(_documented(experiment, field, picked.name))
    out.update({k: str(v) for k, v in extra.items() if v is not None})
    return out


def known_facts_setting(name: str) -> dict[str, str]:
    """World-facts runs (Truth Scores, gating) keep the facts the model knows closed-book: a model with neither a
    shipped filter nor a documented one (`known=...` in its Truth-Score model defaults, e.g. Gemma reads the facts
    SmolLM2 knows) answers them first (`known=compute`)."""
    from interplab.data.world_facts import shipped_known
    from interplab.experiments.registry import model_defaults

    documented = model_defaults("truth-scores", {"model": name}).get("known")
    if name.startswith("zoo:") or (name.removeprefix("real:") in shipped_known() and not documented):
        return {}
    return {"known": documented or "compute"}


def _rows_size(model, unit: str, units: int, *, prompt_tokens: float, forwards: int = 0, replies: int = 0,
               new_tokens: int = 0, extra_flops: float = 0.0, detail: str = ""):
    """A WorkSize from counts: `forwards` forwards of `prompt_tokens` tokens, `replies` greedy replies of
    `new_tokens` tokens (a prefill and one cached step per token)."""
    from interplab.core.progress import WorkSize
    from interplab.models.cost import forward_flops

    n = max(1, int(round(prompt_tokens)))
    rows = forwards + replies
    flops = forward_flops(model, n, rows=rows, unembedded=1) + forward_flops(model, 1, rows=replies * new_tokens)
    return WorkSize(int(units), unit, forwards=rows + replies * new_tokens,
                    tokens=int(rows * n + replies * new_tokens), flops=flops + extra_flops, detail=detail)


def _fact_rows(cfg, model) -> tuple[int, list]:
    """(facts, their probe rows) of a world-facts Truth-Score run: the facts `cfg.known` keeps (as the experiment
    filters them); `known=compute` sizes on every fact (which it keeps is known only after answering them)."""
    from interplab.data.world_facts import counterfactual_items, load_facts, load_known
    from interplab.probes.truth.facts_map import fact_probe_rows

    facts = load_facts()
    items = counterfactual_items(facts, seed=cfg.data_seed, distractor=getattr(cfg, "distractors", True))
    if cfg.known not in ("compute", "all"):
        source = run_model_name({f: getattr(cfg, f, None) for f in MODEL_FIELDS}) or ""
        keep = load_known(source if cfg.known == "shipped" else cfg.known, facts).to_numpy()
        items = [it for it, k in zip(items, keep) if k]
    items = items[:cfg.n_facts] if getattr(cfg, "n_facts", 0) else items
    return len(items), fact_probe_rows(model, items, seed=cfg.data_seed)


def _truth_scores_size(cfg, model):
    heads = model.n_layers * model.n_heads
    if cfg.data == "world-facts":
        n_facts, rows = _fact_rows(cfg, model)
        mean = sum(len(r["text"]) for r in rows) / max(1, len(rows))
        return _rows_size(model, "texts", len(rows), prompt_tokens=mean, forwards=len(rows),
                          detail=f"{n_facts} world facts → {len(rows)} verification texts (≈ {mean:.0f} tokens), "
                                 f"one capture forward each; then {cfg.folds}-fold probes on {heads} heads × "
                                 f"(1 + {cfg.n_null} label-permutation nulls), on the CPU")
    ablate = heads * cfg.n_samples if cfg.ablation else 0
    return _rows_size(model, "prompts", cfg.n_samples, prompt_tokens=48, forwards=cfg.n_samples + ablate,
                      detail=f"{cfg.n_samples} CtxMem prompts, one capture forward each"
                             + (f", and {heads} head ablations of them" if ablate else "")
                             + f"; {cfg.folds}-fold probes on {heads} heads")


def _gating_size(cfg, model):
    if cfg.data != "world-facts":
        grid = len(cfg.modes) * len(cfg.sites) * len(cfg.alphas)
        return _rows_size(model, "prompts", cfg.n_eval, prompt_tokens=48, forwards=cfg.n_samples,
                          replies=cfg.n_eval * (1 + grid), new_tokens=4,
                          detail=f"score {cfg.n_samples} CtxMem prompts, then {cfg.n_eval} counterfactual "
                                 f"generations × {grid} gate settings + ungated")
    n_facts, rows = _fact_rows(cfg, model)
    mean = sum(len(r["text"]) for r in rows) / max(1, len(rows))
    probe, tune, ev = (round(f * n_facts) for f in (0.4, 0.2, 0.4))
    grid = len(cfg.modes) * len(cfg.alphas)
    fc = int(0.4 * len(rows)) + tune * (1 + grid) + ev * (2 + cfg.n_maps)
    return _rows_size(model, "facts", n_facts, prompt_tokens=mean, forwards=fc, replies=2 * ev,
                      new_tokens=cfg.max_new_tokens,
                      detail=f"{n_facts} facts split probe {probe} / tune {tune} / eval {ev}: the map from the "
                             f"probe facts, {grid} gate settings tuned, the eval facts forced-choice ungated, gated "
                             f"and under {cfg.n_maps} shuffled maps, and 2 × {ev} generated answers (about)")


def _decodeshare_size(cfg, model):
    tasks = len(cfg.tasks)
    conds = (7 if "table" in cfg.parts else 0) + (tasks if "loto" in cfg.parts else 0) \
        + (len(cfg.alphas) if "alpha" in cfg.parts else 0) + (6 if "h3" in cfg.parts else 0)
    replies = tasks * cfg.n_calib + tasks * cfg.n_eval * max(1, conds)
    return _rows_size(model, "replies", replies, prompt_tokens=48, replies=replies,
                      new_tokens=max(cfg.calib_max_new_tokens, cfg.eval_max_new_tokens),
                      detail=f"{tasks} tasks: {cfg.n_calib} calibration replies each, then {cfg.n_eval} "
                             f"evaluation examples × about {conds} conditions (parts {','.join(cfg.parts)}), "
                             "each answered by generation and by forced choice (about)")


def _crh_size(cfg, model):
    from interplab.data.concept_pairs import concept_lexicon

    concepts = len(cfg.concepts) or len(concept_lexicon())
    scored = concepts - cfg.select_concepts
    texts = 2 * concepts * (cfg.n_train + cfg.n_test)
    per_prompt = cfg.n_bins + cfg.n_strengths * (cfg.n_p + 4) + 1
    select = cfg.select_concepts * cfg.n_test * len(cfg.select_positions) * len(cfg.select_layers) \
        * cfg.n_strengths
    replies = scored * cfg.n_test * per_prompt + select
    return _rows_size(model, "replies", replies, prompt_tokens=40, forwards=texts, replies=replies,
                      new_tokens=cfg.max_new_tokens,
                      detail=f"{concepts} concepts × {cfg.n_train + cfg.n_test} pairs read at every layer "
                             f"({texts} texts); {cfg.select_concepts} concepts choose the read and strength, "
                             f"{scored} are steered: {cfg.n_test} prompts × {per_prompt} settings, "
                             f"{cfg.max_new_tokens}-token replies, each scored for fluency (about)")


def _hyperfit_train_size(cfg, model):
    steps = cfg.max_epochs * -(-cfg.n_sequences // cfg.batch_size)
    return _rows_size(model, "steps", steps, prompt_tokens=128, forwards=3 * steps * cfg.batch_size,
                      detail=f"at most {cfg.max_epochs} epochs over {cfg.n_sequences} 128-token windows "
                             f"(batches of {cfg.batch_size}; stops at loss {cfg.stop_loss}); a backward costs "
                             "about two forwards")


def _hyperfit_geometry_size(cfg, model):
    models = 1 + len(cfg.targets)
    return _rows_size(model, "texts", cfg.n_texts, prompt_tokens=cfg.max_tokens or 128,
                      forwards=models * cfg.n_texts, replies=models * cfg.n_prompts, new_tokens=cfg.new_tokens,
                      detail=f"{models} models × {cfg.n_texts} held-out texts (≤ {cfg.max_tokens} tokens), "
                             f"teacher-forced, and {cfg.n_prompts} prompts × {cfg.new_tokens} generated tokens")


def _atlas_size(cfg, model):
    L, H = model.n_layers, model.n_heads
    cells = L * H + L                           # per-head attn_z patching and per-layer resid patching
    decode = cfg.n_decode_prompts * 6 if cfg.directions else 0
    concepts = 2 * cfg.n_concept_pairs if cfg.directions else 0
    return _rows_size(model, "forwards", cfg.n_truth_items + cells + concepts, prompt_tokens=40,
                      forwards=cfg.n_truth_items + cells + concepts, replies=decode, new_tokens=12,
                      detail=f"{cfg.n_truth_items} Truth-Score items, {cells} patching cells, "
                             + (f"{decode} decode-task replies and {concepts} concept texts for the directions"
                                if cfg.directions else "no direction methods")
                             + "; probes, bootstraps and permutation nulls come on top (about)")


SIZES = {"truth-scores": _truth_scores_size, "truth-gating-sweep": _gating_size, "decodeshare": _decodeshare_size,
         "crh-concepts": _crh_size, "hyperfit-train": _hyperfit_train_size,
         "hyperfit-geometry": _hyperfit_geometry_size, "atlas": _atlas_size}


def loaded_model_job(experiment: str, result: str, key: str, *, picked, model, settings: dict | None,
                     label: str, saved_label: str = "Saved run", saved_key: str | None = None, hint: str = "",
                     launch: bool = True):
    """The page's headline experiment on the loaded model: its settings as `interplab run` takes them, the job
    panel (size, estimate, launch, progress, cancel), and its `result` when the job has landed; else a saved run to
    open, each labelled with its model, with a notice when it is another model's. Returns (result, run model,
    LoadedRun) or (None, None, None). saved_key: the saved-run picker's widget key (default `<key>_saved`).
    launch=False: the saved runs only (a model the experiment's data does not fit, e.g. an organism on English)."""
    from interplab.app.widgets import saved_result, validity_panel

    run = None
    if launch:
        if settings is None:
            raise InputError(f"loaded_model_job({experiment!r}): settings are needed to launch it")
        sets = " ".join(f"--set {k}={v}" for k, v in settings.items()
                        if k not in ("backend", "device", "dtype") or v not in ("bridge", "cpu", "float32"))
        st.caption(f"On the loaded model: `interplab run {experiment} {sets}`")
        if model is None:    # nothing to size or run it on: the sidebar says why the model did not load
            st.caption(f"Load `{picked.name}` in the sidebar to run this on it.")
        else:
            run = job_panel(experiment, settings, key, model=model, model_key=picked.key, label=label,
                            size_fn=SIZES.get(experiment))
    if run is not None and result in run.result_names:
        validity_panel(run.validity(), key=f"{key}__validity")
        return run.result(result), run_model_name(run.config), run
    saved_key = saved_key or f"{key}_saved"
    got = saved_result(experiment, result, saved_key, label=saved_label, hint=hint, loaded=picked.name)
    if got is None:
        return None, None, None
    from interplab.results.runs import load_run

    path = st.session_state[saved_key]
    return got, run_model_name(load_run(path).config), load_run(path)
