"""The shipped PCFG organisms: registered, present, < 1 MB, cards consistent, grammar recorded, and their KL
re-measured on a fresh held-out sample below the bigram baseline."""
import json

import pytest
import torch

from interplab.zoo.resolve import SHIPPED_DIR

NAMES = ("pcfg-L2", "pcfg-L4", "pcfg-L6", "pcfg-rcnf-L4", "pcfg-sib-L4")


def test_registered_and_shipped_small():
    from interplab.models.checkpoints import validate_checkpoint
    from interplab.zoo.registry import get_recipe
    from interplab.zoo.recipes.pcfg import grammar_of, make_grammar

    for name in NAMES:
        r = get_recipe(name)
        d = SHIPPED_DIR / name
        validate_checkpoint(d)
        size = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
        assert size <= 1_000_000, (name, size)
        card = json.loads((d / "card.json").read_text())
        assert card["metrics"]["kl_ratio_bigram"] < r.ceilings["kl_ratio_bigram"]
        g = grammar_of(str(d))
        g0 = make_grammar(r.data["grammar"])
        assert torch.equal(g.binary, g0.binary) and torch.equal(g.lexical, g0.lexical)
    # the depth sweep shares one grammar
    assert get_recipe("pcfg-L2").data["grammar"] == get_recipe("pcfg-L6").data["grammar"]


@pytest.mark.parametrize("name", ["pcfg-L4", "pcfg-rcnf-L4", "pcfg-sib-L4"])
def test_kl_remeasured_below_bigram(name):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from interplab.models import wrap_hf_model
    from interplab.probes.pcfg import kl_summary, pcfg_kl
    from interplab.zoo.recipes.pcfg import grammar_of

    torch.set_num_threads(1)
    d = SHIPPED_DIR / name
    model = AutoModelForCausalLM.from_pretrained(d).eval()
    tok = AutoTokenizer.from_pretrained(d)
    g = grammar_of(str(d))
    card = json.loads((d / "card.json").read_text())
    s = kl_summary(pcfg_kl(wrap_hf_model(model, tok), g, 128, seed=777, max_len=30, n_baseline=3000))
    assert s["kl"] < card["metrics"]["kl_bigram"]
    assert s["kl"] < 3 * card["metrics"]["kl"] + 0.01
