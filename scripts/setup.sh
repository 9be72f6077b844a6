#!/usr/bin/env bash
# Installs what Bumblebee needs to build and test on Debian/Ubuntu, skipping
# what is already there. Needs root (or sudo). The CUDA toolkit is optional:
# with /usr/local/cuda present the CUDA backend is built too.
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config libopenblas-dev libopenmpi-dev openmpi-bin
          nlohmann-json3-dev libgtest-dev libpcre2-dev libutf8proc-dev python3 python3-venv
          clang libclang-rt-dev)   # clang + libFuzzer (libclang-rt-dev) for scripts/fuzz.sh
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# A venv for the Python-side tests: tensorboard (reads bb-train's event files in
# one test) and the Python bindings' build and test needs (python/CMakeLists.txt
# builds the module for this venv's Python when nanobind is in it).
venv="$(cd "$(dirname "$0")/.." && pwd)/.venv-ci"
py_packages=(tensorboard nanobind==2.9.2 numpy==2.3.4 scikit-build-core==0.11.6 pytest==8.4.2)
[ -x "$venv/bin/python" ] || { echo "setup: creating $venv"; python3 -m venv "$venv"; }
if ! "$venv/bin/python" - "${py_packages[@]}" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
for spec in sys.argv[1:]:
    name, _, pinned = spec.partition("==")
    installed = version(name)   # raises when missing
    assert pinned in ("", installed)
PY
  echo "setup: installing ${py_packages[*]} into $venv"
  "$venv/bin/pip" install -q "${py_packages[@]}"
fi
