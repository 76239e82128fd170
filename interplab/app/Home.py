"""interplab dashboard (served by `interplab app`): the router over Home, the tool pages and every method's pages
(`interplab.app.navigation.app_pages`), and the Home page itself."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="interplab", page_icon=":microscope:", layout="wide")

from interplab.app import state  # noqa: E402
from interplab.app.navigation import app_pages, page_path  # noqa: E402
from interplab.app.widgets import page_model  # noqa: E402


def home() -> None:
    """The Home page: what interplab is, every page in one paragraph, and the current model."""
    st.title("interplab")
    st.markdown(
        "**A mechanistic-interpretability workbench.** One hook layer over TransformerLens's TransformerBridge and "
        "nnsight carries six published methods and the interventions that go with them. Every model is an ordinary "
        "Hugging Face checkpoint: interplab's own small *model organisms* run offline, and the same pages work on "
        "GPT-2, Qwen or Llama checkpoints on your own machine. Everything on these pages can also be scripted "
        "(`import interplab`) or run from the command line (`interplab run NAME`), and every figure exports to "
        "HTML, PNG, SVG or PDF."
    )

    st.header("Pages")
    for page in app_pages():
        st.markdown(f"**{page.title}.** {page.summary}")

    picked = page_model("home")          # on the sidebar's device and dtype, as every page loads it
    name, backend = picked.name, picked.backend

    st.header("Current model")
    model, err = picked.try_load()
    if model is None:
        st.warning(f"**Model `{name}` is not available.** {err}")
        st.markdown(state.model_help(name))
    else:
        st.success(f"`{name}` is loaded on the **{backend}** backend: {model.n_layers} layers, {model.n_heads} query "
                   f"heads ({model.n_kv_heads} key/value), d_model {model.d_model}, vocabulary {model.d_vocab}. "
                   "Open **Models** in the sidebar to run a prompt.")
    st.caption("Models are cached (at most two at a time) by name, backend, device and dtype. "
               "The server listens on 127.0.0.1 unless started with `interplab app --address`.")


st.navigation([st.Page(home, title="Home", default=True)]
              + [st.Page(str(page_path(p)), title=p.title, url_path=p.url_path) for p in app_pages()]).run()
