#!/usr/bin/env bash
# One session on an H200 machine: build the CUDA backend, then run the stages
# named on the command line (default: harness fixtures bench):
#   harness   CUDA-vs-CPU op harness (tests/cuda), forward and backward
#   perf      kernel timings (bb_cuda_ops --perf) beside PyTorch SDPA (benchmarks/baselines/sdpa_bench.py)
#   fixtures  bf16 bb-correctness on every HF fixture vs HF's float64 numbers
#   bench     bb-bench on the Qwen3-0.6B and Qwen3-1.7B architectures (seq 4096)
#   baseline  the PyTorch + HF transformers baseline (benchmarks/baselines) in the same session
#   parity    50-step bf16 parity against HF transformers (benchmarks/parity)
# Logs go to $OUT (or /tmp/bb_out); a short summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/bb_out}
mkdir -p "$OUT"
stages=${*:-harness fixtures bench}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
prefix=""
if [ ! -e /usr/include/x86_64-linux-gnu/cblas.h ] && [ ! -e /usr/include/cblas.h ] && [ -d .deps/usr ]; then
  prefix="-DCMAKE_PREFIX_PATH=$PWD/.deps/usr"
  export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/openblas-pthread:$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
t0=$(date +%s)
cmake -S . -B build-h200 -G Ninja -DCMAKE_BUILD_TYPE=Release $prefix > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
ninja -C build-h200 -j16 bb_cuda_ops bb-bench bb-correctness > "$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -80; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
bin=build-h200/bin

for stage in $stages; do
  echo "== $stage"
  case $stage in
    harness)
      timeout 240 $bin/bb_cuda_ops > "$OUT/harness.log" 2>&1; echo "exit $?"
      grep -E "FAIL|passed" "$OUT/harness.log" | tail -40 ;;
    perf)
      timeout 200 $bin/bb_cuda_ops --perf 2>&1 | tee "$OUT/perf.log" | grep -v "^$"
      timeout 150 python3 benchmarks/baselines/sdpa_bench.py 2>&1 | tee "$OUT/sdpa.log" ;;
    fixtures)
      for f in qwen3_gqa qwen3_mha_sharded qwen3_tp llama3_gqa llama3_tied_f16; do
        d=tests/fixtures/$f
        timeout 60 $bin/bb-correctness hf_path=$d tokens=$d/tokens.json device=cuda steps=5 optimizer.lr=0.01 \
          optimizer.adam_beta1=0.9 optimizer.adam_beta2=0.95 optimizer.weight_decay=0.1 > "$OUT/fix_$f.json" 2> "$OUT/fix_$f.err"
        python3 - "$d/reference.json" "$OUT/fix_$f.json" "$f" "$OUT/fix_$f.err" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))
try:
    o = json.load(open(sys.argv[2]))
except Exception:
    print(sys.argv[3], "FAILED:", open(sys.argv[4]).read()[-400:]); sys.exit()
rel = lambda a, b: abs(a - b) / abs(b)
pp = max(rel(o["per_param_grad_norm"][k], v) for k, v in ref["per_param_grad_norm"].items())
print(f"{sys.argv[3]:18s} bf16 vs HF f64: loss {rel(o['loss'], ref['loss']):.2e} grad_norm {rel(o['grad_norm'], ref['grad_norm']):.2e} "
      f"max per-param {pp:.2e} 5-step losses {max(rel(a, b) for a, b in zip(o['losses'], ref['losses'])):.2e}")
PY
      done ;;
    bench)
      for m in qwen3-0.6b qwen3-1.7b; do
        for rc in ${BB_RECOMPUTE:-none}; do
          timeout 300 $bin/bb-bench hf_path=configs/$m backend.device=cuda bench.seq_len=4096 bench.micro_batch_size=2 \
            bench.num_microbatches=4 bench.steps=${BENCH_STEPS:-4} bench.warmup=2 backend.recompute=$rc \
            output_json="$OUT/bench_${m}_$rc.json" 2>&1 | tee "$OUT/bench_${m}_$rc.log" | tail -3
        done
      done ;;
    baseline)
      timeout 400 python3 benchmarks/baselines/hf_train_bench.py --steps 4 --warmup 2 2>&1 | tee "$OUT/baseline.log" | grep "^{" ;;
    parity)
      [ -f /tmp/parity/hf_losses.json ] || timeout 200 python3 benchmarks/parity/hf_bf16_reference.py --out /tmp/parity > "$OUT/parity_hf.log" 2>&1 || tail -5 "$OUT/parity_hf.log"
      timeout 200 $bin/bb-correctness hf_path=/tmp/parity/model tokens=/tmp/parity/tokens.json device=cuda steps=50 \
        rows_per_step=8 optimizer.lr=1e-4 optimizer.adam_beta1=0.9 optimizer.adam_beta2=0.95 optimizer.adam_eps=1e-8 \
        optimizer.weight_decay=0.1 optimizer.clip_grad=1.0 > "$OUT/parity_bb.json" 2> "$OUT/parity_bb.err" || tail -5 "$OUT/parity_bb.err"
      cp /tmp/parity/hf_losses.json "$OUT/parity_hf.json"
      python3 - "$OUT/parity_hf.json" "$OUT/parity_bb.json" <<'PY'
import json, sys
hf, bb = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
dl = [abs(a - b) / b for a, b in zip(bb["losses"], hf["losses"])]
dg = [abs(a - b) / b for a, b in zip(bb["grad_norms"], hf["grad_norms"])]
print(f"parity over {len(dl)} steps: max loss diff {max(dl):.3%} (step {dl.index(max(dl))}), max grad-norm diff {max(dg):.3%}")
print("hf loss", [round(x, 4) for x in hf["losses"][::10]], "bb loss", [round(x, 4) for x in bb["losses"][::10]])
print("grad-norm diff per step (%):", [round(100 * x, 1) for x in dg])
print("hf grad norms", [round(x, 3) for x in hf["grad_norms"][::5]], "bb", [round(x, 3) for x in bb["grad_norms"][::5]])
PY
      ;;
  esac
done
