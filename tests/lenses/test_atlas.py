"""The atlas (interplab.probes.lenses.atlas) against planted ground truth: on the validation organisms
(interplab.zoo.validation) its maps and directions must point at the planted mechanisms, and a broken variant (other
heads planted, a wrong pair) must not; agreement statistics are checked against their definitions."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import interplab
from interplab.core.result import Result
from interplab.probes import stats
from interplab.probes.lenses import (Atlas, AtlasInputs, atlas, atlas_inputs, direction_overlaps, read_sae_decoder,
                                     span_cos)
from interplab.zoo import shipped_saes
from interplab.zoo.validation.crh import build_planted_crh_organism, load_planted_crh
from interplab.zoo.validation.decodeshare import build_planted_decode_organism, planted_basis
from interplab.zoo.validation.truth_scores import PlantedTruthSpec, build_planted_truth_organism


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # tiny models: on a loaded shared machine extra intra-op threads only oversubscribe the cores
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def organisms(tmp_path_factory):
    root = tmp_path_factory.mktemp("atlas-organisms")
    return {"truth": build_planted_truth_organism(root / "truth"),
            "other": build_planted_truth_organism(root / "other",
                                                  PlantedTruthSpec(heads=[(0, 2), (1, 6), (2, 0), (3, 4)])),
            "decodeshare": build_planted_decode_organism(root / "decodeshare"),
            "crh": build_planted_crh_organism(root / "crh")}


def _load(path):
    return interplab.load_model(str(path), backend="bridge", device="cpu")


def test_atlas_top_heads_are_the_planted_heads(organisms, tmp_path):
    a = atlas(_load(organisms["truth"]), n_boot=200, n_perm=200)
    planted = {tuple(h) for h in PlantedTruthSpec().heads}
    assert a.planted_kind == "truth" and {tuple(h) for h in a.planted_heads} == planted
    for name in ("truth", "patching", "dla"):
        assert set(a.top_heads(name, len(planted))) == planted, name
    # the planted heads carry the context value: each restores ~1/4 of the logit difference, decoys nothing
    p = a.head_maps["patching"]
    mask = np.zeros(p.shape, bool)
    mask[tuple(np.array(sorted(planted)).T)] = True
    assert np.allclose(p[mask], 0.25, atol=0.03) and np.abs(p[~mask]).max() < 0.02
    assert a.planted["passed"].all() and set(a.planted["method"]) == {"truth", "patching", "dla"}
    assert {"decodeshare", "crh", "sae"} <= set(a.unavailable)        # reasons, not errors
    a.save(tmp_path / "atlas")
    b = Result.load_any(tmp_path / "atlas")
    assert isinstance(b, Atlas) and np.array_equal(b.head_maps["truth"], a.head_maps["truth"])


def test_atlas_of_other_heads_fails_the_planted_check_of_the_first(organisms):
    """A broken variant: the organism with other designated heads, scored against the first organism's heads."""
    from interplab.probes.lenses import planted_checks

    a = atlas(_load(organisms["other"]), directions=False, n_boot=200, n_perm=200)
    truth = {"planted_heads": [list(h) for h in PlantedTruthSpec().heads]}
    wrong = planted_checks("truth", truth, a.head_maps, {})
    assert not wrong["passed"].any()
    assert a.planted["passed"].all()          # and its own planted heads are found


def test_atlas_finds_the_planted_decode_subspace(organisms):
    a = atlas(_load(organisms["decodeshare"]), n_boot=200, n_perm=200)
    Q = a.directions["decodeshare"]
    assert Q.shape[1] >= 2
    # the planted P lies in the estimated span: both planted axes have cosine ~1 with it
    assert span_cos(planted_basis(), Q).min() > 0.99
    assert a.planted.loc[0, "value"] < 1.0 and a.planted["passed"].all()
    assert "truth" in a.unavailable and "crh" in a.unavailable
    # the task head (layer 0, head 0) is the only head that moves the first answer token
    assert a.top_heads("patching", 1) == [(0, 0)] and np.isclose(a.head_maps["patching"][0, 0], 1.0)


def test_atlas_finds_the_planted_crh_axis_and_plane(organisms):
    m = _load(organisms["crh"])
    a = atlas(m, n_boot=200, n_perm=200)
    t = load_planted_crh(organisms["crh"])
    assert float(a.directions["crh_axis"][:, 0] @ t["axis"]) > np.cos(np.radians(5))
    assert span_cos(np.stack([t["e1"], t["e2"]], 1), a.directions["crh_plane"]).min() > np.cos(np.radians(10))
    assert a.planted["passed"].all()
    # a broken variant: concept pairs with the with/without sides shuffled across samples give no axis
    inp = atlas_inputs(m)
    rng = np.random.default_rng(0)
    pairs = inp.concept_pairs
    perm = rng.permutation(len(pairs))
    shuffled = [(pairs[i][0], pairs[j][0]) for i, j in zip(range(len(pairs)), perm)]  # without vs without
    inp.concept_pairs = shuffled
    bad = atlas(m, inputs=inp, n_boot=200, n_perm=200)
    assert len(bad.planted) and not bad.planted["passed"].any(), (bad.planted, bad.unavailable)


def test_atlas_on_toy_chat_runs_every_method_and_agreement_matches_its_definition():
    m = interplab.load_model("zoo:toy-chat")
    a = atlas(m, n_boot=200, n_perm=200)
    assert set(a.head_maps) == {"truth", "patching", "dla"} and set(a.layer_maps) == {"pr", "patching_resid"}
    assert set(a.directions) == {"decodeshare", "crh_axis", "crh_plane"} and a.site == "resid_post.1"
    assert a.sae_name == shipped_saes("zoo:toy-chat")[0].name
    assert a.unavailable == {} and not len(a.planted)
    row = a.agreement.set_index(["map_a", "map_b"]).loc[("patching", "dla")]
    assert np.isclose(row["rho"], stats.spearman(np.abs(a.head_maps["patching"]), np.abs(a.head_maps["dla"])))
    assert row["lo"] <= row["rho"] <= row["hi"]
    # the depth-partialled reading: ranks centred within each layer; Holm can only raise the p
    L, H = a.head_maps["patching"].shape
    layer = np.repeat(np.eye(L), H, 0)
    want = stats.partial_spearman(np.abs(a.head_maps["patching"]), np.abs(a.head_maps["dla"]),
                                  layer)
    assert np.isclose(row["rho_partial"], want)
    assert row["p_holm"] >= row["p_partial"] and row["n_eff"] == L * (H - 1)
    # overlaps: recomputed from the stored directions
    ov = a.overlaps.set_index(["a", "b"])
    W, _ = read_sae_decoder(shipped_saes("zoo:toy-chat")[0])
    W = W / np.linalg.norm(W, axis=1, keepdims=True)
    assert np.isclose(ov.loc[("sae", "crh_axis"), "max_cos"], np.abs(W @ a.directions["crh_axis"][:, 0]).max())
    assert ov.loc[("sae", "crh_axis"), "best"] == f"feature {int(np.abs(W @ a.directions['crh_axis'][:, 0]).argmax())}"


def test_direction_overlaps_are_one_for_a_shared_direction_and_chance_for_random():
    rng = np.random.default_rng(0)
    d = 64
    Q, _ = np.linalg.qr(rng.standard_normal((d, 3)))
    feats = rng.standard_normal((d, 20))
    feats[:, 7] = Q[:, 0] + Q[:, 1]                      # one feature inside span(Q)
    ov = direction_overlaps({"sae": feats, "sub": Q, "axis": Q[:, 2:3]}).set_index(["a", "b"])
    assert np.isclose(ov.loc[("sae", "sub"), "max_cos"], 1.0) and ov.loc[("sae", "sub"), "best"] == "feature 7"
    assert ov.loc[("sae", "sub"), "baseline_max_cos"] < 0.9
    assert np.isclose(ov.loc[("sub", "axis"), "max_cos"], 1.0)   # the axis is inside the subspace


def test_spearman_interval_covers_and_detects():
    rng = np.random.default_rng(1)
    x = rng.normal(size=40)
    strong = stats.spearman_interval(x, x + 0.3 * rng.normal(size=40), B=500, n_perm=500)
    null = stats.spearman_interval(x, rng.normal(size=40), B=500, n_perm=500)
    assert strong["lo"] > 0.5 and strong["p"] < 0.01
    assert null["lo"] < 0 < null["hi"] and null["p"] > 0.05
    assert np.isnan(stats.spearman_interval(x, np.ones(40))["rho"])
    assert isinstance(strong, stats.SpearmanInterval)


def test_unavailable_methods_are_reasons_not_errors(organisms):
    m = _load(organisms["decodeshare"])
    inp = AtlasInputs(pair=("T0 x1", "T0 x1"), texts=["T0 x1", "T1 x2"], direction_layer=0)
    a = atlas(m, inputs=inp, n_boot=200, n_perm=200)
    assert "patching" in a.unavailable and "same metric" in a.unavailable["patching"]
    assert "patching" not in a.head_maps and "dla" in a.head_maps


def test_collect_directions_gathers_sae_rows_saved_atlas_runs_and_extras(tmp_path, monkeypatch):
    from interplab.probes.lenses import collect_directions
    from interplab.results import new_run

    monkeypatch.setenv("INTERPLAB_HOME", str(tmp_path / "home"))
    m = interplab.load_model("zoo:toy-chat")
    a = atlas(m, n_boot=200, n_perm=200)
    with new_run("atlas", root=tmp_path / "home") as run:
        run.save_result("atlas_toy-chat", a)
    v = np.random.default_rng(0).standard_normal(m.d_model)
    reg = collect_directions(m, a.site, extra={"my steering vector": v}, unembedding=4, root=tmp_path / "home")
    W, site = read_sae_decoder(shipped_saes("zoo:toy-chat")[0])
    assert site == a.site and reg.to_frame()["source"].value_counts()["sae"] == W.shape[0]
    # every SAE row is stored as its unit vector
    assert np.allclose(reg.vector(f"SAE {shipped_saes('zoo:toy-chat')[0].name} #3"), W[3] / np.linalg.norm(W[3]))
    axis = next(n for n in reg.names if n.startswith("crh_axis[0]"))
    assert np.allclose(reg.vector(axis), a.directions["crh_axis"][:, 0])
    k = a.directions["decodeshare"].shape[1]
    assert sum(n.startswith("decodeshare[") for n in reg.names) == k
    # neighbours: the vector itself first (cos 1), then by |cos|, matching a direct computation
    nb = reg.neighbours(v, k=5)
    assert nb.loc[0, "name"] == "my steering vector" and np.isclose(nb.loc[0, "cosine"], 1.0)
    u = v / np.linalg.norm(v)
    assert np.isclose(nb.loc[1, "cosine"], (reg.vectors @ u)[[reg.names.index(n) for n in nb["name"]]][1])
    # another site collects no atlas or SAE directions
    other = collect_directions(m, "resid_post.3", root=tmp_path / "home")
    assert len(other) == 0


def test_collect_directions_reads_steering_and_decodeshare_runs_at_the_same_point(tmp_path):
    """A `crh-spiral` run steering at resid_pre.2 and a `decodeshare` study of layer 1 both live at resid_post.1
    (resid_pre.L is resid_post.L-1); at resid_post.2 neither is collected."""
    from interplab.probes.decodeshare import shared_subspace
    from interplab.probes.lenses import collect_directions
    from interplab.results import new_run

    m = interplab.load_model("zoo:toy-chat")
    rng = np.random.default_rng(3)
    vecs, delta = rng.standard_normal((3, m.d_model)), rng.standard_normal(m.d_model)
    with new_run("crh-spiral", {"model": "zoo:toy-chat", "layer": 2}, root=tmp_path) as run:
        run.save_arrays("spiral", {"vectors": vecs, "delta": delta, "ws": np.array([0.1, 0.2, 0.3])})
        run.save_json("summary", {"site": "resid_pre.2"})
    states = {f"t{i}": rng.standard_normal((40, m.d_model)) + 3 * rng.standard_normal(m.d_model) for i in range(3)}
    ss = shared_subspace(states)
    with new_run("decodeshare", {"model": "zoo:toy-chat", "layer": -1}, root=tmp_path) as run:   # -1 = middle = 2
        run.save_result("subspace_decode", ss)
    with new_run("decodeshare", {"model": "zoo:toy-chat", "layer": 1}, root=tmp_path) as run:
        run.save_result("subspace_decode", ss)
    reg = collect_directions(m, "resid_post.1", saes=False, root=tmp_path)
    src = reg.to_frame()["source"].value_counts().to_dict()
    assert src == {"steering": 4, "decodeshare": ss.basis.shape[1]}, (src, reg.skipped)
    w2 = next(n for n in reg.names if n.startswith("CRH spiral steering w=0.2"))
    assert np.allclose(reg.vector(w2), vecs[1] / np.linalg.norm(vecs[1]))
    other = collect_directions(m, "resid_post.2", saes=False, root=tmp_path).to_frame()["source"].value_counts()
    assert other.to_dict() == {"decodeshare": ss.basis.shape[1]}     # the layer -1 (= middle) study only


def test_pr_change_against_a_reference_model():
    """pr_change = PR(reference) − PR(model) per layer on the same texts; the model against itself gives 0."""
    from interplab.probes.lenses import layer_participation

    m, ref = interplab.load_model("zoo:toy-chat"), interplab.load_model("zoo:toy-base")
    a = atlas(m, reference=ref, directions=False, n_boot=200, n_perm=200)
    texts = atlas_inputs(m).texts
    assert np.allclose(a.layer_maps["pr_change"], layer_participation(ref, texts) - a.layer_maps["pr"])
    assert np.abs(a.layer_maps["pr_change"]).max() > 0.1
    same = atlas(m, reference=m, directions=False, n_boot=200, n_perm=200)
    assert np.allclose(same.layer_maps["pr_change"], 0.0)


def test_user_inputs_replace_the_built_in_ones(organisms, tmp_path):
    """The atlas experiment's settings (clean/corrupt, truth_data, ...): a user's truth file gives a model without
    verification items its Truth-Score map, which finds the planted heads; bad settings are typed errors."""
    import pandas as pd

    from interplab.core.errors import ConfigError
    from interplab.experiments.atlas import AtlasExperimentConfig
    from interplab.probes.lenses.atlas_inputs import with_user_data
    from interplab.zoo.validation.truth_scores import planted_truth_items

    m = _load(organisms["truth"])
    inp = atlas_inputs(m, n_items=160)
    items = planted_truth_items(160, seed=3, memory_map=inp.planted[1]["memory_map"])
    path = tmp_path / "truth.csv"
    pd.DataFrame({"text": [it["text"] for it in items], "label": [it["label"] for it in items]}).to_csv(path)
    inp.truth_items, inp.missing["truth"] = None, "removed for the test"
    inp = with_user_data(m, inp, clean="c1 q0", corrupt="c2 q0", truth_data=str(path), n_items=160)
    assert "truth" not in inp.missing and len(inp.truth_items) == 160 and inp.pair == ("c1 q0", "c2 q0")
    a = atlas(m, inputs=inp, directions=False, n_boot=200, n_perm=200)
    planted = {tuple(h) for h in a.planted_heads}
    assert set(a.top_heads("truth", len(planted))) == planted and a.pair == ["c1 q0", "c2 q0"]
    with pytest.raises(ConfigError, match="both clean and corrupt"):
        AtlasExperimentConfig(clean="a")
    with pytest.raises(ConfigError, match="no such file: truth_data"):
        AtlasExperimentConfig(truth_data=str(tmp_path / "missing.csv"))


def test_the_atlas_experiment_config_is_an_atlas_config():
    """Issue 26 §3: the experiment's config derives from AtlasConfig, so every atlas setting (n_perm, batch_size
    included) is settable from the command line."""
    from dataclasses import fields

    from interplab.experiments.atlas import AtlasExperimentConfig
    from interplab.experiments.registry import build_config
    from interplab.probes.lenses.atlas import AtlasConfig

    cfg = build_config(AtlasExperimentConfig, {"n_perm": "500", "batch_size": "8", "direction_layer": "2"})
    assert isinstance(cfg, AtlasConfig) and {f.name for f in fields(AtlasConfig)} <= {f.name for f in fields(cfg)}
    a = cfg.atlas_config()
    assert type(a) is AtlasConfig and (a.n_perm, a.batch_size, a.direction_layer) == (500, 8, 2)
    assert AtlasExperimentConfig().atlas_config().direction_layer is None


# ------------------------------------------------------------------------------- a real model's built-in atlas data
def _real_stub(name: str = "real:smollm2-135m-instruct"):
    """What the atlas parts read of a real model's inputs: its name, tokenizer and EOS (no weights are loaded)."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from interplab.models import real

    if not real.is_installed(real.real_model(name)):
        pytest.skip(f"{name} is not installed (`bash scripts/setup.sh install` installs the real models)")
    tok = AutoTokenizer.from_pretrained(str(real.checkpoint_for(name)))
    return SimpleNamespace(name=name, tokenizer=tok, eos_token_id=tok.eos_token_id)


def test_a_real_model_reads_world_facts_and_chat_tasks_not_the_toy_vocabulary():
    from interplab.data.toy_vocab import speaks_toy_vocab
    from interplab.data.world_facts import load_facts, load_known
    from interplab.probes.atlas_contract import AtlasContext
    from interplab.probes.decodeshare.atlas_part import PART as DS
    from interplab.probes.truth.atlas_part import PART as TRUTH

    m = _real_stub()
    assert not speaks_toy_vocab(m.tokenizer)
    ctx = AtlasContext(n_items=60, n_decode=4, seed=0)
    rows = TRUTH.inputs(m, ctx)["truth_items"]
    assert len(rows) == 60 and sum(r["label"] for r in rows) == 20       # 20 facts x (context, memory, distractor)
    by_fact = pd.DataFrame(rows).groupby("index")["candidate_kind"].apply(sorted)
    assert (by_fact.apply(tuple) == ("context", "distractor", "memory")).all()
    facts = load_facts()
    known = set(facts[load_known(m.name, facts)]["subject"])
    text = m.tokenizer.decode(rows[0]["text"])
    assert text.startswith("<|im_start|>") and any(s in text for s in known)   # chat-templated, a known fact
    ds = DS.inputs(m, ctx)
    assert len(ds["decode_prompts"]) == 6 and all(len(p) == 4 for p in ds["decode_prompts"].values())
    assert m.tokenizer.decode(next(iter(ds["decode_prompts"].values()))[0]).startswith("<|im_start|>")


def test_atlas_artifact_names_of_every_kind_of_model_name():
    from interplab.experiments.atlas import _key
    from interplab.results.runs import _check_name

    for name, want in [("zoo:toy-chat", "toy-chat"), ("real:smollm2-135m-instruct", "smollm2-135m-instruct"),
                       ("planted:truth", "planted-truth"), ("/tmp/x/ckpt", "tmp_x_ckpt")]:
        assert _key(name) == want
        _check_name("artifact", f"atlas_{_key(name)}")          # a valid run artifact name
