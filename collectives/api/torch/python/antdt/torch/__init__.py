"""antdt for PyTorch: ``import antdt.torch`` registers the ``"antdt"`` backend of
``torch.distributed`` (docs/torch.md).

    import antdt.torch
    torch.distributed.init_process_group("antdt")   # env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
"""
import torch.distributed as _dist

from . import _C  # needs torch.distributed's types (ProcessGroup, Store) loaded first
from ._C import ProcessGroupAntdt

BACKEND = "antdt"


def _create_process_group(store, rank, world_size, timeout):
    return _C._create_process_group(store, rank, world_size, timeout)


# register_backend refuses a second registration (a re-imported module).
if not hasattr(_dist.Backend, BACKEND.upper()):
    _dist.Backend.register_backend(BACKEND, _create_process_group)

# The straggler tools for DDP users (built from collectives/api/python/).
from .hook import PartialAllReduceHook  # noqa: E402
from .sampler import DdsBatchSampler  # noqa: E402
from .fractional_step import fractional_step  # noqa: E402

__all__ = ["BACKEND", "ProcessGroupAntdt", "PartialAllReduceHook", "DdsBatchSampler", "fractional_step"]
