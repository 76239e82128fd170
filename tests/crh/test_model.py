"""CRH on a tiny random checkpoint: reading diffs, batched per-row steering, positions, identities (spec §8 9–11)."""
import numpy as np
import pytest
import torch

from interplab.interventions import Steer
from interplab.probes.crh import (
    GibberishFilter, TokenSetJudge, baseline_scan, concept_acts, concept_diffs, diffmean_direction, fit_cylinder,
    pca_direction, penalty_scan, probe_direction, sector_scan, steer_generate, truncate_at,
)

PROMPTS = ["w1 w2 w3 w4 w5", "w6 w7", "w8 w9 w10"]            # different lengths: left padding is exercised
PAIRS = [("w1 w2 w3", "w1 w2 w3 w20 w21"), ("w4 w5", "w4 w5 w20"), ("w6 w7 w8 w9", "w6 w20 w8"),
         ("w10", "w10 w21 w20"), ("w11 w12", "w11 w12 w22 w20"), ("w13 w14 w15", "w13 w20 w15 w21")]


@pytest.fixture(scope="module")
def model(llama):
    torch.manual_seed(0)
    return llama


def _judge():
    return TokenSetJudge(["w20", "w21", "w22"], gibberish=GibberishFilter())


def test_diffs_equal_hand_computed_capture_difference(model):
    L = 1
    d = concept_diffs(model, PAIRS, layer=L)
    assert d.shape == (len(PAIRS), model.d_model)
    # independent reference: the HF module's hidden_states[L + 1] (block-L output) at the last token, unbatched
    ref = []
    with torch.no_grad():
        for no, yes in PAIRS:
            hs = []
            for t in (no, yes):
                ids = model.tokenize([t]).input_ids
                out = model.hf_model(input_ids=ids, output_hidden_states=True)
                hs.append(out.hidden_states[L + 1][0, -1].double().numpy())
            ref.append(hs[1] - hs[0])
    np.testing.assert_allclose(d, np.stack(ref), atol=1e-4, rtol=1e-4)


def test_left_padding_reads_last_real_token(model):
    batched = concept_acts(model, PROMPTS, layer=0)
    single = np.concatenate([concept_acts(model, [p], layer=0) for p in PROMPTS])
    np.testing.assert_allclose(batched, single, atol=1e-5)
    # and it is not the padded column: the shortest prompt's value differs from its first-column activation
    full = model.run(PROMPTS, capture=["resid_post.0"], logits=False).cache["resid_post.0"]
    assert not torch.allclose(full[1, 0].double(), torch.as_tensor(batched[1]), atol=1e-3)
    mean = concept_acts(model, PROMPTS, layer=0, position="mean")
    ref = model.run([PROMPTS[1]], capture=["resid_post.0"], logits=False).cache["resid_post.0"][0].mean(0)
    np.testing.assert_allclose(mean[1], ref.double().numpy(), atol=1e-5)


def test_zero_strength_is_bit_identical(model):
    plain = model.generate(PROMPTS, max_new_tokens=6)
    plain.text = truncate_at(plain.text, ["<|im_end|>"])
    cyl = fit_cylinder(concept_diffs(model, PAIRS, layer=1))
    sm = sector_scan(model, PROMPTS, cyl, layer=1, judge=_judge(), n_bins=4, strengths=[0.0], max_new_tokens=6)
    texts = np.array(sm.texts).reshape(3, 4, 1)
    for i in range(3):
        assert all(t == plain.text[i] for t in texts[i].ravel())
    # per-row Steer with some zero rows: those rows' logits are torch.equal to no edit
    base = model.run(PROMPTS).logits
    V = torch.zeros(3, model.d_model)
    V[1] = 5.0
    edited = model.run(PROMPTS, edits=[Steer("resid_post.1", V)]).logits
    assert torch.equal(edited[0], base[0]) and torch.equal(edited[2], base[2])
    assert not torch.allclose(edited[1], base[1])
    assert torch.equal(model.run(PROMPTS, edits=[Steer("resid_post.1", torch.zeros(3, model.d_model))]).logits, base)


def test_resid_post_equals_next_resid_pre_and_offbyone_flag(model):
    v = torch.randn(model.d_model)
    a = model.run(PROMPTS, edits=[Steer("resid_post.0", v)]).logits
    b = model.run(PROMPTS, edits=[Steer("resid_pre.1", v)]).logits
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    cyl = fit_cylinder(concept_diffs(model, PAIRS, layer=1))
    sm = sector_scan(model, PROMPTS[:1], cyl, layer=1, judge=_judge(), n_bins=3, strengths=[1.0], max_new_tokens=2)
    assert sm.config["write_site"] == sm.config["read_site"] == "resid_post.1"
    sm2 = sector_scan(model, PROMPTS[:1], cyl, layer=1, judge=_judge(), n_bins=3, strengths=[1.0], max_new_tokens=2,
                      offbyone=True)
    assert sm2.config["write_site"] == "resid_pre.1" and sm2.config["read_site"] == "resid_post.1"


def test_prompt_only_and_decode_only_positions(model):
    site = "resid_post.0"
    V = torch.randn(3, model.d_model) * 8
    plain = model.generate(PROMPTS, max_new_tokens=4, capture=[site, "resid_post.2"])
    # decode-only: prefill residuals bit-identical everywhere, so the first new token is the unsteered one
    dec = model.generate(PROMPTS, max_new_tokens=4, capture=[site, "resid_post.2"],
                         edits=[Steer(site, V, positions="decode")])
    for s in (site, "resid_post.2"):
        assert torch.equal(dec.prefill_cache[s], plain.prefill_cache[s])
    assert [r[0] for r in dec.new_tokens] == [r[0] for r in plain.new_tokens]
    # prompt-only: the steered site moves by exactly v_row at real prompt tokens and not at pads
    pro = model.generate(PROMPTS, max_new_tokens=4, capture=[site], edits=[Steer(site, V, positions="prompt")])
    delta = pro.prefill_cache[site] - plain.prefill_cache[site]
    mask = plain.prefill_cache.batch.attention_mask.bool()
    torch.testing.assert_close(delta[mask], V[:, None].expand_as(delta)[mask], atol=1e-5, rtol=0)
    assert torch.equal(delta[~mask], torch.zeros_like(delta[~mask]))
    # ... and not at decode steps: their site value equals an unsteered recomputation of the same tokens
    # (layer-0 output at a new token depends on layer-0 keys, which are read before the steered site)
    rows = [pro.batch.row_tokens(i) + pro.new_tokens[i] for i in range(3)]
    ref = model.run(rows, capture=[site], logits=False).cache
    byp = ref.by_position(site)
    for i in range(3):
        n_new = pro.decode_cache[site].shape[1]
        plen = int(pro.batch.lengths[i])
        torch.testing.assert_close(pro.decode_cache[site][i], byp[i, plen: plen + n_new], atol=1e-4, rtol=1e-4)
    # the same through steer_generate: decode-only keeps every row's first token
    run = steer_generate(model, PROMPTS, V.numpy(), site=site, positions="decode", max_new_tokens=1)
    assert run.texts == truncate_at(model.generate(PROMPTS, max_new_tokens=1).text, ["<|im_end|>"])


def test_batched_equals_one_call_per_condition(model):
    cyl = fit_cylinder(concept_diffs(model, PAIRS, layer=1))
    L = np.linspace(0.5, 6.0, 4)
    big = sector_scan(model, PROMPTS, cyl, layer=1, judge=_judge(), n_bins=6, strengths=L, max_new_tokens=5)
    small = sector_scan(model, PROMPTS, cyl, layer=1, judge=_judge(), n_bins=6, strengths=L, max_new_tokens=5,
                        max_rows=3)
    assert big.config["n_calls"] == 1 and small.config["n_calls"] == 24
    np.testing.assert_array_equal(big.labels, small.labels)
    assert big.texts == small.texts
    assert big.labels.shape == (3, 6, 4)


def test_penalty_and_baseline_scans(model):
    d, a_no, a_yes = concept_diffs(model, PAIRS, layer=1, return_acts=True)
    cyl = fit_cylinder(d)
    pm = penalty_scan(model, PROMPTS, d[:3], cyl.axis, layer=1, judge=_judge(), strengths=[0.0, 4.0],
                      ps=[0.0, 1.0], max_new_tokens=4, keep_texts=True)
    assert pm.labels.shape == (3, 2, 2)
    plain = truncate_at(model.generate(PROMPTS, max_new_tokens=4).text, ["<|im_end|>"])
    texts = np.array(pm.texts).reshape(3, 2, 2)
    assert all(texts[i, j, 0] == plain[i] for i in range(3) for j in range(2))     # L = 0 is the identity
    dirs = {"diffmean": diffmean_direction(d), "pca": pca_direction(d), "probe": probe_direction(a_no, a_yes)}
    assert float(dirs["pca"] @ d.mean(0)) > 0
    bc = baseline_scan(model, PROMPTS, dirs, layer=1, judge=_judge(), strengths=[1.0, 8.0], max_new_tokens=4)
    assert bc.labels.shape == (3, 3, 2)
    m, ci = bc.rates(2)
    assert m.shape == (3, 2) and np.all(ci >= 0)
    assert len(bc.to_frame()) == 6


def test_smoke_wu_direction_raises_concept_rate(model):
    """Spec §8 test 11: along a W_U-derived direction for the concept tokens, the proxy label-2 rate at the
    largest strength exceeds the rate at the smallest."""
    words = ["w20", "w21"]
    ids = [model.tokenizer.convert_tokens_to_ids(w) for w in words]
    W_U = model.hf_model.get_output_embeddings().weight.detach().double().numpy()     # [V, d]
    u = W_U[ids].mean(0) - W_U.mean(0)
    layer = model.n_layers - 1
    bc = baseline_scan(model, PROMPTS, {"wu": u}, layer=layer, judge=TokenSetJudge(words, gibberish=None),
                       strengths=[0.1, 200.0], positions="all", max_new_tokens=4)
    rate = (bc.labels[0] == 2).mean(0)
    assert rate[-1] > rate[0]


def test_generate_concept_pairs_and_menu(model, tmp_path):
    from interplab.core.errors import DataError
    from interplab.probes.crh import generate_concept_pairs, load_concept_menu

    cp = generate_concept_pairs(model, ["w1 w2", "w3"], "w20 w21", max_new_tokens=3, filter_judge=_judge())
    assert len(cp.pairs) == 2 and len(cp.resp_with) == 2
    no, yes = cp.pairs[0]
    # both sides are the uninstructed conversation: same user turn prefix, answers differ only after it
    user = model.apply_chat_template([{"role": "user", "content": "w1 w2"}], add_generation_prompt=False)
    assert no[: len(user)] == user and yes[: len(user)] == user
    plain = generate_concept_pairs(model, ["w1 w2"], "w20", fmt="plain", max_new_tokens=2)
    assert plain.pairs[0][0].startswith("User: w1 w2\nAssistant: ")
    assert cp.keep.dtype == bool and len(cp.to_frame()) == 2
    d = concept_diffs(model, cp.pairs, layer=0)
    assert d.shape == (2, model.d_model)
    csv = tmp_path / "menu.csv"
    csv.write_text('concept_id,output_concept,concept_genre,instruction\n2,"C syntax",code,"Always mention C."\n')
    assert load_concept_menu(csv).loc[0, "concept_genre"] == "code"
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(DataError):
        load_concept_menu(tmp_path / "bad.csv")


def test_backend_parity_diffs_and_sector_scan(llama_ckpt):
    # both backends in eager attention: the exact-parity mode (docs/real_models.md: fp32 + SDPA agrees to ~1e-5)
    import interplab

    model = interplab.load_model(llama_ckpt, attn_implementation="eager")
    nn = interplab.load_model(llama_ckpt, backend="nnsight", attn_implementation="eager")
    db = concept_diffs(model, PAIRS, layer=1)
    dn = concept_diffs(nn, PAIRS, layer=1)
    np.testing.assert_allclose(db, dn, atol=1e-5)
    cyl = fit_cylinder(db)
    kw = dict(layer=1, judge=_judge(), n_bins=4, strengths=[1.0, 6.0, 20.0], max_new_tokens=4)
    sb = sector_scan(model, PROMPTS[:2], cyl, **kw)
    sn = sector_scan(nn, PROMPTS[:2], cyl, **kw)
    np.testing.assert_array_equal(sb.labels, sn.labels)
    assert sb.texts == sn.texts


def test_truncate_at_end_of_turn(model):
    assert truncate_at(["a b <|im_end|> c", "x y", "<|im_end|>z"], ["<|im_end|>"]) == ["a b", "x y", ""]
    from interplab.probes.crh.steering import _stop_strings

    assert _stop_strings(model, None) == ("<|im_end|>",)      # random checkpoints carry the ChatML tokens
    assert _stop_strings(model, []) == ()
