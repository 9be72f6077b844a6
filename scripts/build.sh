#!/usr/bin/env bash
# Configures and builds Bumblebee into build/ (tools land in build/bin/).
# Parallelism follows the cores and memory of the machine (nvcc needs ~2 GB a job).
set -euo pipefail
cd "$(dirname "$0")/.."
cores=$(nproc)
mem_gb=$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)
jobs=$(( cores < mem_gb / 2 ? cores : mem_gb / 2 ))
(( jobs >= 1 )) || jobs=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$jobs"
