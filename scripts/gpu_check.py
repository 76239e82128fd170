"""The GPU check: what runs when a GPU is lent (at most ~10 minutes), printing one table.

    python scripts/gpu_check.py                  # GPU: largest random real-architecture model that fits, bf16
    python scripts/gpu_check.py --dry-run        # print the plan, run only the model-level smoke
    python scripts/gpu_check.py --model qwen2.5-0.5b --bench hook_layer --budget 540

With a GPU it picks the largest committed real-architecture config (interplab.testing) whose bf16 weights fit in
a third of the free GPU memory (and whose parameter count is under --max-params, so building the random weights
fits the time budget), builds seeded random weights once (cached), and runs, each step under its own share of the
budget: model-level checks (both backends load in bf16, bridge = nnsight on captures, every built-in edit,
KV-cached generation with a decode-only edit, a device_map over every GPU — or GPU + CPU offload on one GPU for
nnsight), the benchmark groups (`python -m benchmarks.harness GROUP`) and every method's main experiment with
`--set model=<dir>` and minimal settings. Without a GPU it says so, runs the same model-level path on the
GPT-2-small-size model on the CPU, and exits 0."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

IDS_BASE = [[11, 42, 7, 301, 5, 99, 12], [8, 100, 77]]

def pick_model(max_params: float):
    """(config name, n_params) of the largest committed config whose bf16 weights fit a third of free memory."""
    import torch
    from transformers import AutoModelForCausalLM

    from interplab.testing import real_configs, real_size_config

    free = torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else 0
    sizes = []
    for name in real_configs():
        with torch.device("meta"):
            n = sum(p.numel() for p in AutoModelForCausalLM.from_config(real_size_config(name)).parameters())
        sizes.append((n, name))
    fits = [(n, name) for n, name in sorted(sizes) if n <= max_params and 2 * n * 3 <= free]
    n, name = fits[-1] if fits else min(sizes)
    return name, n


def model_checks(path: str, device: str, dtype: str, rows: list, offload_dir: str) -> None:
    """Both backends: load, bridge = nnsight captures, every built-in edit, KV-cached generation, a device_map."""
    import torch

    import interplab
    from interplab.interventions import Ablate, HeadGate, Patch, Steer, SubspaceProjection

    def step(name, fn):
        t = time.perf_counter()
        try:
            note = fn() or ""
            rows.append((name, "ok", time.perf_counter() - t, note))
        except Exception as e:  # noqa: BLE001 - the table records every failure and goes on
            rows.append((name, "FAIL", time.perf_counter() - t, f"{type(e).__name__}: {str(e)[:150]}"))
            traceback.print_exc()

    models = {}
    sites = None

    def load(backend):
        def fn():
            models[backend] = interplab.load_model(path, backend=backend, device=device, dtype=dtype)
            return repr(models[backend])[:90]
        return fn

    step("load bridge", load("bridge"))
    step("load nnsight", load("nnsight"))
    if len(models) < 2:
        return
    mb, mn = models["bridge"], models["nnsight"]
    n = mb.n_layers
    IDS = [[t % mb.d_vocab for t in row] for row in IDS_BASE]
    sites = [f"{k}.{L}" for L in (0, n - 1) for k in ("resid_pre", "attn_z", "attn_out", "mlp_out", "resid_post")]

    def parity():
        ob, on = mb.run(IDS, capture=sites + ["attn_pattern.0"]), mn.run(IDS, capture=sites + ["attn_pattern.0"])
        real = ob.batch.attention_mask.bool()
        d = max(float((ob.cache[s].float() - on.cache[s].float())[real].abs().max()) for s in sites)
        dl = float((ob.logits.float() - on.logits.float())[real].abs().max())
        return f"max |bridge - nnsight| captures {d:.2e}, logits {dl:.2e} ({dtype})"

    def edits():
        g = torch.Generator().manual_seed(0)
        src = mb.run(IDS[::-1], capture=["resid_post.0"]).cache
        es = [Steer(f"resid_post.{n // 2}", torch.randn(mb.d_model, generator=g), scale=4.0),
              Ablate(f"attn_z.{n - 1}", heads=[0, 1]), Patch.from_cache(src, "resid_post.0", positions="last_prompt"),
              HeadGate(torch.rand(n, mb.n_heads, generator=g).numpy() + 0.5),
              SubspaceProjection(n // 2, torch.randn(mb.d_model, 8, generator=g), phases=("prefill", "decode"))]
        real = mb.tokenize(IDS).attention_mask.bool().cpu()
        eb, en = mb.run(IDS, edits=es).logits.float().cpu(), mn.run(IDS, edits=es).logits.float().cpu()
        clean = mb.run(IDS).logits.float().cpu()
        return (f"edit effect {float((eb - clean)[real].abs().max()):.2e}, "
                f"|bridge - nnsight| {float((eb - en)[real].abs().max()):.2e}")

    def generate():
        dec = [Steer(f"resid_post.{n // 2}", torch.ones(mb.d_model), phases=("decode",), scale=2.0)]
        t = time.perf_counter()
        a = mb.generate(IDS, max_new_tokens=8, edits=dec, stop_at_eos=False)
        tb = time.perf_counter() - t
        b = mn.generate(IDS, max_new_tokens=8, edits=dec, stop_at_eos=False)
        same = sum(x == y for ra, rb in zip(a.new_tokens, b.new_tokens) for x, y in zip(ra, rb))
        return f"8 tokens x 2 rows in {tb:.2f}s (bridge); tokens equal across backends: {same}/16"

    def dispatched():
        n_gpu = torch.cuda.device_count()
        if n_gpu > 1:
            m = interplab.load_model(path, backend="bridge", dtype=dtype, device_map="auto")
            where = f"device_map='auto' over {n_gpu} GPUs"
        else:
            far = "cpu" if device != "cpu" else "disk"
            layers = _module_map(path, lambda i: far if i >= n // 2 else (0 if device != "cpu" else "cpu"))
            m = interplab.load_model(path, backend="nnsight", dtype=dtype, device_map=layers,
                                     offload_folder=offload_dir)
            where = f"nnsight, layers {n // 2}.. on {'cpu' if device != 'cpu' else 'disk'}"
        real = mb.tokenize(IDS).attention_mask.bool().cpu()
        d = float((m.run(IDS).logits.float().cpu() - mn.run(IDS).logits.float().cpu())[real].abs().max())
        return f"{where}: max |dispatched - single| logits {d:.2e}"

    step("bridge = nnsight captures", parity)
    step("built-in edits", edits)
    step("KV-cached generate + decode edit", generate)
    step("device_map", dispatched)


def _module_map(path: str, placement) -> dict:
    """A full device_map: block i goes to placement(i); every other top-level module to the first GPU (or CPU)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from interplab.models.layout import get_module, paths_for

    with torch.device("meta"):
        hf = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    layers_path = paths_for(hf).layers
    blocks = get_module(hf, layers_path)
    rest = 0 if torch.cuda.is_available() else "cpu"
    out = {}
    for name, mod in hf.named_modules():
        if not name or name == layers_path or name.startswith(layers_path + "."):
            continue
        if layers_path.startswith(name + ".") or any(name.startswith(k + ".") for k in out):
            continue
        out[name] = rest
    out.update({f"{layers_path}.{i}": placement(i) for i in range(len(blocks))})
    return out


def run_cmd(name: str, cmd: list[str], timeout: float, rows: list) -> None:
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(timeout, 5))
        out = (p.stdout + p.stderr).strip().splitlines()
        if p.returncode == 0:
            bench = [ln for ln in out if ln.startswith("BENCH ")]
            note = "; ".join(b[6:140] for b in bench[:4]) if bench else (out[-1][:150] if out else "")
            rows.append((name, "ok", time.perf_counter() - t, note))
        else:
            err = [ln for ln in out if "Error" in ln or "error" in ln]
            rows.append((name, "FAIL", time.perf_counter() - t, (err[-1] if err else (out[-1] if out else ""))[:150]))
    except subprocess.TimeoutExpired:
        rows.append((name, "TIMEOUT", time.perf_counter() - t, f"over {timeout:.0f}s"))


def print_table(rows: list, header: str) -> None:
    print(f"\n## {header}\n")
    print("| step | status | seconds | note |")
    print("|---|---|---|---|")
    for name, status, secs, note in rows:
        print(f"| {name} | {status} | {secs:.1f} | {str(note).replace('|', '/')} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="print the plan; run only the model-level smoke")
    ap.add_argument("--model", default=None, help="committed config name (default: the largest that fits) or a "
                    "checkpoint directory")
    ap.add_argument("--max-params", type=float, default=3e9, help="upper bound for the automatic choice")
    ap.add_argument("--bench", default="hook_layer,real_models",
                    help="comma-separated benchmark groups ('' for none); real_models: the SmolLM2 speed rows of "
                         "issue 25 section 5 (without the model installed its rows fail with the install command)")
    ap.add_argument("--experiments", default="all", help="comma-separated experiment names (default: all)")
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for the whole check")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    import torch

    from interplab.testing import SMOKE_EXPERIMENTS, real_size_checkpoint, smoke_experiment_args

    gpu = torch.cuda.is_available()
    if gpu:
        name, n_params = (args.model, None) if args.model else pick_model(args.max_params)
        device, dtype = "cuda", "bfloat16"
        print(f"GPU: {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}; model {name} "
              f"({(n_params or 0) / 1e9:.2f}B params), bf16")
    else:
        name, device, dtype = args.model or "gpt2-small", "cpu", "float32"
        print(f"no GPU available: running the CPU smoke of the same path on {name} (fp32) and exiting 0")
    rows: list = []
    t = time.perf_counter()
    path = name if os.path.isdir(name) else str(real_size_checkpoint(name, dtype="bfloat16" if gpu else "float32"))
    rows.append((f"random weights {os.path.basename(name)}", "ok", time.perf_counter() - t, path))
    with tempfile.TemporaryDirectory() as tmp:
        model_checks(path, device, dtype, rows, os.path.join(tmp, "offload"))
        py = [sys.executable]
        cli = py + ["-c", "import sys; from interplab.cli import main; sys.exit(main())", "run"]
        cmds = [(f"bench {g}", py + ["-m", "benchmarks.harness", g]) for g in filter(None, args.bench.split(","))]
        names = list(SMOKE_EXPERIMENTS) if args.experiments == "all" else [e for e in args.experiments.split(",") if e]
        for e in names:
            cmds.append((f"experiment {e}", cli + [e, "--out", tmp] + smoke_experiment_args(e, path, dtype=dtype,
                                                                                          device=device)))
        if args.dry_run or not gpu:
            for label, cmd in cmds:
                rows.append((label, "planned", 0.0, " ".join(cmd[:1] + cmd[3:] if "-c" in cmd else cmd)[:150]))
        else:
            for i, (label, cmd) in enumerate(cmds):
                left = args.budget - (time.perf_counter() - t0)
                run_cmd(label, cmd, left / (len(cmds) - i), rows)
    print_table(rows, f"interplab GPU check ({'GPU' if gpu else 'CPU smoke'}, {name}, {dtype}, "
                      f"{time.perf_counter() - t0:.0f}s)")
    failed = [r for r in rows if r[1] in ("FAIL", "TIMEOUT")]
    return 1 if (gpu and failed) else 0


if __name__ == "__main__":
    sys.exit(main())
