#!/usr/bin/env bash
# Fetches the header-only CUDA dependencies of the CUDA backend into
# third_party/ (git-ignored): the cudnn-frontend C++ headers, which the PyPI
# wheel nvidia-cudnn-frontend carries under include/. CMake enables the cuDNN
# attention backend (BB_ATTENTION_BACKEND=cudnn) only when these headers and
# libcudnn are found; without them the build has our flash attention alone.
#
#   scripts/fetch_cuda_deps.sh            fetch the pinned version
#   CUDNN_FRONTEND_VERSION=x.y.z scripts/fetch_cuda_deps.sh
set -euo pipefail

version="${CUDNN_FRONTEND_VERSION:-1.32.0}"
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/third_party/cudnn-frontend"

if [ -f "$dest/include/cudnn_frontend.h" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ]; then
  echo "cudnn-frontend $version already in $dest"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
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
