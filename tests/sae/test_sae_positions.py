"""evaluate_sae(positions=...): the assistant-answer mask, "all" unchanged, "response" = CE on answer tokens only."""
from __future__ import annotations

import copy

import pytest
import torch

from interplab.core.errors import ConfigError, DataError, InputError
from interplab.sae import SAEEval, assistant_token_mask, chat_ids, evaluate_sae
from interplab.sae.evals import kl_per_row, next_token_ce

SITE = "resid_post.1"


@pytest.fixture(scope="module")
def lossy_sae(identity_sae):
    torch.manual_seed(0)
    sae = copy.deepcopy(identity_sae)
    with torch.no_grad():
        sae.W_dec.add_(0.3 * torch.randn_like(sae.W_dec))
    return sae


def _hand_mask(tokens: list[str]) -> list[bool]:
    """Independent reading of the ChatML rendering: inside an assistant turn, from the token after the role name up
    to and including the turn's <|im_end|>."""
    out, inside = [], False
    for j, t in enumerate(tokens):
        if t == "<|im_start|>":
            inside = False
            out.append(False)
        elif j and tokens[j - 1] == "<|im_start|>":
            inside = t == "assistant"
            out.append(False)
        else:
            out.append(inside)
            if t == "<|im_end|>":
                inside = False
    return out


def test_response_mask_is_assistant_answers_plus_im_end(llama, dialogues):
    tok = llama.tokenizer
    n_two_turns = 0
    for d in dialogues:
        ids = chat_ids(tok, d)
        mask = assistant_token_mask(tok, d)
        toks = tok.convert_ids_to_tokens(ids)
        assert len(mask) == len(ids)
        assert mask == _hand_mask(toks)
        # exactly the answer words plus one closing <|im_end|> per assistant turn
        answers = [m for m in d if m["role"] == "assistant"]
        n_words = sum(len(m["content"].split()) for m in answers)
        sel = [t for t, m in zip(toks, mask) if m]
        assert len(sel) == n_words + len(answers)
        assert sel.count("<|im_end|>") == len(answers) and toks[-1] == "<|im_end|>" and mask[-1]
        assert "assistant" not in sel and "<|im_start|>" not in sel
        n_two_turns += len(answers) == 2
    assert n_two_turns > 0  # multi-turn dialogues are covered


def test_response_mask_errors(llama):
    with pytest.raises(DataError, match="assistant turn"):
        assistant_token_mask(llama.tokenizer, [{"role": "assistant", "content": "w1 w2"}])


def _previous_downstream(model, sae, dialogues, micro_batch):
    """The all-position downstream metrics as evaluate_sae computed them before `positions` existed."""
    from interplab.interventions import Ablate
    from interplab.sae.providers import fast_provider
    from interplab.sae.steering import SAESplice

    prov = fast_provider(model, dialogues, site=SITE, micro_batch=micro_batch, shuffle=False, bucket=True)
    splice, ablate = SAESplice(sae, SITE), Ablate(SITE)
    ce = {"clean": [], "sae": [], "zero": []}
    kl = {"sae": [], "zero": []}
    with torch.no_grad():
        for idx in prov._batches(0):
            seqs = [prov.samples[i] for i in idx]
            clean = model.run(seqs, logits=True)
            toks, mask = clean.batch.input_ids, clean.batch.attention_mask.bool()
            ce["clean"].append(next_token_ce(clean.logits, toks, mask)[0])
            for key, edit in (("sae", splice), ("zero", ablate)):
                o = model.run(seqs, edits=[edit], logits=True)
                ce[key].append(next_token_ce(o.logits, toks, mask)[0])
                kl[key].append(kl_per_row(clean.logits, o.logits, mask))
    c = {k: torch.cat(v).mean().item() for k, v in ce.items()}
    return {"ce_clean": c["clean"], "ce_sae": c["sae"], "ce_zero_ablation": c["zero"],
            "delta_loss_pct": (c["sae"] - c["clean"]) / c["clean"] * 100.0,
            "ce_loss_score": (c["zero"] - c["sae"]) / (c["zero"] - c["clean"]),
            "kl_sae": torch.cat(kl["sae"]).mean().item(), "kl_zero_ablation": torch.cat(kl["zero"]).mean().item()}


def test_all_reproduces_previous_numbers_and_both_adds_response(llama, dialogues, lossy_sae):
    ds = dialogues[:7]
    prev = _previous_downstream(llama, lossy_sae, ds, micro_batch=3)
    default = evaluate_sae(llama, lossy_sae, ds, site=SITE, micro_batch=3)
    explicit = evaluate_sae(llama, lossy_sae, ds, site=SITE, micro_batch=3, positions="all")
    both = evaluate_sae(llama, lossy_sae, ds, site=SITE, micro_batch=3, positions="both")
    for k, v in prev.items():
        assert default[k] == v and explicit[k] == v and both[k] == v, k   # bit-identical
    assert not any(k.endswith("_response") for k in default)
    assert all(isinstance(r, SAEEval) for r in (default, explicit, both))
    resp = evaluate_sae(llama, lossy_sae, ds, site=SITE, micro_batch=3, positions=["response"])
    for k in prev:
        assert k not in resp
        assert resp[k + "_response"] == both[k + "_response"]
    # reconstruction metrics do not depend on positions
    assert both["log2_mse"] == default["log2_mse"] and both["l0"] == default["l0"]


def test_response_ce_is_answer_tokens_only(llama, dialogues, lossy_sae):
    """Hand computation, one dialogue per forward: mean CE over the positions whose next token is an answer token,
    then over dialogues. It differs from the all-position CE (the prompt tokens are excluded)."""
    from interplab.interventions import Ablate
    from interplab.sae.steering import SAESplice

    ds = dialogues[:6]
    r = evaluate_sae(llama, lossy_sae, ds, site=SITE, micro_batch=4, positions="both")
    per = {"clean": [], "sae": [], "zero": []}
    kls = []
    n_tok = 0
    with torch.no_grad():
        for d in ds:
            ids = chat_ids(llama.tokenizer, d)
            tgt = torch.tensor(assistant_token_mask(llama.tokenizer, d))[1:]
            n_tok += int(tgt.sum())
            y = torch.tensor(ids)[1:]
            lc = None
            for key, edits in (("clean", []), ("sae", [SAESplice(lossy_sae, SITE)]), ("zero", [Ablate(SITE)])):
                lp = torch.log_softmax(llama.run([ids], edits=edits, logits=True).logits[0, :-1].double(), -1)
                per[key].append((-lp.gather(-1, y[:, None]).squeeze(-1))[tgt].mean().item())
                if key == "clean":
                    lc = lp
                elif key == "sae":
                    kls.append((lc.exp() * (lc - lp)).sum(-1)[tgt].mean().item())
    mean = {k: sum(v) / len(v) for k, v in per.items()}
    assert r["n_sequences_response"] == len(ds) and r["n_tokens_response"] == n_tok
    assert r["ce_clean_response"] == pytest.approx(mean["clean"], rel=1e-4)
    assert r["ce_sae_response"] == pytest.approx(mean["sae"], rel=1e-4)
    assert r["ce_zero_ablation_response"] == pytest.approx(mean["zero"], rel=1e-4)
    assert r["kl_sae_response"] == pytest.approx(sum(kls) / len(kls), rel=1e-3)
    assert r["delta_loss_pct_response"] == pytest.approx(
        (r["ce_sae_response"] - r["ce_clean_response"]) / r["ce_clean_response"] * 100)
    assert r["ce_loss_score_response"] == pytest.approx(
        (r["ce_zero_ablation_response"] - r["ce_sae_response"])
        / (r["ce_zero_ablation_response"] - r["ce_clean_response"]))
    # the two position sets really differ
    assert abs(r["ce_clean_response"] - r["ce_clean"]) > 1e-3
    assert abs(r["ce_sae_response"] - r["ce_sae"]) > 1e-3


def test_positions_errors(llama, dialogues, identity_sae):
    for bad in ("assistant", "", ["all", "prompt"], [], 3):
        with pytest.raises(ConfigError, match="'all', 'response', 'both'"):
            evaluate_sae(llama, identity_sae, dialogues[:2], site=SITE, positions=bad)
    with pytest.raises(InputError, match="needs chat dialogues"):
        evaluate_sae(llama, identity_sae, ["w1 w2 w3", "w4 w5"], site=SITE, positions="response")
    # texts still work with the default
    r = evaluate_sae(llama, identity_sae, ["w1 w2 w3", "w4 w5"], site=SITE)
    assert r["ce_sae"] == pytest.approx(r["ce_clean"], abs=1e-5)
