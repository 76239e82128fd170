"""The authors' released maps live outside the repository (shared/data/truthprobe_scores beside the project, or
$INTERPLAB_SHARED_DATA); tests that read them skip, saying how to provide them, when they are absent."""
from __future__ import annotations

import pytest

from interplab.core.errors import DataError
from interplab.probes.truth.lineage import released_dir


def _missing_reason() -> str:
    try:
        released_dir()
    except DataError as e:
        return f"released TruthProbe maps not present: {e}"
    return ""


MISSING = _missing_reason()
needs_released = pytest.mark.skipif(bool(MISSING), reason=MISSING)
