"""The SAE shipped with toy-chat: small, SAELens format, recorded config, metrics that match the docs."""
from __future__ import annotations

import json
from dataclasses import fields

import pytest


def test_toy_chat_ships_a_small_saelens_sae():
    from interplab.experiments.sae import SAETrainRunConfig
    from interplab.sae import load_sae
    from interplab.zoo import shipped_saes

    dirs = shipped_saes("zoo:toy-chat")
    assert [d.name for d in dirs] == ["fast_jumprelu_L1"]
    d = dirs[0]
    assert sum(p.stat().st_size for p in d.iterdir()) < 1_000_000
    sae = load_sae(d)
    assert (sae.cfg.d_in, sae.cfg.d_sae) == (128, 512) and sae.cfg.metadata["interplab_site"] == "resid_post.1"
    run = json.loads((d / "run_config.json").read_text())
    assert run["kind"] == "sae-train"
    cfg = SAETrainRunConfig(**run["config"])  # the recorded config is a valid `interplab run sae-train` config
    assert set(run["config"]) <= {f.name for f in fields(cfg)}  # fields added since take their defaults
    assert (cfg.model, cfg.expansion, cfg.site) == ("zoo:toy-chat", 4, "resid_post.1")
    m = json.loads((d / "metrics.json").read_text())
    assert m["explained_variance"] == pytest.approx(0.952, abs=5e-4) and m["dead_features"] == 0
    assert shipped_saes("zoo:toy-base") == [] and shipped_saes("zoo:no-such-organism") == []
