"""Measure the parity band of each numeric mode against plain transformers in fp32 with eager attention.

    python scripts/parity_bands.py [--real gpt2-small,qwen2.5-0.5b] [--device cpu]

For each test model (the four random 2-layer architectures of the test suite, plus committed real-size configs
with seeded random weights) and each backend, it runs the same left-padded batch in three modes — fp32 + eager,
fp32 + SDPA, bf16 (+ SDPA) — and prints the largest absolute difference over real tokens of the logits and of the
last layer's residual stream against the reference, and that difference relative to the reference logits' spread
(max |logit| over real tokens). The numbers in docs/real_models.md come from this script."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import interplab  # noqa: E402
from interplab.testing import make_random_checkpoint, real_size_checkpoint  # noqa: E402

IDS = [[11, 42, 7, 30, 5, 9, 12, 8], [8, 10, 17, 3]]
MODES = {"fp32+eager": dict(dtype="float32", attn_implementation="eager"),
         "fp32+sdpa": dict(dtype="float32", attn_implementation="sdpa"),
         "bf16+sdpa": dict(dtype="bfloat16", attn_implementation="sdpa")}


def reference(path, device):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").to(device)
    width = max(map(len, IDS))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in IDS], device=device)
    att = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in IDS], device=device)
    pos = (att.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        out = hf(input_ids=ids, attention_mask=att, position_ids=pos, output_hidden_states=True)
    return out.logits.cpu(), att.bool().cpu()


def measure(label, path, device):
    ref_logits, real = reference(path, device)
    scale = float(ref_logits[real].abs().max())
    rows = []
    for backend in ("bridge", "nnsight"):
        for mode, kw in MODES.items():
            m = interplab.load_model(path, backend=backend, device=device, **kw)
            site = f"resid_post.{m.n_layers - 2}"
            out = m.run(IDS, capture=[site])
            ref_m = interplab.load_model(path, backend=backend, device=device, dtype="float32",
                                         attn_implementation="eager")
            ref_site = ref_m.run(IDS, capture=[site]).cache[site]
            dl = float((out.logits.float().cpu() - ref_logits)[real].abs().max())
            dr = float((out.cache[site].float() - ref_site.float())[real].abs().max())
            rows.append((label, backend, mode, dl, dl / scale, dr))
            del m, ref_m
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", default="gpt2-small", help="comma-separated committed configs ('' for none)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("gpt2", "llama", "qwen2", "mistral"):
            rows += measure(f"{arch} (2L, d64)", make_random_checkpoint(arch, f"{tmp}/{arch}"), args.device)
        for name in filter(None, args.real.split(",")):
            rows += measure(name, real_size_checkpoint(name), args.device)
    print("| model | backend | mode | max abs Δ logits | Δ / max abs logit | max abs Δ resid_post (vs fp32 eager) |")
    print("|---|---|---|---|---|---|")
    for label, backend, mode, dl, rel, dr in rows:
        print(f"| {label} | {backend} | {mode} | {dl:.2e} | {rel:.2e} | {dr:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
