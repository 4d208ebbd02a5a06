#!/usr/bin/python3
"""A small CNN on Fashion-MNIST, data-parallel, one process per rank (docs/torch.md).

Started by tools/fashion_mnist_demo.sh (or any launcher that sets ANTDT_RANK /
ANTDT_WORLD_SIZE or RANK / WORLD_SIZE, MASTER_ADDR and MASTER_PORT):

  --mode ddp    plain DDP (the default allreduce hook) with a DistributedSampler:
                what a PyTorch user has today;
  --mode antdt  the Agent (ANTDT_POLICY: bsp, antdt-dd, antdt-nd) drives the steps:
                local batches and micro-batches from the plan, sample ids from the
                DDS (DdsBatchSampler), the gradient exchange by PartialAllReduceHook,
                restarts under antdt-run --restarts.

--slow-cgroup DIR puts rank --slow-rank (first incarnation only: a restarted
rank runs on a "healthy node") into that cgroup v1 cpu group; the driver sets
its quota. Rank 0 keeps a copy of the model every --snapshot-every steps with
its wall time and, after training, writes DIR/curve.json (test accuracy over
time) and DIR/summary.json; every rank writes DIR/steps.rank<r>.<inc>.jsonl.
--min-accuracy A exits 3 unless the final test accuracy reaches A (tests).
"""

import argparse
import contextlib
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

DATA_DIR = "/usr/share/datasets/fashion-mnist"
CURVE_TEST_SAMPLES = 2000  # test images per point of the accuracy curve (the final figure uses all 10 000)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).sub_(0.2860).div_(0.3530).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def accuracy(model, x, y):
    with torch.no_grad():
        correct = 0
        for i in range(0, len(x), 1000):
            correct += (model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum().item()
    return correct / len(x)


def env_int(*names, default=None):
    for n in names:
        if os.environ.get(n):
            return int(os.environ[n])
    if default is None:
        sys.exit(f"train_fashion_mnist: none of {', '.join(names)} is set (start the ranks with antdt-run)")
    return default


class Run:
    """What every mode shares: data, model, optimizer, logs, snapshots."""

    def __init__(self, args):
        self.args = args
        self.rank = env_int("RANK", "ANTDT_RANK")
        self.world = env_int("WORLD_SIZE", "ANTDT_WORLD_SIZE")
        self.incarnation = env_int("ANTDT_INCARNATION", default=0)
        os.makedirs(args.out, exist_ok=True)
        if args.slow_cgroup and self.rank == args.slow_rank and self.incarnation == 0:
            with open(os.path.join(args.slow_cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        torch.manual_seed(args.seed)
        self.x, self.y = load(args.data, "train")
        if args.train_samples:
            self.x, self.y = self.x[:args.train_samples], self.y[:args.train_samples]
        self.model = Net()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=args.lr, momentum=0.9)
        self.log = open(os.path.join(args.out, f"steps.rank{self.rank}.{self.incarnation}.jsonl"), "w")
        self.snapshots = []
        self.last_snapshot = 0
        self.samples_applied = 0.0
        self.start = None

    def clock(self):
        return time.time() - self.start

    def snapshot(self, step):
        """A copy of the model when the applied results crossed a multiple of --snapshot-every."""
        every = self.args.snapshot_every
        if self.rank == 0 and step // every > self.last_snapshot // every:
            self.last_snapshot = step
            self.snapshots.append((self.clock(), step, self.samples_applied,
                                   {k: v.clone() for k, v in self.model.state_dict().items()}))

    def record(self, **fields):
        self.log.write(json.dumps(fields) + "\n")

    def finish(self, wall_s, steps, extra=None):
        self.log.close()
        if self.rank != 0:
            return 0
        tx, ty = load(self.args.data, "test")
        curve = []
        for t, step, samples, state in self.snapshots:
            self.model.load_state_dict(state)
            curve.append({"t": t, "step": step, "samples": samples,
                          "accuracy": accuracy(self.model, tx[:CURVE_TEST_SAMPLES], ty[:CURVE_TEST_SAMPLES])})
        self.model.load_state_dict(self.final_state)
        final = accuracy(self.model, tx, ty)
        curve.append({"t": wall_s, "step": steps, "samples": self.samples_applied,
                      "accuracy": accuracy(self.model, tx[:CURVE_TEST_SAMPLES], ty[:CURVE_TEST_SAMPLES])})
        summary = {"label": self.args.label, "mode": self.args.mode, "policy": os.environ.get("ANTDT_POLICY", ""),
                   "ranks": self.world, "wall_s": wall_s, "steps": steps, "samples": self.samples_applied,
                   "final_accuracy": final, **(extra or {})}
        with open(os.path.join(self.args.out, "curve.json"), "w") as f:
            json.dump(curve, f)
        with open(os.path.join(self.args.out, "summary.json"), "w") as f:
            json.dump(summary, f)
        print(f"train_fashion_mnist: {self.args.label}: {steps} steps, {wall_s:.1f} s, "
              f"{self.samples_applied / wall_s:.0f} samples/s, test accuracy {100 * final:.2f}%", flush=True)
        if self.args.min_accuracy and final < self.args.min_accuracy:
            print(f"train_fashion_mnist: test accuracy {100 * final:.2f}% is below the required "
                  f"{100 * self.args.min_accuracy:.2f}%", file=sys.stderr)
            return 3
        return 0

    def progress(self, step, total=None):
        if self.rank == 0 and step % self.args.progress_every == 0:
            of = f"/{total}" if total else ""
            print(f"  [{self.args.label}] step {step}{of}  {self.clock():6.1f} s  "
                  f"{self.samples_applied / max(self.clock(), 1e-9):7.0f} samples/s", flush=True)


def init_process_group(args, run, generation=0):
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get("MASTER_PORT", "29500")) + generation
    dist.init_process_group(args.backend, init_method=f"tcp://{addr}:{port}", rank=run.rank,
                            world_size=run.world)


def train_ddp(args):
    """Plain DDP: a fixed B/n per rank, every step waits for every rank."""
    run = Run(args)
    init_process_group(args, run)
    ddp = nn.parallel.DistributedDataParallel(run.model)
    sampler = torch.utils.data.distributed.DistributedSampler(range(len(run.x)), num_replicas=run.world,
                                                              rank=run.rank, shuffle=True, seed=args.seed)
    local = args.global_batch // run.world
    steps_per_epoch = len(sampler) // local
    dist.barrier()
    run.start = time.time()
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        ids = torch.tensor(list(sampler))
        for k in range(steps_per_epoch):
            t0 = time.time()
            batch = ids[k * local:(k + 1) * local]
            loss = F.cross_entropy(ddp(run.x[batch]), run.y[batch])
            run.opt.zero_grad()
            loss.backward()
            run.opt.step()
            step += 1
            run.samples_applied += local * run.world
            run.record(step=step, t=run.clock(), step_s=time.time() - t0, local_batch=local)
            run.snapshot(step)
            run.progress(step, steps_per_epoch * args.epochs)
    wall = run.clock()
    run.final_state = {k: v.clone() for k, v in run.model.state_dict().items()}
    dist.destroy_process_group()
    return run.finish(wall, step)


def train_antdt(args):
    """The Agent drives the steps: plan, DDS samples, partial exchange, restarts."""
    import antdt
    from antdt.torch.fractional_step import fractional_step
    from antdt.torch.hook import PartialAllReduceHook
    from antdt.torch.sampler import DdsBatchSampler

    os.environ.setdefault("ANTDT_RESULT_CACHE", "64")  # a slow rank falls several steps behind under drop/defer
    run = Run(args)
    agent = antdt.Agent.from_env(dataset_size=len(run.x), epochs=args.epochs, shard_size=args.shard_size,
                                 global_batch=args.global_batch)
    hook = PartialAllReduceHook(agent)
    sampler = DdsBatchSampler(agent)

    def wrap(generation):
        init_process_group(args, run, generation)
        ddp = nn.parallel.DistributedDataParallel(run.model, bucket_cap_mb=64)
        hook.register(ddp)
        return ddp

    def resync():
        # After a rebuild the lowest rank that was not restarted sends the model, the
        # optimizer's momentum and how far it applied results.
        comm = agent.communicator()
        fresh = run.incarnation > 0 and not resync.done
        source = torch.tensor([run.world if fresh else run.rank], dtype=torch.int32)
        comm.allreduce(source, source, antdt.ReduceOp.min)
        src = int(source)
        with torch.no_grad():
            for p in run.model.parameters():
                state = run.opt.state[p]
                if state.get("momentum_buffer") is None:
                    state["momentum_buffer"] = torch.zeros_like(p)
                comm.broadcast(p.data, src)
                comm.broadcast(state["momentum_buffer"], src)
        progress = torch.tensor([hook.done_through, run.samples_applied], dtype=torch.float64)
        comm.broadcast(progress, src)
        hook.done_through, run.samples_applied = int(progress[0]), float(progress[1])
        resync.done = True
    resync.done = False

    def grad_scale(samples):
        return min(1.0, samples / args.global_batch)

    ddp = wrap(agent.generation) if not agent.rebuild_needed() else None
    agent.communicator().barrier() if ddp is not None else None
    run.start = time.time()
    step = 0
    idle_s = 0.01
    while True:
        t0 = time.time()
        plan = agent.next_step()
        t_plan = time.time()
        if agent.should_exit():
            hook.leave_generation()
            run.record(step=plan.step, t=run.clock(), restart=True)
            run.log.close()
            print(f"train_fashion_mnist: rank {run.rank} ordered to restart at step {plan.step}", flush=True)
            dist.destroy_process_group()
            agent.close()
            return agent.exit_code
        if plan.stop:
            hook.leave_generation()
            step = plan.step - 1
            break
        if hook.already_applied(plan):
            continue
        if plan.rebuild or ddp is None:
            if ddp is not None:
                hook.leave_generation()
            agent.communicator()
            resync()
            if dist.is_initialized():
                dist.destroy_process_group()
            ddp = wrap(plan.generation)
        ids = sampler.fetch()
        t_fetch = time.time()
        hook.begin_step(plan, len(ids))
        exchange_before = hook_time.total
        c0 = time.time()
        if not ids:
            # No data now (the epoch's rest is leased to others): wait as a loader would.
            time.sleep(idle_s)
        # An empty batch runs DDP too (0 samples, weight 0): DDP counts its iterations and
        # syncs its buckets over the process group at the second one, so every rank runs each.
        batch = torch.tensor(ids, dtype=torch.int64)
        per_pass = plan.micro_batch or max(len(ids), 1)
        chunks = [batch[i:i + per_pass] for i in range(0, len(ids), per_pass)] or [batch]
        for k, chunk in enumerate(chunks):
            # Gradient accumulation: DDP (and the hook) exchange at the last pass only.
            ctx = ddp.no_sync() if k + 1 < len(chunks) else contextlib.nullcontext()
            with ctx:
                loss = F.cross_entropy(ddp(run.x[chunk]), run.y[chunk], reduction="sum") / max(len(ids), 1)
                loss.backward()
        exchange_s = hook_time.total - exchange_before  # inside the hook, during backward
        t_comp = time.time()
        compute_s = t_comp - c0 - exchange_s
        if ids:
            idle_s = min(max(compute_s, 0.002), 0.2)
        # Each result is the exact weighted average of the gradients it holds; its step is
        # the fraction samples / B of a step (a step of a few samples, near an epoch's end or
        # with contributions dropped, moves the model as little as it should, momentum included).
        if hook.last_count > 0:
            fractional_step(run.opt, grad_scale(hook.last_count))
            run.samples_applied += hook.last_count
        for grad, count in hook.missed:
            run.samples_applied += count
        hook.apply_missed(run.opt, grad_scale)
        run.opt.zero_grad(set_to_none=False)
        agent.report_step(compute_s=compute_s, samples=len(ids), fate=hook.last_fate,
                          transfer_s=exchange_s)
        sampler.settle(hook.last_fate)
        run.record(step=plan.step, t=run.clock(), step_s=time.time() - t0, compute_s=compute_s,
                   local_batch=len(ids), planned_batch=plan.local_batch, micro_batches=plan.micro_batches,
                   fate=hook.last_fate.name, late=plan.late.name, plan_s=t_plan - t0, fetch_s=t_fetch - t_plan,
                   xfer_s=exchange_s, post_s=time.time() - t_comp)
        run.snapshot(hook.done_through)
        run.progress(plan.step)
    wall = run.clock()
    run.final_state = {k: v.clone() for k, v in run.model.state_dict().items()}
    # Every replica must hold the same model (the hook's invariant).
    flat = torch.cat([p.detach().reshape(-1) for p in run.model.parameters()])
    low, high = flat.clone(), flat.clone()
    comm = agent.communicator()
    comm.allreduce(low, low, antdt.ReduceOp.min)
    comm.allreduce(high, high, antdt.ReduceOp.max)
    identical = bool(torch.equal(low, high))
    counts = torch.tensor([sampler.committed, sampler.given_back], dtype=torch.float64)
    comm.allreduce(counts, counts, antdt.ReduceOp.sum)
    dist.destroy_process_group()
    agent.close()
    if not identical:
        print(f"train_fashion_mnist: rank {run.rank}: the replicas differ", file=sys.stderr)
    code = run.finish(wall, step, {"replicas_identical": identical, "committed": float(counts[0]),
                                   "given_back": float(counts[1]), "hook": hook.counts})
    return code if identical else 4


class hook_time:
    """Seconds spent in the gradient exchange (patched around the hook's exchange)."""
    total = 0.0


def timed_exchange(original):
    def exchange(self, flat):
        t = time.time()
        try:
            return original(self, flat)
        finally:
            hook_time.total += time.time() - t
    return exchange


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["ddp", "antdt"], required=True)
    # The process group DDP is built on; the antdt backend (import antdt.torch) when it is there.
    p.add_argument("--backend", default=None,
                   help="torch.distributed backend of DDP's process group (default: gloo for --mode ddp; for "
                        "--mode antdt " + ANTDT_MODE_BACKEND + ")")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--global-batch", type=int, default=128)
    p.add_argument("--shard-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--train-samples", type=int, default=0, help="use only the first N training images (0: all)")
    p.add_argument("--snapshot-every", type=int, default=25)
    p.add_argument("--progress-every", type=int, default=100)
    p.add_argument("--slow-rank", type=int, default=2)
    p.add_argument("--slow-cgroup", default="")
    p.add_argument("--data", default=DATA_DIR)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--label", default="")
    p.add_argument("--min-accuracy", type=float, default=0.0)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    args.label = args.label or args.mode
    torch.set_num_threads(1)
    if args.backend is None:
        args.backend = "gloo" if args.mode == "ddp" else antdt_mode_backend()
    if args.mode == "ddp":
        return train_ddp(args)
    from antdt.torch.hook import PartialAllReduceHook
    PartialAllReduceHook.exchange = timed_exchange(PartialAllReduceHook.exchange)
    return train_antdt(args)


# DDP's process group in --mode antdt (the hook's exchange never uses it; DDP itself
# broadcasts the model through it): the antdt backend ("gloo" pins gloo instead).
ANTDT_MODE_BACKEND = "antdt"


def antdt_mode_backend():
    if ANTDT_MODE_BACKEND != "antdt":
        return ANTDT_MODE_BACKEND
    try:
        import antdt.torch  # noqa: F401  (registers the backend "antdt")
    except ImportError as e:
        raise SystemExit("train_fashion_mnist: --mode antdt needs the torch.distributed backend antdt.torch "
                         f"(built with the project when Torch is found; PYTHONPATH=<build>/python): {e}")
    return "antdt"


if __name__ == "__main__":
    sys.exit(main())
