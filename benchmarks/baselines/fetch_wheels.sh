#!/usr/bin/env bash
# Downloads the wheels torchtitan_bench.py needs beside the GPU machine's own
# packages (torch 2.11, einops, safetensors, typing-extensions are there) into
# .whl/ at the repository root, and has git ignore that folder, so the device
# tool carries it (carry: [".whl"]). All are pure Python (py3-none-any):
#   torchtitan 0.3.0, spmd_types 0.2.3 (torchtitan pins it), tyro 1.0.17 (its
#   config classes), docstring_parser 0.18.0 and typeguard 4.4.4 (tyro's needs).
# torchtitan's other Requires-Dist (torchdata, datasets, wandb, torch_checkpointing,
# tensorboard, tokenizers, pillow) are not imported when it only builds and
# trains its models. On the GPU machine:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
dest="$root/.whl"
mkdir -p "$dest"
exclude="$(git -C "$root" rev-parse --git-common-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")"
grep -qxF "/.whl/" "$exclude" 2>/dev/null || echo "/.whl/" >> "$exclude"

python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$dest" \
  torchtitan==0.3.0 spmd_types==0.2.3 tyro==1.0.17 docstring_parser==0.18.0 typeguard==4.4.4
ls "$dest"
