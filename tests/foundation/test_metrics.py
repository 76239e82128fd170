"""Issue 49: padding-aware metrics (per-token loss with a mask, logit difference, answer probability and rank),
checked against a hand computation on an unpadded forward of each row."""
from __future__ import annotations

import pytest
import torch

import interplab
from interplab.core.errors import InputError, ShapeError
from interplab.metrics import answer_prob, answer_rank, logit_diff, position_logits, token_loss

PROMPTS = ["s1 s2 s3 s4 s5 sep", "s2 sep"]


@pytest.fixture(scope="module")
def base():
    return interplab.load_model("zoo:toy-base", device="cpu")


def test_token_loss_matches_each_row_alone(base):
    out = base.run(PROMPTS)
    loss = token_loss(out)
    assert loss.shape == (2, out.batch.input_ids.shape[1] - 1)
    for i, p in enumerate(PROMPTS):
        alone = base.run(p)
        ids = alone.batch.input_ids[0]
        ref = torch.nn.functional.cross_entropy(alone.logits[0, :-1].float(), ids[1:], reduction="none")
        got = loss[i][~torch.isnan(loss[i])]
        torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    assert torch.isnan(loss[1]).sum() == (~out.batch.attention_mask[1].bool()).sum()   # padding targets are NaN
    n = (~torch.isnan(loss)).sum()
    torch.testing.assert_close(token_loss(out, reduce="mean"), loss[~torch.isnan(loss)].sum() / n)
    mask = torch.zeros_like(out.batch.attention_mask, dtype=torch.bool)
    mask[:, -1] = True                                   # only the last token's loss
    only = token_loss(out, mask=mask)
    assert (~torch.isnan(only)).sum() == 2
    with pytest.raises(InputError):
        token_loss(out, mask=torch.zeros_like(mask), reduce="mean")


def test_positions_and_answer_metrics(base):
    out = base.run(PROMPTS)
    a, b = base.token_id("s1"), base.token_id("s2")
    last = position_logits(out)
    for i, p in enumerate(PROMPTS):
        alone = base.run(p).logits[0]
        torch.testing.assert_close(last[i], alone[-1], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(position_logits(out, 0)[i], alone[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logit_diff(out, a, b), last[:, a] - last[:, b])
    p = answer_prob(out, a)
    torch.testing.assert_close(p, torch.softmax(last, -1)[:, a])
    r = answer_rank(out, [a, b])
    top = last.argmax(-1)
    assert answer_rank(out, top).tolist() == [0, 0] and bool((r >= 0).all())
    with pytest.raises(InputError, match="outside"):
        position_logits(out, 5)                          # row 1 has fewer real tokens
    with pytest.raises(ShapeError):
        logit_diff(out, [a, a, a], b)
    with pytest.raises(InputError, match="logits=False"):
        token_loss(base.run(PROMPTS, capture=["resid_post.0"], logits=False))


def test_reply_loss_scores_only_the_reply(base):
    from interplab.metrics import reply_loss

    gen = base.generate(PROMPTS, max_new_tokens=4)
    got = reply_loss(base, gen)
    for i, p in enumerate(PROMPTS):
        prompt = gen.batch.row_tokens(i)
        full = prompt + list(gen.new_tokens[i])
        out = base.run([full])
        ref = torch.nn.functional.cross_entropy(out.logits[0, :-1].float(), torch.tensor(full[1:]),
                                                reduction="none")[len(prompt) - 1:]
        torch.testing.assert_close(got[i], ref.mean(), atol=1e-4, rtol=1e-4)
