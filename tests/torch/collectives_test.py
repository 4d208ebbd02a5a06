#!/usr/bin/env python3
"""Every torch.distributed collective on the antdt backend against values each
rank computes on its own (run by launch.py at 1-4 ranks). A failure raises
(and exits non-zero) naming the check."""
import datetime
import warnings

import torch
import torch.distributed as dist

import antdt.torch  # noqa: F401  registers "antdt"

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int8, torch.uint8, torch.int32, torch.int64]
OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {dist.get_rank()}: {what}")


def value(rank, n, dtype):
    """Rank r's input: small values every dtype holds exactly (products too)."""
    base = torch.arange(n, dtype=torch.float64) % 3 + 1 + (rank % 2)
    return base.to(dtype)


def expected_reduce(op, n, world, dtype):
    inputs = [value(r, n, torch.float64) for r in range(world)]
    stack = torch.stack(inputs)
    if op == "sum":
        out = stack.sum(0)
    elif op == "product":
        out = stack.prod(0)
    elif op == "min":
        out = stack.min(0).values
    elif op == "max":
        out = stack.max(0).values
    else:
        out = stack.sum(0) / world
        if not dtype.is_floating_point:
            out = torch.div(stack.sum(0), world, rounding_mode="floor")
    return out.to(dtype)


def test_all_reduce(rank, world):
    for dtype in DTYPES:
        for name, op in OPS.items():
            if name == "product" and dtype in (torch.int8, torch.uint8) and world > 3:
                continue  # 3^4 overflows int8
            t = value(rank, 37, dtype)
            dist.all_reduce(t, op=op)
            want = expected_reduce(name, 37, world, dtype)
            tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 0
            check(torch.allclose(t.double(), want.double(), atol=tol, rtol=tol),
                  f"all_reduce {name} {dtype}: got {t[:5].tolist()} want {want[:5].tolist()}")


def test_noncontiguous(rank, world):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6) + rank
    t = base.t()  # a transposed view: not contiguous
    check(not t.is_contiguous(), "the test's tensor is contiguous")
    dist.all_reduce(t)
    want = (torch.arange(24, dtype=torch.float32).reshape(4, 6) * world + sum(range(world))).t()
    check(torch.equal(t, want), f"non-contiguous all_reduce: {t.flatten()[:4].tolist()}")
    check(torch.equal(base.t(), want), "non-contiguous all_reduce did not write the base tensor")
    sl = torch.zeros(10)[::2]
    sl.fill_(rank + 1)
    dist.broadcast(sl, src=world - 1)
    check(torch.all(sl == world), "strided broadcast")


def test_async(rank, world):
    tensors = [torch.full((1000,), float(rank + i)) for i in range(5)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    fut = works[-1].get_future()
    for w in works:
        w.wait()
    for i, t in enumerate(tensors):
        check(torch.all(t == sum(r + i for r in range(world))), f"async all_reduce {i}")
    got = fut.wait()
    check(isinstance(got, list) and got[0] is not None and torch.equal(got[0], tensors[-1]),
          "the future's value is the reduced tensor")
    # Chained callback, as DDP does.
    t = torch.ones(8)
    fut = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    check(torch.all(fut.wait() == 2 * world), "future.then")
    # Background progress: is_completed() turns true without wait().
    import time
    w = dist.all_reduce(torch.ones(4), async_op=True)
    deadline = time.monotonic() + 30
    while not w.is_completed():
        check(time.monotonic() < deadline, "async all_reduce never completed without wait()")
        time.sleep(0.001)


def test_coalesced(rank, world):
    ts = [torch.full((n,), float(rank + 1)) for n in (3, 5, 2)]  # torch wants one dtype
    dist.all_reduce_coalesced(ts)
    for t in ts:
        check(torch.all(t == world * (world + 1) / 2), f"all_reduce_coalesced {t.dtype}")


def test_broadcast_reduce(rank, world):
    for root in range(world):
        for dtype in (torch.float32, torch.int64, torch.bool, torch.int16):
            t = torch.full((9,), rank == root, dtype=dtype) if dtype == torch.bool else \
                torch.full((9,), rank * 10, dtype=dtype)
            dist.broadcast(t, src=root)
            want = torch.full((9,), True) if dtype == torch.bool else torch.full((9,), root * 10, dtype=dtype)
            check(torch.equal(t, want), f"broadcast root {root} {dtype}")
        t = torch.full((6,), float(rank + 1))
        dist.reduce(t, dst=root, op=dist.ReduceOp.MAX)
        if rank == root:
            check(torch.all(t == world), f"reduce max root {root}")


def test_gathers(rank, world):
    # all_gather, equal and uneven sizes
    out = [torch.empty(4, dtype=torch.int32) for _ in range(world)]
    dist.all_gather(out, torch.full((4,), rank, dtype=torch.int32))
    check(all(torch.all(o == r) for r, o in enumerate(out)), "all_gather")
    out = [torch.empty(r + 1) for r in range(world)]
    dist.all_gather(out, torch.full((rank + 1,), float(rank)))
    check(all(torch.all(o == r) and o.numel() == r + 1 for r, o in enumerate(out)), "uneven all_gather")
    # all_gather_into_tensor / _all_gather_base
    flat = torch.empty(world * 3, dtype=torch.float16)
    dist.all_gather_into_tensor(flat, torch.full((3,), float(rank), dtype=torch.float16))
    check(torch.equal(flat, torch.arange(world).repeat_interleave(3).half()), "all_gather_into_tensor")
    flat = torch.empty(world * 2)
    dist._all_gather_base(flat, torch.full((2,), float(rank)))
    check(torch.equal(flat, torch.arange(world).repeat_interleave(2).float()), "_all_gather_base")
    # gather / scatter at every root
    for root in range(world):
        gl = [torch.empty(5) for _ in range(world)] if rank == root else None
        dist.gather(torch.full((5,), float(rank * 2)), gather_list=gl, dst=root)
        if rank == root:
            check(all(torch.all(g == 2 * r) for r, g in enumerate(gl)), f"gather root {root}")
        out = torch.empty(3, dtype=torch.int64)
        sl = [torch.full((3,), r + 100, dtype=torch.int64) for r in range(world)] if rank == root else None
        dist.scatter(out, scatter_list=sl, src=root)
        check(torch.all(out == rank + 100), f"scatter root {root}: {out.tolist()}")


def test_reduce_scatter(rank, world):
    inputs = [torch.full((4,), float(rank + r)) for r in range(world)]
    out = torch.empty(4)
    dist.reduce_scatter(out, inputs)
    check(torch.all(out == sum(q + rank for q in range(world))), "reduce_scatter")
    inp = torch.cat([torch.full((3,), float(r * (rank + 1))) for r in range(world)])
    out = torch.empty(3)
    dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.SUM)
    check(torch.all(out == rank * sum(q + 1 for q in range(world))), "reduce_scatter_tensor")
    out = torch.empty(3)
    dist._reduce_scatter_base(out, inp)
    check(torch.all(out == rank * sum(q + 1 for q in range(world))), "_reduce_scatter_base")


def test_all_to_all(rank, world):
    inp = torch.arange(world * 2, dtype=torch.float32) + 100 * rank
    out = torch.empty(world * 2)
    dist.all_to_all_single(out, inp)
    want = torch.cat([torch.arange(2) + 2 * rank + 100 * r for r in range(world)]).float()
    check(torch.equal(out, want), f"all_to_all_single even: {out.tolist()} want {want.tolist()}")
    # uneven: rank r sends (r + j + 1) rows of 2 to rank j
    in_splits = [rank + j + 1 for j in range(world)]
    out_splits = [j + rank + 1 for j in range(world)]
    inp = torch.cat([torch.full((s, 2), float(rank * 10 + j)) for j, s in enumerate(in_splits)])
    out = torch.empty(sum(out_splits), 2)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = torch.cat([torch.full((s, 2), float(j * 10 + rank)) for j, s in enumerate(out_splits)])
    check(torch.equal(out, want), "all_to_all_single uneven")
    outs = [torch.empty(j + 1, dtype=torch.int64) for j in range(world)]
    ins = [torch.full((rank + 1,), rank * 100 + j, dtype=torch.int64) for j in range(world)]
    dist.all_to_all(outs, ins)
    check(all(torch.all(o == j * 100 + rank) for j, o in enumerate(outs)), "all_to_all lists")


def test_p2p(rank, world):
    if world < 2:
        return
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    # Every rank sends first (isend) then receives: gloo's semantics, no deadlock.
    t = torch.full((1000,), float(rank))
    r = torch.empty(1000)
    s = dist.isend(t, nxt)
    q = dist.irecv(r, prv)
    s.wait()
    q.wait()
    check(torch.all(r == prv), "isend/irecv ring")
    # Blocking send/recv, even ranks first.
    t = torch.full((3,), rank, dtype=torch.int32)
    r = torch.empty(3, dtype=torch.int32)
    if rank % 2 == 0:
        dist.send(t, nxt)
        dist.recv(r, prv)
    else:
        dist.recv(r, prv)
        dist.send(t, nxt)
    check(torch.all(r == prv), "send/recv")
    # A transfer in flight while collectives run.
    q = dist.irecv(r, prv)
    dist.all_reduce(torch.ones(2))
    dist.isend(t + 1, nxt).wait()
    q.wait()
    check(torch.all(r == prv + 1), "irecv across a collective")
    # batch_isend_irecv
    ops = [dist.P2POp(dist.isend, torch.full((2,), float(rank)), nxt),
           dist.P2POp(dist.irecv, r2 := torch.empty(2), prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check(torch.all(r2 == prv), "batch_isend_irecv")


def test_subgroups(rank, world):
    if world < 2:
        return
    evens = dist.new_group([r for r in range(world) if r % 2 == 0], backend="antdt")
    odds = dist.new_group([r for r in range(world) if r % 2 == 1], backend="antdt")
    mine = evens if rank % 2 == 0 else odds
    members = [r for r in range(world) if r % 2 == rank % 2]
    t = torch.full((4,), float(rank))
    dist.all_reduce(t, group=mine)
    check(torch.all(t == sum(members)), f"subgroup all_reduce: {t.tolist()}")
    t = torch.full((2,), float(rank))
    dist.broadcast(t, src=members[-1], group=mine)  # src is a global rank
    check(torch.all(t == members[-1]), "subgroup broadcast")
    out = [torch.empty(1) for _ in members]
    dist.all_gather(out, torch.tensor([float(rank)]), group=mine)
    check([o.item() for o in out] == [float(m) for m in members], "subgroup all_gather")
    dist.barrier(group=mine)
    t = torch.ones(3)
    dist.all_reduce(t)  # the world group still works after subgroup traffic
    check(torch.all(t == world), "world all_reduce after subgroups")


def test_errors(rank, world):
    def raises(fn, words, what):
        try:
            fn()
        except RuntimeError as e:
            check(all(w in str(e) for w in words), f"{what}: message {str(e)!r} lacks {words}")
            return
        raise AssertionError(f"rank {rank}: {what} did not raise RuntimeError")
    raises(lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool)), ["antdt", "Bool"], "bool all_reduce")
    raises(lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND),
           ["antdt", "bitwise"], "BAND")
    raises(lambda: dist.all_reduce(torch.ones(2).to_sparse()), ["sparse"], "sparse")
    if world > 1:
        raises(lambda: dist.send(torch.ones(1), (rank + 1) % world, tag=3), ["antdt", "tag"], "tagged send")
        raises(lambda: dist.recv(torch.ones(1)), ["antdt", "any source"], "recv from any source")
    raises(lambda: dist.all_gather_into_tensor(torch.empty(world * 2 + 1), torch.ones(2)),
           ["antdt", "elements"], "all_gather_into_tensor size")


def main():
    warnings.filterwarnings("ignore", message=".*will be deprecated")
    dist.init_process_group("antdt", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    check(dist.get_backend() == "antdt", f"backend is {dist.get_backend()}")
    tests = [test_all_reduce, test_noncontiguous, test_async, test_coalesced, test_broadcast_reduce,
             test_gathers, test_reduce_scatter, test_all_to_all, test_p2p, test_subgroups, test_errors]
    for test in tests:
        test(rank, world)
        dist.barrier()
        if rank == 0:
            print(f"  {test.__name__}: ok at {world} rank(s)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
