"""AntDT comm for Python: the Agent (antdt.agent) and, with torch, the
straggler tools (antdt.torch.hook, antdt.torch.sampler). docs/torch.md."""

from antdt.agent import (  # noqa: F401
    late_policy,
    Agent,
    Communicator,
    Error,
    Fate,
    LatePolicy,
    PartialResult,
    ReduceOp,
    SampleBatch,
    StepPlan,
)

__all__ = ["Agent", "Communicator", "Error", "Fate", "LatePolicy", "PartialResult", "ReduceOp", "SampleBatch",
           "StepPlan"]
