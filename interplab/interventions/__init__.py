"""Interventions as explicit `Edit` objects: Steer, Ablate, Patch, and each method's own edits (the SAE edits in
`interventions.sae`, imported on use: they need SAELens). Every edit of the package is defined here."""
from interplab.core.edit import PHASES, Edit, ModelShape, StepContext, broadcast_mask
from interplab.interventions.basic import Ablate, Patch, Steer
from interplab.interventions.block_diagonal import BlockDiagonalAttention
from interplab.interventions.grid import CellPatch, GradProbe, Interpolate
from interplab.interventions.head_gate import HeadGate, RandomHeadGate, truth_gates
from interplab.interventions.heads import HeadAblation, HeadScale
from interplab.interventions.logit_bias import LogitTemperature, StaticLogitBias, SuppressTokens
from interplab.interventions.patchback import SubspacePatchback
from interplab.interventions.projection import SubspaceProjection, first_decode_steps, teacher_forced

__all__ = ["Edit", "StepContext", "ModelShape", "PHASES", "broadcast_mask", "Steer", "Ablate", "Patch",
           "SubspaceProjection", "SubspacePatchback", "teacher_forced", "first_decode_steps", "StaticLogitBias",
           "SuppressTokens", "LogitTemperature", "HeadGate", "RandomHeadGate", "truth_gates", "CellPatch",
           "Interpolate", "GradProbe", "BlockDiagonalAttention", "HeadScale", "HeadAblation"]
