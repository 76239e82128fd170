"""Remote execution through nnsight: `remote="local"` is nnsight 0.8's LocalSimulationBackend, which serializes each
trace exactly as for NDIF and deserializes it with interplab hidden. Every result equals the local one (fp32)."""
from __future__ import annotations

import sys

import pytest
import torch

import interplab
from interplab.core.edit import Edit
from interplab.core.errors import ConfigError, RemoteError
from interplab.interventions import (Ablate, HeadGate, LogitTemperature, Patch, StaticLogitBias, Steer,
                                     SubspacePatchback, SubspaceProjection, SuppressTokens)

IDS = [[5, 6, 7, 8, 9], [10, 11, 12]]
SITES = ["resid_pre.0", "attn_z.1", "attn_out.0", "mlp_out.1", "resid_post.1", "final_norm", "logits"]


class _NoInterplab:
    """A meta-path finder that makes `import interplab` fail, as on an NDIF server. nnsight's simulation hides
    non-installed modules, but interplab is pip-installed (editable) here, so without this it would import."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "interplab":
            raise ModuleNotFoundError(f"No module named {name!r} (the simulated server has no interplab)")
        return None


@pytest.fixture(autouse=True)
def server_without_interplab(monkeypatch):
    from nnsight.intervention.backends.local import LocalSimulationBackend

    hide, restore = LocalSimulationBackend._hide_local_modules, LocalSimulationBackend._restore
    blocker = _NoInterplab()

    def hide_all(self):
        hidden = hide(self)
        for name in [n for n in sys.modules if n.split(".")[0] == "interplab"]:
            hidden["modules"][name] = sys.modules.pop(name)
        sys.meta_path.insert(0, blocker)
        return hidden

    def restore_all(self, hidden):
        sys.meta_path.remove(blocker)
        restore(self, hidden)

    monkeypatch.setattr(LocalSimulationBackend, "_hide_local_modules", hide_all)
    monkeypatch.setattr(LocalSimulationBackend, "_restore", restore_all)


@pytest.fixture(scope="module")
def pair(checkpoint_factory):
    path = checkpoint_factory("llama")
    return (interplab.load_model(path, backend="nnsight"),
            interplab.load_model(path, backend="nnsight", remote="local"))


def _close(a, b):
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def _edit_sets(m):
    g = torch.Generator().manual_seed(0)
    src = m.run(IDS[::-1], capture=["resid_post.0"]).cache
    return {
        "steer": [Steer("resid_post.0", torch.randn(m.d_model, generator=g), scale=2.0, positions="last_prompt")],
        "ablate": [Ablate("attn_z.1", heads=[1]), Ablate("mlp_out.0")],
        "patch": [Patch.from_cache(src, "resid_post.0")],
        "head_gate": [HeadGate(torch.rand(m.n_layers, m.n_heads, generator=g).numpy() + 0.5)],
        "projection": [SubspaceProjection(1, torch.randn(m.d_model, 3, generator=g), phases=("prefill",))],
        "logit_edits": [StaticLogitBias(torch.randn(m.d_vocab, generator=g), alpha=2.0),
                        SuppressTokens([0, 3]), LogitTemperature(0.7)],
    }


def test_captures_equal_local(pair):
    loc, rem = pair
    a, b = loc.run(IDS, capture=SITES), rem.run(IDS, capture=SITES)
    for s in SITES:
        _close(a.cache[s], b.cache[s])
    _close(a.logits, b.logits)


@pytest.mark.parametrize("name", ["steer", "ablate", "patch", "head_gate", "projection", "logit_edits"])
def test_builtin_edits_equal_local(pair, name):
    loc, rem = pair
    edits = _edit_sets(loc)[name]
    clean = loc.run(IDS).logits
    a = loc.run(IDS, edits=edits, capture=["resid_post.1"])
    b = rem.run(IDS, edits=edits, capture=["resid_post.1"])
    assert float((a.logits - clean).abs().max()) > 1e-3  # the edit does something
    if name == "logit_edits":  # -inf where tokens are suppressed, on both engines
        assert torch.equal(torch.isinf(a.logits), torch.isinf(b.logits))
        a.logits, b.logits = a.logits.nan_to_num(neginf=0.0), b.logits.nan_to_num(neginf=0.0)
    _close(a.logits, b.logits)
    _close(a.cache["resid_post.1"], b.cache["resid_post.1"])


def test_kv_cached_generation_with_decode_only_edit_equals_local(pair):
    loc, rem = pair
    g = torch.Generator().manual_seed(3)
    edits = [SubspaceProjection(0, torch.randn(loc.d_model, 4, generator=g), phases=("decode",)),
             Steer("resid_post.1", torch.randn(loc.d_model, generator=g), phases=("decode",), scale=3.0)]
    kw = dict(max_new_tokens=5, edits=edits, capture=["resid_post.1"], stop_at_eos=False)
    a, b = loc.generate(IDS, **kw), rem.generate(IDS, **kw)
    plain = loc.generate(IDS, max_new_tokens=5, stop_at_eos=False)
    assert a.new_tokens == b.new_tokens
    assert float((a.step_logits - plain.step_logits).abs().max()) > 1e-3
    _close(a.step_logits, b.step_logits)
    _close(a.decode_cache["resid_post.1"], b.decode_cache["resid_post.1"])
    _close(a.prefill_cache["resid_post.1"], b.prefill_cache["resid_post.1"])


def test_kv_cached_generation_with_patchback_equals_local(pair):
    """SubspacePatchback picks its donor rows per decode step from the step context on the client."""
    loc, rem = pair
    g = torch.Generator().manual_seed(5)
    K = 4
    donors = torch.randn(len(IDS), K, loc.d_model, generator=g) * 3
    valid = torch.ones(len(IDS), K, dtype=torch.bool)
    valid[1, 2] = False
    edit = SubspacePatchback(1, torch.randn(loc.d_model, 3, generator=g), donors, valid, window=[0, 2, 3])
    kw = dict(max_new_tokens=5, edits=[edit], stop_at_eos=False)
    a, b = loc.generate(IDS, **kw), rem.generate(IDS, **kw)
    plain = loc.generate(IDS, max_new_tokens=5, stop_at_eos=False)
    assert float((a.step_logits - plain.step_logits).abs().max()) > 1e-3
    assert a.new_tokens == b.new_tokens
    _close(a.step_logits, b.step_logits)


def test_remote_generation_is_one_session(pair, monkeypatch):
    """One request for the whole generation: the session, not a trace per token."""
    from nnsight.intervention.backends.local import LocalSimulationBackend

    calls = []
    orig = LocalSimulationBackend.__call__
    monkeypatch.setattr(LocalSimulationBackend, "__call__", lambda self, t: (calls.append(t), orig(self, t))[1])
    _, rem = pair
    rem.generate(IDS, max_new_tokens=4, stop_at_eos=False)
    assert len(calls) == 1


class _Double(Edit):
    sites = ("resid_post.0",)

    def apply(self, site, x, ctx):
        return 2 * x


def test_what_cannot_run_remotely_raises(pair):
    _, rem = pair
    with pytest.raises(RemoteError, match="remote_apply"):
        rem.run(IDS, edits=[_Double()])
    with pytest.raises(RemoteError, match="gradients"):
        rem.run(IDS, grad=True)
    with pytest.raises(RemoteError, match="use_cache"):
        rem.generate(IDS, max_new_tokens=2, use_cache=False)


def test_the_simulation_hides_interplab(pair):
    """The check is real: a trace that needs interplab on the server fails to deserialize under remote='local'."""
    _, rem = pair
    nn = rem.nnsight_model
    ids = torch.tensor(IDS[0])[None]
    steer = Steer("resid_post.0", torch.ones(rem.d_model))  # an interplab object, pickled by reference
    op = steer.remote_apply("resid_post.0", None)
    with nn.trace(ids, remote="local"):  # the same trace with the edit's torch closure works
        h = nn.model.layers[0].output
        nn.model.layers[0].output = op(h)
    with pytest.raises(Exception, match="interplab"):
        with nn.trace(ids, remote="local"):
            h = nn.model.layers[0].output
            nn.model.layers[0].output = steer.apply("resid_post.0", h, None)


def test_remote_options_are_checked(checkpoint_factory):
    path = checkpoint_factory("llama")
    with pytest.raises(ConfigError, match="nnsight"):
        interplab.load_model(path, remote="local")  # bridge backend
    with pytest.raises(ConfigError, match="hub id"):
        interplab.load_model(path, backend="nnsight", remote=True)
    with pytest.raises(ConfigError, match="remote must be"):
        interplab.load_model(path, backend="nnsight", remote="ndif")


def test_new_module_sites_run_remotely_and_the_source_ones_say_why(pair):
    """Issue 49's sites that are module inputs/outputs (resid_mid edited in place, attn_q/k/v, mlp_hidden, the norm
    scales, an edited scale re-computing its norm) ship to the server like the others; attn_rot_q/k and attn_scores
    (read through nnsight's `.source`) and module sites (local PyTorch hooks) are refused with the reason."""
    from interplab.interventions import HeadScale

    loc, rem = pair
    sites = ["resid_mid.0", "attn_q.1", "attn_k.0", "attn_v.1", "mlp_hidden.0", "ln1_scale.1", "final_norm_scale"]
    edits = [Steer("resid_mid.0", torch.linspace(-1, 1, loc.d_model)), Steer("ln2_scale.1", [0.5]),
             HeadScale({(0, 1): 0.0}, site="attn_k"), Steer("mlp_hidden.1", torch.ones(loc.d_mlp))]
    a, b = loc.run(IDS, capture=sites, edits=edits), rem.run(IDS, capture=sites, edits=edits)
    for s in sites:
        _close(a.cache[s], b.cache[s])
    _close(a.logits, b.logits)
    for site in ("attn_rot_q.0", "attn_scores.1", "module:model.layers.0.mlp.act_fn"):
        with pytest.raises(RemoteError, match="remote"):
            rem.run(IDS, capture=[site])
