"""Typed errors. Every interplab failure a user can cause is an `InterplabError` subclass whose message says
what is wrong and what to do about it, so callers can catch one base class and users never read library internals."""
from __future__ import annotations


class InterplabError(Exception):
    """Base class of every error interplab raises on purpose."""


class ModelNotFoundError(InterplabError):
    """A model name, zoo name or path could not be resolved to a checkpoint."""


class CheckpointError(InterplabError):
    """A checkpoint directory exists but is incomplete or corrupt (missing/unreadable weights, bad config)."""


class SiteError(InterplabError, KeyError):
    """An activation site name or layer index is not valid for this model."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


class InputError(InterplabError, ValueError):
    """Bad user input: empty prompt, prompt longer than the context, wrong type."""


class ShapeError(InterplabError, ValueError):
    """An array has the wrong shape for the model or for another array it must match."""


class DataError(InterplabError, ValueError):
    """A dataset or result file is malformed or inconsistent."""


class ConfigError(InterplabError, ValueError):
    """A configuration value is out of range or inconsistent."""


class MissingDependencyError(InterplabError, ImportError):
    """An optional dependency or system tool (e.g. Chromium for static figure export) is not installed."""


class ResultsError(InterplabError):
    """A run directory is missing, incomplete or would be overwritten."""


class RemoteError(InterplabError):
    """Something cannot run on a remote engine (nnsight `remote=True` / `remote="local"`): gradients, an edit that
    cannot be shipped as plain torch operations, or an option the remote path does not support."""


class ChatTemplateNotice(UserWarning):
    """A plain string became a user turn of the model's chat template (its default for chat models): shown once
    per model, naming the template's text around the turn (e.g. a default system prompt). `out.prompts` shows
    what every row became; pass chat=False for raw text."""


class UnknownTokenWarning(UserWarning):
    """A prompt contains text the tokenizer maps to its unknown token (e.g. `<unk>`): the model sees a token it was
    never trained to read. The message names the unknown pieces."""
