#!/usr/bin/env bash
# The README's main job: set up, build, and pretrain the tiny Qwen3 (~1M parameters,
# random init) on the shipped corpus on the CPU, with validation, logs and a loss plot.
# Extra arguments are recipe overrides, e.g. ./scripts/demo.sh train.steps=100
# Outputs land in runs/qwen3_tiny_pretrain/ (docs/training.md says what each file is).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
build/bin/bb-train recipe=recipes/qwen3_tiny_pretrain.json "$@"
echo "loss curve: runs/qwen3_tiny_pretrain/loss.svg; TensorBoard: .venv-ci/bin/tensorboard --logdir runs"
