#!/usr/bin/env bash
# Fetches the header-only CUDA dependencies of the CUDA backend into
# third_party/ (git-ignored):
#   cudnn-frontend: the C++ headers the PyPI wheel nvidia-cudnn-frontend carries
#     under include/. CMake enables the cuDNN attention backend
#     (BB_ATTENTION_BACKEND=cudnn) only when these headers and libcudnn are
#     found; without them the build has our flash attention alone.
#   cutlass: the CUTLASS 3 headers (cute/, cutlass/) the PyPI wheel
#     nvidia-cutlass carries under cutlass_library/source/include/. CMake builds
#     the sm_90a grouped GEMM of the MoE experts (BB_GROUPED_GEMM=cutlass) only
#     when they are there; without them grouped GEMMs run on cuBLAS.
#
#   scripts/fetch_cuda_deps.sh            fetch the pinned versions
#   CUDNN_FRONTEND_VERSION=x.y.z CUTLASS_VERSION=x.y.z.w scripts/fetch_cuda_deps.sh
set -euo pipefail

version="${CUDNN_FRONTEND_VERSION:-1.32.0}"
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/third_party/cudnn-frontend"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

fetch_cudnn_frontend() {
  if [ -f "$dest/include/cudnn_frontend.h" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ]; then
    echo "cudnn-frontend $version already in $dest"
    return 0
  fi
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "nvidia-cudnn-frontend==$version"
  wheel="$(ls "$tmp"/nvidia_cudnn_frontend-*.whl | head -n 1)"
  [ -n "$wheel" ] || { echo "fetch_cuda_deps: no nvidia-cudnn-frontend wheel downloaded" >&2; exit 1; }
  python3 - "$wheel" "$tmp/unpacked" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])
PY
  [ -f "$tmp/unpacked/include/cudnn_frontend.h" ] || { echo "fetch_cuda_deps: the wheel has no include/cudnn_frontend.h" >&2; exit 1; }
  rm -rf "$dest"
  mkdir -p "$dest"
  mv "$tmp/unpacked/include" "$dest/include"
  echo "$version" > "$dest/VERSION"
  echo "cudnn-frontend $version headers in $dest/include"
}

# The CUTLASS headers: the wheel's cutlass_library/source/include/{cute,cutlass}
# become third_party/cutlass/include/{cute,cutlass}.
fetch_cutlass() {
  local version="${CUTLASS_VERSION:-4.2.0.0}" dest="$root/third_party/cutlass" prefix="cutlass_library/source/include/"
  if [ -f "$dest/include/cutlass/cutlass.h" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ]; then
    echo "cutlass $version already in $dest"
    return 0
  fi
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp/cutlass" "nvidia-cutlass==$version"
  local wheel
  wheel="$(ls "$tmp"/cutlass/nvidia_cutlass-*.whl | head -n 1)"
  [ -n "$wheel" ] || { echo "fetch_cuda_deps: no nvidia-cutlass wheel downloaded" >&2; exit 1; }
  python3 - "$wheel" "$tmp/cutlass/include" "$prefix" <<'PY'
import os, sys, zipfile
wheel, out, prefix = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            path = os.path.join(out, name[len(prefix):])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(z.read(name))
PY
  [ -f "$tmp/cutlass/include/cutlass/cutlass.h" ] || { echo "fetch_cuda_deps: the wheel has no $prefix/cutlass/cutlass.h" >&2; exit 1; }
  rm -rf "$dest"
  mkdir -p "$dest"
  mv "$tmp/cutlass/include" "$dest/include"
  echo "$version" > "$dest/VERSION"
  echo "cutlass $version headers in $dest/include"
}

fetch_cudnn_frontend
fetch_cutlass
