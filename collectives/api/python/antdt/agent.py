"""The Agent API (include/antdt/agent.hpp) in Python.

Every rank of a job holds one Agent. It owns the rank's Communicator and talks to
the job's coordinator (DDS, Monitor, Controller with the ANTDT_POLICY policy)::

    agent = antdt.Agent.from_env(dataset_size=60000, epochs=2, global_batch=128)
    while True:
        plan = agent.next_step()
        if agent.should_exit():
            sys.exit(agent.exit_code)          # ordered to restart (antdt-run starts us again)
        if plan.stop:
            break
        comm = agent.communicator()            # rebuilt first when plan.rebuild
        batch = agent.next_samples()           # up to plan.local_batch sample ids
        ...
        agent.report_step(compute_s=t, samples=len(batch), fate=fate)
        agent.settle(fate)                     # or agent.commit()

Buffers passed to the Communicator are numpy arrays or torch tensors
(contiguous, of a supported dtype; refused with a clear error otherwise).
Errors are antdt.Error (a RuntimeError) with a .status naming the cause.
"""

from antdt._agent import (  # noqa: F401
    Agent,
    Communicator,
    Error,
    Fate,
    LatePolicy,
    PartialResult,
    ReduceOp,
    SampleBatch,
    StepPlan,
    StragglerClass,
)

LATE_POLICIES = {"wait": LatePolicy.wait, "drop": LatePolicy.drop, "defer": LatePolicy.defer}


def late_policy(name):
    """LatePolicy from its name ('wait', 'drop', 'defer'), for command lines."""
    try:
        return LATE_POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown late policy {name!r} (expected one of {', '.join(LATE_POLICIES)})") from None
