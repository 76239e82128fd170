"""Model loading and the LabModel hook layer over TransformerBridge and nnsight.

Attributes are imported lazily so that `load_model` can reject a bad name before torch is imported."""
from interplab.models.checkpoints import validate_checkpoint, verify_checksums
from interplab.models.loading import BACKENDS, load_model, wrap_hf_model

_LAZY = {"LabModel": "interplab.models.lab_model", "Batch": "interplab.models.inputs",
         "Cache": "interplab.models.outputs", "RunOutput": "interplab.models.outputs",
         "GenerateOutput": "interplab.models.outputs", "harvest": "interplab.models.harvest",
         "ActivationStore": "interplab.models.harvest", "InMemoryStore": "interplab.models.harvest",
         "HarvestMismatchError": "interplab.models.harvest"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'interplab.models' has no attribute {name!r}")


__all__ = ["load_model", "wrap_hf_model", "LabModel", "Batch", "Cache", "RunOutput", "GenerateOutput", "BACKENDS",
           "validate_checkpoint", "verify_checksums", "harvest", "ActivationStore", "InMemoryStore",
           "HarvestMismatchError"]
