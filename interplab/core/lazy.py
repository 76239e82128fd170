"""The one lazy-export scheme of interplab's packages: a package names which of its modules defines each public name,
and the name is imported on first access, so `import interplab` (and each subpackage) stays light and importing one
method does not import every other's dependencies."""
from __future__ import annotations

import importlib
from typing import Callable

__all__ = ["LazyExports"]


class LazyExports:
    """name -> defining module of one package.

        _lazy = LazyExports(__name__)
        _lazy.add("pcfg", "pcfg_kl", "parse_probes")       # interplab.probes.pcfg defines both
        __getattr__, __dir__ = _lazy.hooks(globals())
        __all__ = _lazy.names()
    """

    def __init__(self, package: str):
        self.package = package
        self.table: dict[str, str] = {}

    def add(self, module: str, *names: str) -> None:
        """`module` is relative to the package ("pcfg", "decodeshare.subspaces")."""
        for n in names:
            self.table[n] = f"{self.package}.{module}"

    def names(self) -> list[str]:
        return sorted(self.table)

    def hooks(self, module_globals: dict) -> tuple[Callable, Callable]:
        """The package's module-level `__getattr__` and `__dir__`."""
        table, package = self.table, self.package

        def __getattr__(name: str):
            if name in table:
                return getattr(importlib.import_module(table[name]), name)
            raise AttributeError(f"module {package!r} has no attribute {name!r}")

        def __dir__():
            return sorted(set(module_globals) | set(table))

        return __getattr__, __dir__
