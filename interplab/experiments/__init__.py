"""Runnable experiments, registered by name for the CLI (`interplab run NAME`) and the app.

Each capability adds a module here; the registry discovers them (no list to keep in sync)."""
from interplab.experiments.registry import get_experiment, list_experiments, register_experiment, run_experiment

__all__ = ["register_experiment", "get_experiment", "list_experiments", "run_experiment"]
