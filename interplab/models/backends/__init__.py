"""Backends translate canonical sites into their own hook points and run one forward with captures and edits.

Both expose `forward(...)` with the same contract (see `base.Backend`); everything above them (tokenizing,
generation loop, caches) is shared in `interplab.models.lab_model`."""
