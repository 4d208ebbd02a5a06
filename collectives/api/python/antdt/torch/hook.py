"""A DDP communication hook that skips laggards: the partial AllReduce of the
Agent's plan (docs/torch.md, "Straggler tools").

One training step is one exchange of the whole gradient (every DDP bucket in one
call, made at the last bucket), weighted by the rank's local batch:

* ``wait`` steps (BSP) run a plain AllReduce;
* ``drop`` / ``defer`` steps run ``partial_allreduce`` with the plan's late
  policy: a late contribution is dropped (its samples go back to the DDS) or
  added into a later step; a late rank receives the results it missed and
  applies them (``apply_missed``) without computing those steps.

The weighted average is exact: every rank sends ``[b * g, b]`` (b = its local
batch, g = the mean gradient of its batch) and divides the sum's gradient part
by its last element, Σ b_i — which also counts the samples behind every
result, fetched ones included. Every rank applies the same results in the same
order, so replicas stay bit-identical.

Usage (the trainer keeps the step loop; see tools/train_fashion_mnist.py)::

    hook = PartialAllReduceHook(agent)
    hook.register(ddp)                              # DDP(..., broadcast_buffers=False) if the model has buffers
    plan = agent.next_step()
    if hook.already_applied(plan): continue        # a late rank fetched this step's result
    hook.begin_step(plan, samples=len(batch))
    loss.backward()                                 # the hook exchanges at the last bucket; an empty
                                                    # batch runs DDP too (0 samples: weight 0), since
                                                    # DDP syncs its buckets at its 2nd iteration
    if hook.last_count > 0: fractional_step(optimizer, min(1, hook.last_count / B))
    # before a rebuild (plan.rebuild), a restart exit or the end: hook.leave_generation()
    hook.apply_missed(optimizer)                    # results this rank was late for
    agent.settle(hook.last_fate)
"""

import torch

from antdt.agent import Error, Fate, LatePolicy, ReduceOp
from antdt.torch.fractional_step import fractional_step


class PartialAllReduceHook:
    def __init__(self, agent, late=None):
        """late: a LatePolicy forcing every step's policy (tests); None: the plan's."""
        self.agent = agent
        self.late_override = late
        self.done_through = 0        # the last step whose result this rank applied
        self.run_open = False        # inside a run of partial steps
        self.run_policy = LatePolicy.wait
        self.run_staleness = 1
        self.plan = None
        self.samples = 0
        self.last_fate = Fate.none
        self.last_count = 0.0        # samples behind the last result (0: nothing to apply)
        self.last_result = None
        self.missed = []             # (flat gradient, samples) of results fetched for later steps
        self.params = None           # the parameters in the flat gradient's order
        # The communicator of the last exchange: finishing a run and leaving a generation
        # must use it, since agent.communicator() would already rebuild on a rebuild step.
        self.comm = None
        # Whether this communicator generation had its first exchange: that one always waits
        # for every rank (policy_of).
        self.generation_started = False
        self._pending = []           # (bucket buffer, future) of buckets before the last
        self.counts = {"included": 0, "deferred": 0, "dropped": 0, "none": 0, "fetched_results": 0, "steps": 0}

    # -- the step protocol -------------------------------------------------
    def policy_of(self, plan):
        # The first step of a communicator generation (a new DDP) waits for every rank, whatever
        # the plan: DDP syncs its buckets over its process group at its second iteration, and a
        # rank late for the first step would wait in the next partial step for the others while
        # they wait for it in that sync, until the timeouts. The partial collectives' own warm-up
        # (ANTDT_PARTIAL_WARMUP steps of BSP) covers it too, unless it is set to 0. Every rank
        # starts a generation at the same step, so they agree on this step's policy.
        if not self.generation_started:
            return LatePolicy.wait
        return self.late_override if self.late_override is not None else plan.late

    def already_applied(self, plan):
        """True when this rank fetched this step's result while it was late: skip the step."""
        return plan.step <= self.done_through

    def begin_step(self, plan, samples):
        """Before the step's (last) backward: the plan and this rank's batch size."""
        if plan.step != self.done_through + 1:
            raise Error(f"rank {self.agent.rank} is at step {plan.step} but applied the results through step "
                        f"{self.done_through} (steps and results must match)")
        late = self.policy_of(plan)
        if self.run_open and (plan.rebuild or late != self.run_policy or plan.staleness != self.run_staleness):
            self.finish_run()
        self.plan = plan
        self.samples = int(samples)

    def finish_run(self):
        """Ends a run of partial steps (before plain steps, a rebuild, an exit or the end)."""
        if not self.run_open:
            return
        self._catch_up(self.comm.partial_finish().steps_behind)
        self.run_open = False

    def leave_generation(self):
        """Before the communicator goes (a rebuild, a restart exit, the end): ends the run
        of partial steps, then waits for every rank at a barrier. partial_finish alone may
        return on the on-time ranks while a late rank is still in its last partial step, and
        a rank that rebuilt (destroying the communicator and its arbiter) would cut that
        rank off; every rank reaches the same step's rebuild, exit or stop, so all pass."""
        self.finish_run()
        if self.comm is not None:
            self.comm.barrier()
        self.comm = None
        self.generation_started = False

    # -- the exchange ------------------------------------------------------
    def exchange(self, flat):
        """This step's exchange of `flat` (the mean gradient of this rank's batch, or zeros
        for an empty batch). Returns the step's result (the weighted average)."""
        comm = self.comm = self.agent.communicator()
        n = float(self.samples)
        send = torch.empty(flat.numel() + 1, dtype=torch.float32)
        torch.mul(flat.reshape(-1).to(torch.float32), n, out=send[:-1])
        send[-1] = n
        recv = torch.empty_like(send)
        late = self.policy_of(self.plan)
        self.counts["steps"] += 1
        if late == LatePolicy.wait:
            comm.allreduce(send, recv, ReduceOp.sum)
            self.done_through = self.plan.step
            fate = Fate.included if n > 0 else Fate.none
        else:
            if not self.run_open:
                self.run_open, self.run_policy, self.run_staleness = True, late, self.plan.staleness
            # An empty batch arrives with weight 0: it cannot close a step on its own (so it never
            # makes a rank with data late), and a step in which no rank has data closes empty once
            # every rank arrived (docs/partial.md).
            r = self._partial(comm, send, recv, weight=n, samples=int(n))
            fate = r.fate if n > 0 else Fate.none
            result = self._result(recv)
            self._catch_up(r.steps_behind)
            self._finish_exchange(fate, result)
            return result[0]
        result = self._result(recv)
        self._finish_exchange(fate, result)
        return result[0]

    def _finish_exchange(self, fate, result):
        self.generation_started = True
        self.last_fate = fate
        self.last_result, self.last_count = result
        self.counts[fate.name] += 1

    @staticmethod
    def _result(recv):
        count = float(recv[-1])
        grad = recv[:-1] / count if count > 0 else torch.zeros_like(recv[:-1])
        return grad, count

    def _partial(self, comm, send, recv, weight, samples):
        r = comm.partial_allreduce(send, recv, ReduceOp.sum, policy=self.run_policy, weight=weight,
                                   staleness=self.run_staleness, samples=samples)
        if r.step == 0:
            raise Error(f"rank {self.agent.rank}: partial_allreduce for step {self.done_through + 1} found the run "
                        "ended by the other ranks")
        self.done_through += 1
        return r

    def _catch_up(self, behind):
        """The results this rank missed, from its result cache (no messages, no compute)."""
        if behind == 0:
            return
        comm = self.comm
        size = len(self.last_result) + 1 if self.last_result is not None else self._flat_size() + 1
        zeros = torch.zeros(size, dtype=torch.float32)
        while behind > 0:
            recv = torch.empty_like(zeros)
            r = self._partial(comm, zeros, recv, weight=0.0, samples=0)
            self.missed.append(self._result(recv))
            self.counts["fetched_results"] += 1
            behind = r.steps_behind

    def _flat_size(self):
        if self.params is None:
            raise Error("PartialAllReduceHook: the gradient layout is unknown (no backward ran yet)")
        return sum(p.numel() for p in self.params)

    # -- applying results --------------------------------------------------
    def set_layout(self, params):
        """The parameters in the flat gradient's order (the DDP hook learns it from the buckets)."""
        self.params = list(params)

    def flat_grads(self):
        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self.params])

    def load_grads(self, flat):
        offset = 0
        for p in self.params:
            k = p.numel()
            g = flat[offset:offset + k].view_as(p)
            if p.grad is None:
                p.grad = g.clone()
            else:
                p.grad.copy_(g)
            offset += k

    def exchange_without_backward(self):
        """A step without DDP's backward (an empty batch): zeros in, the result into .grad."""
        result = self.exchange(torch.zeros(self._flat_size()))
        self.load_grads(result)
        return result

    def apply_missed(self, optimizer, grad_scale=None):
        """Applies the results this rank fetched while late (each an optimizer step). With
        grad_scale, each is fractional_step(optimizer, min(1, grad_scale(samples))) (e.g.
        samples / global batch, so a result of few samples moves the model less, momentum
        included; a result holding a deferred contribution besides may hold more than B).
        Returns how many."""
        applied = 0
        for grad, count in self.missed:
            if count > 0:
                self.load_grads(grad)
                if grad_scale:
                    fractional_step(optimizer, min(1.0, grad_scale(count)))
                else:
                    optimizer.step()
                applied += 1
        self.missed.clear()
        return applied

    # -- the DDP communication hook ----------------------------------------
    def register(self, ddp):
        """Registers this hook on `ddp` (a DistributedDataParallel): register_comm_hook(self,
        ddp_hook), after checking that DDP runs no collective of its own at every iteration. A
        late rank skips the steps whose results it fetched, so it would miss those collectives
        and pair the others' with later iterations' (a mismatch, then a hang). Such collectives
        are the broadcast of the model's buffers (e.g. BatchNorm's running statistics; needs
        DDP(..., broadcast_buffers=False), each rank then keeping its own) and the AllReduce of
        the used-parameter map under find_unused_parameters=True."""
        why = None
        if getattr(ddp, "broadcast_buffers", False) and any(True for _ in ddp.module.buffers()):
            why = ("broadcasts the model's buffers at every iteration; construct it with "
                   "DistributedDataParallel(..., broadcast_buffers=False)")
        elif getattr(ddp, "find_unused_parameters", False):
            why = ("reduces its map of used parameters at every iteration (find_unused_parameters=True); "
                   "construct it without, every parameter taking part in each backward")
        if why is not None:
            raise Error(f"PartialAllReduceHook.register: this DDP {why}. A rank that skips the steps it was late "
                        "for cannot follow a collective that DDP runs at every iteration")
        ddp.register_comm_hook(self, PartialAllReduceHook.ddp_hook)

    @staticmethod
    def ddp_hook(state, bucket):
        """The hook register() installs (register_comm_hook(state=<this object>, hook=ddp_hook))."""
        self = state
        fut = torch.futures.Future()
        self._pending.append((bucket, fut))
        if not bucket.is_last():
            return fut
        pending, self._pending = self._pending, []
        pending.sort(key=lambda bf: bf[0].index())
        # DDP rebuilds its buckets after the first iteration: learn the layout every time.
        self.set_layout(p for b, _ in pending for p in b.parameters())
        buffers = [b.buffer() for b, _ in pending]
        result = self.exchange(torch.cat([buf.reshape(-1) for buf in buffers]))
        offset = 0
        for (b, f), buf in zip(pending, buffers):
            k = buf.numel()
            buf.copy_(result[offset:offset + k].view_as(buf))
            offset += k
            f.set_result(buf)
        return fut
