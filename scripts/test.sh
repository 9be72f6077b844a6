#!/usr/bin/env bash
# Sets up, builds and runs every test (CPU tests, MPI tests under mpirun), then the fuzz targets.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
FUZZ_SECONDS=20 ./scripts/fuzz.sh
