#!/usr/bin/env bash
# Fashion-MNIST under a real straggler (docs/torch.md, "Straggler tools"): a small CNN
# on 4 ranks of this machine (one intra-op thread each), rank 2 throttled by the kernel
# to a third of its CPU share (a cgroup v1 cpu quota; never ANTDT_INJECT). Runs, one
# after the other:
#   gloo-ddp      plain DDP on the gloo backend (what a PyTorch user has today)
#   antdt-bsp     the Agent with ANTDT_POLICY=bsp (DDS samples, every step waits)
#   antdt-dd      ANTDT_POLICY=antdt-dd: local batches by speed, gradient accumulation above the cap
#   antdt-nd      ANTDT_POLICY=antdt-nd: drop late contributions, re-split, restart the straggler
#                 (its new process is not throttled: "moved to a healthy node")
#   no-straggler  antdt-bsp without the quota: the ceiling
# then prints the table (time to --target accuracy, final accuracy, samples/s, efficiency
# = samples/s over no-straggler's) and writes PNG plots (tools/fashion_mnist_report.py).
#
#   tools/fashion_mnist_demo.sh [--epochs E] [--full] [--runs "gloo-ddp antdt-dd ..."]
#                               [--repeat N] [--target ACC] [--out DIR] [--build DIR]
#                               [--dd-config JSON]
# --dd-config: antdt-dd's ANTDT_POLICY_CONFIG (default {"micro_batch_cap":32}).
# --full: 4 epochs instead of 1 (about 4x longer). The quota is always removed on exit.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ANTDT_BUILD_DIR:-$repo/build}"
epochs=1
runs="gloo-ddp antdt-bsp antdt-dd antdt-nd no-straggler"
repeat=1
target=0.80
out=""
dd_config='{"micro_batch_cap":32}'
ranks=4
slow_rank=2
while (($#)); do
  case "$1" in
    --epochs) epochs="$2"; shift 2 ;;
    --full) epochs=4; shift ;;
    --runs) runs="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --target) target="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --dd-config) dd_config="$2"; shift 2 ;;
    *) echo "fashion_mnist_demo.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
out="${out:-$build/fashion-mnist}"
python=/usr/bin/python3
[[ -x "$build/tools/antdt-run" && -f "$build/python/antdt/agent.py" ]] ||
  { echo "fashion_mnist_demo.sh: build antdt-run and antdt_python first (tools/demo.sh does)" >&2; exit 1; }

# The straggler: a cgroup v1 cpu group whose quota is a third of one rank's share of the cores.
cpu_root=/sys/fs/cgroup/cpu
group="$cpu_root/antdt-pytrain-demo-$$"
cleanup() {
  if [[ -d "$group" ]]; then
    # Whatever is still in the group goes back to the root group, then the group goes.
    while read -r pid; do echo "$pid" > "$cpu_root/cgroup.procs" 2>/dev/null || true; done < "$group/cgroup.procs"
    rmdir "$group" 2>/dev/null || echo "fashion_mnist_demo.sh: could not remove $group" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [[ ! -w "$cpu_root" ]]; then
  echo "fashion_mnist_demo.sh: $cpu_root is not a writable cgroup v1 cpu hierarchy (run as root where it is mounted)" >&2
  exit 1
fi
mkdir "$group"
cores="$(nproc)"
period=100000
quota=$((period * cores / ranks / 3))
echo "$period" > "$group/cpu.cfs_period_us"
echo "$quota" > "$group/cpu.cfs_quota_us"
echo "fashion_mnist_demo.sh: rank $slow_rank throttled to $quota/$period us of CPU (a third of its share of $cores cores)"

free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=1 UCX_WARN_UNUSED_ENV_VARS=n
mkdir -p "$out"
dirs=()
for ((i = 1; i <= repeat; i++)); do
  for run in $runs; do
    label="$run"; ((repeat > 1)) && label="$run.$i"
    dir="$out/$label"
    rm -rf "$dir"
    slow=(--slow-cgroup "$group" --slow-rank "$slow_rank")
    policy=bsp mode=antdt config='{}'
    case "$run" in
      gloo-ddp) mode=ddp ;;
      antdt-bsp) ;;
      antdt-dd) policy=antdt-dd config="$dd_config" ;;
      antdt-nd) policy=antdt-nd ;;
      no-straggler) slow=() ;;
      *) echo "fashion_mnist_demo.sh: unknown run '$run'" >&2; exit 2 ;;
    esac
    echo "== $label (mode $mode, ANTDT_POLICY=$policy $config, $epochs epochs)"
    MASTER_ADDR=127.0.0.1 MASTER_PORT="$(free_port)" ANTDT_POLICY="$policy" ANTDT_POLICY_CONFIG="$config" \
      "$build/tools/antdt-run" -n "$ranks" --restarts 2 -- "$python" "$repo/tools/train_fashion_mnist.py" \
      --mode "$mode" --epochs "$epochs" --label "$label" --out "$dir" ${slow[@]+"${slow[@]}"}
    dirs+=("$dir")
  done
done
"$python" "$repo/tools/fashion_mnist_report.py" --target "$target" --out "$out" "${dirs[@]}"
