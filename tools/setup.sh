#!/usr/bin/env bash
# Installs the Debian packages that the build, the tests, the perf baselines and
# the demo need. Idempotent: runs apt-get only when something is missing.
# Runs as root, or through sudo when it exists. CUDA (/usr/local/cuda) is not
# installed here: without nvcc the build simply leaves the GPU path out.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libucx-dev ucx-utils libhwloc-dev libibverbs-dev libssl-dev
  libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev libgloo-dev
  nlohmann-json3-dev libcli11-dev
  libsqlite3-dev
  iproute2
  python3-torch libtorch-dev pybind11-dev python3-dev python3-matplotlib dataset-fashion-mnist
  clang-14 libclang-rt-14-dev
)

missing=()
for pkg in "${packages[@]}"; do
  if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup.sh: all ${#packages[@]} required packages are installed"
  exit 0
fi

if ((EUID == 0)); then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "setup.sh: missing packages (${missing[*]}), and installing them needs root or sudo" >&2
  exit 1
fi

echo "setup.sh: installing ${missing[*]}"
set -x
"${as_root[@]}" apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
