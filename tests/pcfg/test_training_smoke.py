"""300-step training smoke test (spec §8.13): a 2-layer d=32 model on a random CNF grammar (N=4, V=4, len <= 16)
must beat the bigram baseline on KL against the exact grammar distribution."""
import pytest
import torch

from interplab.grammar import random_cnf
from interplab.train.arch import ArchConfig, build_model
from interplab.train.config import TrainConfig
from interplab.train.grammar_eval import grammar_kl, kl_summary
from interplab.train.trainer import train
from interplab.zoo.recipes.pcfg import grammar_batches, pcfg_tokenizer


@pytest.mark.slow
def test_300_steps_beat_bigram_baseline():
    torch.set_num_threads(1)
    g = random_cnf(N=4, V=4, p_bin=0.4, n_lexical=2, seed=3)
    tok = pcfg_tokenizer(g)
    arch = ArchConfig(family="llama", n_layers=2, d_model=32, d_mlp=64, n_heads=4, n_kv_heads=2, d_head=8, n_ctx=20)
    model = build_model(arch, tok, seed=0)
    cfg = TrainConfig(steps=300, lr=3e-3, warmup_steps=30, weight_decay=0.1, progress=False, log_every=50)
    res = train(model, grammar_batches(g, tok, 32, seed=0, max_len=16), cfg)
    assert res.steps_done == 300
    s = kl_summary(grammar_kl(model, g, 300, seed=1, tokenizer=tok, max_len=16, n_baseline=5000))
    assert s["kl"] < s["kl_bigram"], s
    assert s["kl"] < s["kl_unigram"], s
