"""Quiet by default: third-party progress bars (transformers' "Loading weights", "Writing model shards") are shown
only when asked for, with `verbose=True` or the environment variable INTERPLAB_VERBOSE=1."""
from __future__ import annotations

import contextlib
import os


def verbose_default() -> bool:
    return os.environ.get("INTERPLAB_VERBOSE", "").strip().lower() in ("1", "true", "yes")


@contextlib.contextmanager
def hf_progress(verbose: bool | None = None):
    """Within the block, transformers' tqdm bars are on only if `verbose` (default: INTERPLAB_VERBOSE); the previous
    setting is restored afterwards, so a user's own `enable_progress_bar()` outside interplab is untouched."""
    verbose = verbose_default() if verbose is None else verbose
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # nothing to silence
        yield
        return
    was = hf_logging.is_progress_bar_enabled()
    (hf_logging.enable_progress_bar if verbose else hf_logging.disable_progress_bar)()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()
