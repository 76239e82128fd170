"""The toy method's experiment `toy-method-norms`."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from interplab.experiments.registry import register_experiment
from interplab.figures.export import save_figure


@dataclass
class ToyNormsConfig:
    """model: any interplab model name or checkpoint. n_texts: how many of the built-in texts (data: a user file
    with a `text` column replaces them)."""

    model: str = "zoo:toy-chat"
    n_texts: int = 4
    data: str = ""


@register_experiment("toy-method-norms", config=ToyNormsConfig, help="mean residual norm per layer (toy plug-in)")
def toy_norms(cfg: ToyNormsConfig, run) -> None:
    import interplab
    from interplab.data.user import user_records
    from tests.methods.toy_method import api, figures

    texts = [r["text"] for r in user_records("toy_method", cfg.data)] if cfg.data else api.TEXTS[:cfg.n_texts]
    norms = api.layer_norms(interplab.load_model(cfg.model), texts)
    run.save_table("norms", pd.DataFrame({"layer": range(len(norms)), "mean_norm": norms}))
    save_figure(run, "norms", figures.norm_bars(norms), ["html"])
