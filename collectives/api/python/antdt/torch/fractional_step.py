"""An optimizer step for a result that holds only part of a global batch
(docs/torch.md, "Straggler tools").

Under partial AllReduce a step's result may hold few samples: the last steps of
an epoch, whose data sits on one rank's lease, or a step whose contributions
were dropped. Scaling only the gradient by samples / B (linear scaling) is not
enough with momentum: the momentum buffer still moves the model by a whole
step's worth each time, so a run of ten 9-sample steps at an epoch's end coasts
ten full steps on the last direction (seen: test accuracy 86% -> 80% over the
last steps of antdt-dd runs, while the BSP runs' single short step cost
nothing).

``fractional_step(optimizer, f)`` advances torch.optim.SGD by the fraction f of
a step, as if time ran f as fast: the gradient and the learning rate times f,
the momentum m^f (buffer <- m^f * buffer + f * g; params -= lr * f * buffer).
f = 1 is exactly ``optimizer.step()``; 1/f steps of fraction f move the model
about as far as one full step. Other optimizers get the gradient times f only.
"""

import torch


def fractional_step(optimizer, fraction):
    """One step of ``optimizer`` standing for ``fraction`` (0, 1] of a global batch
    (the gradients in .grad are the mean over the samples the result holds)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fractional_step: fraction {fraction} is outside (0, 1]")
    if fraction == 1:
        optimizer.step()
        return
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(fraction)
    if not isinstance(optimizer, torch.optim.SGD):
        optimizer.step()
        return
    saved = [(group["lr"], group.get("momentum", 0)) for group in optimizer.param_groups]
    try:
        for group, (lr, momentum) in zip(optimizer.param_groups, saved):
            group["lr"] = lr * fraction
            if momentum:
                group["momentum"] = momentum ** fraction
        optimizer.step()
    finally:
        for group, (lr, momentum) in zip(optimizer.param_groups, saved):
            group["lr"] = lr
            if momentum:
                group["momentum"] = momentum
