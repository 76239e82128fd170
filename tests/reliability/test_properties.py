"""Bad input, systematically (hypothesis): every public parser and validator either works or raises an
`InterplabError` subclass with a message — never a bare KeyError / IndexError / RuntimeError from deep inside."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interplab.core.errors import InterplabError
from interplab.core.sites import LAYER_KINDS, parse_site
from interplab.experiments.registry import build_config, parse_overrides

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _ok_or_typed(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except InterplabError as exc:
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        return None


site_text = st.one_of(
    st.text(max_size=20),
    st.builds(lambda k, l: f"{k}.{l}", st.sampled_from(LAYER_KINDS + ("logits", "blocks", "")),
              st.one_of(st.integers(-20, 20).map(str), st.text(max_size=4))),
)


@FAST
@given(site_text, st.integers(1, 12))
def test_site_names(name, n_layers):
    s = _ok_or_typed(parse_site, name, n_layers)
    if s is not None:
        assert s.layer is None or 0 <= s.layer < n_layers


@FAST
@given(st.one_of(st.none(), st.integers(), st.floats(), st.lists(st.integers(), max_size=3)))
def test_site_non_strings(name):
    _ok_or_typed(parse_site, name, 4)


@dataclass
class _Cfg:
    model: str = "zoo:toy-chat"
    layer: int = 1
    alpha: float = 0.5
    alphas: list[float] = field(default_factory=lambda: [0.0, 1.0])
    layers: list[int] = field(default_factory=lambda: [0, 1])
    flag: bool = False
    limit: Optional[int] = None


override_item = st.one_of(
    st.text(max_size=30),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["model", "layer", "alpha", "alphas", "layers", "flag",
                                                         "limit", "nope", ""]),
              st.one_of(st.text(max_size=12), st.integers().map(str), st.floats().map(str),
                        st.lists(st.floats(allow_nan=False), max_size=3).map(lambda v: ",".join(map(str, v))))),
)


@FAST
@given(st.lists(override_item, max_size=4))
def test_set_overrides(items):
    ov = _ok_or_typed(parse_overrides, items)
    if ov is not None:
        cfg = _ok_or_typed(build_config, _Cfg, ov)
        if cfg is not None:
            assert isinstance(cfg.layer, int) and isinstance(cfg.alpha, float)
            assert all(isinstance(x, float) for x in cfg.alphas)


shapes = st.lists(st.integers(0, 6), min_size=0, max_size=3).map(tuple)


@FAST
@given(shapes, st.sampled_from([np.float64, np.float32, np.int64, np.bool_, object]))
def test_head_gate_maps(shape, dtype):
    from interplab.interventions import HeadGate, truth_gates

    arr = np.ones(shape, dtype=dtype) if dtype is not object else np.array([["a"] * 4] * 4, dtype=object)
    g = _ok_or_typed(truth_gates, arr, "contrast", 1.0, n_layers=4, n_heads=4)
    if g is not None:
        assert g.shape == (4, 4)
    _ok_or_typed(HeadGate, arr)


@FAST
@given(shapes, st.sampled_from([torch.float32, torch.float64, torch.int64]))
def test_steer_vectors(shape, dtype):
    from interplab.interventions import Steer

    _ok_or_typed(Steer, "resid_post.0", torch.zeros(shape, dtype=dtype))


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=200))
def test_grammar_text(text):
    from interplab.grammar import PCFG

    _ok_or_typed(PCFG.from_string, text)


@FAST
@given(shapes, st.sampled_from([np.float64, np.float32, np.int64, object]), st.integers(1, 5), st.integers(1, 5))
def test_score_maps(shape, dtype, n_layers, n_heads):
    from interplab.probes.truth import TruthScores

    arr = np.full(shape, 0.5, dtype=dtype) if dtype is not object else np.full(shape, "x", dtype=object)
    ts = _ok_or_typed(TruthScores.from_array, arr, n_layers=n_layers, n_heads=n_heads)
    if ts is not None:
        assert ts.scores.shape == (n_layers, n_heads)


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=200))
def test_score_map_files(tmp_path_factory, blob):
    from interplab.probes.truth import TruthScores

    p = tmp_path_factory.mktemp("npy") / "converted_score_cv5_head_metrics_m_d.npy"
    p.write_bytes(blob)
    _ok_or_typed(TruthScores.from_npy, p)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)),
       st.sampled_from([".csv", ".jsonl", ".json", ".tsv", ".parquet", ".arrow", ".txt"]),
       st.sampled_from(["truth", "decodeshare", "crh", "sae", "hyperfit"]))
def test_dataset_files(tmp_path_factory, blob, suffix, method):
    from interplab.data.files import read_records
    from interplab.data.user import check_user_file

    p = tmp_path_factory.mktemp("data") / f"user{suffix}"
    p.write_bytes(blob)
    _ok_or_typed(lambda: list(read_records(p, limit=50)))
    _ok_or_typed(check_user_file, method, p)
