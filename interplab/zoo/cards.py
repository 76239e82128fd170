"""Model cards: MODEL_CARD.md (for people) + card.json (for tests and the app) inside each checkpoint directory."""
from __future__ import annotations

import datetime as _dt
import os
import platform
from pathlib import Path

CARD_JSON = "card.json"
CARD_MD = "MODEL_CARD.md"


def dir_size_bytes(path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def _curve(log: list[dict], max_points: int = 40) -> list[dict]:
    if len(log) <= max_points:
        return log
    idx = sorted({round(i * (len(log) - 1) / (max_points - 1)) for i in range(max_points)})
    return [log[i] for i in idx]


def model_format(model) -> str:
    """'raw' or 'chat': the data format a zoo organism was trained on (its card), else 'chat' when the tokenizer
    has a chat template, else 'raw'. Here, below the probes (and free of torch), because several methods' data and
    their atlas parts build prompts in it and no method may import another's."""
    import json
    from pathlib import Path

    card = Path(str(getattr(model, "path", "") or "")) / "card.json"
    if card.exists():
        try:
            fmt = json.loads(card.read_text()).get("recipe", {}).get("data", {}).get("format")
            if fmt in ("raw", "chat"):
                return fmt
        except (OSError, ValueError):
            pass
    return "chat" if getattr(model.tokenizer, "chat_template", None) else "raw"


def write_card(recipe, out_dir, report: dict) -> dict:
    """Write card.json + MODEL_CARD.md for a freshly built checkpoint and return the card dict."""
    from interplab.core.io import write_json, write_text

    out_dir = Path(out_dir)
    tr = report.get("train", {})
    as_run = report.get("train_configs")
    if as_run is None:
        from interplab.train.checkpoint import read_train_info

        info = read_train_info(out_dir)
        as_run = info.get("train_configs") or ([info["train_config"]] if info.get("train_config") else [])
    losses = tr.get("losses", [])
    card = {
        "name": recipe.name,
        "description": recipe.description,
        "recipe": recipe.summary() | {"available": True, "path": None},
        "n_params": report.get("n_params"),
        "metrics": report.get("metrics", {}),
        "thresholds": dict(recipe.thresholds),
        "ceilings": dict(getattr(recipe, "ceilings", {}) or {}),
        "train": {
            "steps_done": tr.get("steps_done"), "steps_planned": report.get("steps"),
            "stopped_early": tr.get("stopped_early"), "train_seconds": tr.get("seconds"),
            "build_seconds": report.get("build_seconds"), "tokens": tr.get("tokens"),
            "tokens_per_s": tr.get("tokens_per_s"),
            "first_losses": losses[:20], "final_loss": losses[-1] if losses else None,
            "curve": _curve(tr.get("log", [])),
            "configs_as_run": as_run,
        },
        "extra": {k: v for k, v in report.items() if k not in ("train", "metrics", "n_params")},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "built_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    card["size_bytes"] = dir_size_bytes(out_dir)
    write_json(out_dir / CARD_JSON, card)
    write_text(out_dir / CARD_MD, render_card_md(card))
    card["size_bytes"] = dir_size_bytes(out_dir)
    write_json(out_dir / CARD_JSON, card)
    return card


def render_card_md(card: dict) -> str:
    r = card["recipe"]
    t = card["train"]
    lines = [f"# {card['name']}", "", card["description"], "",
             "An ordinary Hugging Face checkpoint built by `interplab zoo train " + card["name"] + "`; load it with "
             "`interplab.load_model(\"zoo:" + card["name"] + "\")` or `transformers.AutoModelForCausalLM`.", "",
             "## Recipe", "",
             f"- family: {r['family']}; parent: {r['parent'] or 'none (from scratch)'}; seed: {r['seed']}",
             f"- architecture: {r['arch']}",
             f"- data: {r['data']}",
             f"- training config template: {r['train']}",
             *[f"- training as run{f' (phase {i + 1})' if len(t.get('configs_as_run') or []) > 1 else ''}: {c}"
               for i, c in enumerate(t.get("configs_as_run") or [])],
             f"- steps planned {t['steps_planned']}, done {t['steps_done']}"
             + (" (stopped early at the time limit)" if t.get("stopped_early") else ""),
             "", "## Size and cost", "",
             f"- parameters: {card['n_params']:,}" if card.get("n_params") else "- parameters: n/a",
             f"- checkpoint size: {card['size_bytes'] / 1e6:.2f} MB",
             f"- training time: {t['train_seconds'] or 0:.0f} s ({(t['tokens_per_s'] or 0):,.0f} tokens/s) on "
             f"{card['machine']['cpus']} shared CPU cores; built {card['built_at']}",
             "", "## Measured after training (held-out examples)", "", "| metric | value | threshold |", "|---|---|---|"]
    for k, v in sorted(card["metrics"].items()):
        th = card["thresholds"].get(k)
        ce = card.get("ceilings", {}).get(k)
        bound = f">= {th}" if th is not None else f"< {ce}" if ce is not None else ""
        lines.append(f"| {k} | {v:.4f} | {bound} |")
    lines += ["", "## Training curve", "", "| step | loss | lr | evals |", "|---|---|---|---|"]
    for rec in t["curve"]:
        ev = ", ".join(f"{k.split('/')[-1]}={v:.2f}" for k, v in rec.items() if k.startswith("acc/"))
        lines.append(f"| {rec['step']} | {rec['loss']:.4f} | {rec['lr']:.2e} | {ev} |")
    lines += ["", f"First 20 losses: {', '.join(f'{x:.4f}' for x in t['first_losses'])}", ""]
    if r.get("notes") or card.get("extra", {}).get("notes"):
        lines += ["## Notes", "", str(card.get("extra", {}).get("notes") or ""), ""]
    return "\n".join(lines)


def read_card(path) -> dict:
    from interplab.core.io import read_json

    f = Path(path) / CARD_JSON
    return read_json(f) if f.is_file() else {}
