"""The toy method's app page."""
import streamlit as st

from interplab.app import state
from interplab.app.widgets import model_picker, show_figure
from tests.methods.toy_method import api, figures

st.title("Toy Method")
name, backend = model_picker("model")
if st.button("Compute norms", key="toy_compute"):
    model, err = state.try_get_model(name, backend=backend)
    if model is None:
        st.error(err)
    else:
        show_figure(figures.norm_bars(api.layer_norms(model)), key="toy_norms")
