"""Probe results made of DataFrames plus an info dict, saved as one CSV per table and a JSON (a run sub-folder)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

from interplab.core.errors import ResultsError


class TableResult:
    """Mixin for result dataclasses: `TABLES` maps each DataFrame field to its CSV file (the first one marks that a
    folder holds this result), `INFO_FILE` names the JSON that stores the `info` field."""

    TABLES: ClassVar[dict[str, str]] = {}
    INFO_FILE: ClassVar[str] = "info.json"

    def save(self, path) -> Path:
        from interplab.core.io import write_json

        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        for attr, fname in self.TABLES.items():
            getattr(self, attr).to_csv(p / fname, index=False)
        write_json(p / self.INFO_FILE, self.info)
        return p

    @classmethod
    def load(cls, path):
        import pandas as pd

        p = Path(path)
        first = next(iter(cls.TABLES.values()))
        if not (p / first).exists():
            raise ResultsError(f"{p} holds no {cls.__name__} ({first} missing); save one with .save(dir)")
        tables = {attr: pd.read_csv(p / fname) for attr, fname in cls.TABLES.items()}
        return cls(**tables, info=json.loads((p / cls.INFO_FILE).read_text()))
