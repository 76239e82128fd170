"""End-to-end on a random Llama: train_sae (fast / block), evaluate_sae (T8 on a no-op splice), steering (T9, T12),
feature statistics (per-sample contexts, logit effects, special-token ranking)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from interplab.sae import evaluate_sae, train_sae
from interplab.sae.steering import SAESteer, steering_sweep

SITE = "resid_post.1"


def test_identity_splice_is_noop(llama, dialogues, identity_sae):
    """x_hat = x  =>  CE_sae = CE_clean, Delta Loss 0, ce_loss_score 1, KL 0, MSE 0."""
    r = evaluate_sae(llama, identity_sae, dialogues[:6], site=SITE, micro_batch=3)
    assert r["ce_sae"] == pytest.approx(r["ce_clean"], abs=1e-5)
    assert abs(r["delta_loss_pct"]) < 1e-3
    assert r["ce_loss_score"] == pytest.approx(1.0, abs=1e-4)
    assert r["kl_sae"] < 1e-6 and r["kl_zero_ablation"] > 1e-3
    assert r["mse"] < 1e-10 and r["explained_variance"] == pytest.approx(1.0, abs=1e-6)
    assert r["dead_features"] == 0


def test_evaluate_matches_hand_computation(llama, dialogues, identity_sae):
    """A damaged SAE: Eq. 7 from evaluate_sae equals a direct per-sample computation; Delta Loss sign."""
    import copy

    sae = copy.deepcopy(identity_sae)
    with torch.no_grad():
        sae.b_dec.add_(0.3)  # x_hat = x + 0.3 everywhere -> per-token sq error 0.09 * 64
    special = [llama.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    r = evaluate_sae(llama, sae, dialogues[:5], site=SITE, special_token_ids=special)
    assert r["mse"] == pytest.approx(0.09, rel=1e-4) and r["mse_special"] == pytest.approx(0.09, rel=1e-4)
    assert r["log2_mse"] == pytest.approx(math.log2(0.09), rel=1e-4)
    assert r["n_sequences_special"] == 5
    # the splice changes the loss and the sign convention holds: delta = (ce_sae - ce_clean) / ce_clean
    assert r["delta_loss_pct"] == pytest.approx((r["ce_sae"] - r["ce_clean"]) / r["ce_clean"] * 100)
    assert abs(r["ce_sae"] - r["ce_clean"]) > 1e-4


def test_steering_alpha0_and_equivalence(llama, dialogues, identity_sae):
    """T9: alpha = 0 reproduces the unsteered greedy output; alpha * W_dec[k] at the site equals +alpha on
    feature k with the error term kept; T12: a non-zero edit changes the output."""
    from interplab.interventions import Edit
    from interplab.sae import chat_ids

    import copy

    torch.manual_seed(0)
    sae = copy.deepcopy(identity_sae)
    with torch.no_grad():  # make it a lossy SAE so the error term matters
        sae.W_dec.add_(0.05 * torch.randn_like(sae.W_dec))
    prompts = [chat_ids(llama.tokenizer, d[:-1], add_generation_prompt=True) for d in dialogues[:3]]
    g0 = llama.generate(prompts, max_new_tokens=6, greedy=True)
    gs = llama.generate(prompts, max_new_tokens=6, greedy=True, edits=[SAESteer(sae, 3, 0.0, site=SITE)])
    assert torch.equal(g0.tokens, gs.tokens)
    assert torch.equal(g0.step_logits, gs.step_logits)

    class FeatureAdd(Edit):
        def __init__(self, k, a):
            self.sites, self.k, self.a = (SITE,), k, a

        def apply(self, site, x, ctx):
            f = sae.encode(x)
            err = x - sae.decode(f)
            f2 = f.clone()
            f2[..., self.k] += self.a
            return sae.decode(f2) + err

    a = llama.run(prompts, edits=[SAESteer(sae, 3, 4.0, site=SITE)], logits=True).logits
    b = llama.run(prompts, edits=[FeatureAdd(3, 4.0)], logits=True).logits
    c = llama.run(prompts, logits=True).logits
    assert torch.allclose(a, b, atol=1e-4)
    assert (a - c).abs().max() > 1e-2  # T12: the hook has an effect
    # positions: 'generated' leaves the prompt forward untouched; 'template' only touches template tokens
    tmpl = SAESteer(sae, 3, 4.0, site=SITE, positions="template", prompt_ids=prompts,
                    template_ids=[llama.tokenizer.convert_tokens_to_ids("<|im_start|>")])
    out = llama.run(prompts, edits=[tmpl], capture=[SITE], logits=False).cache[SITE]
    ref = llama.run(prompts, capture=[SITE], logits=False).cache[SITE]
    # resid_post.1 at the first real token (always <|im_start|>) moves by exactly alpha * W_dec[3]
    mask = llama.run(prompts, logits=False, capture=[SITE]).batch.attention_mask.bool()
    first = mask.float().argmax(1)
    for i in range(len(prompts)):
        d = out[i, first[i]] - ref[i, first[i]]
        assert torch.allclose(d, 4.0 * sae.W_dec[3], atol=1e-4)
    gen_only = llama.run(prompts, edits=[SAESteer(sae, 3, 4.0, site=SITE, positions="generated")], logits=True).logits
    assert torch.equal(gen_only, c)


def test_steering_sweep_saves_and_loads(llama, dialogues, identity_sae, tmp_path):
    res = steering_sweep(llama, identity_sae, [d[:-1] for d in dialogues[:2]], feature=5, alphas=(0.0, 8.0),
                         max_new_tokens=4, site=SITE)
    df = res.to_frame()
    assert len(df) == 4 and set(df.alpha) == {0.0, 8.0}
    from interplab.sae import chat_ids

    g0 = llama.generate([chat_ids(llama.tokenizer, dialogues[0][:-1], add_generation_prompt=True)], max_new_tokens=4)
    assert df[df.alpha == 0.0].iloc[0]["new_tokens"] == g0.new_tokens[0]
    res.save(tmp_path)
    back = type(res).load(tmp_path)
    assert back.to_frame()["new_tokens"].tolist() == df["new_tokens"].tolist()


@pytest.mark.parametrize("method", ["fast", "block"])
def test_train_on_model_and_evaluate(llama, dialogues, tmp_path, method):
    from sae_lens import SAE

    out = train_sae(llama, dialogues, site=SITE, method=method, architecture="jumprelu", expansion=2, steps=12,
                    batch_tokens=32, lr=1e-3, context_size=32, out_dir=tmp_path / method, b_dec_init_tokens=64,
                    micro_batch=4)
    sae = SAE.load_from_disk(str(out))
    md = sae.cfg.metadata
    assert md.hook_name == "blocks.1.hook_resid_post" and md.model_name == llama.name
    assert md.training_data_mode == ("fast_sequential" if method == "fast" else "block")
    assert md.chat_template_hash and len(md.chat_template_hash) == 16
    if method == "fast":
        assert md.truncation_len == 8192
    else:
        assert md.context_size == 32 and md.block_data == "dialogues"
    r = evaluate_sae(llama, out, dialogues[:4], downstream=False)
    assert r["site"] == SITE and math.isfinite(r["log2_mse"]) and r["d_sae"] == 128


@torch.no_grad()
def test_feature_statistics(llama, dialogues, identity_sae, tmp_path):
    from interplab.sae.features import FeatureStats, feature_statistics

    st = feature_statistics(llama, identity_sae, dialogues[:8], k=3, site=SITE)
    assert st.d_sae == 128 and st.top_values.shape == (128, 3)
    # reference: per-sample forwards, feature acts; top-1 sample and value per feature
    ref_max = {}
    for i, s in enumerate(st.samples):
        a = llama.run([s], capture=[SITE], logits=False).cache[SITE][0]
        f = identity_sae.encode(a)
        ref_max[i] = f.max(0).values
    R = torch.stack([ref_max[i] for i in range(len(st.samples))])  # [N, F]
    assert np.allclose(st.top_values[:, 0], R.max(0).values.numpy(), atol=1e-4)
    assert np.allclose(st.max_act, R.max(0).values.numpy(), atol=1e-4)
    f0 = int(np.argmax(st.density))
    ctx = st.contexts(f0)
    assert ctx, "a dense feature has contexts"
    for c in ctx:
        # each context is exactly one sample (no packing leakage) and its trace max is the recorded max
        assert c["token_ids"] == st.samples[c["sample"]]
        assert max(c["acts"]) == pytest.approx(c["max"], abs=1e-4)
        assert int(np.nanargmax(c["acts"])) == c["position"]
    # logit effects = W_dec @ W_U
    eff = identity_sae.W_dec.detach() @ llama.unembedding()[0].float()
    assert np.array_equal(st.logit_top_ids[:, 0], eff.argmax(1).numpy())
    # special-token ranking: mean over samples containing the token of the per-sample max on that token
    t = llama.tokenizer.convert_tokens_to_ids("<|im_start|>")
    si = list(st.special_ids).index(t)
    vals = []
    for i, s in enumerate(st.samples):
        a = identity_sae.encode(llama.run([s], capture=[SITE], logits=False).cache[SITE][0])
        m = torch.tensor(s) == t
        if m.any():
            vals.append(a[m].max(0).values)
    assert np.allclose(st.special_scores[si], torch.stack(vals).mean(0).numpy(), atol=1e-4)
    assert st.hist_counts.sum() == pytest.approx(st.density.sum() * st.n_tokens)
    st.save(tmp_path)
    back = FeatureStats.load(tmp_path)
    assert np.array_equal(back.top_samples, st.top_samples) and back.contexts(f0) == st.contexts(f0)
    present = int((st.special_counts > 0).sum())
    assert 0 < present < len(st.special_ids)  # bos/eos/unk never occur in the chat samples
    assert len(st.to_frame()) == 128 and len(st.special_ranking(3)) == 3 * present
    # figure builders are pure functions of the stats
    from interplab.figures.sae import (context_html, feature_histogram_figure, logit_effects_figure,
                                       special_token_heatmap)
    assert sum(feature_histogram_figure(st, f0).data[0].y) == pytest.approx(st.density[f0] * st.n_tokens)
    assert len(logit_effects_figure(st, f0).data[0].x) == 2 * st.logit_top_ids.shape[1]
    assert special_token_heatmap(st).data[0].z.shape[0] == present
    html = context_html(ctx[0]["tokens"], ctx[0]["acts"])
    assert html.count("<span") == len(ctx[0]["tokens"])
