#!/usr/bin/env bash
# Builds, here, everything the GPU check runs, and packs it with the shared
# libraries it needs into one folder that can travel to a GPU machine on which
# nothing can be installed (the lent H100/H200 machines are described as
# having CUDA, CMake and ninja, but not UCX, hwloc, libibverbs, GoogleTest,
# CLI11, nlohmann-json or Open MPI, and they reach no package registry). There,
#   ANTDT_GPU_PREBUILT=gpu-bundle tools/gpu-check.sh
# runs the check from the folder without building anything (docs/gpu.md#the-gpu-check).
#
# usage: tools/gpu-bundle.sh [DIR]          (default: <repo>/gpu-bundle, ignored by git)
#   ANTDT_GPU_ARCH        CUDA architectures to build (default 90: H100/H200; e.g. "80;90")
#   ANTDT_GPU_BUNDLE_BUILD build directory (default: <repo>/build-gpu-bundle; reused)
#   ANTDT_GPU_BUNDLE_MAX_MB refuse a bundle larger than this (default 60: the device tool
#                          carries at most 64 MiB with the working tree)
# The folder holds bin/ (stripped programs), lib/ (every shared library they load
# that is not part of the C library or the GPU driver, and UCX's and hwloc's
# plugins), env.sh (the variables that make the programs find them) and
# MANIFEST (commit, architectures, newest glibc symbol version needed, sizes).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$repo/gpu-bundle}"
build="${ANTDT_GPU_BUNDLE_BUILD:-$repo/build-gpu-bundle}"
arch="${ANTDT_GPU_ARCH:-90}"
max_mb="${ANTDT_GPU_BUNDLE_MAX_MB:-60}"
programs=(cuda/antdt_gpu_tests perf/antdt_reduce_kernel_bench perf/antdt_allreduce_perf
  perf/antdt_allreduce_device_perf perf/antdt_pushpull_perf tools/antdt-run
  collectives/api/nccl/libantdt_nccl.so tests/nccl/antdt_nccl_client perf/nccl_allreduce_perf)

if [[ -z "${CUDACXX:-}" && -x /usr/local/cuda/bin/nvcc ]]; then export CUDACXX=/usr/local/cuda/bin/nvcc; fi
command -v "${CUDACXX:-nvcc}" >/dev/null || { echo "gpu-bundle: no nvcc (set CUDACXX)" >&2; exit 1; }

echo "gpu-bundle: building in $build (CUDA architectures $arch)"
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DANTDT_WITH_CUDA=ON \
  -DANTDT_CUDA_ARCHITECTURES="$arch" -DCMAKE_CUDA_ARCHITECTURES="$arch" -DANTDT_BUILD_TESTS=ON \
  -DANTDT_BUILD_PERF=ON >/dev/null
targets=()
for p in "${programs[@]}"; do
  t="$(basename "$p")"
  [[ "$t" == lib*.so ]] && t="${t#lib}" && t="${t%.so}"  # libantdt_nccl.so: target antdt_nccl
  targets+=("$t")
done
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for p in "${programs[@]}"; do
  install -m 755 "$build/$p" "$out/bin/"
  strip --strip-unneeded "$out/bin/$(basename "$p")"
done

# The C library, the dynamic loader and the GPU driver come from the machine
# that runs the bundle (the driver must match its kernel module); everything
# else travels, libstdc++ included (the GPU machine's may be older).
is_base() {
  case "$1" in
    linux-vdso.so* | ld-linux*.so* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | \
      libresolv.so* | libutil.so* | libcuda.so* | libnvidia-*.so*) return 0 ;;
  esac
  return 1
}

# Copies every non-base library `file` loads (transitively: ldd resolves the
# whole tree) into lib/.
copy_needed() {
  local file="$1" name path
  while read -r name _ path _; do
    [[ "$path" == /* ]] || continue
    is_base "$name" && continue
    [[ -e "$out/lib/$name" ]] && continue
    cp -L "$path" "$out/lib/$name"
    chmod 644 "$out/lib/$name"
    strip --strip-unneeded "$out/lib/$name" 2>/dev/null || true
  done < <(LD_LIBRARY_PATH="$build:${LD_LIBRARY_PATH:-}" ldd "$file" | awk '/=>/ {print $1, "=>", $3, "x"}')
  if LD_LIBRARY_PATH="$build:${LD_LIBRARY_PATH:-}" ldd "$file" | grep -q "not found"; then
    echo "gpu-bundle: $file needs a library that is not found here:" >&2
    ldd "$file" | grep "not found" >&2
    exit 1
  fi
}
for p in "$out"/bin/*; do copy_needed "$p"; done

# Plugins loaded at run time (dlopen, so ldd does not see them), with their
# own needs: UCX's cross-memory-attach transport (shared-memory rendezvous
# between processes) and hwloc's PCI discovery (GPUs and NICs in the
# topology). Not UCX's InfiniBand/RDMA-CM transports (no RDMA on a one-GPU
# machine) nor hwloc's OpenGL/OpenCL/libxml2 components (X11 and ICU: 40 MiB).
multiarch="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
for plugin in "ucx/libuct_cma.so" "hwloc/hwloc_pci.so"; do
  so="/usr/lib/$multiarch/$plugin"
  [[ -e "$so" ]] || continue
  mkdir -p "$out/lib/$(dirname "$plugin")"
  cp -L "$so" "$out/lib/$plugin"
  # UCX looks for the versioned name.
  [[ "$plugin" == ucx/* ]] && cp "$out/lib/$plugin" "$out/lib/$plugin.0"
  copy_needed "$so"
done

# The C++ runtime goes apart (lib/cxx): it is used only where the machine's
# own is older than the programs need, since the bundled one needs this
# machine's glibc, which may be newer than the GPU machine's.
mkdir -p "$out/lib/cxx"
for cxx in libstdc++.so.6 libgcc_s.so.1; do
  if [[ -e "$out/lib/$cxx" ]]; then mv "$out/lib/$cxx" "$out/lib/cxx/"; fi
done
glibcxx_needed="$(find "$out/bin" "$out/lib" -path "$out/lib/cxx" -prune -o -type f -exec objdump -T {} + 2>/dev/null |
  grep -o 'GLIBCXX_[0-9.]*' | sort -V | uniq | tail -1 || true)"
echo "${glibcxx_needed:-GLIBCXX_3.4}" >"$out/lib/cxx/GLIBCXX_NEEDED"

cat >"$out/env.sh" <<'ENVEOF'
# Sourced by tools/gpu-check.sh (ANTDT_GPU_PREBUILT): the bundle's libraries
# and plugins first, whatever the machine has; its C++ runtime only when the
# machine's lacks the version the programs need.
bundle_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PATH="$bundle_dir/bin:$PATH"
export LD_LIBRARY_PATH="$bundle_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
system_cxx="$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')"
if [[ -z "$system_cxx" ]] || ! grep -qa "$(cat "$bundle_dir/lib/cxx/GLIBCXX_NEEDED")" "$system_cxx"; then
  export LD_LIBRARY_PATH="$bundle_dir/lib/cxx:$LD_LIBRARY_PATH"
fi
if [[ -d "$bundle_dir/lib/ucx" ]]; then export UCX_MODULE_DIR="$bundle_dir/lib/ucx"; fi
if [[ -d "$bundle_dir/lib/hwloc" ]]; then export HWLOC_PLUGINS_PATH="$bundle_dir/lib/hwloc"; fi
ENVEOF

# The newest glibc symbol version the programs and their libraries need (the
# C++ runtime aside): the GPU machine's C library must be at least that
# (gpu-check.sh compares).
glibc_needed="$(find "$out/bin" "$out/lib" -path "$out/lib/cxx" -prune -o -type f -exec objdump -T {} + 2>/dev/null |
  grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -k3,3n | uniq | tail -1 || true)"
size_mb="$(du -sm "$out" | cut -f1)"
{
  echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "built: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname)"
  echo "cuda_architectures: $arch"
  echo "nvcc: $("${CUDACXX:-nvcc}" --version | tail -1)"
  echo "glibc_needed: ${glibc_needed:-unknown}"
  echo "glibcxx_needed: ${glibcxx_needed:-unknown} (lib/cxx is used where the machine's libstdc++ lacks it)"
  echo "size_mb: $size_mb"
  echo "programs: $(cd "$out/bin" && echo *)"
  echo "libraries: $(cd "$out/lib" && find . -name '*.so*' | sed 's|^\./||' | sort | tr '\n' ' ')"
} >"$out/MANIFEST"
cat "$out/MANIFEST"
if ((size_mb > max_mb)); then
  echo "gpu-bundle: $out is ${size_mb} MiB, more than ${max_mb} MiB (ANTDT_GPU_BUNDLE_MAX_MB)" >&2
  exit 1
fi
echo "gpu-bundle: ready in $out"
