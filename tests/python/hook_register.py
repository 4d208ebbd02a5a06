"""PartialAllReduceHook.register on one process (DDP on a 1-rank gloo group, no Agent needed):

- a model with buffers under DDP's default broadcast_buffers=True is refused with an antdt.Error
  (a RuntimeError) naming broadcast_buffers, and nothing is registered; find_unused_parameters=True
  is refused naming it;
- with broadcast_buffers=False, and for a model without buffers, the hook is registered (DDP then
  refuses a second registration, which is how the test sees it).

  hook_register.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import job  # noqa: E402


def registered(ddp):
    """Whether a comm hook is registered on `ddp` (DDP allows only one)."""
    try:
        ddp.register_comm_hook(None, lambda state, bucket: None)
    except RuntimeError as e:
        if "only be called once" in str(e):
            return True
        raise
    return False


def main():
    job.require_torch()
    import torch
    import torch.distributed as dist
    import antdt
    from antdt.torch.hook import PartialAllReduceHook

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{job.free_port()}", rank=0, world_size=1)
    errors = []
    with_buffers = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    # (what DDP runs at every iteration, the model, DDP's options, the word the refusal must name)
    refused = [("a broadcast of the buffers", with_buffers, {}, "broadcast_buffers=False"),
               ("an AllReduce of its used-parameter map", torch.nn.Linear(4, 4), {"find_unused_parameters": True},
                "find_unused_parameters")]
    for what, model, kwargs, word in refused:
        ddp = torch.nn.parallel.DistributedDataParallel(model, **kwargs)
        try:
            PartialAllReduceHook(None).register(ddp)
            errors.append(f"a DDP that runs {what} every iteration was accepted")
        except antdt.Error as e:
            if word not in str(e):
                errors.append(f"the refusal of {what} does not name {word}: {e}")
            elif registered(ddp):
                errors.append(f"the hook refused for {what} was registered anyway")
    for name, model, kwargs in [("buffers, broadcast_buffers=False", with_buffers, {"broadcast_buffers": False}),
                                ("no buffers", torch.nn.Linear(4, 4), {})]:
        ddp = torch.nn.parallel.DistributedDataParallel(model, **kwargs)
        PartialAllReduceHook(None).register(ddp)
        if not registered(ddp):
            errors.append(f"{name}: the hook was not registered")
    dist.destroy_process_group()
    for e in errors:
        print(f"FAIL: {e}", flush=True)
    print("hook_register: " + ("failed" if errors else "refused where DDP syncs every iteration, registered otherwise"), flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
