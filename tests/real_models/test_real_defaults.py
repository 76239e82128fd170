"""Issue 48: the dashboard's defaults mean something on the two real models (docs/lenses.md, "Defaults").

The Patching page's default pair is a public fact pair with single-token answers on both models, and the metric
flips sign between the clean and the corrupt run; the Direction page's default steering moves SmolLM2's output; the
Models page's Gemma-3 reading equals plain transformers on the same de-quantized weights with the <bos> the
tokenizer adds. Seconds per model (a handful of short forwards)."""
from __future__ import annotations

import os

import pytest
import torch

import interplab
from interplab.models import real

NAMES = ["real:smollm2-135m-instruct", "real:gemma-3-270m"]
_LOADED: dict = {}


def _model(name: str):
    if not real.is_installed(real.real_model(name)):
        pytest.fail(f"{name} is not installed; `bash scripts/setup.sh install` installs the real models")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1") or 1))
    if name not in _LOADED:
        _LOADED[name] = interplab.load_model(name)
    return _LOADED[name]


def _explore(m):
    """Temporary: candidate templates on this model (printed with -s)."""
    from interplab.probes.lenses.common import CAPITALS

    tok = m.tokenizer
    facts = [f for f in CAPITALS if all(len(tok(" " + w, add_special_tokens=False)["input_ids"]) == 1 for w in f)]
    ids = [tok(" " + a, add_special_tokens=False)["input_ids"][0] for _, a in facts]
    templ = ["The capital of {c} is", "The capital of {c} is the city of", "The capital city of {c} is",
             "Q: What is the capital of {c}?\nA:", "{c}'s capital city is"]
    for t in templ:
        if m.chat_default:
            texts = [tok.apply_chat_template([{"role": "user", "content": f"What is the capital of {c}?"}],
                                             add_generation_prompt=True, tokenize=False) + t.format(c=c)
                     for c, _ in facts]
        else:
            texts = [t.format(c=c) for c, _ in facts]
        last = m.run(texts).logits[:, -1]
        sub = last[:, ids]
        rank = [int((last[i] > last[i, ids[i]]).sum()) for i in range(len(facts))]
        off = sub.masked_fill(torch.eye(len(facts), dtype=torch.bool), -1e9).max(1).values
        margin = sub.diag() - off
        top = [tok.decode([int(last[i].argmax())]) for i in range(len(facts))]
        print(f"{m.name} {t!r}: ranks {rank} min margin {float(margin.min()):.2f} "
              f"n>0 {int((margin > 0).sum())}/{len(facts)} top {top[:5]}", flush=True)


@pytest.mark.parametrize("name", NAMES)
def test_default_pair_is_a_fact_pair_whose_metric_flips(name):
    from interplab.probes.lenses import default_fact_pair
    from interplab.probes.lenses.common import prompt_ids

    m = _model(name)
    _explore(m)
    pair = default_fact_pair(m)
    assert (pair.answer, pair.wrong) == (" Paris", " Rome"), pair
    for word in (pair.answer, pair.wrong):
        assert len(m.tokenizer(word, add_special_tokens=False)["input_ids"]) == 1, (name, word)
    assert len(prompt_ids(m, pair.clean)) == len(prompt_ids(m, pair.corrupt))
    a, w = m.token_id(pair.answer), m.token_id(pair.wrong)
    last = m.run([pair.clean, pair.corrupt]).logits[:, -1].double()
    diff = (last[:, a] - last[:, w]).tolist()
    print(name, "logit diff clean / corrupt", diff, "top", [m.tokenizer.decode([int(i)]) for i in last.argmax(-1)])
    assert diff[0] > 1.0 and diff[1] < -1.0, (name, diff)


def test_gemma_reads_like_plain_transformers_with_its_bos():
    """The Models page's "the cat sat on the" on Gemma-3: interplab reads it with the <bos> the tokenizer adds and
    gives the logits plain transformers gives on the same weights (so what it shows is the checkpoint's own
    reading, not a missing <bos>)."""
    from transformers import AutoModelForCausalLM

    m = _model("real:gemma-3-270m")
    tok, text = m.tokenizer, "the cat sat on the"
    ids = m.tokenize(text).row_tokens(0)
    assert ids[0] == tok.bos_token_id, ids
    ours = m.run(text).logits[0, -1].double()
    hf = AutoModelForCausalLM.from_pretrained(m.path).eval()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0, -1].double()
        no_bos = hf(torch.tensor([ids[1:]])).logits[0, -1].double()
    assert float((ours - ref).abs().max()) <= 1e-3 * float(ref.abs().max()), float((ours - ref).abs().max())
    show = lambda lg: [(tok.decode([int(i)]), round(float(p), 3)) for p, i in zip(*torch.softmax(lg, -1).topk(5))]
    print("gemma with bos", show(ref), "without", show(no_bos))


def test_direction_default_steering_moves_smollm2s_answer():
    from interplab.probes.lenses import default_direction, direction_dashboard

    m = _model(NAMES[0])
    d = default_direction(m)
    assert d.token == " Paris" and len(d.prompts) == 16
    dash = direction_dashboard(m, d.vector, d.site, list(d.prompts), steer_prompt=d.steer_prompt,
                               steer_scales=(0.0, 0.5, 1.0, 2.0, 4.0), relative_scales=True)
    print("unit", dash.steer_unit, dash.steering)
    out = dash.steering
    assert "Rome" in out["0.0"] and "Paris" not in out["0.0"], out
    assert any("Paris" in out[str(float(k))] for k in d.scales if k), out
    assert dash.top_contexts["prompt"].nunique() > 1        # the contexts come from different prompts
