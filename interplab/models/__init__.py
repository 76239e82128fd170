"""Model loading and the LabModel hook layer over TransformerBridge and nnsight.

Attributes are imported lazily so that `load_model` can reject a bad name before torch is imported."""
from interplab.models.checkpoints import validate_checkpoint, verify_checksums
from interplab.models.loading import BACKENDS, load_model, wrap_hf_model

from interplab.core.lazy import LazyExports

_lazy = LazyExports(__name__)
_lazy.add("lab_model", "LabModel")
_lazy.add("inputs", "Batch")
_lazy.add("outputs", "Cache", "RunOutput", "GenerateOutput")
_lazy.add("harvest", "harvest", "ActivationStore", "InMemoryStore", "HarvestMismatchError")
__getattr__, __dir__ = _lazy.hooks(globals())


__all__ = ["load_model", "wrap_hf_model", "LabModel", "Batch", "Cache", "RunOutput", "GenerateOutput", "BACKENDS",
           "validate_checkpoint", "verify_checksums", "harvest", "ActivationStore", "InMemoryStore",
           "HarvestMismatchError"]
