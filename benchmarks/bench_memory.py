"""Peak resident memory of every default action of the dashboard on a real model (issue 48: "no default action may
hold more than a stated budget"; 2 GB for a 135M model).

Each action runs in a fresh Python process (nothing loaded or cached before it), as the page's default button does
it (the same API call or experiment, the same settings); the parent reads the child's peak RSS from the kernel
(`os.wait4` -> `ru_maxrss`, the child's own high-water mark, in KiB on Linux). An action that has not finished
after `--cap` seconds is stopped and its peak so far is reported with `capped` = yes: the long actions (the patching
sweep over every position, the tuned lens, the atlas) work in batches of a fixed size, so their peak is reached in
the first batches, but a capped row is a lower bound and says so.

    python -m benchmarks.bench_memory                                     # SmolLM2-135M-Instruct, 2 GB budget
    python -m benchmarks.bench_memory --model real:gemma-3-270m --cap 120 --only load,next-token

Prints a markdown table (action, peak RSS, budget, within, wall, capped, what it ran) and one BENCH line per
action. Run it in a CPU slot (`/work/bin/slot python -m benchmarks.bench_memory`): each action loads the model."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUDGET_MB = 2048.0
MODEL = "real:smollm2-135m-instruct"

# name -> (what the page's default button runs, child code). `M` is the model name and `OUT` a scratch results
# root; every action loads the model itself, so each row includes the model's own weights.
_LOAD = "import interplab\nm = interplab.load_model(M)\n"
ACTIONS: dict[str, tuple[str, str]] = {
    "load": ("Models page: load the model (every page's first step)", _LOAD),
    "next-token": ("Models page: the default prompt's top-10 next tokens and layer-0 attention", _LOAD + """
from interplab.probes.next_token import next_token_report, suggest_chat, suggest_prompt
system, prompt = suggest_chat(m) if m.chat_default else ("", suggest_prompt(m))
next_token_report(m, prompt, top_k=10, system=system)
"""),
    "patching-all": ("Patching page: the default pair, resid_pre + attn_z, Positions = all, exact", """
from interplab.experiments.registry import run_experiment
run_experiment("patching", dict(model=M, sites="resid_pre,attn_z", positions="all", attribution=False), root=OUT)
"""),
    "patching-each": ("Patching page: the default pair, resid_pre + attn_z, Positions = each, exact (a job)",
                      """
from interplab.experiments.registry import run_experiment
run_experiment("patching", dict(model=M, sites="resid_pre,attn_z", positions="each", attribution=False), root=OUT)
"""),
    "logit-lens": ("Logit Lens page: the default prompt's logit lens and DLA of its top token", _LOAD + """
from interplab.probes.lenses import default_pair, direct_logit_attribution, logit_lens
prompt = default_pair(m)[0]
ll = logit_lens(m, prompt, top_k=5)
direct_logit_attribution(m, prompt, ll.top_tokens[-1][-1][0])
"""),
    "tuned-lens": ("Logit Lens page: Train tuned lens (100 steps on 16 default prompts; a job)", """
from interplab.experiments.registry import run_experiment
run_experiment("logit-lens", dict(model=M, tuned_steps=100, n_tuned_prompts=16), root=OUT)
"""),
    "attention": ("Attention page: every head's pattern of the default prompt at layer 0", _LOAD + """
from interplab.probes.lenses import attention_patterns, default_pair
attention_patterns(m, default_pair(m)[0], 0)
"""),
    "direction": ("Direction page: Build dashboard for the default token direction at the last layer", _LOAD + """
from interplab.probes.lenses import default_direction, direction_dashboard
d = default_direction(m)
direction_dashboard(m, d.vector, d.site, list(d.prompts), steer_prompt=d.steer_prompt, steer_scales=d.scales,
                    relative_scales=True)
"""),
    "atlas": ("Atlas page: the atlas of the loaded model (a job)", """
from interplab.experiments.registry import run_experiment
run_experiment("atlas", dict(models=[M], figure_formats=[]), root=OUT)
"""),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--budget-mb", type=float, default=BUDGET_MB)
    ap.add_argument("--cap", type=float, default=90.0, help="seconds an action may run before it is stopped")
    ap.add_argument("--only", default="", help="comma-separated actions (default: all)")
    args = ap.parse_args(argv)
    names = [a for a in args.only.split(",") if a] or list(ACTIONS)
    unknown = [a for a in names if a not in ACTIONS]
    if unknown:
        ap.error(f"unknown actions {unknown}; known: {list(ACTIONS)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_memory_") as out:
        for name in names:
            r = measure(name, args.model, args.cap, out)
            rows.append(r)
            print("BENCH " + json.dumps({**r, "model": args.model, "budget_mb": args.budget_mb}), flush=True)
    print("\n| action | peak RSS (MB) | budget (MB) | within | wall (s) | capped | what it ran |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        mb = r["peak_mb"]
        ok = "n/a" if mb is None else ("yes" if mb <= args.budget_mb else "**no**")
        print(f"| {r['action']} | {'—' if mb is None else f'{mb:.0f}'} | {args.budget_mb:.0f} | {ok} | {r['wall_s']} "
              f"| {'yes' if r['capped'] else 'no'} | {ACTIONS[r['action']][0]}"
              + (f" (failed: {r['error'][0]})" if r["error"] else "") + " |")
    return 0


def measure(action: str, model: str, cap_s: float, out: str) -> dict:
    """Run one action in a fresh interpreter, reaped by os.wait4 (which returns that child's own rusage): its peak
    RSS (MB), wall time and whether it hit the cap. stderr goes to a file, so the parent never reads a pipe (a
    full pipe would block the child)."""
    _, code = ACTIONS[action]
    prog = f"M = {model!r}\nOUT = {out!r}\n" + code
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled"}
    err_path = Path(out) / f"{action}.stderr"
    t0 = time.perf_counter()
    with open(err_path, "w") as err:
        child = subprocess.Popen([sys.executable, "-c", prog], env=env, stdout=subprocess.DEVNULL, stderr=err,
                                 start_new_session=True)
    capped = False
    deadline = t0 + cap_s
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline and not capped:
            capped = True
            os.killpg(child.pid, signal.SIGTERM)
        time.sleep(0.2)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    tail = err_path.read_text().strip().splitlines()[-1:] if child.returncode != 0 and not capped else []
    return dict(action=action, peak_mb=usage.ru_maxrss / 1024.0, rc=child.returncode, wall_s=round(wall, 1),
                capped=capped, error=tail)


if __name__ == "__main__":
    raise SystemExit(main())
