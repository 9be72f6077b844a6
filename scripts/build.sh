#!/usr/bin/env bash
# Configures and builds Bumblebee into build/ (tools land in build/bin/).
# Parallelism follows the cores and memory of the machine (nvcc needs ~2 GB a job).
set -euo pipefail
cd "$(dirname "$0")/.."
cores=$(nproc)
mem_gb=$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)
jobs=$(( cores < mem_gb / 2 ? cores : mem_gb / 2 ))
(( jobs >= 1 )) || jobs=1
# With a CUDA toolkit, fetch the cudnn-frontend and CUTLASS headers (PyPI) for the cuDNN
# attention path and the CUTLASS grouped GEMM of the MoE experts.
if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc > /dev/null; then
  ./scripts/fetch_cuda_deps.sh || echo "build: cudnn-frontend / CUTLASS headers not fetched; cuDNN attention / CUTLASS grouped GEMM are left out"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$jobs"
