"""The Streamlit dashboard: `interplab app` serves `Home.py` and the pages in `pages/`.

Shared helpers: `interplab.app.state` (bounded model cache, default model) and `interplab.app.widgets`
(figure display with export buttons, sidebar model picker)."""
