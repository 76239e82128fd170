"""FAST vs block providers on a random Llama (RoPE, GQA) checkpoint: spec T1-T4 and T10."""
from __future__ import annotations

import pytest
import torch

from interplab.sae import block_provider, chat_ids, fast_provider
from interplab.sae.providers import BlockDiagonalAttention, segment_ids

SITE = "resid_post.1"


def _per_sample(llama, samples):
    """Reference: one sample per forward, no padding (the paper's procedure)."""
    out = []
    for s in samples:
        out.append(llama.run([s], capture=[SITE], logits=False).cache[SITE][0])
    return out


def test_fast_provider_rows_and_batch1_equality(llama, dialogues):
    tok = llama.tokenizer
    prov = fast_provider(llama, dialogues, site=SITE, micro_batch=5, shuffle=True, seed=3)
    ref = _per_sample(llama, prov.samples)
    seen = set()
    n_rows = 0
    for ch in prov.iter_chunks():
        s = int(ch.sample[0])
        assert (ch.sample == s).all(), "one sample per chunk"
        assert s not in seen
        seen.add(s)
        assert ch.token_ids.tolist() == chat_ids(tok, dialogues[s])  # ids = apply_chat_template
        assert ch.position.tolist() == list(range(len(ch.token_ids)))
        assert torch.allclose(ch.acts, ref[s], atol=1e-4), float((ch.acts - ref[s]).abs().max())
        n_rows += ch.acts.shape[0]
    assert seen == set(range(len(dialogues)))
    assert n_rows == prov.n_tokens
    assert prov.forwards == 3  # 12 samples / micro_batch 5


def test_fast_truncation_and_exclusion(llama, dialogues):
    tok = llama.tokenizer
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    prov = fast_provider(llama, dialogues, site=SITE, truncate=7, micro_batch=4, exclude_token_ids=[im_start],
                         shuffle=False)
    full = fast_provider(llama, dialogues, site=SITE, truncate=7, micro_batch=6, shuffle=False)
    got = {int(c.sample[0]): c for c in prov.iter_chunks()}
    for c in full.iter_chunks():
        s = int(c.sample[0])
        assert len(c.token_ids) == min(7, len(chat_ids(tok, dialogues[s])))
        keep = c.token_ids != im_start
        assert got[s].token_ids.tolist() == c.token_ids[keep].tolist()  # exactly those rows dropped
        assert torch.allclose(got[s].acts, c.acts[keep], atol=1e-4)


def test_stream_identity_block_vs_fast(llama, dialogues):
    """T1: the block token stream minus inserted BOS/separators equals the concatenated FAST samples (up to the
    dropped tail), for both separators; and pack_blocks' tokens are SAELens's."""
    for sep in ("bos", "none"):
        bp = block_provider(llama, dialogues, site=SITE, context_size=24, separator=sep, shuffle=True, seed=1)
        B, S, P = bp.packed(0)
        order = bp._order(len(bp.samples), 0)
        stream = [t for i in order for t in bp.samples[i]]
        real = B[S >= 0].tolist()
        assert real == stream[: len(real)]
        assert len(stream) - len(real) < 24 * 1 + len(bp.samples)  # only the tail is dropped
        assert (B[:, 0] == bp.bos_id).all()  # BOS at position 0 of every block
        ins = B[S < 0]
        assert (ins == bp.bos_id).all()
        # provenance: token at (block, j) is samples[S][P]
        for b, j in [(0, 0), (1, 5), (B.shape[0] - 1, 23)]:
            if S[b, j] >= 0:
                assert B[b, j] == bp.samples[int(S[b, j])][int(P[b, j])]
    # SAELens semantics: the packed blocks are exactly what concat_and_batch_sequences yields
    from sae_lens.tokenization_and_batching import concat_and_batch_sequences
    bp = block_provider(llama, dialogues, site=SITE, context_size=24, separator="bos", shuffle=False)
    ref = torch.stack(list(concat_and_batch_sequences(iter(torch.tensor(s) for s in bp.samples), 24,
                                                      begin_batch_token_id=bp.bos_id,
                                                      sequence_separator_token_id=bp.bos_id)))
    assert torch.equal(bp.packed(0)[0], ref)


def _segments_starting_in_block(S, P, b):
    """(sample, start column, length) of the samples whose first token lies in block b."""
    out = []
    row_s, row_p = S[b], P[b]
    for j in range(len(row_s)):
        if row_s[j] >= 0 and row_p[j] == 0:
            L = int(((row_s == row_s[j])).sum())
            out.append((int(row_s[j]), j, L))
    return out


def test_causality_leakage_and_block_diagonal_mask(llama, dialogues):
    """T2: a block's first segment (starting at a sample start, no BOS inserted) equals its per-sample
    activations; T3: later segments differ (leakage); T4: a block-diagonal attention mask removes the
    difference (RoPE organism)."""
    fast = {int(c.sample[0]): c.acts for c in
            fast_provider(llama, dialogues, site=SITE, micro_batch=1, shuffle=False).iter_chunks()}
    bp = block_provider(llama, dialogues, site=SITE, context_size=40, separator="none", prepend_bos=False,
                        shuffle=False, micro_batch=4)
    B, S, P = bp.packed(0)
    chunks = list(bp.iter_chunks())
    packed_acts = torch.stack([c.acts for c in chunks])  # [n_blocks, C, d]
    # T2: block 0 starts with sample 0 at position 0
    s0, j0, L0 = _segments_starting_in_block(S, P, 0)[0]
    assert (s0, j0) == (0, 0)
    assert torch.allclose(packed_acts[0, :L0], fast[s0][:L0], atol=1e-5)
    # T3: later segments of the block differ
    diffs = []
    for b in range(B.shape[0]):
        for s, j, L in _segments_starting_in_block(S, P, b):
            if j > 0:
                diffs.append(float((packed_acts[b, j:j + L] - fast[s][:L]).abs().max()))
    assert diffs and max(diffs) > 1e-3 and min(diffs) > 1e-4
    # T4: block-diagonal mask -> equal to per-sample activations (with BOS at block start and BOS separators too)
    for sep, pre in (("none", False), ("bos", True)):
        bp2 = block_provider(llama, dialogues, site=SITE, context_size=40, separator=sep, prepend_bos=pre,
                             shuffle=False)
        B2, S2, P2 = bp2.packed(0)
        seg = segment_ids(S2)
        out = llama.run(B2.tolist(), capture=[SITE], edits=[BlockDiagonalAttention(llama.n_layers, seg)],
                        logits=False).cache[SITE]
        n = 0
        for b in range(B2.shape[0]):
            for s, j, L in _segments_starting_in_block(S2, P2, b):
                assert torch.allclose(out[b, j:j + L], fast[s][:L], atol=1e-4), (sep, b, j)
                n += 1
        assert n >= 3


def test_block_provider_texts_bt_p(llama):
    texts = [" ".join(f"w{(i * 7 + j) % 40}" for j in range(5 + i % 6)) for i in range(20)]
    bp = block_provider(llama, texts, site=SITE, context_size=16, separator="bos", shuffle=False)
    assert bp.data_kind == "texts"
    chunks = list(bp.iter_chunks())
    assert all(c.acts.shape == (16, llama.d_model) for c in chunks)
    im = llama.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert not any((c.token_ids == im).any() for c in chunks)  # no chat template in BT(P)


def test_provider_errors(llama, dialogues):
    from interplab.core.errors import InputError, SiteError

    with pytest.raises(SiteError):
        fast_provider(llama, dialogues, site="resid_post.9")
    with pytest.raises(InputError):
        fast_provider(llama, [], site=SITE)
    with pytest.raises(InputError):
        fast_provider(llama, [42], site=SITE)


def test_fast_provider_backend_parity(model_factory, dialogues):
    """The providers only use LabModel.run, so the nnsight backend harvests the same activations."""
    a = model_factory("llama", n_layers=3)
    b = model_factory("llama", backend="nnsight", n_layers=3)
    pa = {int(c.sample[0]): c.acts for c in fast_provider(a, dialogues[:6], site=SITE, shuffle=False).iter_chunks()}
    pb = {int(c.sample[0]): c.acts for c in fast_provider(b, dialogues[:6], site=SITE, shuffle=False).iter_chunks()}
    assert pa.keys() == pb.keys()
    for k in pa:
        assert torch.allclose(pa[k], pb[k], atol=1e-4)


@pytest.mark.parametrize("store", ["memory", "disk"])
def test_fast_provider_from_a_harvest_store_equals_streaming(llama, dialogues, tmp_path, store):
    """store=...: epoch 0 is bit-identical to the streaming provider (same micro-batches); epoch 1 is read back from
    the store (no forward) and equals streaming's recomputation up to padding-order float noise."""
    kw = dict(site=SITE, micro_batch=4, shuffle=True, seed=5)
    stream = list(fast_provider(llama, dialogues, **kw).iter_chunks(epochs=2))
    prov = fast_provider(llama, dialogues, store="memory" if store == "memory" else tmp_path / "acts", **kw)
    stored = list(prov.iter_chunks(epochs=2))
    assert prov.forwards == -(-len(prov.samples) // 4)          # one pass over the data, not two
    assert len(stored) == len(stream) == 2 * len(prov.samples)
    for k, (a, b) in enumerate(zip(stream, stored)):
        assert torch.equal(a.sample, b.sample) and torch.equal(a.token_ids, b.token_ids)
        if k < len(prov.samples):
            assert torch.equal(a.acts, b.acts)
        else:
            torch.testing.assert_close(a.acts, b.acts, atol=1e-5, rtol=1e-5)


def test_leakage_table_reports_the_difference_in_units_of_the_typical_norm(llama, dialogues):
    """Issue 25 §3: max |diff| is in the residual's own units (~2.5e4 on SmolLM2); abs_diff_rel divides it by the
    typical norm of the per-sample activations, so it reads the same on any model."""
    from interplab.core.scale import activation_scale
    from interplab.sae.compare import leakage_table

    df = leakage_table(llama, dialogues, site="resid_post.1", context_size=32)
    acts = torch.cat([c.acts.reshape(-1, c.acts.shape[-1]) for c in
                      fast_provider(llama, dialogues, site="resid_post.1", shuffle=False).iter_chunks()])
    typical = activation_scale(acts).typical
    assert len(df) and (df["abs_diff_rel"] - df["abs_diff"] / typical).abs().max() < 1e-6
    later = df[df["segment_index"] > 0]
    assert len(later) and (later["abs_diff_rel"] > 0).all()  # packed later segments see earlier ones
