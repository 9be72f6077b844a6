#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ (clang, address + undefined-behaviour
# sanitizers) into build-fuzz/ and runs each one for a bounded time, starting from its
# committed seeds in tests/fuzz/corpus/<target>/. Every target runs; the script fails
# when any of them had a finding (each target stops at its first one): a crash,
# a sanitizer report, a leak, an exception other than bb::Error, a run over
# FUZZ_TIMEOUT seconds or one over FUZZ_RSS_MB of memory. A finding's input is kept
# as build-fuzz/findings/<target>/crash-* (or leak-*, timeout-*, oom-*); replay it with
#   build-fuzz/<target> build-fuzz/findings/<target>/crash-...
# Usage: scripts/fuzz.sh [target ...]   (default: every target)
# FUZZ_SECONDS (default 20) is the time per target; new inputs found go to
# build-fuzz/corpus/<target>/, never into the committed seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-20}"
timeout_s="${FUZZ_TIMEOUT:-10}"
rss_mb="${FUZZ_RSS_MB:-2048}"
cxx="${FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}"
[ -n "$cxx" ] || { echo "fuzz: clang++ not found (scripts/setup.sh installs clang and libFuzzer)" >&2; exit 1; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S tests/fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" >/dev/null
cmake --build build-fuzz -j "$(nproc)"

if (($#)); then
  targets=("$@")
else
  targets=()
  for src in tests/fuzz/*.cpp; do targets+=("$(basename "$src" .cpp)"); done
fi
failed=()
for t in "${targets[@]}"; do
  [ -d "tests/fuzz/corpus/$t" ] || { echo "fuzz: no seed corpus tests/fuzz/corpus/$t" >&2; exit 1; }
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/findings/$t"
  echo "fuzz: $t for ${seconds}s"
  # The first corpus folder receives new inputs; the committed seeds are only read.
  if ! "build-fuzz/$t" "build-fuzz/corpus/$t" "tests/fuzz/corpus/$t" -dict=tests/fuzz/json.dict \
      -max_total_time="$seconds" -timeout="$timeout_s" -rss_limit_mb="$rss_mb" \
      -artifact_prefix="build-fuzz/findings/$t/" -print_final_stats=1 >"build-fuzz/$t.log" 2>&1; then
    tail -n 60 "build-fuzz/$t.log" >&2
    echo "fuzz: FINDING in $t; input kept in build-fuzz/findings/$t/, log in build-fuzz/$t.log" >&2
    failed+=("$t")
    continue
  fi
  grep -E "^(Done|stat::number_of_executed_units)" "build-fuzz/$t.log" | tail -n 1
done
if ((${#failed[@]})); then
  echo "fuzz: findings in ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: no findings in ${#targets[@]} targets"
