"""Speed on the real pretrained SmolLM2-135M-Instruct (issue 25 §5), each row against the tool a researcher would
otherwise use, measured in this same process, single-threaded (`torch.set_num_threads(1)`: tokens per CPU-second,
and no oversubscription of a shared 2-core machine). On a GPU (`scripts/gpu_check.sh`) the same rows run on cuda.

- real_smollm2_generate_<backend>: KV-cached greedy `LabModel.generate` (no edit) vs plain transformers `generate`
  on the same checkpoint loaded with transformers' defaults (SDPA). Goal <= 1.10x.
- real_smollm2_generate_steer_<backend> / _headgate_<backend>: the same with a decode-only Steer at the middle layer
  / a HeadGate on every head. Goals <= 1.10x / <= 1.15x plain HF generate.
- real_smollm2_capture_vs_rwc: capture of one mid-layer site (`logits=False`: the forward stops after it) vs
  TransformerLens `run_with_cache` on the same TransformerBridge. Goal >= 2x faster.
- real_smollm2_hook_overhead: `LabModel.run(capture=[one site])` with logits vs a plain transformers forward. Goal
  <= 1.10x.
- real_smollm2_truth_map: a Truth-Score map end to end (capture of every head's z at the last token + 270 x 5-fold
  probes, `solver="lbfgs"`) vs `run_with_cache` over the same batches + a scikit-learn `LogisticRegression` loop.
  Goal >= 10x. Both sides' forwards are timed on `TRUTH_TIMED` of the `TRUTH_ITEMS` items and scaled linearly
  (forward time is linear in the number of equal-length batches); the scikit-learn loop is timed on every head.

The model must be installed (`interplab models install smollm2-135m-instruct --build`; `setup.sh` does it).
    python -m benchmarks.harness real_models --md
"""
from __future__ import annotations

import gc
import time

import torch

from benchmarks.harness import timeit, timeit_interleaved

NAME = "real:smollm2-135m-instruct"
PROMPT = "What is the capital of France? Answer in one sentence."
NEW_TOKENS = 32
REPEAT = 3
TRUTH_ITEMS, TRUTH_TIMED, TRUTH_BATCH = 1000, 128, 32
_cache: dict = {}


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _threads() -> None:
    if _device() == "cpu":
        torch.set_num_threads(1)


def _get(kind: str):
    """The bridge, the nnsight model and the plain transformers model of the one checkpoint, loaded once."""
    if kind not in _cache:
        _threads()
        if kind == "hf":
            from transformers import AutoModelForCausalLM

            from interplab.models.real import checkpoint_for

            path = checkpoint_for(NAME.split(":", 1)[1])
            _cache[kind] = AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="sdpa").to(_device()).eval()
        else:
            import interplab

            _cache[kind] = interplab.load_model(NAME, backend=kind, device=_device())
        gc.collect()
    return _cache[kind]


def _prompt_ids():
    m = _get("bridge")
    b = m.tokenize([PROMPT])
    return b.input_ids, b.attention_mask


def _hf_generate():
    hf = _get("hf")
    ids, mask = _prompt_ids()

    def f():
        with torch.no_grad():
            hf.generate(input_ids=ids.to(hf.device), attention_mask=mask.to(hf.device), max_new_tokens=NEW_TOKENS,
                        min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=hf.config.eos_token_id)
    return f


def _edit(kind: str, m):
    from interplab.interventions import HeadGate, Steer

    if kind == "steer":
        v = torch.randn(m.d_model, generator=torch.Generator().manual_seed(1))
        return [Steer(f"resid_post.{m.n_layers // 2}", v / v.norm(), scale=4.0, phases=("decode",))]
    if kind == "headgate":
        g = 0.9 + 0.2 * torch.rand(m.n_layers, m.n_heads, generator=torch.Generator().manual_seed(2))
        return [HeadGate(g.numpy())]
    return []


def generate(backend: str, edit: str) -> dict:
    m = _get(backend)
    edits = _edit(edit, m)
    ids, mask = _prompt_ids()
    rows = [ids[0][mask[0].bool()].tolist()]

    def ours_fn():
        m.generate(rows, max_new_tokens=NEW_TOKENS, edits=edits, stop_at_eos=False, return_logits=False)

    t = timeit_interleaved(ours_fn, _hf_generate(), repeat=5, sync=_sync)
    ours, anchor = t["ours"], t["anchor"]
    goal_x = 1.15 if edit == "headgate" else 1.10
    ratio = ours / anchor
    return dict(ours=ours, anchor=anchor, ratio=ratio,
                goal=f"<= {goal_x:.2f}x plain HF generate (KV cache, greedy)", ok=ratio <= goal_x,
                extra={"model": NAME, "backend": backend, "edit": edit or "none", "prompt_tokens": len(rows[0]),
                       "new_tokens": NEW_TOKENS, "ours_tok_per_s": round(NEW_TOKENS / ours, 2),
                       "hf_tok_per_s": round(NEW_TOKENS / anchor, 2),
                       "cpu_ratio": round(t["ours_cpu"] / t["anchor_cpu"], 3),
                       "threads": torch.get_num_threads(), "device": _device()})


def _batch_ids(n: int = 4, t: int = 64):
    m = _get("bridge")
    return torch.randint(100, min(m.d_vocab, 20000), (n, t), generator=torch.Generator().manual_seed(0))


def capture_vs_run_with_cache() -> dict:
    m = _get("bridge")
    ids = _batch_ids()
    site = f"resid_post.{m.n_layers // 2}"
    ours = timeit(lambda: m.run(ids, capture=[site], logits=False), repeat=REPEAT, sync=_sync)

    def anchor_fn():
        with torch.no_grad():
            m.bridge.run_with_cache(ids.to(m.device), prepend_bos=False)

    anchor = timeit(anchor_fn, repeat=REPEAT, sync=_sync)
    ratio = anchor / ours
    return dict(ours=ours, anchor=anchor, ratio=ratio, goal=">= 2x faster than TransformerLens run_with_cache",
                ok=ratio >= 2.0, extra={"model": NAME, "shape": list(ids.shape), "site": site,
                                        "threads": torch.get_num_threads(), "device": _device()})


def hook_overhead() -> dict:
    m = _get("bridge")
    hf = _get("hf")
    ids = _batch_ids()
    mask = torch.ones_like(ids)
    site = f"resid_post.{m.n_layers // 2}"

    def plain(model):
        def f():
            with torch.no_grad():
                model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device))
        return f

    ours = timeit(lambda: m.run(ids, capture=[site]), repeat=REPEAT, sync=_sync)
    anchor = timeit(plain(hf), repeat=REPEAT, sync=_sync)
    eager = timeit(plain(m.hf_model), repeat=REPEAT, sync=_sync)
    ratio = ours / anchor
    return dict(ours=ours, anchor=anchor, ratio=ratio, goal="<= 1.10x a plain transformers (SDPA) forward",
                ok=ratio <= 1.10, extra={"model": NAME, "shape": list(ids.shape), "site": site,
                                         "vs_same_module_eager": round(ours / eager, 3),
                                         "interplab_attn": m.hf_model.config._attn_implementation,
                                         "threads": torch.get_num_threads(), "device": _device()})


def _truth_items(n: int) -> list[tuple[str, int]]:
    """Equal-shape synthetic items: the benchmark times the machinery, not the science (labels alternate)."""
    import random

    rnd = random.Random(0)
    words = ["Paris", "Rome", "Berlin", "Madrid", "Lisbon", "Vienna", "Oslo", "Athens", "Dublin", "Prague"]
    out = []
    for i in range(n):
        a, b = rnd.sample(words, 2)
        out.append((f"Context: the capital is {a}. Question: what is the capital? Answer: {b if i % 2 else a}",
                    int(i % 2 == 0)))
    return out


def truth_map() -> dict:
    import warnings

    import numpy as np

    from interplab.probes import TruthScoresConfig, truth_scores_from_activations
    from interplab.probes.truth.probe_core import kfold_splits
    from interplab.probes.truth.scores import capture_head_outputs

    m = _get("bridge")
    items = _truth_items(TRUTH_ITEMS)
    texts, y = [t for t, _ in items], np.array([lab for _, lab in items])
    scale = TRUTH_ITEMS / TRUTH_TIMED

    # ours: capture (timed on TRUTH_TIMED items, scaled) + the batched probes on all TRUTH_ITEMS items
    t = time.perf_counter()
    capture_head_outputs(m, texts[:TRUTH_TIMED], batch_size=TRUTH_BATCH)
    _sync()
    ours_capture = (time.perf_counter() - t) * scale
    X = capture_head_outputs(m, texts[:TRUTH_TIMED], batch_size=TRUTH_BATCH).repeat(
        int(np.ceil(scale)), 1, 1, 1)[:TRUTH_ITEMS]
    X = X + 0.01 * torch.randn(X.shape, generator=torch.Generator().manual_seed(3))  # distinct rows
    t = time.perf_counter()
    res = truth_scores_from_activations(X, y, TruthScoresConfig(solver="lbfgs"))
    ours_probes = time.perf_counter() - t
    ours = ours_capture + ours_probes

    # anchor: TransformerLens run_with_cache per batch, hook_z at the last token, then scikit-learn per head/fold
    names = [f"blocks.{L}.attn.hook_z" for L in range(m.n_layers)]
    tok = m.tokenize(texts[:TRUTH_TIMED], chat=False)
    t = time.perf_counter()
    feats = []
    for i in range(0, TRUTH_TIMED, TRUTH_BATCH):
        ids = tok.input_ids[i:i + TRUTH_BATCH].to(m.device)
        with torch.no_grad():
            _, cache = m.bridge.run_with_cache(ids, prepend_bos=False, attention_mask=tok.attention_mask[
                i:i + TRUTH_BATCH].to(m.device))
        feats.append(torch.stack([cache[n][:, -1] for n in names], 1).float().cpu())  # left-padded: last = real
        del cache
    _sync()
    anchor_capture = (time.perf_counter() - t) * scale
    from sklearn.linear_model import LogisticRegression

    Xn = X.numpy()
    folds = kfold_splits(len(y), 5, seed=42)
    t = time.perf_counter()
    acc = np.zeros((m.n_layers, m.n_heads))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for L in range(m.n_layers):
            for h in range(m.n_heads):
                accs = []
                for tr, te in folds:
                    clf = LogisticRegression(max_iter=100).fit(Xn[tr, L, h], y[tr])
                    accs.append(clf.score(Xn[te, L, h], y[te]))
                acc[L, h] = np.mean(accs)
    anchor_probes = time.perf_counter() - t
    anchor = anchor_capture + anchor_probes
    ratio = anchor / ours
    dacc = float(np.abs(acc - res.scores).mean())
    return dict(ours=ours, anchor=anchor, ratio=ratio,
                goal=">= 10x faster than run_with_cache + a scikit-learn loop", ok=ratio >= 10.0,
                extra={"model": NAME, "items": TRUTH_ITEMS, "heads": m.n_layers * m.n_heads, "folds": 5,
                       "ours_capture_s": round(ours_capture, 2), "ours_probes_s": round(ours_probes, 2),
                       "anchor_capture_s": round(anchor_capture, 2), "anchor_probes_s": round(anchor_probes, 2),
                       "forwards_timed_on": TRUTH_TIMED, "mean_abs_dacc": round(dacc, 4),
                       "threads": torch.get_num_threads(), "device": _device()})


def load(backend: str) -> dict:
    """Issue 49: `interplab.load_model` (weights, tokenizer, the backend's wrapper) vs plain transformers'
    `from_pretrained` of the same de-quantized checkpoint plus its tokenizer; both from a warm file cache."""
    import interplab
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from interplab.models.real import checkpoint_for

    _threads()
    path = str(checkpoint_for(NAME.split(":", 1)[1]))

    def ours_fn():
        interplab.load_model(NAME, backend=backend, device=_device())
        gc.collect()

    def anchor_fn():
        AutoModelForCausalLM.from_pretrained(path).to(_device()).eval()
        AutoTokenizer.from_pretrained(path)
        gc.collect()

    t = timeit_interleaved(ours_fn, anchor_fn, repeat=5, warmup=1)
    ours, anchor = t["ours"], t["anchor"]
    ratio = ours / anchor
    return dict(ours=ours, anchor=anchor, ratio=ratio, goal="<= 1.20x plain from_pretrained + tokenizer",
                ok=ratio <= 1.2, extra={"model": NAME, "backend": backend, "threads": torch.get_num_threads(),
                                        "cpu_ratio": round(t["ours_cpu"] / t["anchor_cpu"], 3),
                                        "device": _device()})


BENCHMARKS = {}
for _backend in ("bridge", "nnsight"):
    for _edit_kind, _label in (("", "generate"), ("steer", "generate_steer"), ("headgate", "generate_headgate")):
        BENCHMARKS[f"real_smollm2_{_label}_{_backend}"] = (lambda b=_backend, e=_edit_kind: generate(b, e))
BENCHMARKS["real_smollm2_capture_vs_rwc"] = capture_vs_run_with_cache
BENCHMARKS["real_smollm2_load_bridge"] = lambda: load("bridge")
BENCHMARKS["real_smollm2_load_nnsight"] = lambda: load("nnsight")
BENCHMARKS["real_smollm2_hook_overhead"] = hook_overhead
BENCHMARKS["real_smollm2_truth_map"] = truth_map
