"""Feature Browser: any SAELens-format SAE directory (trained here or elsewhere) on the chosen model. Features are
searched / sorted by density or max activation; each feature card shows its top contexts (per-sample, tokens
shaded by activation) and activation histogram, then the direction dashboard of its decoder row (the Direction
page's API: projection histogram, logit effects, cosine neighbours among every collected direction), and a
steer-with-this-feature box. The sections live in interplab.app.views.features."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="interplab · Feature Browser", page_icon=":microscope:", layout="wide")

from interplab.app.views import features as V  # noqa: E402
from interplab.app.widgets import page_model  # noqa: E402

st.title("Feature Browser")
st.caption("Top-activating contexts are computed one dialogue per forward (FAST), so no context contains another "
           "sample's tokens. Pick any SAELens directory (cfg.json + sae_weights.safetensors).")

picked = page_model("fb", page="features", suggested="toy-chat", fits=lambda n: n.endswith("chat"))
model = picked.load()
sae_dir = V.pick_sae_dir(picked.name)
sae = V.load(sae_dir)
site, n_samples, k = V.scan_settings(model, sae)
sae_key = (picked.key, sae_dir, V.weights_stamp(sae_dir))     # the model and SAE behind the numbers
stats = V.statistics(model, sae, (sae_key, site, n_samples, k), site, n_samples, k)

st.subheader("Features")
feature = V.pick_feature(stats)
st.subheader(f"Feature #{feature}")
V.feature_card(stats, feature)
V.direction_views(model, sae, sae_key, sae_dir, stats, feature, site)

st.subheader("Steer with this feature")
V.steer(model, sae, feature, site)
