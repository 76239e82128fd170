"""The PCFG page's sections (pages/5_PCFG.py): the grammar picker, whether the model may be compared
with it, a sample's trees, next-token distributions, held-out KL, parse probes, the construction
mirror and the seeded depth sweep. Widget keys start with `pcfg_`. Model computations are cached on
the PageModel's key and the grammar's full text."""
from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st
import torch

from interplab.app.compute import cached_compute
from interplab.app.widgets import later_verdicts, saved_result, show_figure
from interplab.core.errors import InterplabError
from interplab.figures.pcfg import (kl_by_position_figure, local_to_global_heatmap, lstar_figure,
                                    next_token_figure, parse_tree_figure, probe_curves_figure)
from interplab.grammar import EXAMPLES, PCFG, next_token_logprobs, prefix_span_posteriors, viterbi

MAX_EDIT_RULES = 400
TRAINING = "model's training grammar"
CUSTOM = "custom (edit rules)"
# a model without a grammar of its own opens on toy-english: its samples are sentences with nested
# phrases, where the first example alphabetically ("hand") samples "a a a" with one parse of p = 1,
# which shows nothing
DEFAULT_EXAMPLE = "toy-english"
ORGANISMS = "`zoo:pcfg-L2`, `zoo:pcfg-L4`, `zoo:pcfg-L6`, `zoo:pcfg-rcnf-L4`, `zoo:pcfg-sib-L4`."


def organism_grammar(model):
    """The grammar a PCFG organism was trained on (its grammar.json), or None."""
    if model is None:
        return None
    try:
        from interplab.zoo.recipes.pcfg import grammar_of

        return grammar_of(model)
    except (InterplabError, OSError):
        return None


@cached_compute(max_entries=16)
def grammar_from_text(*, text: str) -> dict:
    return PCFG.from_string(text, name="custom").to_dict()


def grammar_key(picked, g) -> tuple:
    """What a model computation on grammar `g` depends on: the model and the grammar's full text."""
    return picked.key, g.name, g.to_string()


def pick_grammar(name: str, org_g):
    """The sidebar's grammar: the model's own (a newly picked PCFG organism brings it), an example
    or edited rules. Returns (grammar, source); stops the page on a grammar error."""
    sources = ([TRAINING] if org_g is not None else []) + sorted(EXAMPLES) + [CUSTOM]
    if st.session_state.get("pcfg_grammar_for") != name:
        st.session_state["pcfg_grammar_for"] = name
        st.session_state["pcfg_source"] = TRAINING if org_g is not None else DEFAULT_EXAMPLE
    if st.session_state.get("pcfg_source") not in sources:
        st.session_state["pcfg_source"] = TRAINING if org_g is not None else DEFAULT_EXAMPLE
    with st.sidebar:
        st.subheader("Grammar")
        src = st.selectbox("Grammar", sources, key="pcfg_source")
    if src == TRAINING:
        return org_g, src
    if src != CUSTOM:
        return EXAMPLES[src](), src
    text = st.sidebar.text_area("Rules (A -> B C [p] / A -> 'a' [p]; first LHS = start)",
                                value=EXAMPLES["toy-english"]().to_string(), height=260,
                                key="pcfg_rules")
    if text.count("\n") > MAX_EDIT_RULES:
        st.error(f"at most {MAX_EDIT_RULES} rules in the editor; load bigger grammars from Python.")
        st.stop()
    try:
        return PCFG.from_dict(grammar_from_text(text=text)), src
    except InterplabError as e:
        st.error(f"**Grammar error.** {e}")
        st.stop()


def may_compare(model, model_err, g, src: str, org_g, name: str) -> bool:
    """May the model be compared with grammar `g`? Comparing a model with a grammar it was not
    trained on gives KLs of many nats that mean nothing: only with the organism's own grammar, or on
    request when the tokenizer at least covers the terminals."""
    if model is None:
        st.info(f"Model `{name}` is not available ({model_err}); showing the grammar alone. PCFG "
                f"organisms: {ORGANISMS}")
        return False
    vocab = model.tokenizer.get_vocab()
    covers = all(t in vocab for t in g.terminals) and model.tokenizer.eos_token_id is not None
    if not covers:
        st.info(f"`{name}` was not trained on this grammar (its tokenizer lacks the terminals); "
                "model comparisons are hidden. Pick a PCFG organism (`zoo:pcfg-L4`): it brings its "
                "training grammar.")
        return False
    if src == TRAINING:
        return True
    why = ("it has no `grammar.json`, so it was not trained on a PCFG" if org_g is None else
           f"it was trained on its own grammar `{org_g.name}`, not on `{g.name}`")
    st.info(f"Model comparisons are hidden: {why}, and a KL against a grammar the model never saw "
            "measures nothing. Pick a PCFG organism (`zoo:pcfg-L4`) and its training grammar.")
    return st.checkbox("Compare anyway", False, key="pcfg_compare_anyway")


def sample_trees(g):
    """A sampled sentence with its gold tree (shaded by the exact prefix span posterior) beside the
    Viterbi tree. Returns (words, tokens [1, n], lengths tensor)."""
    c1, c2 = st.columns([1, 1])
    with c1:
        seed = st.number_input("Sample seed", min_value=0, value=0, step=1, key="pcfg_seed")
    with c2:
        max_len = st.number_input("max length (longer samples are truncated, never re-sampled)",
                                  min_value=2, max_value=64, value=32, step=1, key="pcfg_maxlen")
    toks, trees = g.sample(1, seed=int(seed), max_len=int(max_len), on_long="truncate")
    tree = trees[0]
    n = tree.length
    words = [g.terminals[int(t)] for t in toks[0, :n]]
    truncated = ", truncated" if tree.truncated else ""
    st.markdown(f"**Sentence** ({n} tokens{truncated}): `{' '.join(words)}`")
    tk, lens_t = toks[:, :n], torch.tensor([n])
    post = prefix_span_posteriors(g, tk, lens_t).exp()[0]  # [i, t, A]
    colors = [float(post[s, e, lab]) if e > 0 else 0.0 for s, e, lab, _ in tree.spans]
    cg, cv = st.columns(2)
    with cg:
        show_figure(parse_tree_figure(words, tree.spans.tolist(), g.nonterminals, colors=colors,
                                      title="gold tree (shade: exact prefix span posterior at its "
                                            "end)"),
                    "pcfg_gold_tree")
    with cv:
        if tree.truncated:
            st.info("Truncated sample: no complete parse.")
        else:
            vr = viterbi(g, tk, lens_t)
            vt = vr.trees[0]
            same = vt is not None and (sorted(map(tuple, vt.spans[:, :3].tolist()))
                                       == sorted(map(tuple, tree.spans[:, :3].tolist())))
            show_figure(parse_tree_figure(words, vt.spans.tolist(), g.nonterminals,
                                          title=f"Viterbi tree (log p = "
                                                f"{float(vr.log_prob[0]):.3f}; "
                                                f"{'same as' if same else 'differs from'} gold)"),
                        "pcfg_viterbi_tree")
    return words, tk, lens_t


@cached_compute("Running the model...", max_entries=32)
def model_probs(model, g, *, tokens: tuple):
    from interplab.probes.pcfg import model_next_logprobs

    t = torch.tensor([list(tokens)])
    return model_next_logprobs(model, g, t, torch.tensor([len(tokens)]))[0].exp().numpy()


def next_token(picked, model, g, words, tk, lens_t, compare: bool):
    """The exact next-token distribution at a chosen position, beside the model's when it may be
    compared. Returns (exact probabilities [n+1, V+1], the model's or None)."""
    n = len(words)
    lp = next_token_logprobs(g, tk, lens_t)[0].exp().numpy()  # [n+1, V+1]
    q = None
    if compare:
        q = model_probs(model, g, key=grammar_key(picked, g), tokens=tuple(int(x) for x in tk[0]))
    pos = st.slider("Position p (prefix w_1..w_p)", 0, n, 0, key="pcfg_pos")
    show_figure(next_token_figure(lp[pos], None if q is None else q[pos],
                                  list(g.terminals) + ["EOS"],
                                  title=f"p(next | {' '.join(words[:pos]) or '∅'})"),
                "pcfg_next_token")
    if q is not None:
        from interplab.probes.pcfg import position_kl

        kl = position_kl(lp[: n + 1], q[: n + 1])
        df_sent = pd.DataFrame({"position": np.arange(n + 1), "kl": kl})
        show_figure(kl_by_position_figure({"this sentence": df_sent}, baselines=False,
                                          title="KL(p_G ‖ q_θ) per position, this sentence"),
                    "pcfg_kl_sentence")
    return lp, q


@cached_compute("Computing exact distributions and the model's...")
def heldout_kl(model, g, *, n_seq: int):
    from interplab.probes.pcfg import pcfg_kl

    return pcfg_kl(model, g, n_seq, 0, n_baseline=5000)


def _pressed(button: str, key: str) -> bool:
    """A button that stays pressed for the session once clicked (its results keep showing)."""
    if st.button(button, key=f"{key}_btn") or st.session_state.get(f"{key}_done"):
        st.session_state[f"{key}_done"] = True
        return True
    return False


def heldout(picked, model, g) -> None:
    from interplab.probes.pcfg import describe_kl_summary, kl_summary

    n_eval = st.number_input("Held-out sequences", min_value=16, max_value=2048, value=128, step=16,
                             key="pcfg_neval")
    if _pressed("Evaluate KL by position", "pcfg_eval"):
        dfk = heldout_kl(model, g, key=grammar_key(picked, g), n_seq=int(n_eval))
        st.markdown(describe_kl_summary(kl_summary(dfk)))
        show_figure(kl_by_position_figure({picked.name: dfk}), "pcfg_kl_by_position")


@cached_compute("Fitting probes on every layer...")
def probe_study(model, g, *, targets: tuple, probe: str, n_seq: int):
    from interplab.probes.pcfg import probe_study as study

    return study(model, g, list(targets), probe, n_sequences=n_seq, n_seeds=1, seed=0)


def probes(picked, model, g) -> None:
    from interplab.probes.pcfg import PROBE_TARGETS

    cA, cB, cC = st.columns(3)
    with cA:
        probe_kind = st.selectbox("Probe", ["linear", "mlp"], key="pcfg_probe_kind")
    with cB:
        n_probe = st.number_input("Sequences", min_value=40, max_value=1000, value=150, step=10,
                                  key="pcfg_nprobe")
    with cC:
        targets = st.multiselect("Targets", list(PROBE_TARGETS),
                                 default=["span_posterior", "gold_label", "next_token"],
                                 key="pcfg_targets")
    if not (targets and _pressed("Run probes", "pcfg_probe")):
        return
    study = probe_study(model, g, key=grammar_key(picked, g), targets=tuple(targets),
                        probe=probe_kind, n_seq=int(n_probe))
    dfp = study.probes
    if dfp.empty:
        st.warning("No probe target had enough examples; sample more sequences.")
        return
    tsel = st.selectbox("Target to plot", sorted(dfp.target.unique()), key="pcfg_target_plot")
    st.caption(PROBE_TARGETS[tsel][2])
    show_figure(probe_curves_figure(dfp, tsel), "pcfg_probe_curves")
    if (dfp[dfp.target == tsel]["bucket"] != "all").any():
        show_figure(local_to_global_heatmap(dfp, tsel), "pcfg_l2g_heatmap")
    show_figure(lstar_figure(study.l_star, slopes=study.slopes), "pcfg_lstar")
    st.dataframe(dfp, hide_index=True, key="pcfg_probe_table")


@cached_compute("Dyadic inside vectors, probes per layer and truncated predictors...")
def construction(model, g, *, n_seq: int, n_seeds: int):
    from interplab.probes.pcfg import construction_mirror

    return construction_mirror(model, g, n_seq, 0, n_seeds=n_seeds)


def construction_mirror(picked, model, g, compare: bool) -> None:
    """The `pcfg-construction` experiment's views, where the grammar is uniform-binary-like and the
    model was trained on it."""
    from interplab.grammar import DyadicUndefinedError, dyadic_sizes

    try:
        dyadic_sizes(g)
    except DyadicUndefinedError as e:
        st.info(f"The construction mirror does not apply to `{g.name}`: {e}")
        return
    if not compare:
        st.info("The construction mirror needs a model trained on this grammar (e.g. "
                "`zoo:pcfg-L2`, or `zoo:pcfg-sib-L4` for a grammar whose truncation levels differ "
                "at the output).")
        return
    from interplab.figures.pcfg import dyadic_probe_figure, truncated_kl_figure

    cm1, cm2 = st.columns(2)
    with cm1:
        n_cm = st.number_input("Sequences", min_value=16, max_value=2000, value=64, step=16,
                               key="pcfg_cm_n")
    with cm2:
        cm_seeds = st.number_input("Probe split seeds", min_value=1, max_value=5, value=1, step=1,
                                   key="pcfg_cm_seeds")
    if not _pressed("Run construction mirror", "pcfg_cm"):
        return
    try:
        cm = construction(model, g, key=grammar_key(picked, g), n_seq=int(n_cm),
                          n_seeds=int(cm_seeds))
    except InterplabError as e:
        st.error(f"**Construction mirror failed.** {e}")
        return
    summ, name = cm.summary(), picked.name
    final, cost = summ["final_kl_by_k"], summ["kl_exact_trunc_by_k"]
    st.markdown(f"log₂ n = {cm.log2_n}, {cm.n_sequences} sequences; final-layer KL(p_trunc,k ‖ q) "
                "by k: " + ", ".join(f"k={k}: {v:.3f}" for k, v in final.items())
                + ". What the truncation itself costs in this grammar, KL(p_G ‖ p_trunc,k): "
                + ", ".join(f"k={k}: {max(v, 0.0):.4f}" for k, v in cost.items())
                + ". Closest k per layer (logit lens): "
                + ", ".join(f"layer {l}: {k}" for l, k in summ["best_k_by_layer"].items()) + ".")
    show_figure(dyadic_probe_figure(cm.probe, title=f"{name}: dyadic inside R² by layer"),
                "pcfg_cm_probe")
    show_figure(truncated_kl_figure(cm.kl, title=f"{name}: KL(p_trunc,k ‖ layer l)"), "pcfg_cm_kl")
    with st.expander("Tables"):
        st.dataframe(cm.probe, hide_index=True, key="pcfg_cm_probe_table")
        st.dataframe(cm.kl, hide_index=True, key="pcfg_cm_kl_table")


def depth_sweep() -> None:
    """A saved `pcfg-depth-sweep` run (with the verdicts a later `pcfg-verdicts` run made from
    it)."""
    sweep = saved_result("pcfg-depth-sweep", "sweep", "pcfg_sweep_run",
                         label="Saved depth-sweep run",
                         hint=" (about half an hour on one CPU thread; `--set steps=...` to change "
                              "the budget)")
    if sweep is None:
        return
    # saved before runs checked themselves: pcfg-verdicts made its verdicts
    later_verdicts("pcfg-verdicts", st.session_state.get("pcfg_sweep_run"),
                   key="pcfg_sweep_later_verdicts")
    from interplab.figures.pcfg import kl_depth_seeds_figure, lstar_depth_seeds_figure

    st.markdown(f"{sweep.steps} steps per organism, {sweep.organisms['seed'].nunique()} training "
                f"seeds per depth, {sweep.level:.0%} t intervals.")
    show_figure(kl_depth_seeds_figure(sweep.kl_by_depth, sweep.organisms, log2_n=sweep.log2_n,
                                      level=sweep.level), "pcfg_sweep_kl")
    slopes = sweep.slope_by_depth
    sweep_targets = sorted(slopes["target"].unique())
    if sweep_targets:
        t_sel = st.selectbox("Probe target", sweep_targets, key="pcfg_sweep_target")
        show_figure(lstar_depth_seeds_figure(sweep.l_star, slopes, t_sel), "pcfg_sweep_lstar")
        st.dataframe(slopes[slopes["target"] == t_sel].round(3), hide_index=True,
                     key="pcfg_sweep_slopes")
    with st.expander("Tables"):
        st.dataframe(sweep.kl_by_depth.round(5), hide_index=True, key="pcfg_sweep_kl_table")
        st.dataframe(sweep.kl_steps.round(5), hide_index=True, key="pcfg_sweep_kl_steps")
        st.dataframe(sweep.organisms.round(5), hide_index=True, key="pcfg_sweep_organisms")
