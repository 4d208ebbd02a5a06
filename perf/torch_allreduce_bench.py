#!/usr/bin/env python3
"""torch-level all_reduce: the antdt backend against the gloo backend, the same
tensors, interleaved in one run (docs/torch.md#benchmark).

    PYTHONPATH=build/python /usr/bin/python3 perf/torch_allreduce_bench.py [--ranks 2,4]
        [--min-bytes 8] [--max-bytes 64M] [--rounds 5] [--budget-s 0.3]

Starts the ranks itself (env:// on loopback). For every size, each round
times a burst of antdt all_reduces, then one of gloo's on the same tensor
(float32, sum); the figure is the median over rounds. Prints latency,
busbw = 2(n-1)/n * bytes / time, and the ratios antdt/gloo (targets: busbw
at 64 MiB >= 3x gloo's, 8 B latency <= gloo's).
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import time


def parse_bytes(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def human(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def rank_main(a):
    import torch
    import torch.distributed as dist
    import antdt.torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("antdt")
    rank, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    groups = {"antdt": None, "gloo": gloo}
    sizes = []
    b = a.min_bytes
    while b <= a.max_bytes:
        sizes.append(b)
        b *= 8
    if sizes[-1] != a.max_bytes:
        sizes.append(a.max_bytes)
    rows = []
    for nbytes in sizes:
        t = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
        # Iterations per burst: from one timed call on antdt, agreed on by all ranks.
        for g in groups.values():
            dist.all_reduce(t, group=g)
        start = time.perf_counter()
        dist.all_reduce(t)
        one = torch.tensor([time.perf_counter() - start])
        dist.all_reduce(one, op=dist.ReduceOp.MAX, group=gloo)
        iters = int(max(1, min(1000, a.budget_s / max(one.item(), 1e-6))))
        times = {k: [] for k in groups}
        for _ in range(a.rounds):
            for name, g in groups.items():
                dist.barrier(group=gloo)
                start = time.perf_counter()
                for _ in range(iters):
                    dist.all_reduce(t, group=g)
                el = torch.tensor([(time.perf_counter() - start) / iters])
                dist.all_reduce(el, op=dist.ReduceOp.MAX, group=gloo)
                times[name].append(el.item())
        rows.append((t.numel() * 4, iters, {k: statistics.median(v) for k, v in times.items()}))
    if rank == 0:
        factor = 2 * (n - 1) / n if n > 1 else 1
        print(f"\n{n} ranks (float32 sum, median of {a.rounds} interleaved rounds)")
        print(f"{'bytes':>10} {'iters':>6} {'antdt us':>10} {'gloo us':>10} {'antdt GB/s':>11} "
              f"{'gloo GB/s':>10} {'busbw x':>8} {'lat x':>7}")
        for nbytes, iters, m in rows:
            bw = {k: factor * nbytes / v / 1e9 for k, v in m.items()}
            print(f"{human(nbytes):>10} {iters:>6} {m['antdt'] * 1e6:>10.1f} {m['gloo'] * 1e6:>10.1f} "
                  f"{bw['antdt']:>11.3f} {bw['gloo']:>10.3f} {bw['antdt'] / bw['gloo']:>8.2f} "
                  f"{m['gloo'] / m['antdt']:>7.2f}", flush=True)
        print("busbw x = antdt busbw / gloo busbw (target at 64 MiB: >= 3); "
              "lat x = gloo time / antdt time (target at 8 B: >= 1)")
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(a, n):
    port = free_port()
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, *sys.argv], env=env))
    codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(f"torch_allreduce_bench: {n} ranks exited with {codes}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--min-bytes", type=parse_bytes, default=8)
    p.add_argument("--max-bytes", type=parse_bytes, default=64 << 20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--budget-s", type=float, default=0.3, help="target seconds per timed burst")
    a = p.parse_args()
    if "RANK" in os.environ:
        rank_main(a)
        return
    for n in (int(x) for x in a.ranks.split(",")):
        launch(a, n)


if __name__ == "__main__":
    main()
