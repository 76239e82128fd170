"""Patching page: activation patching and attribution patching heatmaps over layer x position / layer x head, and
the patched generation of any selected cell (interplab.probes.lenses; docs/lenses.md)."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="interplab · Patching", page_icon=":microscope:", layout="wide")

from interplab.app.model_jobs import is_organism  # noqa: E402
from interplab.app.runs_view import show_reopened_run  # noqa: E402
from interplab.app.widgets import job_panel, page_model, show_figure  # noqa: E402
from interplab.core.errors import InterplabError  # noqa: E402
from interplab.figures.lenses import attribution_scatter, patching_cell, patching_figure  # noqa: E402
from interplab.figures.arrays import token_label  # noqa: E402
from interplab.probes.lenses import (PATCH_KINDS, compare_to_exact, default_fact_pair,  # noqa: E402
                                     patched_generation)

def _fact_study_box() -> None:
    """Saved `lenses-facts` runs (many pairs); drawn last so the interactive heatmap stays the page's first chart."""
    with st.expander("Over many fact pairs: saved `lenses-facts` runs (e.g. SmolLM2, 50 pairs)"):
        # saved runs only (50 pairs of a real model is ~12 CPU minutes), whatever model is picked above; last on
        # the page so the interactive heatmap stays the page's first chart
        st.caption("One pair shows one reading; `lenses-facts` runs every lens on many clean / corrupt world-fact pairs "
                   "and aggregates with bootstrap intervals over pairs (docs/lenses.md, *On a real model*). Make one "
                   "with `interplab run lenses-facts --set model=real:smollm2-135m-instruct`.")
        from interplab.app.widgets import saved_result  # noqa: E402
        from interplab.figures.lenses import answer_rank_figure  # noqa: E402

        facts = saved_result("lenses-facts", "study", "pt_facts", label="Saved run",
                             hint=" --set model=real:smollm2-135m-instruct")
        if facts is not None:
            n_inc = int(facts.included.sum())
            c = st.columns(3)
            c[0].metric("pairs (included)", f"{facts.n_pairs} ({n_inc})")
            c[1].metric("answer top-1 after the last layer", f"{(facts.pairs['final_rank'] == 0).mean():.2f}")
            c[2].metric("model", str(facts.model).removeprefix("real:"))
            show_figure(answer_rank_figure(facts.rank_per_layer()), key="pt_facts_rank")
            if n_inc:
                c1, c2 = st.columns(2)
                with c1:
                    show_figure(patching_figure(facts.mean_patching("resid_pre"), title=f"resid_pre by token role · "
                                                f"mean over {n_inc} pairs"), key="pt_facts_roles")
                with c2:
                    show_figure(patching_figure(facts.mean_patching("attn_z"), title=f"attn_z per head · mean over "
                                                f"{n_inc} pairs"), key="pt_facts_heads")
                st.caption("Top heads by |mean| over pairs (95% bootstrap interval; boot_freq: share of resamples in "
                           "which the head is in the top k):")
                st.dataframe(facts.top_heads("patching").round(3), hide_index=True, key="pt_facts_top")
                from interplab.results.runs import load_run  # noqa: E402

                saved = load_run(st.session_state["pt_facts"])
                if "map_agreement" in saved.table_names:
                    st.caption("Do the head maps name the same heads? Spearman ρ over heads with an interval over "
                               "pairs, head-permutation p, top-k overlap (the Truth-Score map: the model's committed "
                               "truth-scores run):")
                    st.dataframe(saved.table("map_agreement").round(3), hide_index=True, key="pt_facts_agree")


st.title("Patching")
st.caption("Which activations carry the difference between a clean and a corrupted prompt? Denoising runs the "
           "corrupt prompt and writes in one clean activation per cell; 1 = the clean answer is fully restored. "
           "Attribution patching estimates the whole grid from one backward pass.")

MAX_DEFAULT_CELLS = 3000     # a default grid of at most this many patched forwards (~1 min on 2 CPU cores)
picked = page_model("pt")
model, model_key, is_new = picked.load(), picked.key, picked.is_new
show_reopened_run(("patching", "lenses-facts"))   # a saved run reopened from the Runs page

if is_new:  # a new model: new default pair, with its answers (" Paris" / " Rome" on a real model)
    _pair = default_fact_pair(model)
    # one cell per position unless that grid is large (SmolLM2's chat-templated pair: 12,600 cells, ~30 min);
    # then whole layers, heads only: resid_pre over every position restores the clean run by construction
    _cells = model.n_layers * (1 + model.n_heads) * len(model.tokenizer(_pair.clean)["input_ids"])
    _big = _cells > MAX_DEFAULT_CELLS and not is_organism(picked)
    st.session_state.update(pt_clean=_pair.clean, pt_corrupt=_pair.corrupt, pt_answer=_pair.answer,
                            pt_wrong=_pair.wrong, pt_positions="all" if _big else "each",
                            pt_sites=["attn_z"] if _big else ["resid_pre", "attn_z"])

c1, c2 = st.columns(2)
with c1:
    clean = st.text_area("Clean prompt", key="pt_clean", height=80)
    answer = st.text_input("Answer token (clean)", key="pt_answer",
                           help="metric = logit(answer) − logit(wrong); empty: the clean run's top token")
with c2:
    corrupt = st.text_area("Corrupted prompt (same number of tokens)", key="pt_corrupt", height=80)
    wrong = st.text_input("Wrong token (corrupt)", key="pt_wrong", help="empty: the corrupt run's top token")
c1, c2, c3, c4 = st.columns([3, 1, 1, 1])
with c1:
    sites = st.multiselect("Sites", list(PATCH_KINDS), key="pt_sites",
                           help="attn_z is patched per query head (GQA: heads of one KV group share keys/values)")
with c2:
    direction = st.selectbox("Direction", ["denoise", "noise"], key="pt_direction",
                             help="denoise: run corrupt, patch clean in; noise: run clean, patch corrupt in")
with c3:
    method = st.selectbox("Method", ["exact", "gradient", "ig"], key="pt_method",
                          help="exact activation patching, or attribution patching (gradient / integrated gradients)")
with c4:
    positions = st.selectbox("Positions", ["each", "all"], key="pt_positions",
                             help="each: one cell per position; all: every position of a layer at once")

# the `patching` experiment, as `interplab run patching --set ...` runs it: in place when it is quick, else a job
settings = dict(model=picked.name, backend=picked.backend, device=picked.device, dtype=picked.dtype, clean=clean,
                corrupt=corrupt, answer=answer, wrong=wrong, sites=",".join(sites), positions=positions,
                direction=direction, attribution=method != "exact")
run = job_panel("patching", settings, "pt", model=model, model_key=model_key, label="Run patching",
                button_key="pt_run", disabled=not sites)
if run is None:
    st.info("Press **Run patching** to sweep the grid.")
    _fact_study_box()
    st.stop()

def _pick_cell(kind: str, points: list) -> None:
    """A click on a heatmap cell fills in the 'patched generation' selection below (once per new click, so the
    boxes stay editable while the selection persists)."""
    cell = patching_cell(points[0]) if points else None
    if cell is None or st.session_state.get("pt_last_click") == (kind, cell):
        return
    st.session_state["pt_last_click"] = (kind, cell)
    layer, position, head = cell
    st.session_state.update(pt_cell_site=kind, pt_cell_layer=layer,
                            pt_cell_pos="all" if position is None else position,
                            pt_cell_head="all" if head is None else head)
    st.session_state.pop("pt_gen_text", None)


exact = run.result("exact")
approx = run.result(f"attribution_{method}") if f"attribution_{method}" in run.result_names else None
shown = approx if approx is not None else exact
first = next(iter(exact.results.values()))
st.markdown(f"Metric: logit(`{token_label(exact.answer)}`) − logit(`{token_label(exact.wrong)}`) · "
            f"clean **{first.clean_metric:.3f}** · corrupt **{first.corrupt_metric:.3f}**")
for kind, res in shown.results.items():
    st.subheader(kind)
    pos = None
    if kind == "attn_z" and res.values.ndim == 3:
        pos = st.slider("Query position", 0, len(res.tokens) - 1, len(res.tokens) - 1, key=f"pt_pos_{kind}")
    clicked = show_figure(patching_figure(res, position=pos, clickable=True), key=f"pt_fig_{kind}",
                          filename=f"patching_{kind}", selectable=True)
    _pick_cell(kind, clicked)
    if approx is not None:
        show_figure(attribution_scatter(approx[kind], exact[kind]), key=f"pt_scatter_{kind}")
if approx is not None:
    st.markdown("**Estimate vs exact** (rank and linear correlation over the grid's cells)")
    st.dataframe(compare_to_exact(approx, exact).round(4), hide_index=True, key="pt_compare")

st.subheader("Patched generation of one cell")
st.caption("Click a cell of a heatmap above, or pick it here.")
kinds = list(exact.results)
c1, c2, c3, c4 = st.columns(4)
with c1:
    kind = st.selectbox("Site", kinds, key="pt_cell_site")
with c2:
    layer = st.selectbox("Layer", [int(x) for x in exact[kind].layers], key="pt_cell_layer")
with c3:
    n_pos = len(exact[kind].tokens)
    cell_pos = st.selectbox("Position", ["all"] + list(range(n_pos)), index=n_pos, key="pt_cell_pos",
                            format_func=lambda p: p if p == "all" else f"{p}:{token_label(exact[kind].tokens[p])}")
with c4:
    head = st.selectbox("Head", ["all"] + list(range(model.n_heads)), key="pt_cell_head",
                        disabled=kind != "attn_z")
if st.button("Generate with this cell patched", key="pt_gen"):
    try:
        text = patched_generation(model, clean, corrupt, f"{kind}.{layer}",
                                  None if cell_pos == "all" else int(cell_pos),
                                  None if kind != "attn_z" or head == "all" else int(head), direction=direction)
        base = model.generate([corrupt if direction == "denoise" else clean], max_new_tokens=8).text[0]
        st.session_state["pt_gen_text"] = (base, text)
    except InterplabError as exc:
        st.error(f"Cannot generate: {exc}")
if "pt_gen_text" in st.session_state:
    base, text = st.session_state["pt_gen_text"]
    st.code(f"unpatched: {base}\npatched:   {text}", language=None)
st.dataframe(shown.to_frame().sort_values("normalized", key=abs, ascending=False).head(20).round(4),
             hide_index=True, key="pt_top_cells")

_fact_study_box()
