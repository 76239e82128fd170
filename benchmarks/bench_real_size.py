"""Real-size hook-layer benchmarks on random-weight GPT-2-small-size and Qwen2.5-0.5B-size checkpoints
(`interplab.testing.real_size_checkpoint`, cached), each measured against the tool a researcher would otherwise use,
in this same process:

- real_hook_overhead_<m>: `LabModel.run(capture=[one site])` (logits on) vs a plain `transformers` forward of the same
  checkpoint loaded with transformers' default attention (SDPA). Goal <= 1.10x. `extra.vs_same_module_eager` is the
  pure hook cost (the same eager module interplab loaded, forwarded without hooks).
- real_capture_vs_run_with_cache_<m>: capture of one site (`logits=False`, so the forward stops after it) vs
  TransformerLens `run_with_cache` on the same TransformerBridge. Goal >= 2x faster.
- real_nnsight_vs_hand_trace_<m>: interplab's nnsight backend vs a hand-written nnsight trace saving the same layer
  output and the logits. Goal <= 1.10x.
- real_generate_decode_edit_<m>: KV-cached `LabModel.generate` with a decode-only Steer vs plain HF `generate`
  (greedy, same number of new tokens, SDPA model). Goal <= 1.15x. `extra.vs_same_module_eager`: HF generate on the
  eager module interplab loaded.

Repetitions are small (the dev machine has 2 shared cores); ratios are medians of `repeat` timings.
    python -m benchmarks.harness real_size
"""
from __future__ import annotations

import gc

import torch

from benchmarks.harness import timeit

SHAPES = {"gpt2-small": (2, 64), "qwen2.5-0.5b": (1, 32)}   # (batch, tokens): small, 2 shared cores
NEW_TOKENS = 16
REPEAT = 3
_cache: dict = {}


def _get(name: str, kind: str):
    """Loaded models, one checkpoint at a time (a 0.5B fp32 model is 2 GB per copy)."""
    if _cache.get("name") != name:
        _cache.clear()
        gc.collect()
        _cache["name"] = name
    if kind not in _cache:
        import interplab
        from interplab.testing import real_size_checkpoint

        path = real_size_checkpoint(name)
        if kind == "sdpa":
            from transformers import AutoModelForCausalLM

            _cache[kind] = AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="sdpa").eval()
        else:
            _cache[kind] = interplab.load_model(path, backend=kind, device="cpu")
    return _cache[kind]


def _ids(name: str, vocab: int):
    b, t = SHAPES[name]
    return torch.randint(6, min(vocab, 500), (b, t), generator=torch.Generator().manual_seed(0))


def _site(m) -> str:
    return f"resid_post.{m.n_layers // 2}"


def hook_overhead(name: str) -> dict:
    m = _get(name, "bridge")
    ids = _ids(name, m.d_vocab)
    mask = torch.ones_like(ids)
    sdpa = _get(name, "sdpa")

    def plain(model):
        def f():
            with torch.no_grad():
                model(input_ids=ids, attention_mask=mask)
        return f

    ours = timeit(lambda: m.run(ids, capture=[_site(m)]), repeat=REPEAT)
    anchor = timeit(plain(sdpa), repeat=REPEAT)
    eager = timeit(plain(m.hf_model), repeat=REPEAT)
    ratio = ours / anchor
    return dict(ours=ours, anchor=anchor, ratio=ratio, goal="<= 1.10x a plain transformers (SDPA) forward",
                ok=ratio <= 1.10, extra={"model": name, "shape": list(SHAPES[name]), "site": _site(m),
                                         "vs_same_module_eager": round(ours / eager, 3),
                                         "eager_vs_sdpa": round(eager / anchor, 3),
                                         "interplab_attn": m.hf_model.config._attn_implementation})


def capture_vs_run_with_cache(name: str) -> dict:
    m = _get(name, "bridge")
    ids = _ids(name, m.d_vocab)
    site = "resid_post.1"
    ours = timeit(lambda: m.run(ids, capture=[site], logits=False), repeat=REPEAT)

    def anchor_fn():
        with torch.no_grad():
            m.bridge.run_with_cache(ids, prepend_bos=False)

    anchor = timeit(anchor_fn, repeat=REPEAT, warmup=1)
    ratio = anchor / ours
    return dict(ours=ours, anchor=anchor, ratio=ratio, goal=">= 2x faster than TransformerLens run_with_cache",
                ok=ratio >= 2.0, extra={"model": name, "shape": list(SHAPES[name]), "site": site})


def nnsight_vs_hand_trace(name: str) -> dict:
    m = _get(name, "nnsight")
    ids = _ids(name, m.d_vocab)
    mask = torch.ones_like(ids)
    nn = m.nnsight_model
    layer = m.n_layers // 2
    blocks = nn.transformer.h if hasattr(nn, "transformer") else nn.model.layers

    def hand():
        with torch.no_grad(), nn.trace(input_ids=ids, attention_mask=mask):
            out = blocks[layer].output
            h = (out[0] if isinstance(out, tuple) else out).save()
            logits = nn.output.logits.save()
        return h, logits

    ours = timeit(lambda: m.run(ids, capture=[f"resid_post.{layer}"]), repeat=REPEAT)
    anchor = timeit(hand, repeat=REPEAT)
    h, _ = hand()
    same = bool(torch.allclose(m.run(ids, capture=[f"resid_post.{layer}"]).cache[f"resid_post.{layer}"], h,
                               atol=1e-4))
    ratio = ours / anchor
    return dict(ours=ours, anchor=anchor, ratio=ratio, goal="<= 1.10x a hand-written nnsight trace",
                ok=ratio <= 1.10, extra={"model": name, "shape": list(SHAPES[name]), "same_values": same})


def generate_decode_edit(name: str) -> dict:
    from interplab.interventions import Steer

    m = _get(name, "bridge")
    ids = _ids(name, m.d_vocab)[:, :32]  # prompt of at most 32 tokens
    mask = torch.ones_like(ids)
    sdpa = _get(name, "sdpa")
    steer = Steer(_site(m), torch.randn(m.d_model, generator=torch.Generator().manual_seed(1)), scale=0.1,
                  phases=("decode",))
    ours = timeit(lambda: m.generate(ids, max_new_tokens=NEW_TOKENS, edits=[steer], stop_at_eos=False,
                                     return_logits=False), repeat=REPEAT)

    def hf(model):
        def f():
            with torch.no_grad():
                model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS,
                               min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
        return f

    anchor = timeit(hf(sdpa), repeat=REPEAT)
    eager = timeit(hf(m.hf_model), repeat=REPEAT)
    ratio = ours / anchor
    return dict(ours=ours, anchor=anchor, ratio=ratio, goal="<= 1.15x plain HF generate (KV cache, greedy)",
                ok=ratio <= 1.15, extra={"model": name, "batch": ids.shape[0], "prompt": ids.shape[1],
                                         "new_tokens": NEW_TOKENS, "edit": "Steer decode-only",
                                         "vs_same_module_eager": round(ours / eager, 3)})


BENCHMARKS = {}
for _name, _tag in (("gpt2-small", "gpt2"), ("qwen2.5-0.5b", "qwen05")):
    # named real_<model>_<what> so the harness (which sorts by name) finishes one model before loading the next
    for _fn, _label in ((hook_overhead, "hook_overhead"), (capture_vs_run_with_cache, "capture_vs_rwc"),
                        (nnsight_vs_hand_trace, "nnsight_vs_hand_trace"),
                        (generate_decode_edit, "generate_decode_edit")):
        BENCHMARKS[f"real_{_tag}_{_label}"] = (lambda f=_fn, n=_name: f(n))
