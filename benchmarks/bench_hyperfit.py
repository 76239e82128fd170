"""Benchmark: per-layer participation ratio over 200k tokens of d=192 (4 layers), streaming
`CovarianceAccumulator` vs the anchor a user would write: stack every layer's states, then one SVD per layer.

Both consume identical synthetic hidden-state batches (a fixed per-layer mixing matrix with a decaying spectrum and a
non-zero mean, generated batch by batch the way a model's forward passes would produce them). Peak memory is the
growth of the process's peak resident set (VmHWM, reset through /proc/self/clear_refs before each method) over the
resident set before it started: torch's CPU allocations are invisible to tracemalloc, so RSS is the honest measure.
Times are wall-clock with one thread; `net` times subtract the (identical) cost of generating the states.

Run: python benchmarks/bench_hyperfit.py [--tokens 200000] [--d 192] [--layers 4]
"""
from __future__ import annotations

import argparse
import gc
import time

import torch

from interplab.probes.hyperfit import CovarianceAccumulator, pr_from_spectrum


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/self/status")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _measure(fn):
    gc.collect()
    can_reset = _reset_peak()
    base = _status_kb("VmRSS")
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    peak = _status_kb("VmHWM") - base
    return out, dt, peak * 1024, can_reset


def make_mixers(d: int, layers: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    mix = []
    for layer in range(layers):
        Q, _ = torch.linalg.qr(torch.randn(d, d, generator=g))
        spec = torch.arange(1, d + 1, dtype=torch.float32) ** (-0.5 - 0.25 * layer)
        mix.append((Q * spec).T.contiguous())
    means = [torch.randn(d, generator=g) * 3 for _ in range(layers)]
    return mix, means


def batches(n_tokens: int, d: int, mix, means, batch_tokens: int = 2048, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    done = 0
    while done < n_tokens:
        n = min(batch_tokens, n_tokens - done)
        z = torch.randn(n, d, generator=g)
        yield [z @ m + mu for m, mu in zip(mix, means)]
        done += n


def run_stream(n_tokens, d, mix, means):
    acc = CovarianceAccumulator(d, groups=len(mix))  # all layers in one batched update
    for states in batches(n_tokens, d, mix, means):
        acc.update(torch.stack(states))
    return acc.participation_ratio().tolist()


def run_stack(n_tokens, d, mix, means):
    stored = [[] for _ in mix]
    for states in batches(n_tokens, d, mix, means):
        for buf, x in zip(stored, states):
            buf.append(x)
    out = []
    for i in range(len(stored)):
        X = torch.cat(stored[i])
        stored[i] = None
        Xc = X - X.mean(0)
        del X
        s = torch.linalg.svdvals(Xc)
        out.append(pr_from_spectrum((s.double() ** 2) / (Xc.shape[0] - 1)))
        del Xc
    return out


def run_generate_only(n_tokens, d, mix, means):
    k = 0
    for states in batches(n_tokens, d, mix, means):
        k += len(states)
    return k


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=200_000)
    ap.add_argument("--d", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    mix, means = make_mixers(args.d, args.layers)
    _, t_gen, _, _ = _measure(lambda: run_generate_only(args.tokens, args.d, mix, means))
    pr_s, t_s, mem_s, ok_reset = _measure(lambda: run_stream(args.tokens, args.d, mix, means))
    pr_a, t_a, mem_a, _ = _measure(lambda: run_stack(args.tokens, args.d, mix, means))
    max_diff = max(abs(a - b) for a, b in zip(pr_s, pr_a))
    mem_ratio = mem_a / max(mem_s, 1)
    net_s, net_a = max(t_s - t_gen, 1e-9), max(t_a - t_gen, 1e-9)
    print(f"BENCH name=layer_pr_peak_memory ours={mem_s / 2**20:.1f}MiB anchor={mem_a / 2**20:.1f}MiB "
          f"ratio={mem_ratio:.1f}x goal=anchor/ours>=10 ok={mem_ratio >= 10} "
          f"extra=tokens={args.tokens},d={args.d},layers={args.layers},peak_rss_reset={ok_reset}")
    print(f"BENCH name=layer_pr_time ours={t_s:.3f} anchor={t_a:.3f} ratio={t_s / t_a:.3f} goal=<=1.5 "
          f"ok={t_s / t_a <= 1.5} extra=net_ours={net_s:.3f},net_anchor={net_a:.3f},net_ratio={net_s / net_a:.3f},"
          f"generate={t_gen:.3f},max_abs_pr_diff={max_diff:.2e},pr={'/'.join(f'{p:.2f}' for p in pr_s)}")


if __name__ == "__main__":
    main()
