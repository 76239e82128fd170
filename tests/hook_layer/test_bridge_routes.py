"""The bridge backend runs components with no hook inside as the Hugging Face modules they wrap
(interplab/models/backends/bridge_routes.py). Against the same model with every TransformerBridge
wrapper kept, that must change no number, on any family; a site that a capture or edit names, and a
hook a user attached to the bridge, must still run through TransformerLens's hook point."""
import contextlib

import pytest
import torch

from interplab.core.errors import SiteError
from interplab.core.sites import GLOBAL_KINDS, LAYER_KINDS
from interplab.interventions import Ablate, Steer

FAMILIES = ("gpt2", "llama", "qwen2", "mistral", "gemma3")
ONE = ["w1 w2 w3 w4 w5 w6"]                       # no padding
BATCH = ["w1 w2 w3 w4 w5", "w6 w7", "w8 w9 w10"]  # left padding


@contextlib.contextmanager
def _wrapped_only(m):
    routes = m._impl.routes
    routes.enabled = False
    try:
        yield
    finally:
        routes.enabled = True


def _outputs(m):
    g = torch.Generator().manual_seed(3)
    v = torch.randn(m.d_model, generator=g)
    steer = [Steer("resid_post.1", v, positions="decode", scale=2.0)]
    zero = [Steer("resid_post.0", torch.zeros(m.d_model))]
    return {
        "run": m.run(ONE).logits,
        "run_batch": m.run(BATCH).logits,
        "run_capture": m.run(ONE, capture=["resid_post.0", "attn_z.1"]),
        "run_zero_edit": m.run(ONE, edits=zero).logits,
        "run_ablate": m.run(ONE, edits=[Ablate("attn_z.0", heads=[1])]).logits,
        "gen": m.generate(ONE, max_new_tokens=5, stop_at_eos=False),
        "gen_batch": m.generate(BATCH, max_new_tokens=4, stop_at_eos=False),
        "gen_steer": m.generate(ONE, max_new_tokens=5, edits=steer, stop_at_eos=False,
                                capture=["mlp_out.0"]),
        "gen_uncached": m.generate(ONE, max_new_tokens=3, edits=steer, stop_at_eos=False,
                                   use_cache=False),
    }


@pytest.mark.parametrize("arch", FAMILIES)
def test_unhooked_components_change_no_number(model_factory, arch):
    m = model_factory(arch)
    fast = _outputs(m)
    with _wrapped_only(m):
        ref = _outputs(m)
    for k in ("run", "run_batch", "run_zero_edit", "run_ablate"):
        assert torch.equal(fast[k], ref[k]), (arch, k)
    for s in ("resid_post.0", "attn_z.1"):
        got, want = fast["run_capture"].cache.raw(s), ref["run_capture"].cache.raw(s)
        assert torch.equal(got, want), (arch, s)
    assert torch.equal(fast["run_capture"].logits, ref["run_capture"].logits)
    for k in ("gen", "gen_batch", "gen_steer", "gen_uncached"):
        assert fast[k].new_tokens == ref[k].new_tokens, (arch, k)
        assert torch.equal(fast[k].step_logits, ref[k].step_logits), (arch, k)
    assert torch.equal(fast["gen_steer"].decode_cache["mlp_out.0"],
                       ref["gen_steer"].decode_cache["mlp_out.0"])
    # a zero-strength edit is bit-identical to none, though only its block now runs wrapped
    assert torch.equal(fast["run_zero_edit"], fast["run"])
    assert m.attn_implementation == "sdpa"   # eager was switched on for those forwards only


@pytest.mark.parametrize("arch", FAMILIES)
def test_which_components_run_unwrapped(model_factory, arch):
    """Not a vacuous comparison: with no hook anywhere, the blocks of the RoPE families run as plain
    modules; GPT-2's (joint-QKV attention, TransformerLens's own LayerNorm) never do. A hook keeps
    its block wrapped."""
    m = model_factory(arch)
    routes = m._impl.routes
    blocks = list(m.bridge.blocks)

    def free():
        return {id(w) for _, _, w in routes.unhooked()}
    f = free()
    if arch == "gpt2":
        assert not any(id(b) in f for b in blocks) and not any(id(b.attn) in f for b in blocks)
        return
    assert all(id(b) in f for b in blocks)
    point = m.bridge.hook_dict["blocks.1.hook_out"]
    point.add_hook(lambda x, hook: None)
    try:
        f = free()
    finally:
        point.remove_hooks()
    # the hooked block keeps its wrapper (and hook point); the attention inside it need not
    assert id(blocks[1]) not in f and id(blocks[0]) in f and id(blocks[1].attn) in f
    assert all(id(b) in free() for b in blocks)


def test_hooks_a_user_attached_to_the_bridge_still_fire(model_factory):
    m = model_factory("llama")
    seen = []

    def spy(x, hook):
        seen.append(hook.name)

    clean = m.generate(ONE, max_new_tokens=3, stop_at_eos=False)
    hooks = [("blocks.1.attn.hook_pattern", spy), ("ln_final.hook_scale", spy)]
    with m.bridge.hooks(fwd_hooks=hooks):
        hooked = m.generate(ONE, max_new_tokens=3, stop_at_eos=False)
    assert seen.count("blocks.1.attn.hook_pattern") == seen.count("ln_final.hook_scale") == 3
    assert torch.equal(hooked.step_logits, clean.step_logits)


@pytest.mark.parametrize("arch", FAMILIES)
def test_each_site_alone_runs_through_its_hook_point(model_factory, arch):
    """One site per forward (every other block then runs unwrapped): the capture still comes from
    TransformerLens's hook point (one that never fires raises SiteError) and equals the all-wrapped
    one, as do the logits."""
    m = model_factory(arch)
    sites = [f"{k}.1" for k in LAYER_KINDS] + list(GLOBAL_KINDS)
    for site in sites:
        try:
            fast = m.run(ONE, capture=[site])
        except SiteError:   # a site this family's bridge lacks: so it is when all is wrapped too
            with _wrapped_only(m), pytest.raises(SiteError):
                m.run(ONE, capture=[site])
            continue
        with _wrapped_only(m):
            ref = m.run(ONE, capture=[site])
        assert torch.equal(fast.cache.raw(site), ref.cache.raw(site)), (arch, site)
        assert torch.equal(fast.logits, ref.logits), (arch, site)


def test_a_module_put_in_a_wrappers_place_stays_there(checkpoint_factory):
    """E.g. a LoRA layer wrapped around a projection after loading: the routes map the model again
    instead of swapping it out (and back in as the bare wrapper), and the numbers stay the same."""
    import interplab

    m = interplab.load_model(checkpoint_factory("llama"))   # its own copy: this test edits it
    attn = m.bridge.blocks[0].attn._modules["_original_component"]
    calls = []

    class Tap(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            calls.append(1)
            return self.inner(x)

    with _wrapped_only(m):
        ref = m.generate(ONE, max_new_tokens=3, stop_at_eos=False)
    m.generate(ONE, max_new_tokens=2, stop_at_eos=False)   # the routes are mapped
    tap = Tap(attn._modules["q_proj"])
    attn._modules["q_proj"] = tap
    out = m.generate(ONE, max_new_tokens=3, stop_at_eos=False)
    assert attn._modules["q_proj"] is tap and calls   # the unwrapped attention ran through it
    assert torch.equal(out.step_logits, ref.step_logits)
