"""One edit for any set of (layer, head): Ablate.heads / HeadAblation and HeadScale, under canonical site names."""
import pytest
import torch

from interplab.core.errors import InputError, ShapeError
from interplab.interventions import Ablate, HeadAblation, HeadScale

PROMPTS = ["w1 w2 w3 w4 w5", "w6 w7", "w8 w9 w10"]


@pytest.fixture(scope="module")
def pair(model_factory):
    return model_factory("llama"), model_factory("llama", backend="nnsight")


def test_heads_of_several_layers_in_one_edit(pair):
    one = Ablate.heads({(1, 3), (0, 1)})
    assert isinstance(one, HeadAblation) and one.sites == ("attn_z.0", "attn_z.1")
    assert repr(one) == "HeadAblation(attn_z: L0h1, L1h3 -> zero; positions='all', phases=('prefill', 'decode'))"
    per_layer = [Ablate("attn_z.0", heads=[1]), Ablate("attn_z.1", heads=[3])]
    scaled = HeadScale({(0, 1): 0.0, (1, 3): 0.0})
    assert repr(scaled) == "HeadScale(attn_z: L0h1 x0, L1h3 x0; positions='all', phases=('prefill', 'decode'))"
    outs = []
    for m in pair:
        a, b, c = (m.run(PROMPTS, edits=e).logits for e in ([one], per_layer, [scaled]))
        assert torch.equal(a, b) and torch.equal(a, c), m.backend
        assert (a - m.run(PROMPTS).logits).abs().max() > 1e-3
        outs.append(a)
    mask = pair[0].tokenize(PROMPTS).attention_mask.bool()
    torch.testing.assert_close(outs[0][mask], outs[1][mask], atol=1e-5, rtol=0)


def test_head_scale_matches_scaling_the_heads_rows_by_hand(pair):
    """HeadScale at attn_z = scaling head h's slice of the o_proj input (a plain pre-hook on the HF model)."""
    from transformers import AutoModelForCausalLM

    mb, _ = pair
    batch = mb.tokenize(PROMPTS)
    hf = AutoModelForCausalLM.from_pretrained(mb.path, attn_implementation="eager").eval()
    d = mb.d_head

    def pre(mod, args):
        z = args[0].clone()
        z[..., 2 * d:3 * d] *= 0.5
        return (z,)
    h = hf.model.layers[1].self_attn.o_proj.register_forward_pre_hook(pre)
    with torch.no_grad():
        ref = hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                 position_ids=batch.position_ids).logits
    h.remove()
    mask = batch.attention_mask.bool()
    gates = torch.ones(mb.n_layers, mb.n_heads)
    gates[1, 2] = 0.5
    for m in pair:
        for edit in (HeadScale({(1, 2): 0.5}), HeadScale(gates.numpy())):
            got = m.run(PROMPTS, edits=[edit]).logits
            torch.testing.assert_close(got[mask], ref[mask], atol=1e-5, rtol=0, msg=m.backend)
        assert HeadScale({(1, 2): 1.0}).is_noop()
        assert torch.equal(m.run(PROMPTS, edits=[HeadScale(torch.ones(2, 4).numpy())]).logits,
                           m.run(PROMPTS).logits)


def test_kv_heads_values_and_validation(pair):
    mb, mn = pair
    assert (mb.n_heads, mb.n_kv_heads) == (4, 2)
    mean = torch.randn(mb.n_layers, mb.n_kv_heads, mb.d_head)
    by_pair = HeadAblation({(0, 1)}, site="attn_v", value={(0, 1): mean[0, 1]})
    by_array = HeadAblation({(0, 1)}, site="attn_v", value=mean)
    for m in (mb, mn):
        a = m.run(PROMPTS, edits=[by_pair], capture=["attn_v.0"])
        assert torch.equal(a.logits, m.run(PROMPTS, edits=[by_array]).logits)
        real = a.cache["attn_v.0"][a.batch.attention_mask.bool()]     # padding is never edited
        assert torch.equal(real[:, 1], mean[0, 1].expand_as(real[:, 1]))
    with pytest.raises(ShapeError, match="2 KV heads"):
        mb.run(PROMPTS, edits=[HeadScale({(0, 2): 0.0}, site="attn_k")])     # GQA: 2 KV heads, 4 query heads
    with pytest.raises(ShapeError, match="out of range"):
        mb.run(PROMPTS, edits=[Ablate.heads({(5, 0)})])
    with pytest.raises(ShapeError, match="n_heads=2"):
        mb.run(PROMPTS, edits=[HeadAblation({(0, 1)}, site="attn_v", value=torch.zeros(2, 4, mb.d_head))])
    with pytest.raises(InputError, match="per-head site"):
        HeadScale({(0, 1): 0.0}, site="resid_post")
    with pytest.raises(InputError, match="pairs"):
        Ablate.heads([1, 2])
    with pytest.raises(InputError, match="per-head site"):
        Ablate("mlp_out.0", heads=[1])
    assert Ablate("attn_k.0", heads=1).heads == (1,)  # the instance keeps its heads; Ablate.heads builds an edit
