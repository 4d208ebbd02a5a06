#!/usr/bin/env python3
"""Starts N ranks of a Python script as real processes with the env:// variables
torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), waits for all of them (at most --timeout seconds) and fails when
any failed. Exits 77 (ctest: skipped) when this Python has no torch.

    launch.py -n 4 [--timeout 120] script.py [args...]
"""
import argparse
import os
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    a = parser.parse_args()
    try:
        import torch.distributed  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {sys.executable} has no torch ({e}); install python3-torch (tools/setup.sh)")
        return 77
    port = free_port()
    procs = []
    for rank in range(a.n):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(a.n), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(a.n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, a.script, *a.args], env=env))
    deadline = time.monotonic() + a.timeout
    codes = [None] * a.n
    while any(c is None for c in codes):
        for i, p in enumerate(procs):
            if codes[i] is None:
                codes[i] = p.poll()
        if time.monotonic() > deadline:
            print(f"launch.py: ranks still running after {a.timeout} s: killing them")
            for i, p in enumerate(procs):
                if codes[i] is None:
                    p.kill()
                    codes[i] = -9
            break
        time.sleep(0.05)
    for p in procs:
        p.wait()
    if all(c == 77 for c in codes):
        return 77
    if any(c != 0 for c in codes):
        print(f"launch.py: exit codes {codes}")
        return 1
    print(f"launch.py: {a.n} ranks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
