"""Harvest memory benchmark: peak resident memory of `interplab.harvest` for N and 10 N prompts on the
GPT-2-small-size random model (`interplab.testing.real_size_checkpoint("gpt2-small")`, cached), each in a fresh
subprocess (ru_maxrss is a per-process high-water mark). Goal: 10x the prompts costs <= 1.2x the peak.

What is harvested: resid_post, attn_z and mlp_out of all 12 layers at every real token (positions="all"), 16-token
prompts, batches of 8: ~1.8 MB of float32 activations per prompt (short prompts keep the forwards cheap on 2 shared
cores; many sites make the activations big), so the in-RAM anchor (the same harvest into an `InMemoryStore`, i.e. what
collecting activations in a list does) grows by ~320 MB from N to 10 N while the disk store should not grow at all.

    python -m benchmarks.harness harvest_peak_rss     (or: python benchmarks/bench_harvest.py [N])
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

N_PROMPTS = 20
SEQ, BATCH = 16, 8


def _child(n: int, where: str) -> None:
    """Run in a subprocess: load the model, harvest n prompts, print peak RSS (MiB) before and after."""
    import resource

    import torch

    import interplab
    from interplab.testing import real_size_checkpoint

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    m = interplab.load_model(real_size_checkpoint("gpt2-small"), device="cpu")
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(6, 500, (n, SEQ), generator=g).tolist()
    sites = [f"{kind}.{layer}" for kind in ("resid_post", "attn_z", "mlp_out") for layer in range(m.n_layers)]
    interplab.harvest(m, prompts[:BATCH], sites, None, batch_size=BATCH, positions="all")  # warm-up: allocator steady
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with tempfile.TemporaryDirectory() as tmp:
        out = None if where == "memory" else os.path.join(tmp, "store")
        store = interplab.harvest(m, prompts, sites, out, batch_size=BATCH, positions="all")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        rows = store.n_rows
    print("RESULT " + json.dumps({"n": n, "where": where, "base_mib": base, "peak_mib": peak, "rows": rows}))


def _measure(n: int, where: str) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", f"from benchmarks.bench_harvest import _child; _child({n}, {where!r})"],
                          capture_output=True, text=True, env=env, cwd=root, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"harvest child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def harvest_peak_rss(n: int = N_PROMPTS) -> dict:
    disk = [_measure(n, "disk"), _measure(10 * n, "disk")]
    mem = [_measure(n, "memory"), _measure(10 * n, "memory")]
    ratio = disk[1]["peak_mib"] / disk[0]["peak_mib"]
    return dict(ours=round(disk[1]["peak_mib"], 1), anchor=round(mem[1]["peak_mib"], 1), ratio=round(ratio, 3),
                goal="10x prompts <= 1.2x peak RSS (ours/anchor: peak MiB at 10N, disk store / in-RAM store)",
                ok=ratio <= 1.2,
                extra={"model": "gpt2-small-size random", "prompts": [n, 10 * n], "tokens_per_prompt": SEQ,
                       "sites": "resid_post, attn_z, mlp_out x 12 layers, positions=all", "disk_peak_mib": [round(d["peak_mib"], 1) for d in disk],
                       "memory_peak_mib": [round(d["peak_mib"], 1) for d in mem],
                       "memory_ratio": round(mem[1]["peak_mib"] / mem[0]["peak_mib"], 3),
                       "after_load_mib": [round(d["base_mib"], 1) for d in disk]})


BENCHMARKS = {"harvest_peak_rss": harvest_peak_rss}

if __name__ == "__main__":
    r = harvest_peak_rss(int(sys.argv[1]) if len(sys.argv) > 1 else N_PROMPTS)
    print("BENCH name=harvest_peak_rss " + " ".join(f"{k}={v}" for k, v in r.items() if k != "extra")
          .replace(" goal=" + r["goal"], " goal=" + r["goal"].replace(" ", "_")) + " extra=" + json.dumps(r["extra"]))
