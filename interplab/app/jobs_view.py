"""Long work on a page: `job_panel` sizes it, estimates it, launches it as a job, follows and cancels it, and returns
its run when it lands (docs/results_figures_app.md, "Jobs on a page").

    run = job_panel("patching", {"model": picked.name, "sites": "resid_pre,attn_z"}, key="pt", model=model)
    if run is not None:
        exact = run.result("exact")          # the same run `interplab run patching --set ...` writes

Work whose estimate is at most `INLINE_MAX_S` seconds (an organism's grid, say) runs right in the page, with a
progress bar, through the same `run_experiment`; anything longer, or without an estimate, is a job
(`interplab.jobs`): its own process, progress polled every `POLL_S` seconds, a Cancel button, and the result on the
page when it finishes. The panel finds its job again after the tab was closed (the newest job of this experiment and
model with the same settings), and keeps showing a finished one's result. An estimate over the time budget
(`interplab.jobs.time_budget_s`) needs a tick in "Launch anyway"."""
from __future__ import annotations

import json
import os
from pathlib import Path

import streamlit as st

__all__ = ["job_panel", "job_progress", "jobs_overview", "INLINE_MAX_S", "POLL_S", "inline_max_s"]

INLINE_MAX_S = 5.0        # estimated seconds up to which a page computes in place instead of launching a job
INLINE_ENV = "INTERPLAB_INLINE_MAX_S"
POLL_S = 2.0


def inline_max_s() -> float:
    try:
        return float(os.environ.get(INLINE_ENV, INLINE_MAX_S))
    except ValueError:
        return INLINE_MAX_S


def _signature(experiment: str, overrides: dict) -> str:
    return json.dumps([experiment, sorted((str(k), str(v)) for k, v in overrides.items())])


def _estimate(experiment: str, overrides: dict, model, model_key, size_fn=None):
    """Size + estimate, cached per (settings, model) in the session; the calibration per model. size_fn: the
    size of an experiment that declares none (`SIZES`), with a committed run's wall time as the estimate."""
    from interplab import jobs

    if size_fn is not None:
        return _estimate_sized(experiment, overrides, model, model_key, size_fn)

    cache = st.session_state.setdefault("_job_estimates", {})
    ck = (_signature(experiment, overrides), str(model_key), _runs_stamp(experiment))
    if ck not in cache:
        rates = st.session_state.setdefault("_job_flop_rates", {})
        size = jobs.work_size(experiment, overrides, model)
        rate = rates.get(str(model_key))
        if rate is None and size is not None and size.flops and model is not None:
            from interplab.jobs.estimate import calibrate

            per_row = size.tokens // size.forwards if size.forwards else 32
            rate = rates[str(model_key)] = calibrate(model, tokens=max(4, min(per_row, 512)))
        cache[ck] = jobs.estimate_for(experiment, overrides, loaded=model, flop_rate=rate)
    return cache[ck]


def _runs_stamp(experiment: str) -> float:
    """Changes when a run of `experiment` finishes (a new rate to estimate from)."""
    from interplab.results.runs import runs_root

    d = runs_root() / experiment
    try:
        return d.stat().st_mtime
    except OSError:
        return 0.0


def job_progress(st_job, key: str) -> None:  # noqa: ARG001 - key kept for callers that draw several
    """A job's progress: a bar for its outermost counted task (done / total, rate, time left) and a line per other
    task (e.g. `stages` with the phase running, `prompts 120/292` of a harvest inside it)."""
    from interplab.jobs import format_seconds

    p = st_job.progress or {}
    tasks = p.get("tasks") or []
    if not tasks:
        st.progress(0.0, text=f"{st_job.state}: starting (loading the model)…")
        return
    counted = next((t for t in tasks if t.get("total")), None)
    for t in tasks:
        line = f"{t.get('done', 0):,} / {t.get('total', 0):,} {t.get('unit', '')}" if t.get("total") else \
            f"{t.get('unit', '')}: running for {format_seconds(t.get('elapsed_s'))}"
        if t.get("rate") and t.get("total"):
            line += f" · {t['rate']:.3g} {t.get('unit', '')}/s · {format_seconds(t.get('eta_s'))} left"
        if t.get("phase"):
            line += f" · {t['phase']}"
        if t is counted:
            st.progress(min(1.0, float(t.get("fraction") or 0.0)), text=line)
        else:
            st.caption(("↳ " if t is not tasks[0] else "") + line)


def _find_job(experiment: str, overrides: dict, key: str):
    """The job this panel follows: the one it launched in this session (while it runs, whatever the settings are
    now; once ended, only if it had these settings), else — a reopened tab — the newest job of the experiment and
    model with these settings."""
    from interplab import jobs
    from interplab.core.errors import InterplabError

    want = {str(k): str(v) for k, v in overrides.items()}
    jid = st.session_state.get(f"{key}__job")
    if jid == "":          # this session computed in place since: its own result wins over older jobs
        return None
    if jid:
        try:
            mine = jobs.status(jid)
            if mine.active or mine.record.overrides == want:
                return mine
        except InterplabError:
            pass
        st.session_state.pop(f"{key}__job", None)
    for found in jobs.list_jobs(experiment=experiment, model=str(overrides.get("model", "")) or None):
        if found.record.overrides == want:
            st.session_state[f"{key}__job"] = found.id
            return found
    return None


def _run_inline(experiment: str, overrides: dict, key: str):
    """Run in this process (short work), with a progress bar fed by the progress protocol."""
    from interplab.core import progress
    from interplab.experiments.registry import run_experiment

    bar = st.progress(0.0, text=f"Running {experiment}…")

    def sink(snap):
        m = snap.main
        if m is not None and m.total:
            bar.progress(min(1.0, m.done / m.total), text=f"{m.done:,} / {m.total:,} {m.unit}")

    with progress.reporting_to(sink):
        path = run_experiment(experiment, overrides)
    bar.empty()
    return path


def _cancel(job_id: str) -> None:
    from interplab import jobs

    jobs.cancel(job_id)


def _follow(job_id: str, key: str) -> None:
    """The live part: polled every POLL_S seconds; a finished job reruns the page so its result shows."""
    from interplab import jobs

    @st.fragment(run_every=POLL_S)
    def live():
        now = jobs.status(job_id)
        if not now.active:
            st.rerun()
        job_progress(now, key)
        st.button("Cancel", key=f"{key}__cancel", on_click=_cancel, args=(job_id,),
                  help="stops the job's process and removes its unfinished run")

    live()


def job_panel(experiment: str, overrides: dict, key: str, *, model=None, model_key=None, label: str = "Run",
              button_key: str | None = None, disabled: bool = False, help: str | None = None, size_fn=None):
    """Size + estimate, a launch button, live progress with Cancel, and the finished run (a `LoadedRun`) or None.

    overrides: the experiment's settings as `--set` would take them (the page's widgets); model: the loaded LabModel
    (sizes the work and calibrates the estimate); model_key: what identifies it for caching (PageModel.key);
    size_fn: `size(cfg, model) -> WorkSize` for an experiment that declares no size (`SIZES`)."""
    from interplab import jobs
    from interplab.core.errors import InterplabError
    from interplab.results.runs import load_run

    overrides = {str(k): str(v) for k, v in overrides.items()}
    sig = _signature(experiment, overrides)
    try:
        est = _estimate(experiment, overrides, model, model_key, size_fn)
    except InterplabError as exc:
        st.error(f"Cannot size this run: {exc}")
        return None
    inline = est.seconds is not None and est.seconds <= inline_max_s()
    how = "computed here" if inline else "runs as a job: you can leave the page, and cancel it"
    st.caption(f"**Work:** {est.describe()} — {how}." + (f"  \n{est.size.detail}" if est.size and est.size.detail
                                                           else ""))
    current = _find_job(experiment, overrides, key)
    busy = current is not None and current.active
    confirmed = True
    if est.over_budget and not busy:
        st.warning(f"The estimate ({jobs.format_seconds(est.seconds)}) exceeds the time budget "
                   f"({jobs.format_seconds(est.budget_s)}); make the work smaller, or launch it anyway.")
        confirmed = st.checkbox("Launch anyway", key=f"{key}__confirm")
    go = st.button(label, key=button_key or f"{key}__go", type="primary", help=help,
                   disabled=disabled or busy or not confirmed)
    if go:
        try:
            if inline:
                st.session_state[f"{key}__run"] = (sig, str(_run_inline(experiment, overrides, key)))
                st.session_state[f"{key}__job"] = ""
            else:
                current = jobs.submit(experiment, overrides, size=est.size, estimate_s=est.seconds,
                                      label=key)
                st.session_state[f"{key}__job"] = current.id
        except InterplabError as exc:
            st.error(f"Cannot run {experiment}: {exc}")
            return None
        if not inline:
            st.rerun()             # draw the page again with the launch button off and the job's progress on
    if busy:
        if current.record.overrides != overrides:
            st.caption("A job with other settings is running for this panel; its result shows when you set them "
                       "back, or in Runs.")
        _follow(current.id, key)
        return None
    if current is not None:
        if current.state == "complete" and current.run:
            st.session_state[f"{key}__run"] = (sig, str(current.run))
            st.caption(f"Job {current.id} finished in {jobs.format_seconds(current.wall_s)} "
                       f"(estimated {jobs.format_seconds(current.record.estimate_s)}); its run is in Runs.")
        elif current.state == "failed":
            st.error(f"The last job with these settings failed: "
                     f"{current.error.splitlines()[0] if current.error else 'no error recorded'}")
        elif current.state == "cancelled":
            st.caption("The last job with these settings was cancelled; its unfinished run was removed.")
    saved = st.session_state.get(f"{key}__run")
    if not saved or saved[0] != sig or not Path(saved[1]).is_dir():
        return None
    try:
        return load_run(saved[1])
    except InterplabError as exc:
        st.warning(f"Cannot open the run: {exc}")
        return None


def jobs_overview(key: str = "jobs") -> None:
    """The Runs page's jobs: every running job with its progress and a Cancel button (polled), and the last few
    finished, failed or cancelled ones. A finished job's run is in the table of runs below."""
    from interplab import jobs

    @st.fragment(run_every=POLL_S)
    def live():
        active = jobs.list_jobs(active=True)
        st.subheader(f"Jobs running ({len(active)})" if active else "Jobs")
        if not active:
            st.caption("No job is running. Pages launch long work as jobs; so does `interplab jobs submit NAME`.")
        for j in active:
            model = f" · {j.record.model}" if j.record.model else ""
            st.markdown(f"**{j.record.experiment}**{model} · `{j.id}` · {j.state}"
                        + (f" · estimated {jobs.format_seconds(j.record.estimate_s)}" if j.record.estimate_s
                           else ""))
            job_progress(j, f"{key}_{j.id}")
            st.button("Cancel", key=f"{key}_cancel_{j.id}", on_click=_cancel, args=(j.id,))
        if st.session_state.get(f"{key}_n_active", len(active)) > len(active):
            st.session_state[f"{key}_n_active"] = len(active)
            st.rerun()            # a job ended: the runs table below gains its run
        st.session_state[f"{key}_n_active"] = len(active)

    live()
    done = [j for j in jobs.list_jobs(active=False)][:10]
    if done:
        with st.expander(f"Recent jobs ({len(done)})"):
            st.dataframe([{"job": j.id, "experiment": j.record.experiment, "model": j.record.model,
                           "state": j.state, "wall": jobs.format_seconds(j.wall_s),
                           "estimated": jobs.format_seconds(j.record.estimate_s),
                           "run or error": str(j.run) if j.run else (j.error.splitlines()[0] if j.error else "")}
                          for j in done], hide_index=True, key=f"{key}_recent")


def _committed_duration(experiment: str, model_name: str) -> tuple[float, str] | None:
    """(wall seconds, folder) of the newest committed run of `experiment` on `model_name` (results/)."""
    from interplab.app.model_jobs import run_model_name
    from interplab.results.runs import load_run, read_manifest, shipped_runs, shipped_runs_root

    for p in reversed(shipped_runs(experiment)):
        try:
            if run_model_name(load_run(p).config) == model_name:
                dur = (read_manifest(p) or {}).get("duration_s")
                if dur:
                    return float(dur), p.relative_to(shipped_runs_root().parent).as_posix()
        except Exception:  # noqa: BLE001 - an unreadable committed run is no estimate
            continue
    return None


def _estimate_sized(experiment: str, overrides: dict, model, model_key, size_fn):
    """An experiment without a declared size: `size_fn` sizes it; the estimate is, best first, the user's earlier
    runs on this model, the committed run on this model (its whole wall time: loading, every fit and null, on one
    thread of a 2-core machine), else a calibrated forward for the counted forwards only (a lower bound: probe
    fits, permutation nulls and backward passes come on top)."""
    from interplab import jobs
    from interplab.app.model_jobs import MODEL_FIELDS, run_model_name
    from interplab.experiments.registry import resolve_config
    from interplab.jobs.estimate import Estimate

    cache = st.session_state.setdefault("_job_estimates", {})
    ck = (_signature(experiment, overrides), str(model_key), _runs_stamp(experiment), "sized")
    if ck in cache:
        return cache[ck]
    _, cfg, _, _ = resolve_config(experiment, overrides)
    name = run_model_name({f: getattr(cfg, f, None) for f in (*MODEL_FIELDS, "models")}) or ""
    size = size_fn(cfg, model) if model is not None else None
    est = jobs.estimate(experiment, size, model=name, device=str(getattr(cfg, "device", "cpu") or "cpu"))
    if est.seconds is None:
        done = _committed_duration(experiment, name)
        if done is not None:
            est = Estimate(done[0], f"the committed run on this model took this long ({done[1]})", size,
                           est.budget_s)
        elif size is not None and size.flops and model is not None:
            est = jobs.estimate(experiment, size, model=name, loaded=model)
            est = Estimate(est.seconds, est.source + "; the model's counted forwards only, other work comes on top", size,
                           est.budget_s)
    cache[ck] = est
    return est
