"""FAST SAE benchmarks (one process; prints one BENCH line each).

1. fast_harvest: FAST activation harvesting with padded, masked micro-batches vs one dialogue per forward (the
   paper's procedure). Activations must agree within 1e-4. Goal: >= 3x tokens/s.
2. sae_train_e2e: end-to-end SAE training tokens/s (harvest + mixing buffer + SAETrainer) of interplab's
   `train_sae(method="block")` vs SAELens's own `LanguageModelSAETrainingRunner` (block training, BT(F) on the same
   dialogues with use_chat_formatting) at the same width, batch, context size and buffer. Goal: >= 0.8x.
   Also reported (extra): FAST training tokens/s.

Model: zoo:toy-chat when built, else zoo:toy-base (same architecture and tokenizer), else a random checkpoint with toy-chat's architecture (4 layers, d_model 128,
GQA, RoPE). Usage: python benchmarks/bench_sae.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")


def load_model(tmp: Path):
    import interplab

    from interplab.zoo.resolve import resolve

    for name in ("toy-chat", "toy-base"):
        try:
            resolve(name)
            return interplab.load_model(f"zoo:{name}", device="cpu"), f"zoo:{name}"
        except Exception:  # noqa: BLE001 - try the next one, then a random checkpoint of the same shape
            pass
    if True:
        from interplab.testing import make_random_checkpoint

        p = make_random_checkpoint("llama", tmp / "ckpt", n_layers=4, d_model=128, n_heads=4, n_kv_heads=2,
                                   vocab=128, n_ctx=256)
        return interplab.load_model(p, device="cpu"), "random llama 4L d128 (toy-chat shape)"


def dialogues_for(model, n: int, seed: int = 0):
    from interplab.sae import sae_data

    return sae_data(model, n, 4, 4, seed).train


def bench_harvest(model, dialogues, site: str, micro_batch: int) -> str:
    import torch

    from interplab.sae import fast_provider

    def run(mb):
        p = fast_provider(model, dialogues, site=site, micro_batch=mb, shuffle=False, bucket=True)
        t0 = time.perf_counter()
        acts = {int(c.sample[0]): c.acts for c in p.iter_chunks()}
        return time.perf_counter() - t0, acts, p.n_tokens

    run(micro_batch)  # warm-up
    t_one, a_one, n_tok = run(1)
    t_mb, a_mb, _ = run(micro_batch)
    maxdiff = max(float((a_one[k] - a_mb[k]).abs().max()) for k in a_one)
    ratio = t_one / t_mb
    ok = ratio >= 3.0 and maxdiff <= 1e-4
    return (f"BENCH name=fast_harvest ours={t_mb:.3f} anchor={t_one:.3f} ratio={ratio:.2f} goal=>=3x ok={ok} "
            f"extra=tokens={n_tok},tok_per_s_ours={n_tok / t_mb:.0f},tok_per_s_batch1={n_tok / t_one:.0f},"
            f"micro_batch={micro_batch},max_abs_diff={maxdiff:.2e}")


def bench_train(model, dialogues, site: str, steps: int, batch: int, context: int, expansion: int, tmp: Path) -> list[str]:
    import datasets
    import torch
    from sae_lens import (JumpReLUTrainingSAEConfig, LanguageModelSAERunnerConfig, LanguageModelSAETrainingRunner,
                          LoggingConfig)

    from interplab.sae import site_to_hook_name, train_sae

    d = model.d_model
    d_sae = expansion * d
    buffer_tokens = 16 * batch
    lines = []

    # ours, block training (BT(F)) and FAST
    t0 = time.perf_counter()
    train_sae(model, dialogues, site=site, method="block", architecture="jumprelu", expansion=expansion,
              steps=steps, batch_tokens=batch, lr=1e-3, context_size=context, buffer_tokens=buffer_tokens,
              out_dir=tmp / "ours_block", mode="native", b_dec_init="zeros")
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    train_sae(model, dialogues, site=site, method="fast", architecture="jumprelu", expansion=expansion,
              steps=steps, batch_tokens=batch, lr=1e-3, buffer_tokens=buffer_tokens, out_dir=tmp / "ours_fast",
              mode="native", b_dec_init="zeros", micro_batch=64)
    t_fast = time.perf_counter() - t0

    # SAELens's runner on the same bridge, same dialogues (chat formatting), same width / batch / context / buffer
    bridge = model.bridge
    ds = datasets.Dataset.from_dict({"messages": dialogues})
    store_prompts = 8
    n_batches_in_buffer = max(2, buffer_tokens // (store_prompts * context))
    cfg = LanguageModelSAERunnerConfig(
        sae=JumpReLUTrainingSAEConfig(d_in=d, d_sae=d_sae),
        model_name="interplab-bench", hook_name=site_to_hook_name(site), dataset_path="",
        is_dataset_tokenized=False, streaming=False, use_chat_formatting=True, context_size=context,
        prepend_bos=True, sequence_separator_token="bos", training_tokens=steps * batch,
        train_batch_size_tokens=batch, store_batch_size_prompts=store_prompts,
        n_batches_in_buffer=n_batches_in_buffer, activations_mixing_fraction=0.5, exclude_special_tokens=False,
        logger=LoggingConfig(log_to_wandb=False), lr=1e-3, device="cpu", act_store_device="cpu",
        output_path=str(tmp / "runner_out"), n_checkpoints=0, checkpoint_path=str(tmp / "runner_ckpt"),
        save_final_checkpoint=False, verbose=False)
    err = None
    t_anchor = float("nan")
    try:
        t0 = time.perf_counter()
        LanguageModelSAETrainingRunner(cfg, override_model=bridge, override_dataset=ds).run()
        t_anchor = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - report exactly why the anchor could not run
        err = f"{type(e).__name__}: {str(e)[:200]}".replace(" ", "_")
    tokens = steps * batch
    if err is None:
        ratio = t_anchor / t_ours
        lines.append(f"BENCH name=sae_train_e2e ours={t_ours:.3f} anchor={t_anchor:.3f} ratio={ratio:.2f} goal=>=0.8x "
                     f"ok={ratio >= 0.8} extra=tokens={tokens},ours_block_tok_s={tokens / t_ours:.0f},"
                     f"runner_tok_s={tokens / t_anchor:.0f},ours_fast_tok_s={tokens / t_fast:.0f},d_sae={d_sae},"
                     f"batch={batch},context={context},arch=jumprelu")
    else:
        lines.append(f"BENCH name=sae_train_e2e ours={t_ours:.3f} anchor=nan ratio=nan goal=>=0.8x ok=False "
                     f"extra=runner_failed={err},ours_block_tok_s={tokens / t_ours:.0f},"
                     f"ours_fast_tok_s={tokens / t_fast:.0f}")
    return lines


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        model, label = load_model(tmp)
        site = f"resid_post.{max(0, model.n_layers // 2 - 1)}"
        n = 64 if a.quick else 256
        dl = dialogues_for(model, n)
        print(f"# model={label} site={site} dialogues={len(dl)}", flush=True)
        print(bench_harvest(model, dl, site, micro_batch=32), flush=True)
        for line in bench_train(model, dl, site, steps=50 if a.quick else 300, batch=128, context=128,
                                expansion=8, tmp=tmp):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
