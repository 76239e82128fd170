"""DecodeShare experiments on the multitask-decode organisms (methods/decodeshare.md sections 5 and 7).

Registered experiments (`interplab run NAME --set key=value`):

* `decodeshare-layers`: the shared decode subspace at every layer (paper and repo estimators): k, |S|, the
  permutation and rotation nulls, decode-vs-prefill principal angles, plus the tau/rho sensitivity at one layer.
* `decodeshare`: at one layer, the full intervention study: the ablation table (baseline vs shared-removed vs
  prefill-estimated vs Haar-random vs variance-matched vs alpha-matched and k-matched energy controls) per task for
  forced choice and generation with bootstrap CIs and paired sign-flip p-values; leave-one-task-out; the
  prefill-vs-decode estimator x locus grid with edited positions and removed energy; the alpha sweep; and the
  steering overlap of a diff-of-means task vector with its repaired version at matched norm; and (part
  `patchback`, not in the default parts) the rescue rates of patching decode states back into the flipped examples
  by decode-step window: same-example (an identity check), transfer donor, non-shared and Haar controls; and
  (part `ranking`, opt-in) the stage-aligned steering ranking (TRAD / DECODE proxies vs REAL on held-out example
  seeds, pools from `decodeshare_optin.ranking_pool`; `probes.decodeshare_ranking`).

The helpers (`multitask_sets`, `evaluate_condition`, `summarize`, `build_bases`, ...) are public so the app page and
scripts reuse them. Defaults are sized for a 2-core CPU and a 4-layer d=128 organism (a few minutes).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from interplab.core.errors import ConfigError, InputError
from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure

SEQ_TASKS = ("copy", "rev", "sort", "inc")
ALL_TASKS = ("copy", "rev", "sort", "inc", "mc")


# --------------------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------------------
@dataclass
class TaskSet:
    """Encoded multitask examples of one task.

    prompts: prompt token ids; answers: answer ids without the stop token; stop: the stop-token id;
    fc_cands [n][C]: forced-choice candidates as full answers (ids incl. the stop token); fc_gold [n]: index of the
    gold candidate; fc_equiv [n, C]: candidate equals the gold answer (handles coinciding transforms, e.g. sorted
    inputs); inputs: the input symbol indices; examples: the Example objects."""
    task: str
    prompts: list
    answers: list
    stop: int
    fc_cands: list
    fc_gold: np.ndarray
    fc_equiv: np.ndarray
    inputs: list
    examples: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.prompts)


def resolve_format(model_name: str, fmt: str = "auto") -> str:
    """'raw' or 'chat'. auto: the zoo recipe's training format for `zoo:` names, 'chat' when the name contains
    'chat', else 'raw'."""
    if fmt in ("raw", "chat"):
        return fmt
    if fmt != "auto":
        raise ConfigError(f"format must be 'auto', 'raw' or 'chat'; got {fmt!r}")
    name = str(model_name)
    if name.startswith("zoo:"):
        try:
            from interplab.zoo.registry import get_recipe

            return str(get_recipe(name).data.get("format", "raw"))
        except Exception:  # noqa: BLE001 - fall through to the name heuristic
            pass
    return "chat" if "chat" in name.lower() else "raw"


def _transform(task: str, x: list[int], V: int) -> list[int]:
    if task == "copy":
        return list(x)
    if task == "rev":
        return list(reversed(x))
    if task == "sort":
        return sorted(x)
    if task == "inc":
        return [(i + 1) % V for i in x]
    raise InputError(f"no transform for task {task!r}")


def multitask_sets(model, tasks: Sequence[str], n: int, *, seed: int = 0, split: str = "test",
                   fmt: str = "raw") -> dict[str, TaskSet]:
    """n encoded examples per task from `interplab.data.multitask` (split "train" for calibration, "test" for
    evaluation). Sequence tasks get the four transforms (copy/rev/sort/inc of the same input) as forced-choice
    candidates; mc gets `ans A..D`."""
    from interplab.data import toy_vocab as tv
    from interplab.data.examples import encode
    from interplab.data.multitask import Multitask

    vocab = model.tokenizer.get_vocab()
    mt = Multitask()
    V = mt.config.n_symbols
    stop_word = "<eos>" if fmt == "raw" else "<|im_end|>"
    if stop_word not in vocab:
        raise InputError(f"{model.name} has no {stop_word!r} token: it is not a multitask-decode organism")
    stop = vocab[stop_word]
    out = {}
    for ti, task in enumerate(tasks):
        if task not in ALL_TASKS:
            raise ConfigError(f"unknown multitask task {task!r}; use any of {ALL_TASKS}")
        exs = mt.sample(task, n, seed=seed * 1000 + ti, split=split)
        prompts, answers, cands, gold, equiv, inputs = [], [], [], [], [], []
        for ex in exs:
            enc = encode(ex, vocab, fmt)
            prompts.append(list(enc.ids[:enc.prompt_len]))
            ans = [vocab[w] for w in ex.response]
            answers.append(ans)
            x = [int(w[1:]) for w in ex.meta["x"]]
            inputs.append(x)
            if task == "mc":
                cs = [[vocab[tv.ANS], vocab[L], stop] for L in tv.LETTERS]
                g = tv.LETTERS.index(ex.meta["correct"])
            else:
                cs = [[vocab[tv.SYMBOLS[i]] for i in _transform(t, x, V)] + [stop] for t in SEQ_TASKS]
                g = SEQ_TASKS.index(task)
            cands.append(cs)
            gold.append(g)
            equiv.append([c == cs[g] for c in cs])
        out[task] = TaskSet(task, prompts, answers, stop, cands, np.asarray(gold), np.asarray(equiv, bool),
                            inputs, exs)
    return out


# --------------------------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------------------------
def _budget(edits) -> tuple[int, float]:
    n = sum(int(getattr(e, "n_edited", 0)) for e in edits)
    en = sum(float(getattr(e, "energy_removed", 0.0)) for e in edits)
    return n, en


def _reset(edits) -> None:
    for e in edits:
        if hasattr(e, "reset_counters"):
            e.reset_counters()


def evaluate_condition(model, sets: Mapping[str, TaskSet], edits: Sequence = (), *, condition: str = "baseline",
                       metrics: Sequence[str] = ("fc", "gen"), max_new_tokens: int = 12, batch_size: int = 32,
                       tasks: Sequence[str] | None = None):
    """Per-example correctness under `edits`: a DataFrame with condition, task, metric, example, correct,
    n_edited and energy (the edit budget spent on that task and metric)."""
    import pandas as pd

    from interplab.probes.decodeshare import generate_exact_match, score_forced_choice

    edits = list(edits)
    frames = []
    for task in (tasks or list(sets)):
        s = sets[task]
        if "fc" in metrics:
            _reset(edits)
            fc = score_forced_choice(model, s.prompts, s.fc_cands, s.fc_gold, edits=edits, batch_size=batch_size * 4)
            correct = s.fc_equiv[np.arange(len(s)), fc.pred]
            n, en = _budget(edits)
            frames.append(pd.DataFrame({"condition": condition, "task": task, "metric": "fc",
                                        "example": np.arange(len(s)), "correct": correct.astype(float),
                                        "n_edited": n, "energy": en}))
        if "gen" in metrics:
            _reset(edits)
            g = generate_exact_match(model, s.prompts, s.answers, max_new_tokens=max_new_tokens, edits=edits,
                                     batch_size=batch_size, stop_tokens=[s.stop])
            n, en = _budget(edits)
            frames.append(pd.DataFrame({"condition": condition, "task": task, "metric": "gen",
                                        "example": np.arange(len(s)), "correct": g.correct.astype(float),
                                        "stopped": g.stopped.astype(float), "length": g.lengths,
                                        "n_edited": n, "energy": en}))
    _reset(edits)
    return pd.concat(frames, ignore_index=True)


def summarize(per_example, *, baseline: str = "baseline", n_boot: int = 2000, seed: int = 0,
              group: Sequence[str] = ("condition",)):
    """Accuracy with percentile-bootstrap 95% CIs per (group..., task, metric) plus an 'all' task pooling every
    example; delta vs `baseline` (same task/metric and same value of the other group columns) with a paired
    bootstrap CI (delta_lo, delta_hi) and a paired sign-flip p-value."""
    import pandas as pd

    from interplab.probes.decodeshare import bootstrap_ci, paired_signflip_test

    df = per_example
    df = df.assign(orig_task=df["task"])
    pooled = df.copy()
    pooled["task"] = "all"
    pooled["example"] = pooled.groupby(list(group) + ["metric", "task"]).cumcount()
    both = pd.concat([df, pooled], ignore_index=True)
    keys = list(group) + ["task", "metric"]
    extra = [g for g in group if g != "condition"]  # e.g. alpha: the baseline is matched within each value
    bkeys = extra + ["task", "metric"]
    base = {key: d.sort_values("example")["correct"].to_numpy()
            for key, d in both[both["condition"] == baseline].groupby(bkeys)}
    rows = []
    for key, d in both.groupby(keys, sort=False):
        kv = dict(zip(keys, key))
        x = d.sort_values("example")["correct"].to_numpy()
        acc, lo, hi = bootstrap_ci(x, B=n_boot, seed=seed)
        b = base.get(tuple(kv[k] for k in bkeys))
        if b is not None and len(b) == len(x):
            delta, p = float(x.mean() - b.mean()), paired_signflip_test(x, b, B=n_boot, seed=seed)
            _, dlo, dhi = bootstrap_ci(x - b, B=n_boot, seed=seed)
        else:
            delta = p = dlo = dhi = float("nan")
        gen_stats = {}
        if "stopped" in d.columns and d["stopped"].notna().any():
            gen_stats = {"stop_rate": float(d["stopped"].mean()), "mean_length": float(d["length"].mean())}
        rows.append({**kv, "acc": acc, "lo": lo, "hi": hi, "delta": delta, "delta_lo": dlo, "delta_hi": dhi,
                     "p_vs_baseline": p, "n": len(x), **gen_stats,
                     "n_edited": int(d.groupby("orig_task")["n_edited"].first().sum()),
                     "energy": float(d.groupby("orig_task")["energy"].first().sum())})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------------------------
# Bases and controls
# --------------------------------------------------------------------------------------------------------------
def matched_prefill_basis(ss_pre, k: int, prefill_states=None) -> tuple[np.ndarray, str]:
    """A k-dim basis from the prefill estimator: its shared columns first, then its remaining pooled components in
    variance order (labelled when padding was needed). When the prefill PCA kept fewer than k components and
    `prefill_states` is given, it is redone with rho = 1 (all components) to pad."""
    from dataclasses import asdict

    from interplab.probes.decodeshare import shared_subspace
    from interplab.probes.subspaces import orthonormalize

    if k > ss_pre.k and prefill_states is not None:
        full = shared_subspace(prefill_states, **(asdict(ss_pre.config) | {"rho": 1.0}))
        order = list(np.asarray(ss_pre.shared_idx, int)) + [i for i in range(full.k)
                                                             if i not in set(ss_pre.shared_idx)]
        if k <= len(order):
            return orthonormalize(full.components[:, order[:k]]), (
                f"prefill shared set ({ss_pre.k_s}) padded with prefill components (rho = 1) to k = {k}")
    order = list(np.asarray(ss_pre.shared_idx, int)) + [i for i in range(ss_pre.k) if i not in set(ss_pre.shared_idx)]
    if k > len(order):
        raise ConfigError(f"the prefill estimator kept only {ss_pre.k} components; cannot build a {k}-dim basis "
                          "(raise rho)")
    note = "prefill shared set" if k <= ss_pre.k_s else (
        f"prefill shared set ({ss_pre.k_s}) padded with top prefill components to k = {k}")
    return orthonormalize(ss_pre.components[:, order[:k]]), note


def build_bases(ss_dec, ss_pre, energy_states: np.ndarray, *, alpha: float = 1.0, seed: int = 0,
                kmatch_rule: str = "smallest_k_reaching_target", prefill_states=None) -> dict[str, dict]:
    """The ablation conditions: {name: {"basis": [d, k], "alpha": a, "note": str}}."""
    from interplab.probes.subspaces import (
        alpha_matched_control, energy_pool, haar_basis, k_matched_control, variance_matched_control,
    )

    ks = ss_dec.k_s
    if ks == 0:
        raise ConfigError("the decode estimator found no shared direction (|S| = 0); lower tau, lower m or set "
                          "empty_fallback_m to run the interventions")
    d = ss_dec.d
    out = {"shared": {"basis": ss_dec.basis, "alpha": alpha, "note": f"decode Q_S, k = {ks}"}}
    pb, note = matched_prefill_basis(ss_pre, ks, prefill_states)
    out["prefill-est"] = {"basis": pb, "alpha": alpha, "note": note}
    out["haar"] = {"basis": haar_basis(d, ks, seed=seed), "alpha": alpha, "note": f"Haar-random, k = {ks}, seed {seed}"}
    try:
        vm = variance_matched_control(ss_dec.components, ss_dec.pooled_variance(), ss_dec.shared_idx)
        out["var-matched"] = {"basis": vm, "alpha": alpha, "note": "non-shared PCs paired by pooled variance"}
    except ConfigError as e:
        out["var-matched"] = {"basis": None, "alpha": alpha, "note": f"skipped: {e}"}
    pool = energy_pool(ss_dec.components, ss_dec.shared_idx)
    if pool.shape[1] >= ks:
        am = alpha_matched_control(energy_states, ss_dec.basis, pool, alpha)
        out["alpha-match"] = {"basis": am.basis, "alpha": am.alpha,
                              "note": f"alpha_C = {am.alpha:.3g} (E_S = {am.energy_shared:.3g}, E_C = "
                                      f"{am.energy_control:.3g})"}
        km = k_matched_control(energy_states, ss_dec.basis, pool, alpha, rule=kmatch_rule)
        out["k-match"] = {"basis": km.basis, "alpha": 1.0,
                          "note": f"k_C = {km.k} of {pool.shape[1]} ({kmatch_rule}; E_C = {km.energy_control:.3g} vs "
                                  f"target {alpha ** 2 * km.energy_shared:.3g})"}
    else:
        for n in ("alpha-match", "k-match"):
            out[n] = {"basis": None, "alpha": alpha, "note": f"skipped: energy pool has {pool.shape[1]} < k_S columns"}
    return out


# --------------------------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------------------------
@dataclass
class DecodeShareSetup:
    """Settings shared by both DecodeShare experiments: the model and how it is loaded, the tasks, the calibration
    states the subspace is estimated from, the estimator thresholds, the null sizes, batching and the seed."""

    model: str = "zoo:toy-chat"
    backend: str = "bridge"
    dtype: str = "float32"
    format: str = "auto"
    tasks: str = "copy,rev,sort,inc,mc"
    n_calib: int = 64
    calib_max_new_tokens: int = 12
    max_states_per_task: int = 20000
    rho: float = 0.95
    tau: float = 1e-3
    m: int = 0
    null_perm_B: int = 2000
    null_rot_B: int = 20
    batch_size: int = 32
    seed: int = 0


@dataclass
class DecodeShareConfig(DecodeShareSetup):
    """Settings of the `decodeshare` experiment.

    model: organism or checkpoint (`zoo:toy-chat`, `zoo:toy-base`, a local dir). backend, dtype: how to load it.
    format: prompt format ('auto' = the organism's training format, 'raw' or 'chat').
    tasks: comma-separated multitask tasks. layer: block whose output is edited (-1 = the middle layer).
    n_calib: calibration prompts per task (train split). n_eval: evaluation examples per task (held-out split).
    calib_max_new_tokens / eval_max_new_tokens: greedy decode lengths. max_states_per_task: cap on decode states.
    rho, tau, m (0 = all tasks), mode ('paper' | 'repo'), empty_fallback_m (0 = none): estimator settings;
    tau_k > 0 replaces tau by tau_k / k (the paper's dimensionless threshold; see SharedSubspaceConfig). The
    default tau_k = 1 (a share of at least the uniform 1/k) is used because at toy scale tau = 1e-3 marks every
    kept component as shared (|S| = k), which leaves no room for the non-shared controls; set tau_k=0 for the
    paper's literal tau.
    alpha: removal strength of the ablation table. variant: 'plain' (decode-only) or 'boundary' (also the last
    prompt token). energy_states: states the energy controls are matched on ('edited' = decode states,
    'boundary' = last prompt token states as in the reference code). kmatch_rule: see `k_matched_control`.
    null_perm_B / null_rot_B: null trials. alphas: alpha sweep values. steer_scales: steering scales (multiples of
    ||v||). steer_from / steer_to: the diff-of-means task pair (v = mean(to) - mean(from), added to `from`
    prompts). n_boot: bootstrap resamples. batch_size: generation batch. seed: everything else.
    parts: which sections to run (comma-separated subset of table,loto,h3,alpha,steer,patchback,ranking;
    patchback and ranking are opt-in). patch_windows: the patchback decode-step windows, separated by ';' (e.g.
    "0;0,1;all").
    rank_*: the stage-aligned steering ranking (part `ranking`, `probes.decodeshare_ranking`): rank_n_eval examples
    per task in the ranking sets and in each of rank_real_sets held-out REAL sets (other eval seeds);
    rank_n_caa / rank_n_instr / rank_n_random vectors per pool family; rank_caa_subset examples per bootstrapped CAA
    subset; rank_alpha: the added norm is rank_alpha x the mean residual norm at the layer (last prompt token of the
    calibration prompts); rank_stage: DECODE/REAL steer the first rank_stage generated tokens; rank_top_k: overlap k.
    """
    layer: int = -1
    n_eval: int = 48
    eval_max_new_tokens: int = 12
    tau_k: float = 1.0
    mode: str = "paper"
    empty_fallback_m: int = 0
    alpha: float = 1.0
    variant: str = "plain"
    energy_states: str = "edited"
    kmatch_rule: str = "smallest_k_reaching_target"
    alphas: str = "0,0.25,0.5,0.75,1,1.5,2"
    steer_scales: str = "0.5,1,2"
    steer_from: str = "copy"
    steer_to: str = "inc"
    n_boot: int = 2000
    parts: str = "table,loto,h3,alpha,steer"
    patch_windows: str = "0;0,1;all"
    rank_n_eval: int = 32
    rank_real_sets: int = 2
    rank_n_caa: int = 16
    rank_n_instr: int = 16
    rank_n_random: int = 16
    rank_caa_subset: int = 32
    rank_alpha: float = 1.0
    rank_stage: int = 4
    rank_top_k: int = 10


@dataclass
class DecodeShareLayersConfig(DecodeShareSetup):
    """Settings of `decodeshare-layers` (see DecodeShareConfig for the shared fields). layers: comma-separated
    layer indices or 'all'. sweep_layer: layer of the tau/rho sensitivity sweep (-1 = middle). tau_ks: thresholds
    to report, comma-separated; 0 = the literal `tau`, x > 0 = tau_k = x (tau = x / k)."""
    layers: str = "all"
    sweep_layer: int = -1
    tau_ks: str = "0,1"


def _list(s: str, typ=str) -> list:
    if isinstance(s, (list, tuple)):
        return [typ(x) for x in s]
    return [typ(x.strip()) for x in str(s).split(",") if x.strip()]


def _load(cfg):
    import interplab

    return interplab.load_model(cfg.model, backend=cfg.backend, dtype=cfg.dtype)


def _layer(model, layer: int) -> int:
    L = model.n_layers // 2 if layer < 0 else int(layer)
    if not 0 <= L < model.n_layers:
        raise ConfigError(f"layer {layer} is out of range for a {model.n_layers}-layer model")
    return L


def _est_kwargs(cfg, mode=None) -> dict:
    return dict(rho=cfg.rho, tau=cfg.tau, m=(cfg.m or None), mode=mode or getattr(cfg, "mode", "paper"),
                seed=cfg.seed, empty_fallback_m=(getattr(cfg, "empty_fallback_m", 0) or None),
                tau_k=(getattr(cfg, "tau_k", 0.0) or None))


# --------------------------------------------------------------------------------------------------------------
# decodeshare-layers
# --------------------------------------------------------------------------------------------------------------
def run_layers(cfg: DecodeShareLayersConfig, run=None, *, model=None, progress=None) -> dict[str, Any]:
    """Shared subspace at each layer (paper and repo modes) with nulls and decode-vs-prefill angles."""
    import pandas as pd

    from interplab.probes.decodeshare import (
        collect_decode_states_multi, collect_prefill_states, match_state_counts, null_permutation, null_rotation,
        sensitivity_sweep, shared_subspace,
    )
    from interplab.probes.subspaces import angle_summary, principal_angles

    model = model or _load(cfg)
    fmt = resolve_format(cfg.model, cfg.format)
    tasks = _list(cfg.tasks)
    layers = list(range(model.n_layers)) if cfg.layers == "all" else [_layer(model, l) for l in _list(cfg.layers, int)]
    calib = multitask_sets(model, tasks, cfg.n_calib, seed=cfg.seed, split="train", fmt=fmt)
    prompts = {t: s.prompts for t, s in calib.items()}
    dec = collect_decode_states_multi(model, prompts, layers=layers, max_new_tokens=cfg.calib_max_new_tokens,
                                      max_states_per_task=cfg.max_states_per_task, seed=cfg.seed,
                                      batch_size=cfg.batch_size)
    rows, angles, subspaces = [], {}, {}
    tks = _list(cfg.tau_ks, float) or [0.0]
    for l in layers:
        if progress:
            progress(f"layer {l}")
        pre = collect_prefill_states(model, prompts, layer=l, batch_size=cfg.batch_size)
        dm, pm = match_state_counts(dec[l], pre, seed=cfg.seed)
        for tk in tks:
            thr = f"tau={cfg.tau:g}" if tk == 0 else f"tau_k={tk:g}"
            for mode in ("paper", "repo"):
                kw = _est_kwargs(cfg, mode) | {"tau_k": tk or None}
                ss = shared_subspace(dec[l], **kw)
                sp = shared_subspace(pre, **kw)
                sdm = shared_subspace(dm, **kw)
                n1 = null_permutation(ss, B=cfg.null_perm_B, seed=cfg.seed)
                n2 = null_rotation(dec[l], ss, B=cfg.null_rot_B, seed=cfg.seed) if cfg.null_rot_B > 0 else None
                ang = principal_angles(ss.basis, sp.basis)
                angm = principal_angles(sdm.basis, sp.basis)
                angles[f"L{l} {mode} {thr}: decode vs prefill"] = ang
                subspaces[(l, mode, thr)] = ss
                rows.append({"layer": l, "mode": mode, "threshold": thr, "tau_used": ss.tau, "k": ss.k,
                             "k_s": ss.k_s, "k_s_prefill": sp.k_s, "k_s_decode_matched": sdm.k_s,
                             "n_states": int(sum(ss.n_rows.values())),
                             "p_perm": n1.p, "null_perm_mean": float(n1.null.mean()),
                             "p_rot": n2.p if n2 else np.nan,
                             "null_rot_mean": float(n2.null.mean()) if n2 else np.nan,
                             "angle_mean": angle_summary(ang)["mean"], "angle_p95": angle_summary(ang)["p95"],
                             "angle_mean_matched": angle_summary(angm)["mean"], "bound": ss.bound})
                if run is not None:
                    tag = thr.replace("=", "").replace(".", "p")
                    ss.save(run.path / "subspaces" / f"L{l}_{mode}_{tag}")
                    sp.save(run.path / "subspaces" / f"L{l}_{mode}_{tag}_prefill")
    summary = pd.DataFrame(rows)
    sl = _layer(model, cfg.sweep_layer)
    if sl not in dec:
        sl = layers[len(layers) // 2]
    sweep = sensitivity_sweep(dec[sl], **{k: v for k, v in _est_kwargs(cfg, "paper").items()
                                          if k not in ("rho", "tau", "tau_k")}, rho=cfg.rho, tau=cfg.tau)
    out = {"summary": summary, "sweep": sweep, "angles": angles, "subspaces": subspaces, "sweep_layer": sl}
    if run is not None:
        from interplab.figures.decodeshare import (
            layer_summary_figure, principal_angle_figure, sensitivity_figure, variance_share_heatmap,
        )

        run.save_table("layers", summary)
        run.save_table("sensitivity", sweep)
        save_figure(run, "layers", layer_summary_figure(summary))
        save_figure(run, "sensitivity", sensitivity_figure(sweep, title=f"Sensitivity at layer {sl}"))
        save_figure(run, "angles", principal_angle_figure(angles, title="Principal angles decode vs prefill"))
        for thr in dict.fromkeys(k[2] for k in subspaces):
            save_figure(run, f"shares_{thr.replace('=', '').replace('.', 'p')}",
                            variance_share_heatmap(subspaces[(sl, "paper", thr)]))
    return out


@register_experiment("decodeshare-layers", config=DecodeShareLayersConfig,
                     help="DecodeShare H1: shared decode subspace per layer (paper + repo estimators), nulls, "
                          "decode-vs-prefill angles, tau/rho sensitivity")
def decodeshare_layers(cfg: DecodeShareLayersConfig, run) -> None:
    run_layers(cfg, run)


# --------------------------------------------------------------------------------------------------------------
# decodeshare (interventions)
# --------------------------------------------------------------------------------------------------------------
def _proj(layer, basis, alpha, variant, phases=("decode",), positions="all"):
    from interplab.interventions.projection import SubspaceProjection

    return SubspaceProjection(layer, basis, alpha, phases=phases, boundary=(variant == "boundary"
                                                                            and "decode" in phases),
                              positions=positions)


def run_decodeshare(cfg: DecodeShareConfig, run=None, *, model=None, progress=None) -> dict[str, Any]:
    """The H2/H3/steering study at one layer; returns the tables (and writes them into `run` when given)."""
    import pandas as pd

    from interplab.probes.decodeshare import (
        collect_decode_states, collect_prefill_states, match_state_counts, null_permutation, null_rotation,
        shared_subspace,
    )
    from interplab.probes.subspaces import (
        alpha_matched_control, angle_summary, energy_pool, haar_basis, k_matched_control, principal_angles,
    )

    say = progress or (lambda msg: None)
    parts = set(_list(cfg.parts))
    bad = parts - {"table", "loto", "h3", "alpha", "steer", "patchback", "ranking"}
    if bad:
        raise ConfigError(f"unknown parts {sorted(bad)}; use a subset of "
                          "table,loto,h3,alpha,steer,patchback,ranking")
    if cfg.variant not in ("plain", "boundary"):
        raise ConfigError(f"variant must be 'plain' or 'boundary'; got {cfg.variant!r}")
    if cfg.energy_states not in ("edited", "boundary"):
        raise ConfigError(f"energy_states must be 'edited' or 'boundary'; got {cfg.energy_states!r}")
    model = model or _load(cfg)
    fmt = resolve_format(cfg.model, cfg.format)
    tasks = _list(cfg.tasks)
    L = _layer(model, cfg.layer)
    say(f"calibration states at layer {L}")
    calib = multitask_sets(model, tasks, cfg.n_calib, seed=cfg.seed, split="train", fmt=fmt)
    evals = multitask_sets(model, tasks, cfg.n_eval, seed=cfg.seed + 1, split="test", fmt=fmt)
    prompts = {t: s.prompts for t, s in calib.items()}
    dec = collect_decode_states(model, prompts, layer=L, max_new_tokens=cfg.calib_max_new_tokens,
                                max_states_per_task=cfg.max_states_per_task, seed=cfg.seed,
                                batch_size=cfg.batch_size)
    pre = collect_prefill_states(model, prompts, layer=L, batch_size=cfg.batch_size)
    kw = _est_kwargs(cfg)
    ss = shared_subspace(dec, **kw)
    dm, pm = match_state_counts(dec, pre, seed=cfg.seed)
    ss_pre = shared_subspace(pre, **kw)
    ss_dm = shared_subspace(dm, **kw)
    n1 = null_permutation(ss, B=cfg.null_perm_B, seed=cfg.seed)
    n2 = null_rotation(dec, ss, B=cfg.null_rot_B, seed=cfg.seed) if cfg.null_rot_B > 0 else None
    e_states = np.concatenate(list(dec.values()) if cfg.energy_states == "edited" else list(pre.values()))
    info = {"layer": L, "format": fmt, "mode": ss.mode, "k": ss.k, "k_s": ss.k_s, "d": ss.d,
            "k_s_prefill": ss_pre.k_s, "k_s_decode_count_matched": ss_dm.k_s,
            "n_states": {t: int(v) for t, v in ss.n_rows.items()},
            "p_perm": n1.p, "p_rot": n2.p if n2 else None,
            "angles_decode_vs_prefill": angle_summary(principal_angles(ss.basis, ss_pre.basis)),
            "angles_decode_matched_vs_prefill": angle_summary(principal_angles(ss_dm.basis, ss_pre.basis))}
    out: dict[str, Any] = {"info": info, "subspace": ss, "subspace_prefill": ss_pre, "nulls": [n1] + ([n2] if n2 else [])}
    say(f"|S| = {ss.k_s} of k = {ss.k} (d = {ss.d})")
    if ss.k_s == 0:
        out["error"] = ("the decode estimator found no shared direction at this tau/m; no interventions were run "
                        "(lower tau or m, or set empty_fallback_m)")
        out["info"] = info | {"error": out["error"]}
        if run is not None:
            _save(run, out)
        return out
    bases = build_bases(ss, ss_pre, e_states, alpha=cfg.alpha, seed=cfg.seed, kmatch_rule=cfg.kmatch_rule,
                        prefill_states=pre)
    info["conditions"] = {n: {"k": None if b["basis"] is None else int(b["basis"].shape[1]), "alpha": b["alpha"],
                              "note": b["note"]} for n, b in bases.items()}
    ev = dict(max_new_tokens=cfg.eval_max_new_tokens, batch_size=cfg.batch_size)
    per_example = []
    say("baseline")
    base_df = evaluate_condition(model, evals, [], condition="baseline", **ev)
    per_example.append(base_df)

    if "table" in parts:
        for name, b in bases.items():
            if b["basis"] is None:
                continue
            say(f"ablation: {name}")
            per_example.append(evaluate_condition(model, evals, [_proj(L, b["basis"], b["alpha"], cfg.variant)],
                                                  condition=name, **ev))
        table_pe = pd.concat(per_example, ignore_index=True)
        out["table"] = summarize(table_pe, n_boot=cfg.n_boot, seed=cfg.seed)
        out["table_examples"] = table_pe

    if "loto" in parts and len(tasks) >= 3:
        rows = []
        for t in tasks:
            say(f"LOTO: held out {t}")
            rest = {u: dec[u] for u in tasks if u != t}
            kw_l = dict(kw)
            fold = shared_subspace(rest, **kw_l)
            assert t not in fold.n_rows
            if fold.k_s == 0:
                continue
            sub = {t: evals[t]}
            for name, basis in (("loto-removed", fold.basis), ("loto-haar", haar_basis(ss.d, fold.k_s,
                                                                                      seed=cfg.seed + 7))):
                d_ = evaluate_condition(model, sub, [_proj(L, basis, cfg.alpha, cfg.variant)], condition=name, **ev)
                d_["k_fold"] = fold.k_s
                rows.append(d_)
        if rows:
            lo = pd.concat([base_df] + rows, ignore_index=True)
            out["loto"] = summarize(lo, n_boot=cfg.n_boot, seed=cfg.seed)
            out["loto"] = out["loto"][out["loto"]["task"] != "all"].reset_index(drop=True)

    if "h3" in parts:
        k = min(ss.k_s, max(ss_pre.k_s, 1)) if ss_pre.k_s else ss.k_s
        ests = {"decode": ss.basis[:, :k], "prefill": matched_prefill_basis(ss_pre, k, pre)[0],
                "random": haar_basis(ss.d, k, seed=cfg.seed + 11)}
        loci = {"decode": dict(phases=("decode",)), "prefill": dict(phases=("prefill",), positions="last_prompt")}
        rows = []
        for en, basis in ests.items():
            for ln, lkw in loci.items():
                say(f"H3: {en}-estimated at {ln} locus")
                e = _proj(L, basis, cfg.alpha, cfg.variant if ln == "decode" else "plain", **lkw)
                rows.append(evaluate_condition(model, evals, [e], condition=f"{en}|{ln}", **ev))
        h3 = summarize(pd.concat([base_df] + rows, ignore_index=True), n_boot=cfg.n_boot, seed=cfg.seed)
        h3 = h3[(h3["condition"] != "baseline") & (h3["task"] == "all")].copy()
        h3[["estimator", "locus"]] = h3["condition"].str.split("|", expand=True)
        h3["k"] = k
        out["h3"] = h3.reset_index(drop=True)

    if "alpha" in parts:
        alphas = _list(cfg.alphas, float)
        pool = energy_pool(ss.components, ss.shared_idx)
        rows = []
        for a in alphas:
            say(f"alpha sweep: {a}")
            conds = {"shared": (ss.basis, a), "haar": (bases["haar"]["basis"], a)}
            if a > 0 and pool.shape[1] >= ss.k_s:
                am = alpha_matched_control(e_states, ss.basis, pool, a)
                km = k_matched_control(e_states, ss.basis, pool, a, rule=cfg.kmatch_rule)
                conds["alpha-match"] = (am.basis, am.alpha)
                conds["k-match"] = (km.basis, 1.0)
            for name, (basis, aa) in conds.items():
                d_ = evaluate_condition(model, evals, [_proj(L, basis, aa, cfg.variant)], condition=name, **ev)
                d_["alpha"] = a
                rows.append(d_)
        sw = pd.concat(rows, ignore_index=True)
        base_rep = pd.concat([base_df.assign(alpha=a) for a in alphas], ignore_index=True)
        s_ = summarize(pd.concat([base_rep, sw], ignore_index=True), n_boot=cfg.n_boot, seed=cfg.seed,
                       group=("condition", "alpha"))
        out["alpha_sweep"] = s_[(s_["task"] == "all") & (s_["condition"] != "baseline")].reset_index(drop=True)

    if "steer" in parts:
        out["steering"], out["steering_info"] = _steering(model, cfg, L, ss, fmt, say)

    if "patchback" in parts:
        from interplab.experiments.decodeshare_optin import _patchback

        out["patchback"] = _patchback(model, cfg, L, bases, evals, say)
        info["patchback"] = out["patchback"].info

    if "ranking" in parts:
        from interplab.experiments.decodeshare_optin import _ranking

        out["ranking"] = _ranking(model, cfg, L, calib, fmt, say)
        info["ranking"] = out["ranking"].info

    if run is not None:
        _save(run, out)
    return out


def _steering(model, cfg, L, ss, fmt, say):
    """v = mean decode state(steer_to) - mean decode state(steer_from) on matched inputs; add lam*v to steer_from
    prompts (boundary + decode positions) and measure the rate of steer_to answers (exact match), the source-task
    accuracy, and the teacher-forced margin shift log p(to-answer) - log p(from-answer) vs unsteered, for v and its
    repaired version (I - Q Q^T) v rescaled to ||v||."""
    import pandas as pd

    from interplab.interventions import Steer
    from interplab.probes.decodeshare import bootstrap_ci, collect_decode_states, generate_exact_match
    from interplab.probes.subspaces import haar_basis, repair_vector, steering_overlap

    src, dst = cfg.steer_from, cfg.steer_to
    if src not in SEQ_TASKS or dst not in SEQ_TASKS or src == dst:
        raise ConfigError(f"steer_from/steer_to must be two different sequence tasks of {SEQ_TASKS}")
    vocab = model.tokenizer.get_vocab()
    calib = multitask_sets(model, [src], cfg.n_calib, seed=cfg.seed + 21, split="train", fmt=fmt)[src]
    tw = vocab[dst]
    src_id = vocab[src]
    matched = [[tw if t == src_id else t for t in p] for p in calib.prompts]  # same inputs, other task word
    if matched == calib.prompts:
        raise InputError(f"could not find the task word {src!r} in the prompts")
    st = collect_decode_states(model, {src: calib.prompts, dst: matched}, layer=L,
                               max_new_tokens=cfg.calib_max_new_tokens, seed=cfg.seed, batch_size=cfg.batch_size)
    v = st[dst].mean(0) - st[src].mean(0)
    v_rep = repair_vector(v, ss.basis, 1.0, rescale=True)
    sh = steering_overlap(v, ss.basis)
    sh_rand = float(np.mean([steering_overlap(v, haar_basis(ss.d, ss.k_s, seed=s)) for s in range(20)]))
    evals = multitask_sets(model, [src], cfg.n_eval, seed=cfg.seed + 22, split="test", fmt=fmt)[src]
    V = 16
    targets = [[vocab[f"s{i}"] for i in _transform(dst, x, V)] for x in evals.inputs]
    site = f"resid_post.{L}"

    def boundary(ctx):
        return ctx.positions >= (ctx.prompt_lengths[:, None] - 1)

    from interplab.probes.decodeshare import score_forced_choice

    cands = [[a + [evals.stop], t + [evals.stop]] for a, t in zip(evals.answers, targets)]
    rows, base_margin = [], None
    for lam in [0.0] + _list(cfg.steer_scales, float):
        for name, vec in (("v", v), ("repaired", v_rep)):
            if lam == 0.0 and name == "repaired":
                continue
            say(f"steering {name} x {lam}")
            e = Steer(site, vec, positions=boundary, scale=lam)
            g = generate_exact_match(model, evals.prompts, targets, max_new_tokens=cfg.eval_max_new_tokens,
                                     edits=[e], batch_size=cfg.batch_size, stop_tokens=[evals.stop])
            keep = generate_exact_match(model, evals.prompts, evals.answers, max_new_tokens=cfg.eval_max_new_tokens,
                                        edits=[e], batch_size=cfg.batch_size, stop_tokens=[evals.stop])
            fc = score_forced_choice(model, evals.prompts, cands, edits=[e], batch_size=cfg.batch_size * 4)
            margin = fc.logprobs[:, 1] - fc.logprobs[:, 0]  # log p(to-answer) - log p(from-answer)
            if base_margin is None:
                base_margin = margin
            m_, lo, hi = bootstrap_ci(g.correct.astype(float), B=cfg.n_boot, seed=cfg.seed)
            ms, mlo, mhi = bootstrap_ci(margin - base_margin, B=cfg.n_boot, seed=cfg.seed)
            rows.append({"vector": "none" if lam == 0 else name, "scale": lam, "effect": m_, "lo": lo, "hi": hi,
                         "src_acc": keep.accuracy, "margin_shift": ms, "margin_lo": mlo, "margin_hi": mhi})
    df = pd.DataFrame(rows)
    base = df[df["scale"] == 0.0]
    df = pd.concat([base.assign(vector="v"), base.assign(vector="repaired"), df[df["scale"] > 0]],
                   ignore_index=True)
    df.attrs["effect_label"] = f"rate of '{dst}' answers on '{src}' prompts"
    info = {"sh_v": sh, "sh_v_haar_mean": sh_rand, "sqrt_k_over_d": float(np.sqrt(ss.k_s / ss.d)),
            "norm_v": float(np.linalg.norm(v)), "from": src, "to": dst, "k_s": ss.k_s}
    return df, info


def _save(run, out: Mapping[str, Any]) -> None:
    from interplab.figures.decodeshare import (
        ablation_figure, alpha_sweep_figure, h3_grid_figure, null_histogram, patchback_figure, steering_figure,
        variance_share_heatmap,
    )

    run.save_json("info", out["info"] | ({"steering": out["steering_info"]} if "steering_info" in out else {}))
    out["subspace"].save(run.path / "subspace_decode")
    out["subspace_prefill"].save(run.path / "subspace_prefill")
    save_figure(run, "shares", variance_share_heatmap(out["subspace"]))
    save_figure(run, "nulls", null_histogram(out["nulls"]))
    run.save_table("shares", out["subspace"].to_frame())
    if "table" in out:
        run.save_table("ablation", out["table"])
        run.save_table("ablation_examples", out["table_examples"])
        for m in ("fc", "gen"):
            save_figure(run, f"ablation_{m}", ablation_figure(out["table"], metric=m))
    if "loto" in out:
        run.save_table("loto", out["loto"])
        save_figure(run, "loto_gen", ablation_figure(out["loto"], metric="gen", title="LOTO (generation)"))
    if "h3" in out:
        run.save_table("h3_grid", out["h3"])
        for m in ("fc", "gen"):
            save_figure(run, f"h3_{m}", h3_grid_figure(out["h3"], metric=m))
    if "alpha_sweep" in out:
        run.save_table("alpha_sweep", out["alpha_sweep"])
        for m in ("fc", "gen"):
            save_figure(run, f"alpha_{m}", alpha_sweep_figure(out["alpha_sweep"], metric=m))
    if "steering" in out:
        run.save_table("steering", out["steering"])
        save_figure(run, "steering", steering_figure(out["steering"]))
    if "patchback" in out:
        pb = out["patchback"]
        run.save_table("patchback", pb.table)
        run.save_table("patchback_examples", pb.examples)
        if len(pb.table):
            save_figure(run, "patchback", patchback_figure(pb.table))
    if "ranking" in out:
        from interplab.figures.decodeshare import ranking_scatter_figure

        rk = out["ranking"]
        rk.save(run.path / "ranking")
        run.save_table("ranking_scores", rk.scores)
        run.save_table("ranking_metrics", rk.metrics)
        save_figure(run, "ranking_scatter", ranking_scatter_figure(rk.scores, rk.metrics))


@register_experiment("decodeshare", config=DecodeShareConfig,
                     help="DecodeShare H2/H3: decode-only removal of the shared subspace vs prefill-estimated, Haar, "
                          "variance- and energy-matched controls; LOTO; estimator x locus grid; alpha sweep; "
                          "steering overlap; optional patchback rescue rates (parts=...,patchback)")
def decodeshare(cfg: DecodeShareConfig, run) -> None:
    run_decodeshare(cfg, run)
