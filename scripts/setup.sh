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
# The tensorboard package, for the test that reads bb-train's event files with TensorBoard itself.
venv="$(cd "$(dirname "$0")/.." && pwd)/.venv-ci"
if [ ! -x "$venv/bin/tensorboard" ]; then
  echo "setup: creating $venv with tensorboard"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q tensorboard
fi
