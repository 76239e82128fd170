"""Typed statistic records (issue 26 §3: public functions return typed results, not dicts).

A `Record` is a `dict` subclass whose subclass names what it is and declares its keys: `KEYS` (always present,
documented in the subclass docstring) and `OPTIONAL` (present depending on the arguments). Construction checks the
key set, and `rec.lo` reads `rec["lo"]`. It stays a dict on purpose, so that every existing use is unchanged:
`pd.DataFrame([rec])`, `json.dumps(rec)`, `{**rec}`, `f(**rec)`, `rec["lo"]`, `.get`, equality with a plain dict,
key order (tables keep their columns), and a `Result` saves it as the plain dict it compares equal to."""
from __future__ import annotations

import copyreg

from interplab.core.errors import ShapeError

__all__ = ["Record"]


class Record(dict):
    """Base of the typed statistic records. Subclasses set `KEYS` and optionally `OPTIONAL`."""

    KEYS: tuple[str, ...] = ()
    OPTIONAL: tuple[str, ...] = ()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        missing = [k for k in self.KEYS if k not in self]
        unexpected = [k for k in self if k not in self.KEYS and k not in self.OPTIONAL]
        if missing or unexpected:
            raise ShapeError(f"{type(self).__name__}: missing keys {missing}, unexpected keys {unexpected}; its keys "
                             f"are {list(self.KEYS)}" + (f", optionally {list(self.OPTIONAL)}" if self.OPTIONAL else ""))

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no key or attribute {name!r}; its keys are "
                                 f"{list(self)}") from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.items())})"

    def __reduce__(self):
        # rebuilt item by item (no key check), so a record a caller added keys to still round-trips
        return copyreg.__newobj__, (type(self),), None, None, iter(self.items())
