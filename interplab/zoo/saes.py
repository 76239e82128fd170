"""SAEs shipped with an organism: `<checkpoint>/saes/<run>/` in SAELens format (cfg.json + sae_weights.safetensors).

Each is small (< 1 MB) and comes with the recorded `interplab run sae-train` config (`run_config.json`) and that
run's metrics (`metrics.json`), so the Feature Browser opens on something and the numbers it shows can be rerun.

A real model (`real:<name>`) has no checkpoint folder of ours; its SAEs are the ones kept in the project's committed
`sae-pareto` / `sae-train` runs of that model (`results/sae-*-<model>/<run>/`, e.g. the SmolLM2 FAST SAE of
docs/sae.md "On a real model")."""
from __future__ import annotations

from pathlib import Path

__all__ = ["shipped_saes"]


def shipped_saes(name_or_path: str) -> list[Path]:
    """SAE directories shipped in the checkpoint of `name_or_path` (a zoo name like "zoo:toy-chat" or a local
    checkpoint directory), newest name first; [] when there are none or the model is not built here."""
    from interplab.models.zoo_dirs import find

    name = str(name_or_path)
    if name.startswith("real:"):
        return _committed_run_saes(name)
    if name.startswith("zoo:"):
        root = find(name[4:])
    else:
        root = Path(name).expanduser()
    if root is None or not (root / "saes").is_dir():
        return []
    return sorted((p for p in (root / "saes").iterdir() if (p / "cfg.json").is_file()), key=lambda p: p.name)


def _committed_run_saes(model: str) -> list[Path]:
    """SAELens folders inside the committed sae-pareto / sae-train runs whose config names `model`."""
    from interplab.results.runs import run_model, shipped_runs

    out = []
    for kind in ("sae-train", "sae-pareto"):
        for run in shipped_runs(kind):
            if run_model(run) == model:
                out += sorted(p.parent for p in run.rglob("cfg.json") if (p.parent / "sae_weights.safetensors").is_file())
    return out
