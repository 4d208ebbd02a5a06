"""PartialAllReduceHook's invariants on real processes (3 ranks under antdt-run, DDP on gloo):
rank 2 is late (it sleeps) so contributions are deferred or dropped; local batches differ per rank.

Checked: every rank applied the same results (a checksum of every result and the final
parameters are equal on all ranks); each result is the exact weighted average (the
gradient is 1 for one coordinate on every rank: every result holds exactly 1.0 there, and
rank+1 for another: the result is Σ b_i (i+1) / Σ b_i, within [1, 3]); every contribution
is included once or reported dropped (the samples of all included/deferred contributions
add up to the samples of all applied results, and drops were reported).

  hook_invariants.py <antdt-run> <drop|defer> [--late-first]     the test (starts the job); --late-first:
      no partial warm-up (ANTDT_PARTIAL_WARMUP=0) and rank 2 late from step 1 on
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import job  # noqa: E402

STEPS = 60


def worker(policy_name, late_first):
    import time
    import torch
    import torch.distributed as dist
    import antdt
    from antdt.agent import late_policy
    from antdt.torch.hook import PartialAllReduceHook

    torch.set_num_threads(1)
    agent = antdt.Agent.from_env()
    rank, n = agent.rank, agent.size
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}", rank=rank,
                            world_size=n)
    model = torch.nn.Linear(2, 1, bias=False)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    hook = PartialAllReduceHook(agent, late=late_policy(policy_name))
    hook.register(ddp)
    results = []       # (step, result vector, samples) in the order applied
    contributed = 0.0  # samples of this rank's included/deferred contributions
    dropped = deferred = 0
    step = 0
    while step < STEPS:
        plan = agent.next_step()
        if hook.already_applied(plan):
            continue
        batch = 1 + (rank + plan.step) % 4  # local batches differ per rank and step
        hook.begin_step(plan, batch)
        # Every rank "computes" 5 ms; rank 2 takes 40 ms every third step and arrives late
        # (with late_first: in the first two steps too).
        late_step = plan.step % 3 == 0 or (late_first and plan.step <= 2)
        time.sleep(0.04 if rank == 2 and late_step else 0.005)
        # loss = Σ_samples (w0 * 1 + w1 * (rank+1)) / batch: the gradient is (1, rank+1).
        x = torch.tensor([[1.0, float(rank + 1)]]).repeat(batch, 1)
        ddp(x).sum().div(batch).backward()
        results.append((hook.done_through - len(hook.missed), model.weight.grad.reshape(-1).clone(),
                        hook.last_count))
        for k, (g, c) in enumerate(hook.missed):
            results.append((hook.done_through - len(hook.missed) + 1 + k, g.clone(), c))
        with torch.no_grad():
            for _, g, c in results[-1 - len(hook.missed):]:
                model.weight -= 0.01 * g.view_as(model.weight)
        hook.missed.clear()
        model.weight.grad = None
        if hook.last_fate in (antdt.Fate.included, antdt.Fate.deferred):
            contributed += batch
        dropped += hook.last_fate == antdt.Fate.dropped
        deferred += hook.last_fate == antdt.Fate.deferred
        agent.report_step(samples=batch, fate=hook.last_fate)
        step = hook.done_through
    hook.leave_generation()
    for k, (g, c) in enumerate(hook.missed):
        results.append((hook.done_through - len(hook.missed) + 1 + k, g.clone(), c))
    comm = agent.communicator()
    errors = []
    steps = [s for s, _, _ in results]
    if steps != list(range(1, len(steps) + 1)):
        errors.append(f"results not applied in order 1, 2, ...: {steps[:20]}")
    checksum = torch.zeros(3, dtype=torch.float64)
    applied_samples = 0.0
    for s, g, c in results:
        checksum += torch.tensor([float(g[0]) * s, float(g[1]) * s, c], dtype=torch.float64)
        applied_samples += c
        if c > 0 and float(g[0]) != 1.0:
            errors.append(f"step {s}: the weighted average of ones is {float(g[0])!r}, not exactly 1.0")
        if c > 0 and not 1.0 <= float(g[1]) <= n:
            errors.append(f"step {s}: the weighted average of rank+1 is {float(g[1])}, outside [1, {n}]")
    low, high = checksum.clone(), checksum.clone()
    comm.allreduce(low, low, antdt.ReduceOp.min)
    comm.allreduce(high, high, antdt.ReduceOp.max)
    if not torch.equal(low, high):
        errors.append(f"the ranks applied different results (checksums {low.tolist()} .. {high.tolist()})")
    w = model.weight.detach().reshape(-1).clone()
    wl, wh = w.clone(), w.clone()
    comm.allreduce(wl, wl, antdt.ReduceOp.min)
    comm.allreduce(wh, wh, antdt.ReduceOp.max)
    if not torch.equal(wl, wh):
        errors.append("the replicas differ")
    totals = torch.tensor([contributed, float(dropped), float(deferred)], dtype=torch.float64)
    comm.allreduce(totals, totals, antdt.ReduceOp.sum)
    if float(totals[0]) != applied_samples:
        errors.append(f"contributions included/deferred hold {float(totals[0])} samples but the applied results "
                      f"hold {applied_samples}: a contribution was lost or counted twice")
    if float(totals[1] + totals[2]) == 0:
        errors.append("no contribution was late: the test checked nothing beyond BSP")
    if rank == 0:
        print(f"hook_invariants[{policy_name}]: {len(results)} results, {applied_samples:.0f} samples applied, "
              f"{int(totals[1])} contributions dropped (reported), {int(totals[2])} deferred; rank 0's counts {hook.counts}", flush=True)
    dist.destroy_process_group()
    agent.close()
    for e in errors:
        print(f"FAIL rank {rank}: {e}", flush=True)
    return 1 if errors else 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        return worker(sys.argv[2], sys.argv[3] == "late-first")
    job.require_torch()
    antdt_run, policy = sys.argv[1], sys.argv[2]
    late_first = len(sys.argv) > 3 and sys.argv[3] == "--late-first"
    env = {"ANTDT_RESULT_CACHE": "64"}
    if late_first:
        # No partial warm-up: the hook alone must keep rank 2, late for step 1, from skipping
        # DDP's bucket sync at its second iteration (a deadlock until the timeouts).
        env.update({"ANTDT_PARTIAL_WARMUP": "0", "ANTDT_TIMEOUT_MS": "20000"})
    return job.run_ranks(antdt_run, 3, [__file__, "--worker", policy, "late-first" if late_first else "-"], env=env,
                         timeout=90)


if __name__ == "__main__":
    sys.exit(main())
