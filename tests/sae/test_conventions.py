"""Issue 46: the three position conventions of an SAE evaluation (interplab's positions, SAELens's
positions, all tokens) differ exactly as documented, interplab's convention is `evaluate_sae`'s
unsuffixed numbers, and the SAELens convention is SAELens's own `run_evals` on the same tokens."""

from __future__ import annotations

import copy

import pytest
import torch

from interplab.core.errors import InputError, ShapeError
from interplab.sae import evaluate_sae
from interplab.sae.conventions import (
    CONVENTIONS,
    evaluate_conventions,
    position_masks,
    saelens_run_evals,
)

SITE = "resid_post.1"
SINK, SPECIAL = 1, 2  # a BOS-like id at the sink, another special id inside the sequence


@pytest.fixture(scope="module")
def lossy_sae(identity_sae):
    torch.manual_seed(0)
    sae = copy.deepcopy(identity_sae)
    with torch.no_grad():
        sae.W_dec.add_(0.3 * torch.randn_like(sae.W_dec))
    return sae


def test_position_masks_on_a_constructed_sequence():
    """A sink (special and massive) at 0, a special token at 2, a massive ordinary token at 3:
    interplab drops the massive positions (0, 3) from the splice but scores every prediction;
    SAELens drops the special ones (0, 2) from both; all tokens drops nothing."""
    ids = torch.tensor([SINK, 10, SPECIAL, 11, 12])
    acts = torch.ones(5, 4)
    acts[0] *= 400.0
    acts[3] *= 50.0
    m = position_masks(ids, acts, ignore_ids=[SINK, SPECIAL], exclude_massive=10.0)
    assert set(m) == set(CONVENTIONS)
    as_list = {c: {k: v.tolist() for k, v in d.items()} for c, d in m.items()}
    F, T = False, True
    assert as_list["interplab_positions"] == {"spliced": [F, T, T, F, T], "scored": [T, T, T, T, T]}
    assert as_list["saelens_positions"] == {"spliced": [F, T, F, T, T], "scored": [F, T, F, T, T]}
    assert as_list["all_tokens"] == {"spliced": [T] * 5, "scored": [T] * 5}
    # without a massive factor interplab's positions are all tokens
    m0 = position_masks(ids, acts, ignore_ids=[SINK, SPECIAL], exclude_massive=0.0)
    assert m0["interplab_positions"]["spliced"].all()
    with pytest.raises(ShapeError):
        position_masks(ids, acts[:3], ignore_ids=[SINK], exclude_massive=10.0)


def test_conventions_equal_evaluate_sae_and_saelens_run_evals(llama, dialogues, lossy_sae):
    """interplab's positions = evaluate_sae's unsuffixed numbers (to float64 rounding); SAELens's
    positions = run_evals on the same tokens with the chat markers excluded (SAELens computes in
    float32); the conventions differ from each other here (the factor 1.2 marks some positions
    massive on this random model)."""
    tok = llama.tokenizer
    markers = [tok.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|im_end|>")]
    dl = dialogues[:6]
    conv = evaluate_conventions(
        llama, lossy_sae, dl, site=SITE, ignore_ids=markers, exclude_massive=1.2, micro_batch=4
    )
    ev = evaluate_sae(llama, lossy_sae, dl, site=SITE, exclude_massive=1.2)
    assert ev["n_massive_excluded"] > 0
    ours = {
        k: conv[f"{k}_interplab_positions"]
        for k in (
            "ce_clean",
            "ce_sae",
            "ce_zero_ablation",
            "delta_loss_pct",
            "ce_loss_score",
            "kl_sae",
        )
    }
    for k, v in ours.items():
        assert v == pytest.approx(ev[k], rel=1e-9, abs=1e-12), k
    assert conv["mse_sum_d_interplab_positions"] == pytest.approx(ev["mse_sum_d"], rel=1e-9)
    assert conv["n_positions_interplab_positions"] == ev["n_tokens"]

    ref = saelens_run_evals(llama, lossy_sae, dl, ignore_ids=markers)
    assert conv["mse_sum_d_saelens_positions"] == pytest.approx(ref["mse"], rel=1e-4)
    assert conv["ce_loss_score_saelens_positions"] == pytest.approx(ref["ce_loss_score"], rel=1e-4)
    assert conv["ce_sae_saelens_positions"] == pytest.approx(ref["ce_loss_with_sae"], rel=1e-5)
    assert conv["ce_clean_saelens_positions"] == pytest.approx(ref["ce_loss_without_sae"], rel=1e-5)
    assert conv["kl_sae_saelens_positions"] == pytest.approx(ref["kl_div_with_sae"], rel=1e-4)
    assert conv["explained_variance_saelens_positions"] == pytest.approx(
        ref["explained_variance"], rel=1e-4
    )

    n = {c: conv[f"n_positions_{c}"] for c in CONVENTIONS}
    assert n["saelens_positions"] < n["all_tokens"] and n["interplab_positions"] < n["all_tokens"]
    assert len({round(conv[f"ce_sae_{c}"], 9) for c in CONVENTIONS}) == 3
    assert list(conv.table()["convention"]) == list(CONVENTIONS)


def test_saelens_reference_refuses_an_empty_exclusion(llama, dialogues, lossy_sae):
    with pytest.raises(InputError, match="crashes"):
        saelens_run_evals(llama, lossy_sae, dialogues[:2], ignore_ids=[])


def test_splice_keep_clean_keeps_the_clean_activation(llama, dialogues, lossy_sae):
    """SAESplice(keep_clean=mask) leaves the marked positions at their clean value (the SAELens
    convention's splice)."""
    from interplab.sae.chat import chat_ids
    from interplab.sae.steering import SAESplice

    seqs = [chat_ids(llama.tokenizer, d) for d in dialogues[:3]]
    T = max(map(len, seqs))
    keep = torch.zeros(len(seqs), T, dtype=torch.bool)
    keep[:, ::2] = True
    clean = llama.run(seqs, capture=[SITE], logits=False).cache[SITE]
    out = llama.run(
        seqs,
        capture=[SITE],
        logits=False,
        edits=[SAESplice(lossy_sae, SITE, exclude_massive=0.0, keep_clean=keep)],
    )
    got = out.cache[SITE]
    real = out.batch.attention_mask.bool()
    for i, s in enumerate(seqs):
        c, g = clean[i][real[i]], got[i][real[i]]
        assert torch.allclose(c[::2], g[::2]) and not torch.allclose(c[1::2], g[1::2])
    with pytest.raises(ShapeError):
        SAESplice(lossy_sae, SITE, keep_clean=torch.zeros(3, dtype=torch.bool))
