"""The Hyperfitting page's sections (pages/6_Hyperfitting.py): the targets B of the sidebar's model
A, saved runs, the hyperfit-train / hyperfit-geometry jobs, and the live comparison of A with B
(layer geometry, rank reordering, the entropy-matched temperature control, generations). Widget keys
start with `geo_`. Model computations are cached on the key of both models (`PageModel.key`)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from interplab.app.compute import cached_compute
from interplab.app.model_jobs import loaded_model_job, model_settings, runs_of
from interplab.app.widgets import saved_result, show_figure
from interplab.core.errors import InterplabError

ARM_METRICS = ("ttr", "rep2", "rep3", "diversity", "gen_top1")
HYPERFITTED = ("zoo:text-hyperfit", "zoo:text-late-lora", "zoo:text-full-lora")   # of text-base


def targets_of(name_a: str) -> list[str]:
    """B candidates: the zoo's hyperfitted organisms of text-base, the checkpoints of your
    hyperfit-train runs of this model."""
    zoo = list(HYPERFITTED) if name_a == "zoo:text-base" else []
    return zoo + [f"{p}/checkpoint" for p in runs_of("hyperfit-train", name_a)
                  if Path(p, "checkpoint").is_dir()]


def pick_target(name_a: str) -> str | None:
    targets = targets_of(name_a)
    with st.sidebar:
        st.subheader("Target (B)")
        pick_b = (st.selectbox("Hyperfitted descendant", targets, key="geo_b_pick") if targets
                  else None)
        path_b = st.text_input("Target (B): local checkpoint (overrides)", value="",
                               key="geo_b_path", placeholder="/path/to/hf-checkpoint-dir")
    return path_b.strip() or pick_b


def saved_controls(name_a: str) -> None:
    """A saved `hyperfit-controls` run: ΔDim per arm and the weight change, with its runs table."""
    controls = saved_result("hyperfit-controls", "controls", key="geo_controls_run", loaded=name_a)
    if controls is None:
        return
    from interplab.figures.geometry import delta_dim_by_arm_figure, weight_change_figure

    summary, geo = controls.summary, controls.geometry
    if not (summary["quantity"] == "delta_pr_std").any() and "pr_std_b" in geo.columns:
        # a run saved before the summary had standardised rows: rebuild the intervals from its
        # geometry
        from interplab.probes.hyperfit import summarize_controls

        g = geo.assign(delta_pr_std=geo["pr_std_b"] - geo["pr_std_a"])
        summary = summarize_controls(g, controls.weights, controls.runs)
    left, right = st.columns(2)
    with left:
        show_figure(delta_dim_by_arm_figure(summary), key="geo_controls_ddim")
    with right:
        show_figure(weight_change_figure(controls.summary), key="geo_controls_dw")
    cols = [c for c in ("arm", "seed", "steps", "epochs", "final_train_loss", "converged",
                        "heldout_loss", "stop_step", "best_step", "dW_total")
            if c in controls.runs.columns]
    st.dataframe(controls.runs[cols].round(4), hide_index=True, key="geo_controls_runs")


def saved_tables(name_a: str) -> None:
    """Saved `hyperfit-eval`, `hyperfit-geometry` (its verdicts) and `hyperfit-ksweep` runs."""
    from interplab.figures.geometry import diversity_bars_figure, k_sweep_figure

    ev = saved_result("hyperfit-eval", "eval", key="geo_saved_eval", label="Saved table",
                      loaded=name_a)
    if ev is not None:
        show_figure(diversity_bars_figure(ev.table, metrics=ARM_METRICS), key="geo_saved_bars")
        cols = [c for c in ("setting", "kind", "ttr", "ttr_lo", "ttr_hi", "rep2", "rep3",
                            "diversity", "top1_agreement", "gen_top1", "entropy", "changed_share",
                            "nll")
                if c in ev.table.columns]  # changed_share: did the arm change the replies at all
        st.dataframe(ev.table[cols].round(4), hide_index=True, key="geo_saved_table")
    st.caption("Terminal Expansion verdicts of a saved `hyperfit-geometry` run (headline: "
               "standardised PR with position 0 excluded; raw PR beside it):")
    saved_result("hyperfit-geometry", "validity", key="geo_saved_geo", label="Saved geometry run",
                 loaded=name_a)
    ks = saved_result("hyperfit-ksweep", "k_sweep", key="geo_saved_ks", label="Saved k sweep",
                      loaded=name_a)
    if ks is not None:
        show_figure(k_sweep_figure(ks.frame), key="geo_saved_ksfig")


@dataclass(frozen=True)
class Budget:
    """The sidebar's data and budget of the live comparison."""

    n_texts: int
    max_tokens: int
    exclude_bos: bool
    n_prompts: int
    new_tokens: int
    context: int
    custom: str


def budget() -> Budget:
    with st.sidebar.expander("Data and budget"):
        n_texts = st.number_input("held-out texts", 4, 400, 24, step=4, key="geo_ntexts")
        max_tokens = st.number_input("tokens per text", 16, 1024, 128, step=16, key="geo_maxtok")
        exclude_bos = st.checkbox("exclude BOS / first position", value=True, key="geo_nobos")
        n_prompts = st.number_input("prompts for generations and ranks", 2, 200, 12, step=2,
                                    key="geo_nprompts")
        new_tokens = st.number_input("generated tokens", 8, 256, 64, step=8, key="geo_newtok")
        context = st.number_input("prompt context tokens", 4, 128, 32, step=4, key="geo_ctx")
        custom = st.text_area("custom texts (one per paragraph; blank = held-out corpus)",
                              value="", key="geo_custom")
    return Budget(int(n_texts), int(max_tokens), bool(exclude_bos), int(n_prompts),
                  int(new_tokens), int(context), custom)


def geometry_job(picked, model_a, name_b: str) -> None:
    """The documented `hyperfit-geometry` run of A against B as a job (or a saved one)."""
    from interplab.figures.geometry import pr_by_layer_figure

    # the result's name, as hyperfit-geometry writes it: geometry_<the target folder's name,
    # filename-safe>
    folder = name_b.rstrip("/").rsplit("/", 1)[-1].replace("zoo:", "")
    tag = re.sub(r"[^A-Za-z0-9._+=-]+", "_", folder)
    full, _, _ = loaded_model_job(
        "hyperfit-geometry", f"geometry_{tag.lstrip('.-') or 'target'}", "geo_job", picked=picked,
        model=model_a, label="Run hyperfit-geometry", saved_label="Saved geometry run",
        settings=model_settings("hyperfit-geometry", picked, "base", targets=name_b))
    if full is not None:
        show_figure(pr_by_layer_figure(full, name_a="A", name_b="B"), key="geo_job_pr")


@cached_compute(max_entries=4)
def texts(*, custom_text: str, n: int) -> list[str]:
    if custom_text.strip():
        return [p.strip() for p in custom_text.split("\n\n") if p.strip()][:n]
    from interplab.probes.hyperfit import heldout_texts

    return heldout_texts(n)


@cached_compute("Measuring layer geometry...")
def geometry(a, b, *, texts: list, max_tokens: int, exclude_bos: bool):
    from interplab.probes.hyperfit import compute_layer_geometry

    return compute_layer_geometry(a, b, texts, exclude_bos=exclude_bos, max_tokens=max_tokens)


@cached_compute("Rank reordering along the target's greedy generations...")
def ranks(a, b, *, texts: list, n_prompts: int, new_tokens: int, context: int, max_tokens: int):
    from interplab.probes.hyperfit import rank_reordering

    return rank_reordering(a, b, texts[:n_prompts], texts=texts, context_tokens=context,
                           max_new_tokens=new_tokens, max_tokens=max_tokens)


@cached_compute("Entropy-matched temperature...")
def match(a, b, *, texts: list, max_tokens: int):
    from interplab.probes.hyperfit import match_temperature

    return match_temperature(a, b, texts, max_tokens=max_tokens)


@cached_compute("Generating...")
def generations(a, b, *, texts: list, n_prompts: int, new_tokens: int, context: int, T: float,
                seed: int):
    from interplab.probes.hyperfit import base_ranks_of, context_prompts, generate_continuations

    prompts = context_prompts(a, texts, context)[:n_prompts]
    out = {}
    for label, m, greedy in (("base greedy", a, True), (f"base sampled T={T:.3f}", a, False),
                             ("target greedy", b, True)):
        g, t = generate_continuations(m, prompts, max_new_tokens=new_tokens, greedy=greedy,
                                      temperature=T, seed=seed)
        out[label] = (g, t, base_ranks_of(a, prompts, g))
    return prompts, out


def _d(rows, col: str) -> str:
    return f"{float(rows[col].iloc[0]):+.2f}" if len(rows) else "n/a"


def headline(geo, n_layers: int, exclude_bos: bool) -> None:
    """ΔDim at the last block and the final norm, with the outlier checks. The headline is the
    standardised PR (interplab.probes.hyperfit.HEADLINE_ESTIMATOR; docs/hyperfit.md): a few massive
    coordinates set the raw PR of a real model's last block, so the raw value is shown beside it,
    not instead."""
    from interplab.probes.hyperfit.verdicts import MAX_COORDINATE_CHANGE

    df = geo.to_frame()
    rp = df[(df["site"] == "resid_post") & (df["layer"] == n_layers - 1)]
    fn = df[df["site"] == "final_norm"]
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("ΔDim, last block", _d(rp, "delta_pr_std"),
              help="standardised PR, position 0 excluded: the headline estimator")
    c2.metric("raw PR ΔDim", _d(rp, "delta_pr"), help="the paper's estimator, last block")
    c3.metric("ΔDim, final norm", _d(fn, "delta_pr_std"),
              help=f"standardised; raw {_d(fn, 'delta_pr')}")
    c4.metric("tokens measured", f"{int(df['n_tokens'].iloc[0]):,}")
    for col, what in (("pr_loo", "raw PR"), ("pr_std_loo", "standardised PR")):
        for side, name in (("a", "A"), ("b", "B")):
            moved = float(rp[f"{col}_{side}"].iloc[0]) if len(rp) else 0.0
            if moved > MAX_COORDINATE_CHANGE:
                st.warning(f"Model {name}'s {what} at the last block moves by {moved:.0%} when "
                           f"coordinate {int(rp[f'{col}_dim_{side}'].iloc[0])} is dropped "
                           f"(more than {MAX_COORDINATE_CHANGE:.0%}): one massive coordinate "
                           "sets it, so its ΔDim is not a dimension change (validity check "
                           "outlier_dominance).")
    if not exclude_bos:
        st.warning("Position 0 is included: on real models it carries a massive activation that "
                   "dominates the covariance (even the standardised PR); the headline excludes it.")


def layer_views(geo) -> None:
    from interplab.figures.geometry import cos_l2_figure, eigen_spectrum_figure, pr_by_layer_figure

    left, right = st.columns(2)
    with left:
        show_figure(pr_by_layer_figure(geo, name_a="A", name_b="B"), key="geo_pr")
    with right:
        show_figure(cos_l2_figure(geo), key="geo_cosl2")
    with st.expander("Results table and last-layer eigen-spectrum", expanded=True):
        st.dataframe(geo.to_frame().round(4), hide_index=True, key="geo_table")
        show_figure(eigen_spectrum_figure(geo, name_a="A", name_b="B"), key="geo_spectrum")


def rank_reordering(a, b, key: tuple, txt: list, bud: Budget) -> None:
    from interplab.figures.geometry import rank_histogram_figure

    try:
        rr = ranks(a, b, key=key, texts=txt, n_prompts=bud.n_prompts, new_tokens=bud.new_tokens,
                   context=bud.context, max_tokens=bud.max_tokens)
    except InterplabError as exc:
        st.error(f"Cannot compute rank reordering: {exc}")
        st.stop()
    left, right = st.columns([3, 2])
    with left:
        show_figure(rank_histogram_figure(rr), key="geo_ranks")
    with right:
        st.dataframe(rr.to_frame().assign(value=lambda d: d["value"].astype(float).round(4)),
                     hide_index=True, key="geo_rank_summary")


def temperature(a, b, key: tuple, txt: list, bud: Budget) -> tuple[float, int]:
    """The entropy-matched temperature T* and the sampling temperature and seed for the base."""
    from interplab.figures.geometry import entropy_temperature_figure

    m = match(a, b, key=key, texts=txt, max_tokens=bud.max_tokens)
    left, right = st.columns([3, 2])
    with left:
        show_figure(entropy_temperature_figure(m), key="geo_temperature")
    with right:
        st.markdown(f"Entropy-matched temperature **T\\* = {m.T:.3f}**: the base model's mean "
                    f"teacher-forced entropy at T\\* equals the target's ({m.target_entropy:.3f} "
                    f"nats; base at T=1: {m.base_entropy:.3f}). Temperature never changes the "
                    "argmax, so greedy decoding is identical at every T; the control samples at "
                    "T\\*.")
        T = st.slider("sampling temperature for the base", 0.05, 2.0,
                      float(min(max(m.T, 0.05), 2.0)), 0.01, key="geo_T")
        seed = st.number_input("seed", 0, 10_000, 0, key="geo_seed")
    return float(T), int(seed)


def side_by_side(a, b, key: tuple, txt: list, bud: Budget, T: float, seed: int) -> None:
    """Diversity of the base's greedy and sampled replies and the target's, and one prompt's
    replies."""
    from interplab.figures.geometry import diversity_bars_figure, repetition_html
    from interplab.probes.hyperfit import metrics_table

    prompts, gens = generations(a, b, key=key, texts=txt, n_prompts=bud.n_prompts,
                                new_tokens=bud.new_tokens, context=bud.context, T=T, seed=seed)
    table = metrics_table({k: (g, t) for k, (g, t, _) in gens.items()})
    table["gen_top1"] = [float((r == 1).mean()) for (_, _, r) in gens.values()]
    show_figure(diversity_bars_figure(table, metrics=ARM_METRICS), key="geo_diversity")
    st.dataframe(table.round(4), hide_index=True, key="geo_gen_table")

    st.subheader("Generations side by side")
    i = int(st.number_input("prompt", 0, len(prompts) - 1, 0, key="geo_prompt_idx"))
    tok = a.tokenizer
    st.markdown("**Prompt:** " + tok.decode(prompts[i], skip_special_tokens=True))
    st.caption("Red background: the token completes a 3-gram already seen in this generation. Bold "
               "blue / purple: the base model ranks this token 2-10 / >10 given the same prefix "
               "(hover for the rank).")
    for col, (label, (g, _, r)) in zip(st.columns(len(gens)), gens.items()):
        with col:
            st.markdown(f"**{label}**")
            units = [tok.convert_tokens_to_string([tok.convert_ids_to_tokens(t)]) for t in g[i]]
            st.markdown(repetition_html(units, 3, ranks=r[i].tolist()), unsafe_allow_html=True)
