"""One declaration per method: the `MethodSpec` that the CLI, the app (Home, navigation, data boxes, the Runs page's
hand-over), `interplab.testing`'s smoke runs, the atlas and the app tests iterate over (issue 26 §1).

A spec is plain data: names, file paths relative to the project, and dotted references ("package.module:attr") to
code in higher layers, which only the layer that needs them resolves. So this package sits just above `core` and
everything above it may read it. The built-in methods are the modules of this package (`truth`, `decodeshare`,
`crh`, `pcfg`, `hyperfit`, `sae`); a method outside interplab plugs in by naming its module in the environment
variable INTERPLAB_METHODS (comma-separated importable modules) or in the `interplab.methods` entry-point group.
Each such module holds `METHOD = MethodSpec(...)`, which discovery registers (`register_method` does the same by
hand). A plug-in's experiments register when its `experiment_modules` are imported.

    >>> from interplab.methods import methods, get_method
    >>> [m.name for m in methods()]
    ['truth', 'decodeshare', 'crh', 'pcfg', 'hyperfit', 'sae']
    >>> get_method("truth").data.columns
    ('text', 'label')
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

from interplab.core.errors import ConfigError

__all__ = ["MethodSpec", "PageSpec", "DataSpec", "register_method", "methods", "get_method", "method_of_experiment",
           "method_pages", "page_order", "resolve", "reset", "PLUGIN_ENV", "ENTRY_POINT_GROUP"]

PLUGIN_ENV = "INTERPLAB_METHODS"
ENTRY_POINT_GROUP = "interplab.methods"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_REF = re.compile(r"^[A-Za-z_][\w.]*(:[A-Za-z_]\w*)?$")


@dataclass(frozen=True)
class PageSpec:
    """One app page of a method.

    file: the page script, relative to `interplab/app` (e.g. "pages/2_Truth_Scores.py") or an absolute path (a
        plug-in's own page); its number prefix orders the sidebar. title / summary: the sidebar and Home entry.
    first_button: the label of the button a newcomer presses first (the screenshot walk presses it), or "".
    buttons: widget keys of the buttons the page offers with its defaults (the every-button test expects them).
    reopens: run-kind prefixes this page shows when a run is reopened from the Runs page."""

    file: str
    title: str
    summary: str
    first_button: str = ""
    buttons: tuple[str, ...] = ()
    reopens: tuple[str, ...] = ()

    @property
    def url_path(self) -> str:
        """The page's URL path, as Streamlit derives it from the file name (number prefix dropped)."""
        stem = os.path.splitext(os.path.basename(self.file))[0]
        return re.sub(r"^\d+_", "", stem)


@dataclass(frozen=True)
class DataSpec:
    """A method's user file (docs/data.md): required and optional columns, and the experiment the page's data box
    runs on it (`--set data=PATH`)."""

    columns: tuple[str, ...]
    optional: tuple[str, ...] = ()
    experiment: str = ""
    describe: str = ""  # a custom one-line description of the required columns ("" = the column list)


@dataclass(frozen=True)
class MethodSpec:
    """Everything the layers need to know about one method, in one place.

    name: the method's one spelling (lower-case identifier): data files, the atlas, the CLI and the app key by it.
    title: display name. summary: one sentence for the CLI listing.
    package: the method's API package (dotted). experiment_modules: modules whose import registers its experiments.
    experiments: the experiment names it registers. figures: its figures module. pages: its app pages.
    doc / tests: its docs page and test folder, relative to the project root.
    data: its user file (None: the method takes no user data, e.g. PCFG). smoke: experiment -> `key=value`
        templates ({m}, {dtype}, {device}) of its minimal run on any checkpoint (the real-size test, gpu_check).
    atlas: dotted reference to its atlas contribution, or "".
    elsewhere: the method's modules that the layer rule places outside its package (docs/architecture.md): edits in
        `interventions`, training in `train`, organisms and their recipes in `zoo`, its data builders and adapters in
        `data`, grammars in `grammar`. A test checks that each exists and that none is claimed twice.
    validation_organism: dotted reference to `build(path) -> Path`, the builder of its validation organism (a
        checkpoint with the mechanism planted by construction, `interplab.zoo.validation`), or ""; validation_label:
        what is planted, in a few words (the atlas page's choice).
    model_defaults: experiment -> {"field=value" condition -> `key=value` settings}: the documented run of an
        experiment on a model family (e.g. {"truth-scores": {"model=real:smollm2-135m-instruct":
        ("data=world-facts", ...)}}). The runner applies them when the run's setting equals the condition, under
        the user's own settings (`defaults_for`), and records them in the run's manifest.
    """

    name: str
    title: str
    summary: str
    package: str
    experiment_modules: tuple[str, ...]
    experiments: tuple[str, ...]
    figures: str
    pages: tuple[PageSpec, ...]
    doc: str
    tests: str
    data: DataSpec | None = None
    smoke: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    atlas: str = ""
    elsewhere: tuple[str, ...] = ()
    validation_organism: str = ""
    validation_label: str = ""
    model_defaults: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)

    def defaults_for(self, experiment: str, settings: Mapping[str, Any]) -> dict[str, str]:
        """The model-family defaults of `experiment` whose condition `settings` meet ({key: value} strings), minus
        the keys `settings` already sets."""
        out: dict[str, str] = {}
        for cond, extra in self.model_defaults.get(experiment, {}).items():
            key, _, value = cond.partition("=")
            if str(settings.get(key, "")).strip() == value:
                for kv in extra:
                    k, _, v = kv.partition("=")
                    if k not in settings:
                        out.setdefault(k, v)
        return out

    def validate(self) -> "MethodSpec":
        if not _NAME.match(self.name):
            raise ConfigError(f"method name {self.name!r} must be a lower-case identifier (letters, digits, _): it "
                              "is the one spelling every layer keys by")
        for ref in (self.package, self.figures, *self.experiment_modules, *([self.atlas] if self.atlas else []),
                    *self.elsewhere, *([self.validation_organism] if self.validation_organism else [])):
            if not _REF.match(ref):
                raise ConfigError(f"method {self.name!r}: {ref!r} is not a dotted module reference")
        if not self.experiments or not self.pages:
            raise ConfigError(f"method {self.name!r} must declare at least one experiment and one page")
        if self.data is not None and self.data.experiment and self.data.experiment not in self.experiments:
            raise ConfigError(f"method {self.name!r}: its data experiment {self.data.experiment!r} is not one of its "
                              f"experiments {list(self.experiments)}")
        unknown = set(self.smoke) - set(self.experiments)
        bad = [f"{e}: {c} -> {kv}" for e, conds in self.model_defaults.items() for c, kvs in conds.items()
               for kv in (c, *kvs) if "=" not in kv or not kv.partition("=")[0]]
        if set(self.model_defaults) - set(self.experiments) or bad:
            raise ConfigError(f"method {self.name!r}: model_defaults must map its own experiments to "
                              f"{{'field=value': ('key=value', ...)}}; unknown experiments "
                              f"{sorted(set(self.model_defaults) - set(self.experiments))}, malformed {bad}")
        if unknown:
            raise ConfigError(f"method {self.name!r}: smoke settings for experiments it does not declare: "
                              f"{sorted(unknown)}")
        return self


_SPECS: dict[str, MethodSpec] = {}
_LOCK = threading.RLock()
_DISCOVERED = False


def register_method(spec: MethodSpec) -> MethodSpec:
    """Add a method. Registering a second, different spec under a taken name raises ConfigError (re-registering the
    same spec, e.g. a module imported twice, is a no-op)."""
    spec.validate()
    with _LOCK:
        old = _SPECS.get(spec.name)
        if old is not None and old != spec:
            raise ConfigError(f"method {spec.name!r} is already registered (by {old.package}); pick another name")
        _SPECS[spec.name] = spec
    return spec


def _plugin_modules() -> list[str]:
    mods = [m.strip() for m in os.environ.get(PLUGIN_ENV, "").split(",") if m.strip()]
    try:
        from importlib.metadata import entry_points

        mods += [ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)]
    except Exception:  # noqa: BLE001 - broken distribution metadata must not take the built-ins down
        pass
    return mods


def _discover() -> None:
    global _DISCOVERED
    with _LOCK:
        if _DISCOVERED:
            return
        _DISCOVERED = True
        mods = [f"{__name__}.{i.name}" for i in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name)
                if not i.name.startswith("_")]
        for mod in mods + _plugin_modules():
            try:
                module = importlib.import_module(mod)
            except ImportError as exc:
                raise ConfigError(f"{PLUGIN_ENV} names the method module {mod!r}, which cannot be imported ({exc}); "
                                  "fix the name or put its folder on PYTHONPATH") from None
            spec = getattr(module, "METHOD", None)
            if isinstance(spec, MethodSpec):
                register_method(spec)


def methods() -> list[MethodSpec]:
    """Every registered method: the built-ins in the order of their first page, then plug-ins in the same way."""
    _discover()
    return sorted(_SPECS.values(), key=lambda s: (page_order(s.pages[0]), s.name))


def get_method(name: str) -> MethodSpec:
    _discover()
    try:
        return _SPECS[name]
    except KeyError:
        raise ConfigError(f"unknown method {name!r}; known: {[s.name for s in methods()]}") from None


def method_of_experiment(experiment: str) -> MethodSpec | None:
    """The method that declares `experiment`, or None (the lenses, the atlas, next-token)."""
    return next((s for s in methods() if experiment in s.experiments), None)


def method_pages() -> list[tuple[MethodSpec, PageSpec]]:
    """Every method page, in sidebar order."""
    return sorted(((s, p) for s in methods() for p in s.pages), key=lambda sp: (page_order(sp[1]), sp[1].file))


def page_order(page: PageSpec) -> int:
    """A page's place in the sidebar: its file's number prefix (unnumbered pages, e.g. a plug-in's, go last)."""
    m = re.match(r"^(\d+)_", os.path.basename(page.file))
    return int(m.group(1)) if m else 10_000


def resolve(ref: str):
    """Import a dotted reference "package.module:attr" (or a module). The caller's layer must be allowed to import
    what it names: the spec itself never does."""
    mod, _, attr = ref.partition(":")
    obj = importlib.import_module(mod)
    return getattr(obj, attr) if attr else obj


def reset() -> None:
    """Forget plug-ins (tests): the next call rediscovers the built-ins and whatever INTERPLAB_METHODS names now."""
    global _DISCOVERED
    with _LOCK:
        _SPECS.clear()
        _DISCOVERED = False
