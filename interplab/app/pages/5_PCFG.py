"""PCFG page: pick or edit a grammar, sample a sentence (gold vs Viterbi tree), compare the model's next-token
distribution with the exact grammar distribution, KL by position, layer-wise parse probes and l*(ℓ).
The sections live in interplab.app.views.pcfg."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="interplab · PCFG", page_icon=":deciduous_tree:", layout="wide")

from interplab.app.views import pcfg as V  # noqa: E402
from interplab.app.widgets import page_model  # noqa: E402

st.title("PCFG parse probes")
st.caption("Exact grammar next-token distributions (inside / prefix probabilities) against a model trained on the "
           "grammar, and layer-wise probes of parse quantities. Spec: docs/pcfg.md.")

picked = page_model("pcfg", page="pcfg", suggested="pcfg-L4", fits=lambda n: n.startswith("pcfg"))
model, model_err = picked.try_load()   # the page shows the grammar alone when there is no model

org_g = V.organism_grammar(model)
g, src = V.pick_grammar(picked.name, org_g)
st.markdown(f"**Grammar** `{g.name}`: {g.N} nonterminals, {g.V} terminals, "
            f"{int((g.binary > 0).sum())} binary and {int((g.lexical > 0).sum())} lexical rules; "
            f"expected-children spectral radius {g.spectral_radius():.3f}.")
with st.expander("Rules"):
    st.code(g.to_string()[:20000], language="text")
compare = V.may_compare(model, model_err, g, src, org_g, picked.name)

st.subheader("Sample a sentence")
words, tk, lens_t = V.sample_trees(g)

st.subheader("Next-token distribution per position")
_, q = V.next_token(picked, model, g, words, tk, lens_t, compare)
if q is not None:
    st.subheader("Held-out evaluation")
    V.heldout(picked, model, g)
    st.subheader("Layer-wise parse probes")
    V.probes(picked, model, g)

st.subheader("Construction mirror")
st.caption("The `pcfg-construction` experiment (spec §5.4): per layer, held-out R² of a ridge probe reading the "
           "size-2^k dyadic inside vector at aligned block ends (random-init control in brackets), and "
           "KL(p_trunc,k ‖ logit lens at layer l) against the truncation level k. Needs a uniform-binary-like grammar. "
           "On the uniform-binary organisms the truncated predictors for k ≥ 1 nearly coincide at the output, so "
           "this KL cannot tell the levels apart; `zoo:pcfg-sib-L4` (dependent sibling blocks, "
           "`interplab.grammar.dependent_siblings`) is trained on a grammar where they differ (docs/pcfg.md).")
V.construction_mirror(picked, model, g, compare)

st.subheader("Depth sweep over training seeds")
st.caption("The `pcfg-depth-sweep` experiment: organisms of 1–8 layers × 3 training seeds on the uniform-binary "
           "grammar, all trained for the same number of steps; KL vs depth with a t interval over seeds and the l*(ℓ) slope "
           "per depth with a t interval over the per-seed slopes (docs/pcfg.md). Reads a saved run; trains nothing.")
V.depth_sweep()
