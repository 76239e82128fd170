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


@pytest.mark.parametrize("name", NAMES)
def test_default_pair_is_a_fact_pair_whose_metric_flips(name):
    from interplab.probes.lenses import default_fact_pair
    from interplab.probes.lenses.common import prompt_ids

    m = _model(name)
    pair = default_fact_pair(m)
    assert (pair.answer, pair.wrong) == (" Paris", " Rome"), pair
    for word in (pair.answer, pair.wrong):
        assert len(m.tokenizer(word, add_special_tokens=False)["input_ids"]) == 1, (name, word)
    assert len(prompt_ids(m, pair.clean)) == len(prompt_ids(m, pair.corrupt))
    a, w = m.token_id(pair.answer), m.token_id(pair.wrong)
    last = m.run([pair.clean, pair.corrupt]).logits[:, -1].double()
    diff = (last[:, a] - last[:, w]).tolist()     # measured: SmolLM2 +7.96 / -8.32, Gemma-3 +5.94 / -7.62
    assert diff[0] > 2.0 and diff[1] < -2.0, (name, diff)
    assert [m.tokenizer.decode([int(i)]) for i in last.argmax(-1)] == [" Paris", " Rome"]


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
    # measured: with <bos> <start_of_image> 0.148, " bed" 0.063, ...; without it " cat" 0.906 (docs/real_models.md)
    assert show(ref)[0][0] == "<start_of_image>" and show(no_bos)[0][0] == " cat", (show(ref), show(no_bos))


def test_direction_default_steering_moves_smollm2s_answer():
    from interplab.probes.lenses import default_direction, direction_dashboard

    m = _model(NAMES[0])
    d = default_direction(m)
    assert d.token == " Paris" and len(d.prompts) == 16
    dash = direction_dashboard(m, d.vector, d.site, list(d.prompts), steer_prompt=d.steer_prompt,
                               steer_scales=d.scales, relative_scales=True, max_new_tokens=4)
    out = dash.steering                   # measured: 0.0 "Rome.", 0.1 "Rome Italy", 0.2 / 0.3 "Paris Paris ..."
    assert "Rome" in out["0.0"] and "Paris" not in out["0.0"], out
    assert "Paris" in out[str(float(max(d.scales)))], out
    assert dash.top_contexts["prompt"].nunique() > 1        # the contexts come from different prompts


def test_gemma_dla_folds_the_post_attention_norm_into_the_heads():
    """Gemma-3 has no attention bias; its heads' sum passes a post-attention RMSNorm before it is added. With that
    norm's scale frozen the heads carry all of attn_out (the 'attn bias' term is float error) and the components
    still sum to the model's logit difference."""
    import numpy as np

    from interplab.probes.lenses import default_fact_pair, direct_logit_attribution

    m = _model("real:gemma-3-270m")
    pair = default_fact_pair(m)
    d = direct_logit_attribution(m, pair.clean, pair.answer, pair.wrong)
    scale = float(np.abs(d.heads).max())
    assert float(np.abs(d.attn_bias).max()) <= 1e-4 * scale, (float(np.abs(d.attn_bias).max()), scale)
    assert abs(float(d.component_sum[0] - d.total[0])) <= 1e-3 * max(1.0, abs(float(d.total[0])))
