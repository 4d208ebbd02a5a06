#!/usr/bin/env python3
"""DDP unchanged on the antdt backend: the same model, data and seed trained
with DistributedDataParallel over antdt and over gloo (both groups in one
job); the replicas must be bit-identical across ranks, and antdt's training
must equal gloo's within float tolerance."""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import antdt.torch  # noqa: F401

STEPS = 20


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def train(group, rank):
    model = DDP(make_model(), process_group=group, bucket_cap_mb=0.01)  # several buckets
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(1000 + rank)  # every rank its own data
    losses = []
    for _ in range(STEPS):
        x = torch.randn(16, 32, generator=gen)
        y = (x[:, :10].argmax(1))  # learnable: the largest of the first ten features
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return torch.cat([p.detach().flatten() for p in model.parameters()]), losses


def main():
    dist.init_process_group("antdt", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    antdt_params, antdt_losses = train(None, rank)
    gloo_params, gloo_losses = train(gloo, rank)
    # Bit-identical replicas: every rank's antdt parameters equal rank 0's.
    everyone = [torch.empty_like(antdt_params) for _ in range(world)]
    dist.all_gather(everyone, antdt_params, group=gloo)
    for r, p in enumerate(everyone):
        assert torch.equal(p, everyone[0]), f"rank {r}'s replica differs from rank 0's"
    diff = (antdt_params - gloo_params).abs().max().item()
    assert torch.allclose(antdt_params, gloo_params, rtol=1e-4, atol=1e-5), f"antdt vs gloo: max diff {diff}"
    assert antdt_losses[-1] < antdt_losses[0], f"loss did not fall: {antdt_losses[0]} -> {antdt_losses[-1]}"
    if rank == 0:
        print(f"DDP: {world} ranks, {STEPS} steps: replicas identical, max |antdt - gloo| = {diff:.2e}, "
              f"loss {antdt_losses[0]:.3f} -> {antdt_losses[-1]:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
