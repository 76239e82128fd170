"""The DecodeShare intervention study at one layer (methods/decodeshare.md sections 5 and 7), as a script, the
`decodeshare` experiment and the app page run it.

1. `calibration_states`: decode and prefill residual states of the calibration prompts (train split).
2. `estimate_subspaces`: the shared subspace of the decode states, of the prefill states and of decode states
   subsampled to the prefill counts.
3. `run_study`: both, the nulls, then the sections chosen in `DecodeShareConfig.parts`: the ablation table
   (baseline vs shared-removed vs the controls of `build_bases`, forced choice and generation, bootstrap CIs and
   paired sign-flip p-values), leave-one-task-out, the prefill-vs-decode estimator x locus grid (h3), the
   matched-energy alpha sweep (`sweep`), the steering overlap, and the opt-in patchback rescue rates and
   stage-aligned steering ranking.

What the study's numbers can support is judged by `verdicts.study_verdicts`, which the `decodeshare` experiment
saves as the run's validity report.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from interplab.core.result import Result
from interplab.probes.decodeshare.bases import Condition, build_bases, matched_prefill_basis
from interplab.probes.decodeshare.config import DecodeShareConfig, estimator_kwargs, resolve_layer
from interplab.probes.decodeshare.estimator import (
    NullResult, SharedSubspace, match_state_counts, null_permutation, null_rotation, shared_subspace,
)
from interplab.probes.decodeshare.evaluation import decode_projection, evaluate_condition, summarize
from interplab.probes.decodeshare.model import collect_decode_states, collect_prefill_states
from interplab.probes.decodeshare.patchback import PatchbackResult, patchback_controls, patchback_rescue
from interplab.probes.decodeshare.ranking import RankingResult
from interplab.probes.decodeshare.steering import SteeringOverlap, steering_study
from interplab.probes.decodeshare.subspaces import (
    alpha_matched_control, angle_summary, haar_basis, principal_angles,
)
from interplab.probes.decodeshare.sweep import controls_frame, plan_sweep
from interplab.probes.decodeshare.tasks import BUILTIN_DATA, TaskSet, multitask_sets, real_task_sets, resolve_format

__all__ = ["CalibrationStates", "calibration_states", "SubspaceEstimate", "estimate_subspaces", "DecodeShareStudy",
           "run_study", "study_patchback"]


@dataclass
class CalibrationStates(Result):
    """Residual states after block `layer` of the calibration prompts: decode {task: [n_t, d]} (every generated,
    non-stop token) and prefill {task: [n_prompts, d]} (each prompt's last token)."""
    layer: int
    decode: dict[str, np.ndarray]
    prefill: dict[str, np.ndarray]


def calibration_states(model, tasks: Sequence[str], *, layer: int, n_calib: int, max_new_tokens: int,
                       fmt: str = "raw", seed: int = 0, max_states_per_task: int | None = 20000,
                       batch_size: int = 32, calib_sets: Mapping[str, TaskSet] | None = None) -> CalibrationStates:
    """Decode and prefill states of `n_calib` train-split prompts per task (`multitask_sets(seed=seed)`), or of
    the first `n_calib` prompts of each of `calib_sets` (user data, `user_task_sets`)."""
    if calib_sets is not None:
        calib = {t: calib_sets[t] for t in tasks}
        prompts = {t: s.prompts[:n_calib] for t, s in calib.items()}
    else:
        calib = multitask_sets(model, list(tasks), n_calib, seed=seed, split="train", fmt=fmt)
        prompts = {t: s.prompts for t, s in calib.items()}
    dec = collect_decode_states(model, prompts, layer=layer, max_new_tokens=max_new_tokens,
                                max_states_per_task=max_states_per_task, seed=seed, batch_size=batch_size)
    pre = collect_prefill_states(model, prompts, layer=layer, batch_size=batch_size)
    return CalibrationStates(int(layer), dec, pre)


@dataclass
class SubspaceEstimate(Result):
    """The shared subspaces of one calibration: decode, prefill, and decode subsampled per task to the prefill
    counts (so a decode-vs-prefill difference is not a sample-size effect)."""
    decode: SharedSubspace
    prefill: SharedSubspace
    decode_matched: SharedSubspace

    def angles(self) -> dict[str, np.ndarray]:
        """Principal angles (degrees) of the decode and count-matched decode bases against the prefill basis."""
        return {"decode vs prefill": principal_angles(self.decode.basis, self.prefill.basis),
                "decode (count-matched) vs prefill": principal_angles(self.decode_matched.basis, self.prefill.basis)}


def estimate_subspaces(states: CalibrationStates, **estimator) -> SubspaceEstimate:
    """`shared_subspace(..., **estimator)` of the decode, prefill and count-matched decode states (the count
    matching is seeded with the estimator's `seed`)."""
    ss = shared_subspace(states.decode, **estimator)
    dm, _ = match_state_counts(states.decode, states.prefill, seed=estimator.get("seed", 0))
    return SubspaceEstimate(ss, shared_subspace(states.prefill, **estimator), shared_subspace(dm, **estimator))


@dataclass
class DecodeShareStudy(Result):
    """What `run_study` measured. info: layer, format, k, |S| (decode, prefill, count-matched), state counts,
    null p-values, decode-vs-prefill angle summaries, the conditions of the ablation table and the opt-in parts'
    settings. Every section not in `config.parts` (or skipped because |S| = 0, see `error`) is None.

    table / table_examples: the ablation summary and its per-example rows; shared_vs_controls: accuracy under
    shared removal minus under each control, paired over the same examples (bootstrap CI, sign-flip p); loto:
    leave-one-task-out, per held-out task; loto_contrasts: pooled over the held-out tasks, each LOTO control minus
    the LOTO removal, paired over items; h3: the estimator x locus grid; alpha_sweep: accuracy vs alpha of the
    shared removal and the energy controls it evaluated; sweep_controls: per (energy control, alpha) the target
    and achieved energy, the control's strength and whether it was usable (`sweep.controls_frame`);
    sweep_contrasts: per (control, alpha, metric) the control's accuracy minus the shared removal's, paired over
    the same items (positive = the shared removal hurts more).

    info also holds metrics, baseline_acc {metric: pooled accuracy}, floor {metric: the chance/floor rate},
    n_items and the null sizes, which `verdicts.study_verdicts` reads."""
    config: DecodeShareConfig
    info: dict
    subspaces: SubspaceEstimate
    null_perm: NullResult
    null_rot: NullResult | None = None
    table: pd.DataFrame | None = None
    table_examples: pd.DataFrame | None = None
    shared_vs_controls: pd.DataFrame | None = None
    loto: pd.DataFrame | None = None
    h3: pd.DataFrame | None = None
    alpha_sweep: pd.DataFrame | None = None
    steering: SteeringOverlap | None = None
    sweep_controls: pd.DataFrame | None = None
    sweep_contrasts: pd.DataFrame | None = None
    loto_contrasts: pd.DataFrame | None = None
    patchback: PatchbackResult | None = None
    ranking: RankingResult | None = None
    error: str | None = None

    @property
    def nulls(self) -> list[NullResult]:
        return [self.null_perm] + ([self.null_rot] if self.null_rot is not None else [])

    def to_frame(self):
        return self.table


@dataclass
class _Context:
    """What every section of the study shares: the model, the settings, the layer, the evaluation sets and the
    baseline rows every condition is compared with."""
    model: object
    cfg: DecodeShareConfig
    layer: int
    fmt: str
    evals: Mapping[str, TaskSet]
    say: Callable[[str], None]
    baseline: pd.DataFrame | None = None

    def evaluate(self, edits, condition: str, sets=None) -> pd.DataFrame:
        return evaluate_condition(self.model, self.evals if sets is None else sets, edits, condition=condition,
                                  metrics=self.cfg.metrics, max_new_tokens=self.cfg.eval_max_new_tokens,
                                  batch_size=self.cfg.batch_size)

    def projection(self, basis, alpha, variant=None, **locus):
        return decode_projection(self.layer, basis, alpha, variant or self.cfg.variant, **locus)

    def summarize(self, per_example, **kw) -> pd.DataFrame:
        return summarize(per_example, n_boot=self.cfg.n_boot, seed=self.cfg.seed, **kw)


def _subset(ts: TaskSet, n: int) -> TaskSet:
    from dataclasses import replace

    return replace(ts, prompts=ts.prompts[:n], answers=ts.answers[:n], fc_cands=ts.fc_cands[:n],
                   fc_gold=ts.fc_gold[:n], fc_equiv=ts.fc_equiv[:n], inputs=ts.inputs[:n], examples=ts.examples[:n],
                   parse=None if ts.parse is None else ts.parse[:n])


def run_study(model, cfg: DecodeShareConfig, *, progress: Callable[[str], None] | None = None,
              sets: tuple[Mapping[str, TaskSet], Mapping[str, TaskSet]] | None = None) -> DecodeShareStudy:
    """The H2/H3/steering study at layer `cfg.layer` of `model` (module doc).

    sets: (calibration, evaluation) TaskSets of your own data (`user_task_sets`) instead of the organisms'
    multitask data; cfg.tasks is then replaced by their tasks, n_calib / n_eval cap the prompts per task, and the
    parts that need the toy tasks (steer, ranking) are skipped. cfg.data = 'real-tasks' builds the sets from the
    built-in real-model tasks (`real_task_sets`; cfg.tasks among `decode_tasks.REAL_TASKS`), whose steering part
    runs on a matched task pair (`steer_from`/`steer_to`, e.g. first_letter -> plural)."""
    say = progress or (lambda msg: None)
    cfg.validate()
    fmt = resolve_format(cfg.model, cfg.format)
    L = resolve_layer(model, cfg.layer)
    say(f"calibration states at layer {L}")
    real = cfg.data in BUILTIN_DATA
    if sets is None and real:
        sets = real_task_sets(model, cfg.tasks, n_calib=cfg.n_calib, n_eval=cfg.n_eval, seed=cfg.seed)
    if sets is not None:
        from dataclasses import replace

        calib_sets, eval_sets = sets
        skip = ("ranking",) if real else ("steer", "ranking")
        cfg = replace(cfg, tasks=[t for t in calib_sets if t in eval_sets],
                      parts=[p for p in cfg.parts if p not in skip])
        evals = {t: _subset(eval_sets[t], cfg.n_eval) for t in cfg.tasks}
    else:
        calib_sets = None
        evals = multitask_sets(model, cfg.tasks, cfg.n_eval, seed=cfg.seed + 1, split="test", fmt=fmt)
    states = calibration_states(model, cfg.tasks, layer=L, n_calib=cfg.n_calib,
                                max_new_tokens=cfg.calib_max_new_tokens, fmt=fmt, seed=cfg.seed,
                                max_states_per_task=cfg.max_states_per_task, batch_size=cfg.batch_size,
                                calib_sets=calib_sets)
    est = estimate_subspaces(states, **estimator_kwargs(cfg))
    ss, ss_pre = est.decode, est.prefill
    n1 = null_permutation(ss, B=cfg.null_perm_B, seed=cfg.seed)
    n2 = null_rotation(states.decode, ss, B=cfg.null_rot_B, seed=cfg.seed) if cfg.null_rot_B > 0 else None
    angles = est.angles()
    info = {"layer": L, "format": fmt, "mode": ss.mode, "k": ss.k, "k_s": ss.k_s, "d": ss.d,
            "k_s_prefill": ss_pre.k_s, "k_s_decode_count_matched": est.decode_matched.k_s,
            "n_states": {t: int(v) for t, v in ss.n_rows.items()},
            "p_perm": n1.p, "p_rot": n2.p if n2 else None,
            "angles_decode_vs_prefill": angle_summary(angles["decode vs prefill"]),
            "angles_decode_matched_vs_prefill": angle_summary(angles["decode (count-matched) vs prefill"])}
    study = DecodeShareStudy(cfg, info, est, n1, n2)
    say(f"|S| = {ss.k_s} of k = {ss.k} (d = {ss.d})")
    if ss.k_s == 0:
        study.error = ("the decode estimator found no shared direction at this tau/m; no interventions were run "
                       "(lower tau or m, or set empty_fallback_m)")
        study.info = info | {"error": study.error}
        return study
    e_states = np.concatenate(list(states.decode.values()) if cfg.energy_states == "edited"
                              else list(states.prefill.values()))
    bases = build_bases(ss, ss_pre, e_states, alpha=cfg.alpha, seed=cfg.seed, kmatch_rule=cfg.kmatch_rule,
                        prefill_states=states.prefill)
    info["conditions"] = {n: b.summary() for n, b in bases.items()}
    ctx = _Context(model, cfg, L, fmt, evals, say)
    say("baseline")
    ctx.baseline = ctx.evaluate([], "baseline")
    info["metrics"] = list(cfg.metrics)
    info["baseline_acc"] = {m: float(d["correct"].mean()) for m, d in ctx.baseline.groupby("metric")}
    # the floor of each metric: generation exact match 0; forced choice the chance rate of its candidates
    info["floor"] = {"gen": 0.0, "fc": float(np.mean([1 / len(c) for s in evals.values() for c in s.fc_cands]))}
    info["n_items"] = int(sum(len(s) for s in evals.values()))
    info["null_perm_B"], info["null_rot_B"] = cfg.null_perm_B, cfg.null_rot_B
    _run_sections(ctx, study, states, bases, e_states)
    return study


def _run_sections(ctx: _Context, study: DecodeShareStudy, states: CalibrationStates, bases: dict[str, Condition],
                  e_states: np.ndarray) -> None:
    parts, cfg, ss = set(ctx.cfg.parts), ctx.cfg, study.subspaces.decode
    if "table" in parts:
        study.table, study.table_examples = _ablation_table(ctx, bases)
        study.shared_vs_controls = shared_minus_controls(study.table, ctx.summarize(study.table_examples,
                                                                                    baseline="shared"))
    if "loto" in parts and len(cfg.tasks) >= 3:
        study.loto, study.loto_contrasts = _loto(ctx, states.decode, ss.d)
    if "h3" in parts:
        study.h3 = _h3_grid(ctx, ss, study.subspaces.prefill, states.prefill, e_states)
    if "alpha" in parts:
        study.alpha_sweep, study.sweep_controls, study.sweep_contrasts = _alpha_sweep(ctx, ss, e_states,
                                                                                      study.table_examples)
    if "steer" in parts:
        study.steering = steering_study(ctx.model, cfg, ctx.layer, ss, ctx.fmt, ctx.say,
                                        real=cfg.data in BUILTIN_DATA, null_states=states.decode)
    if "patchback" in parts:
        study.patchback = study_patchback(ctx.model, ctx.evals, bases, layer=ctx.layer, windows=cfg.patch_windows,
                                          max_new_tokens=cfg.eval_max_new_tokens, batch_size=cfg.batch_size,
                                          seed=cfg.seed, n_boot=cfg.n_boot, progress=ctx.say)
        study.info["patchback"] = study.patchback.info
    if "ranking" in parts:
        study.ranking = _ranking(ctx)
        study.info["ranking"] = study.ranking.info


def _ablation_table(ctx: _Context, bases: dict[str, Condition]) -> tuple[pd.DataFrame, pd.DataFrame]:
    per_example = [ctx.baseline]
    for name, b in bases.items():
        if b.basis is None:
            continue
        ctx.say(f"ablation: {name}")
        per_example.append(ctx.evaluate([ctx.projection(b.basis, b.alpha)], name))
    table_pe = pd.concat(per_example, ignore_index=True)
    return ctx.summarize(table_pe), table_pe


def shared_minus_controls(table: pd.DataFrame, vs_shared: pd.DataFrame) -> pd.DataFrame:
    """Per (control, task, metric): accuracy under shared removal minus under the control, with the paired bootstrap
    CI and sign-flip p of `summarize(..., baseline="shared")` (whose deltas are control − shared, so negated)."""
    d = vs_shared[~vs_shared["condition"].isin(["shared", "baseline"])]
    return pd.DataFrame({"control": d["condition"], "task": d["task"], "metric": d["metric"],
                         "shared_minus_control": -d["delta"], "lo": -d["delta_hi"], "hi": -d["delta_lo"],
                         "p": d["p_vs_baseline"], "n": d["n"]}).reset_index(drop=True)


def _loto(ctx: _Context, decode: Mapping[str, np.ndarray], d: int
          ) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """Each task evaluated with the shared subspace estimated without it, a Haar basis of the same size, and that
    Haar basis energy-matched (alpha_C^2 E_C = alpha^2 E_S on the fold's decode states; spec §6.2; its alpha_C
    is recorded, since above 1 it is a reflection). Returns the per-task summary and, pooled over the held-out
    tasks, each LOTO control minus the LOTO removal paired over items."""
    rows = []
    for t in ctx.cfg.tasks:
        ctx.say(f"LOTO: held out {t}")
        fold = shared_subspace({u: decode[u] for u in ctx.cfg.tasks if u != t}, **estimator_kwargs(ctx.cfg))
        assert t not in fold.n_rows
        if fold.k_s == 0:
            continue
        haar = haar_basis(d, fold.k_s, seed=ctx.cfg.seed + 7)
        rest = np.concatenate([decode[u] for u in ctx.cfg.tasks if u != t])
        he = alpha_matched_control(rest, fold.basis, haar, ctx.cfg.alpha)
        for name, basis, a in (("loto-removed", fold.basis, ctx.cfg.alpha), ("loto-haar", haar, ctx.cfg.alpha),
                               ("loto-haar-energy", he.basis, he.alpha)):
            d_ = ctx.evaluate([ctx.projection(basis, a)], name, sets={t: ctx.evals[t]})
            d_["k_fold"] = fold.k_s
            d_["alpha"] = a
            rows.append(d_)
    if not rows:
        return None, None
    lo = ctx.summarize(pd.concat([ctx.baseline] + rows, ignore_index=True))
    alphas = pd.concat(rows).groupby(["condition", "task"])["alpha"].first()
    lo = lo[lo["task"] != "all"].reset_index(drop=True)
    lo["alpha"] = [alphas.get((c, t), 0.0) for c, t in zip(lo["condition"], lo["task"])]
    # pooled over the held-out tasks: each control minus the LOTO removal, paired item by item
    vs = ctx.summarize(pd.concat(rows, ignore_index=True), baseline="loto-removed")
    vs = vs[(vs["task"] == "all") & (vs["condition"] != "loto-removed")].reset_index(drop=True)
    return lo, vs


def _h3_grid(ctx: _Context, ss: SharedSubspace, ss_pre: SharedSubspace, prefill: Mapping,
             e_states: np.ndarray | None = None) -> pd.DataFrame:
    """Decode-, prefill- and randomly-estimated bases of one size, each removed at the decode and at the prefill
    locus; with `e_states`, also the random basis energy-matched to the decode basis on those states
    ("random-energy": alpha_C^2 E_C = alpha^2 E_S, what the paper's Table 21 caption describes; spec §6.2)."""
    k = min(ss.k_s, max(ss_pre.k_s, 1)) if ss_pre.k_s else ss.k_s
    a = ctx.cfg.alpha
    haar = haar_basis(ss.d, k, seed=ctx.cfg.seed + 11)
    ests = {"decode": (ss.basis[:, :k], a), "prefill": (matched_prefill_basis(ss_pre, k, prefill)[0], a),
            "random": (haar, a)}
    if e_states is not None and k:
        he = alpha_matched_control(e_states, ss.basis[:, :k], haar, a)
        ests["random-energy"] = (he.basis, he.alpha)
    loci = {"decode": dict(phases=("decode",)), "prefill": dict(phases=("prefill",), positions="last_prompt")}
    rows = []
    for en, (basis, alpha) in ests.items():
        for ln, lkw in loci.items():
            ctx.say(f"H3: {en}-estimated at {ln} locus")
            e = ctx.projection(basis, alpha, None if ln == "decode" else "plain", **lkw)
            rows.append(ctx.evaluate([e], f"{en}|{ln}"))
    h3 = ctx.summarize(pd.concat([ctx.baseline] + rows, ignore_index=True))
    h3 = h3[(h3["condition"] != "baseline") & (h3["task"] == "all")].copy()
    h3[["estimator", "locus"]] = h3["condition"].str.split("|", expand=True)
    h3["k"] = k
    return h3.reset_index(drop=True)


def _alpha_sweep(ctx: _Context, ss: SharedSubspace, e_states: np.ndarray, table_examples: pd.DataFrame | None
                 ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The shared removal at every alpha of `cfg.alphas` and the energy controls matched to it (`sweep`); a
    control off its target or needing alpha_C > 1 is listed in the controls table and not evaluated. alpha = 0 is
    the baseline (nothing is edited); at `cfg.alpha` the ablation table's rows are reused (the same conditions).

    Returns (summary vs the baseline per condition and alpha, the controls table with each evaluated control's
    removed energy per edited position during evaluation relative to the shared removal's, and the contrasts:
    control minus shared per alpha and metric, paired over items)."""
    alphas = [float(a) for a in ctx.cfg.alphas]
    plan = plan_sweep(e_states, ss, alphas, kmatch_rule=ctx.cfg.kmatch_rule)
    rows = []
    for a in alphas:
        if a == 0:
            rows.append(ctx.baseline.assign(condition="shared", alpha=0.0))
            continue
        conds = [("shared", ss.basis, a)] + [(c.control, c.basis, c.alpha_c) for c in plan
                                             if c.alpha == a and c.usable]
        for name, basis, aa in conds:
            if a == float(ctx.cfg.alpha) and table_examples is not None and name in set(table_examples["condition"]):
                d_ = table_examples[table_examples["condition"] == name].copy()
            else:
                ctx.say(f"alpha sweep: {name} at alpha {a:g}")
                d_ = ctx.evaluate([ctx.projection(basis, aa)], name)
            rows.append(d_.assign(alpha=a))
    sw = pd.concat(rows, ignore_index=True)
    base_rep = pd.concat([ctx.baseline.assign(alpha=a) for a in alphas], ignore_index=True)
    s_ = ctx.summarize(pd.concat([base_rep, sw], ignore_index=True), group=("condition", "alpha"))
    summary = s_[(s_["task"] == "all") & (s_["condition"] != "baseline")].reset_index(drop=True)
    controls = controls_frame(plan)
    per_pos = summary.assign(per_pos=summary["energy"] / summary["n_edited"].where(summary["n_edited"] > 0))
    per_pos = per_pos.groupby(["condition", "alpha"])["per_pos"].mean()   # over the metrics evaluated
    controls["eval_ratio"] = [per_pos.get((c, a), np.nan) / per_pos.get(("shared", a), np.nan)
                              for c, a in zip(controls["control"], controls["alpha"])]
    vs = ctx.summarize(sw, baseline="shared", group=("condition", "alpha"))
    vs = vs[(vs["task"] == "all") & (vs["condition"] != "shared")]
    acc = summary.set_index(["condition", "alpha", "metric"])["acc"]
    contrasts = pd.DataFrame({
        "control": vs["condition"], "alpha": vs["alpha"], "metric": vs["metric"],
        "acc_shared": [acc[("shared", a, m)] for a, m in zip(vs["alpha"], vs["metric"])],
        "acc_control": vs["acc"], "control_minus_shared": vs["delta"], "lo": vs["delta_lo"],
        "hi": vs["delta_hi"], "p": vs["p_vs_baseline"], "n": vs["n"]}).reset_index(drop=True)
    return summary, controls, contrasts


def study_patchback(model, evals: Mapping[str, TaskSet], bases: Mapping[str, Condition], *, layer: int,
                    windows: Sequence[str], max_new_tokens: int = 12, batch_size: int = 32, seed: int = 0,
                    n_boot: int = 2000, progress: Callable[[str], None] | None = None) -> PatchbackResult:
    """Rescue rates of the removal of `bases["shared"]` (decode-only, plain variant, at its alpha) on the
    generation flip set of `evals`, per window: same-example (identity check), transfer donor (another
    baseline-correct example of the same task) and the same-example donor patched through the variance-matched
    non-shared and the Haar bases when `bases` holds them (`build_bases`)."""
    shared = bases["shared"]
    return patchback_rescue(model, {t: s.prompts for t, s in evals.items()},
                            {t: s.answers for t, s in evals.items()}, layer=layer, ablation_basis=shared.basis,
                            alpha=shared.alpha, controls=patchback_controls(bases),
                            windows=list(windows), max_new_tokens=max_new_tokens, batch_size=batch_size,
                            stop_tokens=sorted({s.stop for s in evals.values()}), seed=seed, n_boot=n_boot,
                            progress=progress)


def _ranking(ctx: _Context) -> RankingResult:
    """Stage-aligned steering ranking on the toy pools (`ranking.steering_ranking`, `pools.ranking_pool`)."""
    from interplab.core.scale import activation_scale
    from interplab.probes.decodeshare.pools import ranking_pool
    from interplab.probes.decodeshare.ranking import steering_ranking

    model, cfg, L, fmt = ctx.model, ctx.cfg, ctx.layer, ctx.fmt
    tasks = list(cfg.tasks)
    calib = multitask_sets(model, tasks, cfg.n_calib, seed=cfg.seed, split="train", fmt=fmt)
    ctx.say("ranking: vector pools")
    pool = ranking_pool(model, L, calib, n_caa=cfg.rank_n_caa, n_instr=cfg.rank_n_instr, n_random=cfg.rank_n_random,
                        caa_subset=cfg.rank_caa_subset, fmt=fmt, seed=cfg.seed + 51, batch_size=cfg.batch_size)
    pre = collect_prefill_states(model, {t: s.prompts for t, s in calib.items()}, layer=L, batch_size=cfg.batch_size)
    unit = activation_scale(np.concatenate(list(pre.values())))  # last prompt tokens: no sink position on organisms
    mean_norm = unit.typical
    scale = cfg.rank_alpha * mean_norm
    rank_sets = multitask_sets(model, tasks, cfg.rank_n_eval, seed=cfg.seed + 61, split="test", fmt=fmt)
    real_sets = [multitask_sets(model, tasks, cfg.rank_n_eval, seed=cfg.seed + 71 + r, split="test", fmt=fmt)
                 for r in range(cfg.rank_real_sets)]
    res = steering_ranking(model, L, pool, rank_sets, real_sets, scale=scale, stage=cfg.rank_stage,
                           max_new_tokens=cfg.eval_max_new_tokens, top_k=cfg.rank_top_k, progress=ctx.say)
    res.info |= {"alpha": cfg.rank_alpha, "mean_resid_norm": mean_norm, "n_massive": unit.n_massive,
                 "rank_seed": cfg.seed + 61, "real_seeds": [cfg.seed + 71 + r for r in range(cfg.rank_real_sets)]}
    return res
