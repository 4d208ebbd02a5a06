"""Shared by the Python tests: skip without torch, start a job's ranks under antdt-run."""

import os
import socket
import subprocess
import sys

SKIP = 77  # ctest SKIP_RETURN_CODE


def require_torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: torch is not importable ({e}); apt-get install python3-torch", flush=True)
        sys.exit(SKIP)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(antdt_run, ranks, argv, env=None, restarts=0, timeout=120):
    """Runs `argv` as `ranks` processes under antdt-run; returns the exit code."""
    e = dict(os.environ)
    e.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1",
              "UCX_WARN_UNUSED_ENV_VARS": "n"})
    e.update(env or {})
    cmd = [antdt_run, "-n", str(ranks), "--restarts", str(restarts), "--", sys.executable, *argv]
    print("+", " ".join(cmd), flush=True)
    try:
        return subprocess.run(cmd, env=e, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        print(f"FAIL: the job did not finish within {timeout} s", flush=True)
        return 1
