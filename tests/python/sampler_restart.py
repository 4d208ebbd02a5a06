"""DdsBatchSampler's exactly-once across a restart, with sample-id bitmaps (3 ranks under
antdt-run --restarts 1, 2 epochs of 3 000 samples, B = 96, DDP on gloo with the hook):
rank 1 asks for its own restart at step 12, or the first step after it that it computes (the
Agent exits with the restart code, antdt-run starts it again, every rank rebuilds); rank 2 is
late every third step, so under drop the DDS takes dropped batches back (defer: too-late
ones). Every process writes the ids it committed per epoch; the check builds one bitmap per
epoch and fails on an id committed twice or never.

  sampler_restart.py <antdt-run> <out dir>
  SAMPLER_TEST_LATE=wait|drop|defer (default drop), SAMPLER_TEST_RESTART=1|0 (default 1)
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import job  # noqa: E402

DATASET, EPOCHS, BATCH = 3000, 2, 96
LATE = os.environ.get("SAMPLER_TEST_LATE", "drop")
RESTART = os.environ.get("SAMPLER_TEST_RESTART", "1") == "1"


def worker(out):
    import time
    import torch
    import torch.distributed as dist
    import antdt
    from antdt.torch.hook import PartialAllReduceHook
    from antdt.torch.sampler import DdsBatchSampler

    torch.set_num_threads(1)
    agent = antdt.Agent.from_env(dataset_size=DATASET, epochs=EPOCHS, shard_size=32, global_batch=BATCH)
    rank, inc = agent.rank, agent.incarnation
    model = torch.nn.Linear(4, 1)
    hook = PartialAllReduceHook(agent, late=antdt.late_policy(LATE))
    sampler = DdsBatchSampler(agent)
    committed = {}
    ddp = None

    def wrap(generation):
        if dist.is_initialized():
            dist.destroy_process_group()
        port = int(os.environ["MASTER_PORT"]) + generation
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=agent.size)
        d = torch.nn.parallel.DistributedDataParallel(model)
        hook.register(d)
        return d

    def resync():
        comm = agent.communicator()
        src = torch.tensor([agent.size if inc > 0 and not resync.done else rank], dtype=torch.int32)
        comm.allreduce(src, src, antdt.ReduceOp.min)
        for p in model.parameters():
            comm.broadcast(p.data, int(src))
        done = torch.tensor([hook.done_through], dtype=torch.int64)
        comm.broadcast(done, int(src))
        hook.done_through = int(done)
        resync.done = True
    resync.done = False

    def save():
        with open(os.path.join(out, f"committed.rank{rank}.{inc}.json"), "w") as f:
            json.dump(committed, f)

    restart_asked = False
    while True:
        plan = agent.next_step()
        if agent.should_exit():
            hook.leave_generation()
            save()
            agent.close()
            return agent.exit_code
        if plan.stop:
            hook.leave_generation()
            break
        if hook.already_applied(plan):
            continue
        if plan.rebuild or ddp is None:
            if ddp is not None:
                hook.leave_generation()
            agent.communicator()
            if plan.rebuild:
                resync()
            ddp = wrap(plan.generation)
        # At its first step from 12 on that it computes: a rank that fell behind under drop
        # fetches the results it missed and skips those steps (already_applied), 12 among them.
        if RESTART and rank == 1 and inc == 0 and plan.step >= 12 and not restart_asked:
            agent.request_restart()
            restart_asked = True
        ids = sampler.fetch()
        hook.begin_step(plan, len(ids))
        time.sleep(0.03 if rank == 2 and plan.step % 3 == 0 else 0.004)
        # An empty batch runs DDP too (0 samples): DDP counts its iterations and syncs its
        # buckets over the process group at the second one, so every rank must run each.
        x = torch.tensor(ids, dtype=torch.float32).reshape(-1, 1).repeat(1, 4) / DATASET
        ddp(x).sum().div(max(len(ids), 1)).backward()
        hook.missed.clear()
        model.zero_grad()
        agent.report_step(samples=len(ids), fate=hook.last_fate)
        epoch = sampler.epoch
        if sampler.settle(hook.last_fate):
            committed.setdefault(str(epoch), []).extend(ids)
    save()
    dist.destroy_process_group()
    agent.close()
    return 0


def check(out):
    bitmaps = {e: bytearray(DATASET) for e in range(EPOCHS)}
    files = sorted(f for f in os.listdir(out) if f.startswith("committed."))
    restarted = any(f.endswith(".1.json") for f in files)
    errors = []
    if RESTART and not restarted:
        errors.append(f"no restarted process wrote its ids (files: {files})")
    for name in files:
        with open(os.path.join(out, name)) as f:
            for epoch, ids in json.load(f).items():
                epoch = int(epoch)
                # The DDS numbers epochs from 0 or 1: both map onto the run's epochs in order.
                for i in ids:
                    bitmaps.setdefault(epoch, bytearray(DATASET))[i] += 1
    epochs = sorted(e for e, b in bitmaps.items() if any(b))
    if len(epochs) != EPOCHS:
        errors.append(f"ids were committed in epochs {epochs}, expected {EPOCHS} epochs")
    for e in epochs:
        b = bitmaps[e]
        twice = [i for i in range(DATASET) if b[i] > 1]
        never = [i for i in range(DATASET) if b[i] == 0]
        if twice:
            errors.append(f"epoch {e}: {len(twice)} ids committed more than once, e.g. {twice[:5]}")
        if never:
            errors.append(f"epoch {e}: {len(never)} ids never committed, e.g. {never[:5]}")
    for e in errors:
        print("FAIL:", e)
    if not errors:
        print(f"sampler_restart[{LATE}]: {len(epochs)} epochs x {DATASET} ids committed exactly once over "
              f"{len(files)} processes" + (" (a restart included)" if RESTART else ""))
    return 1 if errors else 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker(sys.argv[2])
    job.require_torch()
    antdt_run, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))
    rc = job.run_ranks(antdt_run, 3, [__file__, "--worker", out], restarts=1,
                       env={"ANTDT_RESULT_CACHE": "64", "ANTDT_POLICY": "bsp"}, timeout=100)
    if rc != 0:
        print(f"FAIL: the job exited with {rc}")
        return 1
    return check(out)


if __name__ == "__main__":
    sys.exit(main())
