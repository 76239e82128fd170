"""DecodeShare experiments on the multitask-decode organisms (methods/decodeshare.md sections 5 and 7).

* `decodeshare-layers`: the shared decode subspace at every layer (`probes.decodeshare.scan_layers`); with
  `from_run=RUN` it reads a saved scan's tables instead and judges them again (no model).
* `decodeshare`: the intervention study at one layer (`probes.decodeshare.run_study`; parts `patchback` and
  `ranking` are opt-in).

Both save their verdicts (`probes.decodeshare.verdicts`) as the run's validity report.
* `decodeshare-tasks`: the real-model task screen (unedited accuracy of the built-in tasks, `data=real-tasks`).

Both load the model, run the method API and write its tables, subspaces and figures into the run. Defaults are
sized for a 2-core CPU and a 4-layer d=128 organism (a few minutes).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from interplab.core import progress
from interplab.core.errors import ConfigError
from interplab.data.decode_tasks import REAL_TASKS
from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure
from interplab.probes.decodeshare import (
    DecodeShareConfig, DecodeShareLayersConfig, DecodeShareStudy, LayerScan, run_study, scan_layers,
)
from interplab.probes.decodeshare.verdicts import layer_verdicts, study_verdicts
from interplab.probes.validity import VALIDITY_RESULT, ValidityReport


def _load(cfg):
    import interplab

    return interplab.load_model(cfg.model, backend=cfg.backend, dtype=cfg.dtype)


def _tag(threshold: str) -> str:
    return threshold.replace("=", "").replace(".", "p")


def save_layer_scan(run, scan: LayerScan, cfg: DecodeShareLayersConfig) -> None:
    from interplab.figures.decodeshare import principal_angle_figure, variance_share_heatmap

    run.save_result("scan", scan)                   # the typed result; the folders and tables below are views of it
    for l, mode, thr in scan.entries():             # one folder per subspace, as the atlas's direction inputs read
        run.save_result(f"subspace_L{l}_{mode}_{_tag(thr)}", scan.subspace(l, mode, thr))
        run.save_result(f"subspace_L{l}_{mode}_{_tag(thr)}_prefill", scan.subspace(l, mode, thr, prefill=True))
    save_layer_tables(run, scan.summary, scan.sweep, scan.sweep_layer, null_perm_B=cfg.null_perm_B,
                      null_rot_B=cfg.null_rot_B)
    save_figure(run, "angles", principal_angle_figure(scan.angles, title="Principal angles decode vs prefill"))
    for thr in dict.fromkeys(k[2] for k in scan.entries()):
        save_figure(run, f"shares_{_tag(thr)}", variance_share_heatmap(scan.subspace(scan.sweep_layer, "paper", thr)))


def save_layer_tables(run, summary, sweep, sweep_layer: int, *, null_perm_B: int, null_rot_B: int) -> None:
    """The scan's tables, their figures and the H1 verdicts over the layers (paper estimator; tau_k = 1 when it
    was scanned, else the first threshold)."""
    from interplab.figures.decodeshare import layer_summary_figure, sensitivity_figure

    run.save_table("layers", summary)
    run.save_table("sensitivity", sweep)
    save_figure(run, "layers", layer_summary_figure(summary))
    save_figure(run, "sensitivity", sensitivity_figure(sweep, title=f"Sensitivity at layer {sweep_layer}"))
    thr = "tau_k=1" if "tau_k=1" in set(summary["threshold"]) else str(summary["threshold"].iloc[0])
    run.save_result(VALIDITY_RESULT, ValidityReport.of(layer_verdicts(
        summary, null_perm_B=null_perm_B, null_rot_B=null_rot_B, threshold=thr)))


def rejudge_layer_scan(run, source: str) -> None:
    """A saved `decodeshare-layers` run judged again from its own tables (no model, nothing recomputed but the
    verdicts): its layers and sensitivity tables, figures and the H1 verdicts with the null sizes of its config;
    json/source names the run and its config."""
    from interplab.results.runs import load_run

    src = load_run(source)
    if src.manifest.get("kind") != "decodeshare-layers":
        raise ConfigError(f"from_run must be a decodeshare-layers run; {source} is a {src.manifest.get('kind')!r} run")
    scfg = src.config
    summary, sweep = src.table("layers"), src.table("sensitivity")
    # the sweep layer as `scan_layers` resolved it (-1: the middle of a scan over every layer)
    layer = int(scfg["sweep_layer"]) if scfg["sweep_layer"] >= 0 else (int(summary["layer"].max()) + 1) // 2
    run.save_json("source", {"run": str(source), "name": src.manifest.get("name"), "config": scfg})
    save_layer_tables(run, summary, sweep, layer, null_perm_B=int(scfg["null_perm_B"]),
                      null_rot_B=int(scfg["null_rot_B"]))


@register_experiment("decodeshare-layers", config=DecodeShareLayersConfig,
                     help="DecodeShare H1: shared decode subspace per layer (paper + repo estimators), nulls, "
                          "decode-vs-prefill angles, tau/rho sensitivity; from_run=RUN judges a saved scan again")
def decodeshare_layers(cfg: DecodeShareLayersConfig, run) -> None:
    if cfg.from_run:
        rejudge_layer_scan(run, cfg.from_run)
        return
    model = _load(cfg)
    save_layer_scan(run, scan_layers(model, cfg, calib_sets=_user_sets(model, cfg)[0] if _user_file(cfg) else None),
                    cfg)


def _user_file(cfg) -> bool:
    # data= names a user file unless it is a built-in set ('real-tasks', built inside the method API)
    from interplab.probes.decodeshare.tasks import BUILTIN_DATA

    return bool(cfg.data) and cfg.data not in BUILTIN_DATA


def _user_sets(model, cfg):
    from interplab.data.user import user_records
    from interplab.probes.decodeshare.tasks import user_task_sets

    return user_task_sets(model, user_records("decodeshare", cfg.data), seed=cfg.seed)


def save_study(run, study: DecodeShareStudy) -> None:
    from interplab.figures import decodeshare as figs

    steering = {"steering": study.steering.info} if study.steering is not None else {}
    run.save_json("info", study.info | steering)
    run.save_result("study", study)                 # the typed result; the folders and tables below are views of it
    run.save_result("subspace_decode", study.subspaces.decode)
    run.save_result("subspace_prefill", study.subspaces.prefill)
    save_figure(run, "shares", figs.variance_share_heatmap(study.subspaces.decode))
    save_figure(run, "nulls", figs.null_histogram(study.nulls))
    run.save_table("shares", study.subspaces.decode.to_frame())
    if study.table is not None:
        run.save_table("ablation", study.table)
        run.save_table("ablation_examples", study.table_examples)
        run.save_table("shared_vs_controls", study.shared_vs_controls)
        for m in study.config.metrics:
            save_figure(run, f"ablation_{m}", figs.ablation_figure(study.table, metric=m))
    if study.loto is not None:
        run.save_table("loto", study.loto)
        if study.loto_contrasts is not None:
            run.save_table("loto_contrasts", study.loto_contrasts)
        if "gen" in study.config.metrics:
            save_figure(run, "loto_gen", figs.ablation_figure(study.loto, metric="gen", title="LOTO (generation)"))
    if study.h3 is not None:
        run.save_table("h3_grid", study.h3)
        for m in study.config.metrics:
            save_figure(run, f"h3_{m}", figs.h3_grid_figure(study.h3, metric=m))
    if study.alpha_sweep is not None:
        run.save_table("alpha_sweep", study.alpha_sweep)
        run.save_table("sweep_controls", study.sweep_controls)
        run.save_table("sweep_contrasts", study.sweep_contrasts)
        for m in study.config.metrics:
            save_figure(run, f"alpha_{m}", figs.alpha_sweep_figure(study.alpha_sweep, metric=m))
    if study.steering is not None:
        run.save_table("steering", study.steering.table)
        save_figure(run, "steering", figs.steering_figure(study.steering.table))
    if study.patchback is not None:
        pb = study.patchback
        run.save_table("patchback", pb.table)
        run.save_table("patchback_examples", pb.examples)
        if len(pb.table):
            save_figure(run, "patchback", figs.patchback_figure(pb.table))
    if study.ranking is not None:
        rk = study.ranking
        run.save_result("ranking", rk)
        run.save_table("ranking_scores", rk.scores)
        run.save_table("ranking_metrics", rk.metrics)
        save_figure(run, "ranking_scatter", figs.ranking_scatter_figure(rk.scores, rk.metrics))
    run.save_result(VALIDITY_RESULT, ValidityReport.of(study_verdicts(study)))


@register_experiment("decodeshare", config=DecodeShareConfig,
                     help="DecodeShare H2/H3: decode-only removal of the shared subspace vs prefill-estimated, Haar, "
                          "variance- and energy-matched controls; LOTO; estimator x locus grid; alpha sweep; "
                          "steering overlap; optional patchback rescue rates (parts=...,patchback)")
def decodeshare(cfg: DecodeShareConfig, run) -> None:
    model = _load(cfg)
    with progress.task(0, "stages", phase="calibration") as bar:   # no count known ahead: progress.json's phase
        study = run_study(model, cfg, sets=_user_sets(model, cfg) if _user_file(cfg) else None, progress=bar.phase)
    save_study(run, study)


@dataclass
class DecodeShareTasksConfig:
    """Settings of `decodeshare-tasks`: which built-in real-model tasks (`interplab.data.decode_tasks`) the model
    answers, unedited, on the evaluation split the study uses (the same seed, n_calib and n_eval select the same
    rows). tasks: any of `REAL_TASKS` (default all). eval_max_new_tokens: reply length (a short sentence).
    min_acc: the generation exact match a task needs to enter the study (the issue's 60 %). split: 'eval' screens
    the rows the study scores, 'calib' the study's calibration rows (disjoint from them), so the task set can be
    chosen on items the study does not score."""
    model: str = "real:smollm2-135m-instruct"
    backend: str = "bridge"
    dtype: str = "float32"
    tasks: list[str] = field(default_factory=lambda: list(REAL_TASKS))
    n_calib: int = 32
    n_eval: int = 40
    eval_max_new_tokens: int = 12
    min_acc: float = 0.6
    split: str = "eval"
    n_boot: int = 2000
    batch_size: int = 32
    seed: int = 0

    def validate(self) -> None:
        # task names are checked once, where the rows are built (decode_tasks.decode_task_rows)
        if not 0 < self.min_acc <= 1:
            raise ConfigError(f"min_acc must be in (0, 1]; got {self.min_acc}")
        if self.split not in ("eval", "calib"):
            raise ConfigError(f"split must be 'eval' or 'calib'; got {self.split!r}")


@register_experiment("decodeshare-tasks", config=DecodeShareTasksConfig,
                     help="DecodeShare on a real model: unedited exact match (parsed replies) and forced choice of "
                          "each built-in real-model task, with bootstrap CIs; which tasks enter the study")
def decodeshare_tasks(cfg: DecodeShareTasksConfig, run) -> None:
    from interplab.figures.decodeshare import ablation_figure
    from interplab.probes.decodeshare.evaluation import screen_tasks
    from interplab.probes.decodeshare.tasks import real_task_sets

    cfg.validate()
    model = _load(cfg)
    calib, evals = real_task_sets(model, cfg.tasks, n_calib=cfg.n_calib, n_eval=cfg.n_eval, seed=cfg.seed)
    rows = evals if cfg.split == "eval" else calib
    screen = screen_tasks(model, rows, min_acc=cfg.min_acc, max_new_tokens=cfg.eval_max_new_tokens,
                          batch_size=cfg.batch_size, n_boot=cfg.n_boot, seed=cfg.seed)
    run.save_result("screen", screen)
    run.save_table("tasks", screen.table)
    run.save_table("examples", screen.examples)
    run.save_json("passing", {"min_acc": screen.min_acc, "tasks": screen.passing, "split": cfg.split})
    save_figure(run, "tasks", ablation_figure(screen.table, metric="gen", title="Unedited exact match per task"))
