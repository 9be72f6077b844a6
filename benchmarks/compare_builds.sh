#!/usr/bin/env bash
# A/B throughput of two source trees on one GPU, in one session: builds the
# tree at OLD (a directory holding another revision, e.g. from `git archive`)
# and this tree with benchmarks/h200_session.sh's build step, then runs the
# bench stage's bb-bench command for each model, alternating old and new
# ROUNDS times so drift of the machine hits both alike.
#   OLD=.oldtree ROUNDS=2 BENCH_MODELS="qwen3-0.6b qwen3-1.7b" benchmarks/compare_builds.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/bb_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/compare.txt") 2>&1
old=${OLD:?OLD=directory of the other tree}
for tree in "$old" .; do
  (cd "$tree" && BUILD=/tmp/bb_build_$(basename "$(realpath "$tree")") OUT=/tmp/bb_build_out bash benchmarks/h200_session.sh none) |
    grep -E "build:|error" | head -20
done
bench() {   # tree model
  local bin=/tmp/bb_build_$(basename "$(realpath "$1")")/bin
  (cd "$1" && timeout 300 "$bin/bb-bench" hf_path=configs/$2 backend.device=cuda bench.seq_len=4096 \
    bench.micro_batch_size=2 bench.num_microbatches=4 bench.steps=${BENCH_STEPS:-4} bench.warmup=2) | tail -1
}
for r in $(seq "${ROUNDS:-2}"); do
  for m in ${BENCH_MODELS:-qwen3-0.6b qwen3-1.7b}; do
    for tree in "$old" .; do
      echo "round $r $m $( [ "$tree" = . ] && echo new || echo old ): $(bench "$tree" "$m")"
    done
  done
done
