#!/usr/bin/env python3
"""The timeout of init_process_group bounds every wait: the last rank never
calls all_reduce; the others must fail with a RuntimeError naming the timeout
within a few seconds of it (not antdt's 60 s default, not torch's 30 min)."""
import datetime
import os
import time

import torch
import torch.distributed as dist

import antdt.torch  # noqa: F401

TIMEOUT_S = 2.0


def main():
    dist.init_process_group("antdt", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.all_reduce(torch.ones(4))  # everybody is there
    if rank == world - 1:
        time.sleep(TIMEOUT_S * 4)  # never joins the next all_reduce; exits after the others failed
        os._exit(0)
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1 << 16))
    except RuntimeError as e:
        waited = time.monotonic() - start
        msg = str(e)
        print(f"rank {rank}: RuntimeError after {waited:.1f} s: {msg[:300]}", flush=True)
        assert "antdt" in msg and "all_reduce" in msg, msg
        assert waited >= TIMEOUT_S * 0.9, f"failed after {waited:.1f} s, before the timeout"
        assert waited < TIMEOUT_S + 6, f"failed after {waited:.1f} s: the timeout was not honoured"
        # A later call fails at once: the communicator is failed, never hangs.
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(1))
            raise AssertionError("a call after the failure succeeded")
        except RuntimeError:
            assert time.monotonic() - t0 < TIMEOUT_S + 6
        os._exit(0)
    raise AssertionError(f"rank {rank}: all_reduce with a missing rank returned")


if __name__ == "__main__":
    main()
