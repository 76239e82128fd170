"""Registry of runnable experiments (what `interplab run NAME --set key=value` runs).

A capability adds a module to the `interplab.experiments` package and decorates a function `(cfg, run) -> None`:

    from dataclasses import dataclass
    from interplab.experiments.registry import register_experiment

    @dataclass
    class MyConfig:
        model: str = "zoo:toy-chat"   # model to load
        layer: int = 1                # layer to probe

    @register_experiment("my-probe", config=MyConfig, help="one line shown by `interplab run --list`")
    def my_probe(cfg: MyConfig, run) -> None:
        run.save_table("scores", ...)

Discovery imports every module of the package (except this one), so adding the module is all it takes.
`run_experiment(name, overrides)` builds the config (strings are parsed by each field's type), creates a run
directory with `new_run`, saves the config, calls the function and finishes the run (a crash marks it failed).
"""
from __future__ import annotations

import dataclasses
import enum
import importlib
import json
import os
import pkgutil
import types
import typing
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from interplab.core.errors import ConfigError, InterplabError

__all__ = [
    "Experiment",
    "register_experiment",
    "get_experiment",
    "list_experiments",
    "discover",
    "discovery_errors",
    "build_config",
    "parse_overrides",
    "parse_value",
    "config_fields",
    "run_experiment",
    "resolve_config",
]


@dataclass(frozen=True)
class Experiment:
    """A registered experiment. size: optional `size(cfg, model) -> interplab.core.progress.WorkSize`, the work a run
    with config `cfg` does on a loaded `model` (what the app shows, with an estimate, before launching a job)."""

    name: str
    fn: Callable[[Any, Any], Any]
    config: type
    help: str
    module: str
    size: Callable[[Any, Any], Any] | None = None

    def fields(self) -> list[dict]:
        return config_fields(self.config)


_REGISTRY: dict[str, Experiment] = {}
_DISCOVERED = False
_DISCOVERY_ERRORS: dict[str, str] = {}


def register_experiment(name: str, *, config: type, help: str, size: Callable[[Any, Any], Any] | None = None):
    """Decorator registering `fn(cfg, run)` as experiment `name` with config dataclass `config`; `size(cfg, model)`
    (optional) says how much work a run is (`interplab.core.progress.WorkSize`)."""
    if not isinstance(name, str) or not name or "/" in name or name.startswith((".", "-")):
        raise ConfigError(f"experiment name {name!r} must be a non-empty string without '/' or a leading '.'/'-'")
    if not (isinstance(config, type) and dataclasses.is_dataclass(config)):
        raise ConfigError(f"experiment {name!r}: config must be a dataclass class, got {config!r}")
    missing = [f.name for f in dataclasses.fields(config)
               if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"experiment {name!r}: every config field needs a default so `interplab run {name}` "
                          f"works without --set; missing defaults: {missing}")

    def deco(fn):
        prev = _REGISTRY.get(name)
        if prev is not None and (prev.module, prev.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ConfigError(f"experiment {name!r} is registered twice: {prev.module}.{prev.fn.__qualname__} "
                              f"and {fn.__module__}.{fn.__qualname__}; rename one")
        _REGISTRY[name] = Experiment(name=name, fn=fn, config=config, help=" ".join(str(help).split()),
                                     module=fn.__module__, size=size)
        return fn

    return deco


def discover(force: bool = False) -> dict[str, str]:
    """Import every module of `interplab.experiments` (except the registry), then every method's declared
    `experiment_modules` (a plugged-in method's live outside this package). Returns {module: error} for modules
    that failed to import; they are skipped with a warning so one broken module cannot hide the rest."""
    global _DISCOVERED
    if _DISCOVERED and not force:
        return dict(_DISCOVERY_ERRORS)
    import interplab.experiments as pkg
    from interplab.methods import methods

    names = [i.name for i in pkgutil.iter_modules(pkg.__path__, prefix=pkg.__name__ + ".")
             if not (i.name.rsplit(".", 1)[-1] == "registry" or i.name.rsplit(".", 1)[-1].startswith("_"))]
    names += [m for spec in methods() for m in spec.experiment_modules if m not in names]
    for name in names:
        try:
            importlib.import_module(name)
            _DISCOVERY_ERRORS.pop(name, None)
        except Exception as exc:  # noqa: BLE001 - report, do not crash the CLI
            _DISCOVERY_ERRORS[name] = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"interplab: could not import experiment module {name}: {exc}", RuntimeWarning,
                          stacklevel=2)
    _DISCOVERED = True
    return dict(_DISCOVERY_ERRORS)


def discovery_errors() -> dict[str, str]:
    return dict(_DISCOVERY_ERRORS)


def list_experiments() -> list[Experiment]:
    """Every registered experiment, sorted by name."""
    discover()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def get_experiment(name: str) -> Experiment:
    discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        pass
    import difflib

    names = sorted(_REGISTRY)
    close = difflib.get_close_matches(name, names, n=3)
    msg = f"unknown experiment {name!r}."
    if close:
        msg += f" Did you mean: {', '.join(close)}?"
    msg += f" Available: {', '.join(names) if names else 'none'} (`interplab run --list` describes them)."
    if _DISCOVERY_ERRORS:
        msg += " Some experiment modules failed to import: " + "; ".join(
            f"{m} ({e})" for m, e in sorted(_DISCOVERY_ERRORS.items()))
    raise ConfigError(msg)


# --------------------------------------------------------------------------------------------------- config parsing
def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - fall back to the raw annotations
        return {f.name: f.type for f in dataclasses.fields(cls)}


def _type_name(tp: Any) -> str:
    """`list[float]`, `Optional[int]`, `Literal['a', 'b']`, `Color`: how a field's type reads in messages."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return f"Literal{list(args)}"
    if origin is typing.Union:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 < len(args):
            return f"Optional[{_type_name(rest[0])}]"
    if origin is typing.Union or (hasattr(types, "UnionType") and isinstance(tp, types.UnionType)):
        return " | ".join("None" if a is type(None) else _type_name(a) for a in args)
    if origin is not None and args:
        inner = ", ".join("..." if a is Ellipsis else _type_name(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def config_fields(cls: type) -> list[dict]:
    """[{name, type, default, help}] for a config dataclass (help from `metadata={"help": ...}` when given)."""
    hints = _hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        out.append({"name": f.name, "type": _type_name(hints.get(f.name, f.type)), "default": default,
                    "help": f.metadata.get("help", "") if f.metadata else ""})
    return out


_TRUE = {"1", "true", "yes", "y", "on", "t"}
_FALSE = {"0", "false", "no", "n", "off", "f"}
_NONE = {"none", "null", "~"}


def parse_value(text: Any, tp: Any, *, field: str = "value") -> Any:
    """Parse CLI text `text` as type `tp` (int, float, bool, str, Path, Enum, Literal, Optional/Union,
    list/tuple/set/dict, nested). Lists are comma-separated (`0,0.25`) or JSON (`[0, 0.25]`); non-strings are
    validated and returned. Bad input raises `ConfigError` naming `field` and the expected type."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any or tp is None:
        return text
    if origin is typing.Union or (hasattr(types, "UnionType") and isinstance(tp, types.UnionType)):
        if isinstance(text, str) and text.strip().lower() in _NONE and type(None) in args:
            return None
        if text is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return parse_value(text, a, field=field)
            except ConfigError as e:
                errors.append(_reason(e, field))
        raise ConfigError(f"{field}: cannot parse {text!r} as {_type_name(tp)} ({'; '.join(errors)})")
    if origin is typing.Literal:
        for a in args:
            if text == a or (isinstance(text, str) and str(a) == text):
                return a
        raise ConfigError(f"{field}: {text!r} is not one of {list(args)}")
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple, set, frozenset):
        container = origin or tp
        if isinstance(text, str):
            s = text.strip()
            items = None
            if s.startswith("["):
                try:
                    items = json.loads(s)
                except json.JSONDecodeError:
                    if not s.endswith("]"):
                        raise ConfigError(f"{field}: {text!r} is not a list (expected {_type_name(tp)}, e.g. "
                                          f"--set {field}=a,b,c)") from None
                    s = s[1:-1]  # [a, b] without JSON quotes: read it as a comma-separated list
                if items is not None and not isinstance(items, list):
                    raise ConfigError(f"{field}: {text!r} is not a list (expected {_type_name(tp)})")
            if items is None:
                items = [p.strip() for p in s.split(",") if p.strip()] if s else []
        else:
            items = list(text)
        try:
            if container is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
                if len(items) != len(args):
                    raise ConfigError(f"{field}: expected {len(args)} items for {_type_name(tp)}, got {len(items)}")
                return tuple(parse_value(v, a, field=field) for v, a in zip(items, args))
            elem = args[0] if args else Any
            return container([parse_value(v, elem, field=field) for v in items])
        except ConfigError as e:
            raise ConfigError(f"{field}: expected {_type_name(tp)} (comma-separated, e.g. --set {field}=a,b): "
                              f"{_reason(e, field)}") from None
    if origin is dict or tp is dict:
        if isinstance(text, Mapping):
            return dict(text)
        try:
            val = json.loads(text)
        except (TypeError, json.JSONDecodeError):
            raise ConfigError(f"{field}: {text!r} is not a JSON object") from None
        if not isinstance(val, dict):
            raise ConfigError(f"{field}: {text!r} is not a JSON object")
        return val
    if tp is bool:
        if isinstance(text, bool):
            return text
        s = str(text).strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
        raise ConfigError(f"{field}: {text!r} is not a boolean (use true/false)")
    if tp is int:
        if isinstance(text, bool):
            raise ConfigError(f"{field}: expected an integer, got {text!r}")
        if isinstance(text, int):
            return text
        try:
            return int(str(text).strip())
        except ValueError:
            try:
                f = float(str(text).strip())
            except ValueError:
                f = None
            if f is not None and f.is_integer():
                return int(f)
            raise ConfigError(f"{field}: {text!r} is not an integer") from None
    if tp is float:
        if isinstance(text, (int, float)) and not isinstance(text, bool):
            return float(text)
        try:
            return float(str(text).strip())
        except ValueError:
            raise ConfigError(f"{field}: {text!r} is not a number") from None
    if tp is str:
        return str(text)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if isinstance(text, tp):
            return text
        for m in tp:
            if str(text) in (m.name, str(m.value)):
                return m
        for m in tp:
            if str(text).casefold() in (m.name.casefold(), str(m.value).casefold()):
                return m
        raise ConfigError(f"{field}: {text!r} is not one of {[m.name for m in tp]} (a {tp.__name__} name or value)")
    if isinstance(tp, type) and issubclass(tp, os.PathLike) or tp is Path:
        return Path(str(text)).expanduser()
    if isinstance(tp, type):
        if isinstance(text, tp):
            return text
        try:
            return tp(text)
        except Exception as exc:  # noqa: BLE001
            raise ConfigError(f"{field}: cannot make a {tp.__name__} from {text!r} ({exc})") from None
    return text


def _reason(e: ConfigError, field: str) -> str:
    """An inner parse error without its "field: " prefix, for an outer message that names the field once."""
    msg = str(e)
    return msg[len(field) + 2:] if msg.startswith(f"{field}: ") else msg


def parse_overrides(items) -> dict[str, str]:
    """['k=v', ...] -> {'k': 'v'} (values stay strings; `build_config` types them)."""
    out: dict[str, str] = {}
    for item in items or ():
        if "=" not in item:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        k = k.strip()
        if not k:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        out[k.replace("-", "_")] = v
    return out


def build_config(cls: type, overrides: Mapping[str, Any] | None = None):
    """An instance of config dataclass `cls` with `overrides` applied (strings parsed by field type)."""
    overrides = dict(overrides or {})
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in overrides if k not in names]
    if unknown:
        listing = ", ".join(f"{d['name']} ({d['type']}, default {d['default']!r})" for d in config_fields(cls))
        raise ConfigError(f"unknown config key(s) {unknown} for {cls.__name__}; valid keys: {listing}")
    kwargs = {k: parse_value(v, hints.get(k, Any), field=k) for k, v in overrides.items()}
    try:
        return cls(**kwargs)
    except InterplabError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid {cls.__name__}: {exc}") from None


THREADS = "threads"


def _check_threads(n: Any) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(f"threads must be a whole number >= 1 (torch CPU threads for the run), got {n!r}")
    return n


def model_defaults(name: str, overrides: Mapping[str, Any]) -> dict[str, str]:
    """The settings experiment `name` takes by default for the model the overrides name (its method's
    `MethodSpec.model_defaults`, e.g. the world-facts data for `model=real:smollm2-135m-instruct`); the user's own
    overrides always win."""
    from interplab.methods import method_of_experiment

    spec = method_of_experiment(name)
    return spec.defaults_for(name, overrides) if spec is not None else {}


def resolve_config(name: str, overrides: Mapping[str, Any] | None = None):
    """(experiment, config, threads, model-family defaults applied) for a run of `name` with `overrides`: what
    `run_experiment` runs, built without running it (a page sizes a job with it before launching; a bad --set fails
    here, in the caller's process)."""
    exp = get_experiment(name)
    overrides = dict(overrides or {})
    family = model_defaults(name, overrides)
    overrides = {**family, **overrides}
    if THREADS in {f.name for f in dataclasses.fields(exp.config)}:
        cfg = build_config(exp.config, overrides)
        threads = _check_threads(getattr(cfg, THREADS))
    else:
        threads = _check_threads(parse_value(overrides.pop(THREADS, 1), int, field=THREADS))
        cfg = build_config(exp.config, overrides)
    return exp, cfg, threads, family


def run_experiment(name: str, overrides: Mapping[str, Any] | None = None, root=None, *, run_name: str | None = None,
                   progress: Callable[[str], None] | None = None) -> Path:
    """Build the config, run experiment `name` in a fresh run directory and return the finished run's path.

    Every experiment takes a `threads` setting (torch CPU threads): the config's own field where it has one, else
    a runner-level `--set threads=N`; the default is 1, because a second thread per process oversubscribes a loaded
    2-core machine (issue 25 section 4).
    The count is restored afterwards and recorded in the run's manifest under `runner`, with the model-family
    defaults that were applied (`model_defaults`)."""
    import torch

    from interplab.core import progress as progress_protocol
    from interplab.results.runs import new_run

    exp, cfg, threads, family = resolve_config(name, overrides)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        runner = {THREADS: threads, **({"model_defaults": family} if family else {})}
        with new_run(name, cfg, root=root, name=run_name, runner=runner) as run:
            if progress:
                progress(f"running {name} into {run.path}")
            with progress_protocol.reporting_to(run.report_progress):  # loops below report into progress.json
                exp.fn(cfg, run)
    finally:
        torch.set_num_threads(before)
    return run.path
