"""The call pipeline as stages: prepare (parse, validate, present), policy, confirmation,
cache, execute (in process or in the sandbox, chosen in one place), result and step record.
``invoke_tool`` is the pipeline with no stages; ``ToolSession`` adds them."""

from workspace_tools.session._checkpoints import ChangedFile, Checkpoints, RestoreResult
from workspace_tools.session._undo import CheckpointedCalls

__all__ = ["ChangedFile", "CheckpointedCalls", "Checkpoints", "RestoreResult"]
