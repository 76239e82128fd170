"""PCFG page: pick or edit a grammar, sample a sentence (gold vs Viterbi tree), compare the model's next-token
distribution with the exact grammar distribution, KL by position, layer-wise parse probes and l*(ℓ)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

st.set_page_config(page_title="interplab · PCFG", page_icon=":deciduous_tree:", layout="wide")

from interplab.app import state  # noqa: E402
from interplab.app.widgets import page_model, show_figure  # noqa: E402
from interplab.core.errors import InterplabError  # noqa: E402
from interplab.figures.pcfg import (kl_by_position_figure, lstar_figure, next_token_figure,  # noqa: E402
                                    parse_tree_figure, probe_curves_figure, local_to_global_heatmap)
from interplab.grammar import EXAMPLES, PCFG, next_token_logprobs, prefix_span_posteriors, viterbi  # noqa: E402

MAX_EDIT_RULES = 400

st.title("PCFG parse probes")
st.caption("Exact grammar next-token distributions (inside / prefix probabilities) against a model trained on the "
           "grammar, and layer-wise probes of parse quantities. Spec: docs/pcfg.md.")

picked = page_model("pcfg", page="pcfg", suggested="pcfg-L4", fits=lambda n: n.startswith("pcfg"))
name, backend, device, dtype = picked.name, picked.backend, picked.device, picked.dtype
model, model_err = picked.try_load()   # the page shows the grammar alone when there is no model


def _organism_grammar(m):
    if m is None:
        return None
    try:
        from interplab.zoo.recipes.pcfg import grammar_of

        return grammar_of(m)
    except (InterplabError, OSError):
        return None


@st.cache_data(max_entries=16, show_spinner=False)
def _grammar_from_text(text: str) -> dict:
    return PCFG.from_string(text, name="custom").to_dict()


# ------------------------------------------------------------------------------------------------ grammar picker
org_g = _organism_grammar(model)
TRAINING = "model's training grammar"
sources = ([TRAINING] if org_g is not None else []) + sorted(EXAMPLES) + ["custom (edit rules)"]
# a newly picked PCFG organism brings its own grammar (grammar_of reads its grammar.json)
# any other model opens on toy-english: its samples are sentences with nested phrases, where the first example
# alphabetically ("hand") samples "a a a" with one parse of p = 1, which shows nothing
DEFAULT_EXAMPLE = "toy-english"
if st.session_state.get("pcfg_grammar_for") != name:
    st.session_state["pcfg_grammar_for"] = name
    st.session_state["pcfg_source"] = TRAINING if org_g is not None else DEFAULT_EXAMPLE
if st.session_state.get("pcfg_source") not in sources:
    st.session_state["pcfg_source"] = TRAINING if org_g is not None else DEFAULT_EXAMPLE
with st.sidebar:
    st.subheader("Grammar")
    src = st.selectbox("Grammar", sources, key="pcfg_source")
if src == TRAINING:
    g = org_g
elif src == "custom (edit rules)":
    default_text = EXAMPLES["toy-english"]().to_string()
    text = st.sidebar.text_area("Rules (A -> B C [p] / A -> 'a' [p]; first LHS = start)", value=default_text,
                                height=260, key="pcfg_rules")
    if text.count("\n") > MAX_EDIT_RULES:
        st.error(f"at most {MAX_EDIT_RULES} rules in the editor; load bigger grammars from Python.")
        st.stop()
    try:
        g = PCFG.from_dict(_grammar_from_text(text))
    except InterplabError as e:
        st.error(f"**Grammar error.** {e}")
        st.stop()
else:
    g = EXAMPLES[src]()

st.markdown(f"**Grammar** `{g.name}`: {g.N} nonterminals, {g.V} terminals, "
            f"{int((g.binary > 0).sum())} binary and {int((g.lexical > 0).sum())} lexical rules; "
            f"expected-children spectral radius {g.spectral_radius():.3f}.")
with st.expander("Rules"):
    st.code(g.to_string()[:20000], language="text")

model_ok = False
if model is None:
    st.info(f"Model `{name}` is not available ({model_err}); showing the grammar alone. PCFG organisms: "
            "`zoo:pcfg-L2`, `zoo:pcfg-L4`, `zoo:pcfg-L6`, `zoo:pcfg-rcnf-L4`, `zoo:pcfg-sib-L4`.")
else:
    vocab = model.tokenizer.get_vocab()
    covers = all(t in vocab for t in g.terminals) and model.tokenizer.eos_token_id is not None
    # Comparing a model with a grammar it was not trained on gives KLs of many nats that mean nothing: compare only
    # with the organism's own grammar, or on request when the tokenizer at least covers the terminals.
    model_ok = covers and src == TRAINING
    if not covers:
        st.info(f"`{name}` was not trained on this grammar (its tokenizer lacks the terminals); model comparisons "
                "are hidden. Pick a PCFG organism (`zoo:pcfg-L4`): it brings its training grammar.")
    elif not model_ok:
        why = ("it has no `grammar.json`, so it was not trained on a PCFG" if org_g is None else
               f"it was trained on its own grammar `{org_g.name}`, not on `{g.name}`")
        st.info(f"Model comparisons are hidden: {why}, and a KL against a grammar the model never saw measures "
                "nothing. Pick a PCFG organism (`zoo:pcfg-L4`) and its training grammar.")
        model_ok = st.checkbox("Compare anyway", False, key="pcfg_compare_anyway")

# ------------------------------------------------------------------------------------------------ sample + trees
st.subheader("Sample a sentence")
c1, c2 = st.columns([1, 1])
with c1:
    seed = st.number_input("Sample seed", min_value=0, value=0, step=1, key="pcfg_seed")
with c2:
    max_len = st.number_input("max length (longer samples are truncated, never re-sampled)", min_value=2,
                              max_value=64, value=32, step=1, key="pcfg_maxlen")
toks, trees = g.sample(1, seed=int(seed), max_len=int(max_len), on_long="truncate")
tree = trees[0]
n = tree.length
words = [g.terminals[int(t)] for t in toks[0, :n]]
st.markdown(f"**Sentence** ({n} tokens{', truncated' if tree.truncated else ''}): `{' '.join(words)}`")
tk = toks[:, :n]
lens = np.array([n])
import torch  # noqa: E402

lens_t = torch.tensor([n])
post = prefix_span_posteriors(g, tk, lens_t).exp()[0]  # [i, t, A]
colors = [float(post[s, e, lab]) if e > 0 else 0.0 for s, e, lab, _ in tree.spans]
cg, cv = st.columns(2)
with cg:
    show_figure(parse_tree_figure(words, tree.spans.tolist(), g.nonterminals, colors=colors,
                                  title="gold tree (shade: exact prefix span posterior at its end)"), "pcfg_gold_tree")
with cv:
    if tree.truncated:
        st.info("Truncated sample: no complete parse.")
    else:
        vr = viterbi(g, tk, lens_t)
        vt = vr.trees[0]
        same = vt is not None and sorted(map(tuple, vt.spans[:, :3].tolist())) == sorted(map(tuple, tree.spans[:, :3].tolist()))
        show_figure(parse_tree_figure(words, vt.spans.tolist(), g.nonterminals,
                                      title=f"Viterbi tree (log p = {float(vr.log_prob[0]):.3f}; "
                                            f"{'same as' if same else 'differs from'} gold)"), "pcfg_viterbi_tree")

# ------------------------------------------------------------------------------------------------ next-token view
st.subheader("Next-token distribution per position")
lp = next_token_logprobs(g, tk, lens_t)[0].exp().numpy()  # [n+1, V+1]
labels = list(g.terminals) + ["EOS"]
q = None
if model_ok:
    from interplab.probes.pcfg import model_next_logprobs

    @st.cache_data(max_entries=32, show_spinner="Running the model...")
    def _model_probs(key: tuple, grammar_json: str, tokens: tuple, _m=None, _g=None):
        t = torch.tensor([list(tokens)])
        return model_next_logprobs(_m, _g, t, torch.tensor([len(tokens)]))[0].exp().numpy()

    q = _model_probs((state.normalize_name(name), backend, device, dtype), g.name + g.to_string()[:2000],
                     tuple(int(x) for x in tk[0]), _m=model, _g=g)
pos = st.slider("Position p (prefix w_1..w_p)", 0, n, 0, key="pcfg_pos")
show_figure(next_token_figure(lp[pos], None if q is None else q[pos], labels,
                              title=f"p(next | {' '.join(words[:pos]) or '∅'})"), "pcfg_next_token")
if q is not None:
    from interplab.probes.pcfg import describe_kl_summary, kl_summary, position_kl

    df_sent = pd.DataFrame({"position": np.arange(n + 1), "kl": position_kl(lp[: n + 1], q[: n + 1])})
    show_figure(kl_by_position_figure({"this sentence": df_sent}, baselines=False,
                                      title="KL(p_G ‖ q_θ) per position, this sentence"), "pcfg_kl_sentence")

    st.subheader("Held-out evaluation")
    n_eval = st.number_input("Held-out sequences", min_value=16, max_value=2048, value=128, step=16, key="pcfg_neval")

    @st.cache_data(max_entries=8, show_spinner="Computing exact distributions and the model's...")
    def _kl(key: tuple, grammar_json: str, n_seq: int, _m=None, _g=None):
        from interplab.probes.pcfg import pcfg_kl

        return pcfg_kl(_m, _g, n_seq, 0, n_baseline=5000)

    if st.button("Evaluate KL by position", key="pcfg_eval_btn") or st.session_state.get("pcfg_eval_done"):
        st.session_state["pcfg_eval_done"] = True
        dfk = _kl((state.normalize_name(name), backend, device, dtype), g.to_string()[:5000], int(n_eval), _m=model, _g=g)
        st.markdown(describe_kl_summary(kl_summary(dfk)))
        show_figure(kl_by_position_figure({name: dfk}), "pcfg_kl_by_position")

    st.subheader("Layer-wise parse probes")
    from interplab.probes.pcfg import PROBE_TARGETS

    cA, cB, cC = st.columns(3)
    with cA:
        probe_kind = st.selectbox("Probe", ["linear", "mlp"], key="pcfg_probe_kind")
    with cB:
        n_probe = st.number_input("Sequences", min_value=40, max_value=1000, value=150, step=10, key="pcfg_nprobe")
    with cC:
        targets = st.multiselect("Targets", list(PROBE_TARGETS), default=["span_posterior", "gold_label", "next_token"],
                                 key="pcfg_targets")

    @st.cache_data(max_entries=8, show_spinner="Fitting probes on every layer...")
    def _probes(key: tuple, grammar_json: str, targets: tuple, probe: str, n_seq: int, _m=None, _g=None):
        from interplab.probes.pcfg import probe_study

        return probe_study(_m, _g, list(targets), probe, n_sequences=n_seq, n_seeds=1, seed=0)

    if targets and (st.button("Run probes", key="pcfg_probe_btn") or st.session_state.get("pcfg_probe_done")):
        st.session_state["pcfg_probe_done"] = True
        study = _probes((state.normalize_name(name), backend, device, dtype), g.to_string()[:5000], tuple(targets),
                        probe_kind, int(n_probe), _m=model, _g=g)
        dfp = study.probes
        if dfp.empty:
            st.warning("No probe target had enough examples; sample more sequences.")
        else:
            tsel = st.selectbox("Target to plot", sorted(dfp.target.unique()), key="pcfg_target_plot")
            st.caption(PROBE_TARGETS[tsel][2])
            show_figure(probe_curves_figure(dfp, tsel), "pcfg_probe_curves")
            if (dfp[dfp.target == tsel]["bucket"] != "all").any():
                show_figure(local_to_global_heatmap(dfp, tsel), "pcfg_l2g_heatmap")
            show_figure(lstar_figure(study.l_star, slopes=study.slopes), "pcfg_lstar")
            st.dataframe(dfp, hide_index=True, key="pcfg_probe_table")

# ------------------------------------------------------------------------------------------------ construction mirror
st.subheader("Construction mirror")
st.caption("The `pcfg-construction` experiment (spec §5.4): per layer, held-out R² of a ridge probe reading the "
           "size-2^k dyadic inside vector at aligned block ends (random-init control in brackets), and "
           "KL(p_trunc,k ‖ logit lens at layer l) against the truncation level k. Needs a uniform-binary-like grammar. "
           "On the uniform-binary organisms the truncated predictors for k ≥ 1 nearly coincide at the output, so "
           "this KL cannot tell the levels apart; `zoo:pcfg-sib-L4` (dependent sibling blocks, "
           "`interplab.grammar.dependent_siblings`) is trained on a grammar where they differ (docs/pcfg.md).")
from interplab.grammar import DyadicUndefinedError, dyadic_sizes  # noqa: E402

try:
    dyadic_sizes(g)
    dyadic_err = None
except DyadicUndefinedError as e:
    dyadic_err = str(e)
if dyadic_err is not None:
    st.info(f"The construction mirror does not apply to `{g.name}`: {dyadic_err}")
elif not model_ok:
    st.info("The construction mirror needs a model trained on this grammar (e.g. `zoo:pcfg-L2`, or "
            "`zoo:pcfg-sib-L4` for a grammar whose truncation levels differ at the output).")
else:
    from interplab.figures.pcfg import dyadic_probe_figure, truncated_kl_figure

    cm1, cm2 = st.columns(2)
    with cm1:
        n_cm = st.number_input("Sequences", min_value=16, max_value=2000, value=64, step=16, key="pcfg_cm_n")
    with cm2:
        cm_seeds = st.number_input("Probe split seeds", min_value=1, max_value=5, value=1, step=1, key="pcfg_cm_seeds")

    @st.cache_data(max_entries=8, show_spinner="Dyadic inside vectors, probes per layer and truncated predictors...")
    def _construction(key: tuple, grammar_json: str, n_seq: int, n_seeds: int, _m=None, _g=None):
        from interplab.probes.pcfg import construction_mirror

        return construction_mirror(_m, _g, n_seq, 0, n_seeds=n_seeds)

    if st.button("Run construction mirror", key="pcfg_cm_btn") or st.session_state.get("pcfg_cm_done"):
        st.session_state["pcfg_cm_done"] = True
        try:
            cm = _construction((state.normalize_name(name), backend, device, dtype), g.to_string()[:5000],
                               int(n_cm), int(cm_seeds), _m=model, _g=g)
        except InterplabError as e:
            st.error(f"**Construction mirror failed.** {e}")
        else:
            summ = cm.summary()
            final, cost = summ["final_kl_by_k"], summ["kl_exact_trunc_by_k"]
            st.markdown(f"log₂ n = {cm.log2_n}, {cm.n_sequences} sequences; final-layer KL(p_trunc,k ‖ q) by k: "
                        + ", ".join(f"k={k}: {v:.3f}" for k, v in final.items()) + ". What the truncation itself "
                        "costs in this grammar, KL(p_G ‖ p_trunc,k): "
                        + ", ".join(f"k={k}: {max(v, 0.0):.4f}" for k, v in cost.items())
                        + ". Closest k per layer (logit lens): "
                        + ", ".join(f"layer {l}: {k}" for l, k in summ["best_k_by_layer"].items()) + ".")
            show_figure(dyadic_probe_figure(cm.probe, title=f"{name}: dyadic inside R² by layer"), "pcfg_cm_probe")
            show_figure(truncated_kl_figure(cm.kl, title=f"{name}: KL(p_trunc,k ‖ layer l)"), "pcfg_cm_kl")
            with st.expander("Tables"):
                st.dataframe(cm.probe, hide_index=True, key="pcfg_cm_probe_table")
                st.dataframe(cm.kl, hide_index=True, key="pcfg_cm_kl_table")

# ------------------------------------------------------------------------------------------------ seeded depth sweep
st.subheader("Depth sweep over training seeds")
st.caption("The `pcfg-depth-sweep` experiment: organisms of 1–8 layers × 3 training seeds on the uniform-binary "
           "grammar, all trained for the same number of steps; KL vs depth with a t interval over seeds and the l*(ℓ) slope "
           "per depth with a t interval over the per-seed slopes (docs/pcfg.md). Reads a saved run; trains nothing.")
from interplab.app.widgets import saved_result  # noqa: E402

sweep = saved_result("pcfg-depth-sweep", "sweep", "pcfg_sweep_run", label="Saved depth-sweep run",
                     hint=" (about half an hour on one CPU thread; `--set steps=...` to change the budget)")
if sweep is not None:   # saved before runs checked themselves: pcfg-verdicts made its verdicts
    from interplab.app.widgets import later_verdicts

    later_verdicts("pcfg-verdicts", st.session_state.get("pcfg_sweep_run"),
                   key="pcfg_sweep_later_verdicts")
if sweep is not None:
    from interplab.figures.pcfg import kl_depth_seeds_figure, lstar_depth_seeds_figure

    st.markdown(f"{sweep.steps} steps per organism, {sweep.organisms['seed'].nunique()} training seeds per depth, "
                f"{sweep.level:.0%} t intervals.")
    show_figure(kl_depth_seeds_figure(sweep.kl_by_depth, sweep.organisms, log2_n=sweep.log2_n, level=sweep.level),
                "pcfg_sweep_kl")
    sweep_targets = sorted(sweep.slope_by_depth["target"].unique())
    if sweep_targets:
        t_sel = st.selectbox("Probe target", sweep_targets, key="pcfg_sweep_target")
        show_figure(lstar_depth_seeds_figure(sweep.l_star, sweep.slope_by_depth, t_sel), "pcfg_sweep_lstar")
        st.dataframe(sweep.slope_by_depth[sweep.slope_by_depth["target"] == t_sel].round(3), hide_index=True,
                     key="pcfg_sweep_slopes")
    with st.expander("Tables"):
        st.dataframe(sweep.kl_by_depth.round(5), hide_index=True, key="pcfg_sweep_kl_table")
        st.dataframe(sweep.kl_steps.round(5), hide_index=True, key="pcfg_sweep_kl_steps")
        st.dataframe(sweep.organisms.round(5), hide_index=True, key="pcfg_sweep_organisms")
