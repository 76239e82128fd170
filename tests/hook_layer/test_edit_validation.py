"""Every built-in edit checks its arrays against the model the first time it is applied (a typed ShapeError naming
the expected shape), whether or not it would change anything; zero-strength edits stay bit-identical to no edit."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from interplab.core.edit import Edit, ModelShape
from interplab.core.errors import ShapeError
from interplab.interventions import (Ablate, HeadGate, LogitTemperature, Patch, RandomHeadGate, StaticLogitBias,
                                     Steer, SubspacePatchback, SubspaceProjection, SuppressTokens, teacher_forced)

PROMPTS = ["w1 w2 w3", "w4 w5"]
BACKENDS = ["bridge", "nnsight"]


@pytest.fixture(scope="module", params=BACKENDS)
def m(request, model_factory):  # 4 layers x 4 heads (2 KV heads), d_model 64, d_head 16, vocab 64
    return model_factory("llama", backend=request.param, n_layers=4)


def _bad(m, edit, *needles):
    with pytest.raises(ShapeError) as e:
        m.run(PROMPTS, edits=[edit])
    for n in needles:
        assert n in str(e.value), str(e.value)


def test_model_shape(m):
    assert m.shape == ModelShape(n_layers=4, n_heads=4, n_kv_heads=2, d_model=64, d_head=16, d_vocab=64,
                              d_mlp=128)
    assert ModelShape.of(m) == m.shape


def test_head_gate_with_an_extra_layer_row_fails(m):
    # the reported bug: an all-ones [L+1, H] map changes nothing, so it used to pass silently
    _bad(m, HeadGate(np.ones((5, 4))), "(5, 4)", "(4, 4)")
    gates = np.ones((5, 4))
    gates[1, 2] = 2.0
    _bad(m, HeadGate(gates), "(4, 4)")
    _bad(m, HeadGate(np.ones((4, 3)), site="attn_out_chunks"), "(4, 4)")


def test_head_gate_transposed_fails(model_factory):
    m = model_factory("llama", n_layers=3)  # 3 layers x 4 heads: a [H, L] map is distinguishable
    g = np.linspace(0.5, 1.5, 12).reshape(3, 4)
    m.run(PROMPTS, edits=[HeadGate(g)])
    _bad(m, HeadGate(g.T), "transposed", "(3, 4)")
    _bad(m, RandomHeadGate(4, 3), "transposed")
    m.run(PROMPTS, edits=[RandomHeadGate(3, 4)])


def test_steer_vector_width(m):
    _bad(m, Steer("resid_post.1", torch.ones(63)), "[64]", "[batch, 64]")
    _bad(m, Steer("attn_z.0", torch.ones(4, 8)), "[4, 16]")
    m.run(PROMPTS, edits=[Steer("resid_post.1", torch.ones(len(PROMPTS), 64))])  # one vector per row is fine
    # a zero-strength edit of the wrong shape is still a bug
    _bad(m, Steer("resid_post.1", torch.ones(65), scale=0.0), "[64]")


def test_ablate_heads_and_value(m):
    _bad(m, Ablate("attn_z.0", heads=[4]), "4 query heads")
    _bad(m, Ablate("resid_post.0", value=torch.zeros(32)), "[64]")
    m.run(PROMPTS, edits=[Ablate("resid_post.0", value=torch.zeros(64)), Ablate("attn_z.1", heads=[-1, 0])])


def test_patch_source_shape(m):
    _bad(m, Patch("resid_post.0", torch.zeros(2, 5, 32)), "[batch, n_pos, 64]")
    _bad(m, Patch("attn_z.1", torch.zeros(5, 4, 8)), "[n_pos, 4, 16]")
    _bad(m, Patch("resid_post.0", torch.zeros(64)), "[n_pos, 64]")
    m.run(PROMPTS, edits=[Patch("resid_post.0", torch.zeros(5, 64))])


def test_subspace_bases_of_the_wrong_width(m):
    basis = np.eye(32)[:, :3]
    _bad(m, SubspaceProjection(1, basis), "d_model=64")
    _bad(m, SubspaceProjection(1, basis, alpha=0.0), "d_model=64")
    _bad(m, teacher_forced(SubspaceProjection(1, basis, phases=("prefill",)), [3, 2]), "d_model=64")
    _bad(m, SubspacePatchback(1, basis, np.zeros((3, 32))), "d_model=64")
    m.run(PROMPTS, edits=[SubspaceProjection(1, np.eye(64)[:, :3], phases=("prefill",))])


def test_logit_edits_against_the_vocabulary(model_factory):
    m = model_factory("llama", n_layers=2, vocab=96)
    _bad(m, StaticLogitBias(torch.ones(m.d_vocab + 1)), "d_vocab=96")
    _bad(m, StaticLogitBias(torch.zeros(50), alpha=0.0), "d_vocab=96")
    _bad(m, SuppressTokens([3, 96]), "[96]", "d_vocab=96")
    _bad(m, Steer("logits", torch.ones(m.d_model)), "[96]")
    m.run(PROMPTS, edits=[StaticLogitBias(torch.ones(96)), SuppressTokens([3]), LogitTemperature(2.0)])


def test_validation_runs_once_per_edit_and_model(m):
    class Counting(Edit):
        sites = ("resid_post.0",)
        calls = 0

        def validate(self, shape):
            type(self).calls += 1
            assert shape is m.shape

        def apply(self, site, x, ctx):
            return x

    e = Counting()
    m.run(PROMPTS, edits=[e])
    m.generate(PROMPTS, max_new_tokens=2, edits=[e], stop_at_eos=False)
    assert Counting.calls == 1
    m.run(PROMPTS, edits=[Counting()])
    assert Counting.calls == 2


def test_valid_zero_strength_edits_stay_bit_identical(m):
    clean = m.run(PROMPTS)
    zero = [Steer("resid_post.0", torch.ones(64), scale=0.0), HeadGate(np.ones((4, 4))),
            SubspaceProjection(1, np.eye(64)[:, :3], alpha=0.0, phases=("prefill",)),
            StaticLogitBias(torch.ones(64), alpha=0.0), LogitTemperature(1.0)]
    assert torch.equal(m.run(PROMPTS, edits=zero).logits, clean.logits)


def test_edits_are_immutable_and_derive_what_they_show():
    """Issue 26 §2: an edit cannot be changed after it is built (what repr shows is what runs); HeadGate's sites are
    derived from its read-only gates; observation counters are the only mutable part, read through properties."""
    import numpy as np
    import torch

    from interplab.interventions import Ablate, HeadGate, Steer, SubspaceProjection

    s = Steer("resid_post.0", torch.ones(4), scale=2.0)
    with pytest.raises(AttributeError, match="immutable"):
        s.scale = 3.0
    g = np.ones((3, 2))
    g[1, 0] = 1.5
    gate = HeadGate(g)
    g[2, 1] = 0.0                                   # the caller's array is copied: the edit does not move
    assert gate.sites == ("attn_z.1",) and gate.gates[2, 1] == 1.0
    with pytest.raises(ValueError):
        gate.gates[0, 0] = 2.0                      # read-only
    with pytest.raises(AttributeError, match="immutable"):
        gate.site = "attn_out_chunks"

    class MyAblate(Ablate):                         # a subclass may still set attributes in its own __init__
        def __init__(self, site):
            super().__init__(site)
            self.note = "mine"
    a = MyAblate("mlp_out.0")
    assert a.note == "mine"
    with pytest.raises(AttributeError, match="immutable"):
        a.note = "changed"
    p = SubspaceProjection(0, np.eye(4)[:, :1])
    assert (p.n_calls, p.n_edited, p.energy_removed) == (0, 0, 0.0)
    with pytest.raises(AttributeError):
        p.n_calls = 5


def test_an_edit_owns_its_values():
    """Issue 47 §5: changing the caller's tensor, list or dict after building an edit changes nothing that runs."""
    import torch

    from interplab.interventions import Ablate, Patch, Steer

    v, heads, src = torch.ones(4), [0, 1], torch.zeros(3, 4)
    s, a, p = Steer("resid_post.0", v), Ablate("attn_z.0", heads=heads), Patch("resid_post.0", src)
    before = repr(s), repr(a), repr(p)
    v[0], src[0, 0] = 5.0, 7.0
    heads.append(2)
    assert torch.equal(s.vector, torch.ones(4)) and a.heads == (0, 1) and float(p.source[0, 0]) == 0.0
    assert (repr(s), repr(a), repr(p)) == before
    with pytest.raises(AttributeError):
        a.heads.append(3)                            # stored as a tuple
    w = torch.ones(4, requires_grad=True)            # autograd still flows through the edit's copy
    (Steer("resid_post.0", w).vector * 2).sum().backward()
    assert torch.equal(w.grad, torch.full((4,), 2.0))


@pytest.mark.parametrize("make", ["steer", "ablate", "gate"])
def test_local_and_remote_forms_share_one_definition(make):
    """apply and remote_apply of the built-in edits compute the same thing (one definition of the math)."""
    import numpy as np
    import torch

    from interplab.core.edit import StepContext  # noqa: F401 - ctx is unused by these edits' math
    from interplab.interventions import Ablate, HeadGate, Steer

    x = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    edit, site = {"steer": (Steer("attn_z.0", torch.randn(4, 5), scale=0.7), "attn_z.0"),
                  "ablate": (Ablate("attn_z.0", heads=[1, 3]), "attn_z.0"),
                  "gate": (HeadGate(np.linspace(0.5, 1.5, 8).reshape(2, 4)), "attn_z.1")}[make]
    assert "transform" in vars(type(edit)), f"{type(edit).__name__} should define its math once, in transform"
    assert torch.equal(edit.apply(site, x, None), edit.remote_apply(site, None)(x))
    assert torch.equal(edit.apply(site, x, None), edit.transform(site, None)(x))
