#!/usr/bin/env bash
# One session on an H200 machine: build the CUDA backend, then run the stages
# named on the command line (default: harness fixtures bench):
#   harness   CUDA-vs-CPU op harness (tests/cuda), forward and backward
#   perf      kernel timings (bb_cuda_ops --perf) beside PyTorch SDPA (benchmarks/baselines/sdpa_bench.py; PERF_SDPA=0 skips it);
#             PERF_FILTER=rmsnorm,moe_dispatch times only those groups; PERF_VARIANTS runs it once per
#             variant, each comma-separated VAR=VALUE settings or "default" (e.g. PERF_VARIANTS="default
#             BB_FLASH_SM90_SECTION_FLOOR=1 BB_FLASH_SM90_SECTION_FLOOR=1.5")
#   ncu       Nsight Compute on kernels of bb_cuda_ops --perf: NCU_KERNELS (a regex over kernel names, e.g.
#             "rmsnorm_backward_team|sum_partials") in the groups NCU_FILTER picks (as PERF_FILTER): NCU_COUNT
#             matching launches (default 2) after the first NCU_SKIP (default 0; a perf line launches its kernels
#             13 times), full set at the GPU's own clocks; details page to ncu_details.txt, report ncu.ncu-rep;
#             NCU_NAME_BASE=demangled matches the regex against names with their template arguments;
#             BB_PERF_LINE (bb_cuda_ops' line selector) leaves one attention line's kernels alone, e.g.
#             NCU_KERNELS=. NCU_COUNT=6 BB_PERF_LINE="attention_backward[flash] seq=4096 x 1 Hq=128" ncu
#   cudnn_variants  cuDNN SDPA backward by graph variant (benchmarks/cudnn_sdpa_variants.cu: ragged or dense, padding
#             mask, causal alignment, layout) with the system cuDNN and with PyTorch's
#   gg_tiles  CUTLASS grouped GEMM tile configurations at the MoE expert shapes (benchmarks/grouped_gemm_tiles.cu):
#             every configuration built at once (GG_CONFIGS picks, default 0 to 8), then each run, a log each
#   fixtures  bf16 bb-correctness on every HF fixture vs HF's float64 numbers; FIXTURE_ARGS adds keys (e.g.
#             optimizer.main_grads_dtype=bf16)
#   bench     bb-bench on the Qwen3-0.6B, Qwen3-1.7B and Qwen3-8B (12 layers) architectures (seq 4096, 32,768
#             tokens a step; BENCH_MODELS picks, NAME:L for the first L layers, NAME@B for micro-batches of B
#             sequences, default 2; the default list runs 0.6B at 4, as torchtitan's peer does);
#             BENCH_PROFILE=N adds N profiled steps: where a step's device time goes, per op;
#             BENCH_VARIANTS="base NAME ..." runs each with BENCH_ARGS_NAME's extra keys (also moe_bench; bf16all and
#             bf16grads are preset)
#   longctx   long context on one GPU: the Qwen3-1.7B architecture, one sequence per step, at seq 32768 and
#             65536 (LONGCTX_SEQS) with recompute (LONGCTX_MODES: mode[:modules], e.g. selective:core_attn,mlp),
#             then HF transformers with activation checkpointing at the longest of LONGCTX_HF_SEQS that fits
#   baseline  the PyTorch + HF transformers baseline (benchmarks/baselines) in the same session, same models;
#             BASELINE_ARGS adds arguments (e.g. --steps 4 --warmup 2)
#   parity    50-step bf16 parity against HF transformers (benchmarks/parity): bb with an fp32 and a bf16
#             residual stream against HF under autocast, and HF with a bf16 residual stream against both
#   moe_parity the same 50 steps on a ~100M-parameter Qwen3-MoE (16 experts, top-4; hf_bf16_reference.py
#             --model moe): bb (fp32 and bf16 residual stream) against HF under autocast, loss within 2 %
#             at every step
#   dsv3_parity the same 50 steps on an 88M-parameter DeepSeek-V3-shaped model (MLA, group-limited sigmoid
#             routing, a shared expert; hf_bf16_reference.py --model dsv3), loss within 2 % at every step
#   dsv3_bench bb-bench and HF transformers (grouped_mm experts) on the DeepSeek-V3 architecture at its real widths,
#             4 layers, 16 routed experts and the first layer dense (configs/deepseek-v3 with model overrides; 5.24B
#             parameters), seq 4096, 1 x 4096 tokens a microbatch, 4 microbatches; BENCH_PROFILE=N profiled steps
#   moe_bench bb-bench on the Qwen3-30B-A3B architecture cut to MOE_LAYERS layers (default 4), 2 x 4096
#             tokens a microbatch, 4 microbatches; BENCH_PROFILE=N profiled steps
#   moe_fit   the largest cut of the same architecture that trains on the GPU, per variant (BENCH_VARIANTS, default
#             "bf16grads base"): the layer counts of MOE_FIT_LAYERS_NAME tried largest first, the first that runs
#             reported with its memory breakdown
#   peers     the PyTorch peers on the same machine (benchmarks/baselines): torchtitan 0.3.0 (wheels in .whl/,
#             made by benchmarks/baselines/fetch_wheels.sh and carried) on Qwen3-0.6B mb 4, 1.7B mb 2, 8B
#             (12 layers) mb 2, 30B-A3B (4 layers) mb 2, and HF transformers on 30B-A3B (4 layers, grouped_mm
#             experts); PEERS picks runs (tt-0.6b tt-1.7b tt-8b tt-30b-a3b hf-30b-a3b), PEER_STEPS the timed
#             steps (default 5); compiling takes minutes a run, so one 10-minute call holds about two of them
#   sft       bb-train SFT on the Qwen3-1.7B architecture (random init, data/chat.jsonl in Qwen3's chat template,
#             seq 4096, 8 rows a step, SFT_STEPS steps, default 8): full fine-tuning (recipes/qwen3_1.7b_sft_full.json)
#             and LoRA rank 16 on all linear layers (recipes/qwen3_1.7b_sft_lora.json; needs the peft.* keys);
#             tokens/s, trained tokens and peak memory (final_metrics.json) into results.jsonl
#   offload   bb-bench on the Qwen3-1.7B architecture, then its state offloaded to pinned host memory and
#             back (Runtime::to): seconds each way and the driver's free device memory before and after
#   optoff    optimizer-state offload (optimizer.offload_fraction): bb-bench on the Qwen3-1.7B architecture at
#             f = 0, 0.5, 1 (OFFLOAD_FRACTIONS picks), seq 4096, 2 x 4 microbatches: tokens/s, step_ms, the
#             device peak and the host-resident optimizer state, one results.jsonl line each
#   export    Python export_weights (benchmarks/export_weights_bench.py): the Qwen3-1.7B architecture (random
#             init, bf16) streamed in 512 MiB buckets to host numpy (pinned buckets) and, with torch, into
#             tensors on the same GPU from those (gpu_tensor) and from device buckets via DLPack (gpu_dlpack);
#             seconds and GB/s into results.jsonl. Builds the _bumblebee module for python3, which needs
#             nanobind importable (NANOBIND_PATH=DIR adds a carried copy's folder to PYTHONPATH)
#   resume    training resumed from a checkpoint on the GPU at the same layout (RESUME_MODELS: fixtures qwen3_gqa,
#             qwen3_moe_fused and the 100M parity model):
#             6 steps straight (twice) against 3 steps, a save, and a fresh process resuming; losses compared bitwise
#   variants  kernel variants in one call: VARIANTS="NAME:PATCH[,PATCH...] ..." (patch files in the tree, e.g.
#             made by `git diff main...BRANCH > .h200/b.patch`); for each, its patches applied, bb_cuda_ops rebuilt
#             in the same build directory, the harness (HARNESS_FILTER) and perf lines (PERF_FILTER) run, and the
#             patches taken out again; logs per variant (build_NAME.log, harness_NAME.log, perf_NAME.log)
#   gpu_unit  the CPU test binary's cases that need a GPU (NCCL on one GPU, CUDA dispatch), which skip in CI
#   sanitizer compute-sanitizer memcheck (both attention backends) and racecheck (our kernels) on a
#             5-step bf16 training run of a tiny fixture
# Stages for two GPUs (nvidia-h200-x2), one MPI rank per GPU, collectives over NCCL:
#   nccl      the MPI test binary (tests/mpi) with its NCCL cases
#   hfload    20 steps, HF export, the export loaded by HF transformers: logits compared (dense, MoE)
#   peftload  a LoRA adapter trained 20 steps by bb, loaded by HF peft onto the base model: logits compared
#   curves    50-step bf16 loss curves of the parity model: one GPU, tp=2, dp=2 (and HF's)
#   dpscale   Qwen3-1.7B throughput on one GPU and at dp=2, with the time in collectives
#   tp8b      the Qwen3-8B architecture at tp=2 (TP8B_LAYERS layers, default 36), MFU and collective time
# Stages bench, offload, optoff, moe_bench, longctx, sft, export, baseline and peers also append one JSON line per run to $OUT/results.jsonl;
# peers, baseline, cudnn_variants and gg_tiles alone skip building bb.
set -uo pipefail
cd "$(dirname "$0")/.."
# What comes back from a device call: $OUT/summary.txt (everything printed) and
# $OUT/logs.tgz (every log, refreshed after each stage, so a call cut short
# still returns what its finished stages wrote).
OUT=${OUT:-/tmp/bb_out}
LOGS=${LOGS:-$(mktemp -d)}
mkdir -p "$OUT" "$LOGS"
exec > >(tee -a "$OUT/summary.txt") 2>&1
stages=${*:-harness fixtures bench}
build=${BUILD:-build-h200}   # BUILD=/tmp/... keeps the build between calls on a warm machine
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
# PyTorch runs with the library path it was installed for: the NCCL and BLAS
# directories prepended below for bb would hand it other CUDA libraries (the
# baseline measured 11 % slower in eager and 45 % slower compiled that way).
py="env LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} python3"
prefix=""
# .deps/usr: Debian packages unpacked here and carried (scripts/fetch_device_deps.sh: PCRE2 and utf8proc,
# which the GPU image lacks and bb-train's tokenizer.json loading needs).
if [ -d .deps/usr ]; then
  prefix="-DCMAKE_PREFIX_PATH=$PWD/.deps/usr"
  export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/openblas-pthread:$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
# The image has NCCL only inside PyTorch's environment (nvidia-nccl wheel).
nccl=""
nccl_h=$(find /usr/include /usr/local/cuda/include /opt/torch/.venv/lib -name nccl.h -path "*nccl*" 2>/dev/null | head -1)
if [ -n "$nccl_h" ]; then
  nccl_dir=$(dirname "$(dirname "$nccl_h")")
  nccl_lib=$(ls "$nccl_dir"/lib/libnccl.so* /usr/local/cuda/lib64/libnccl.so* /usr/lib/x86_64-linux-gnu/libnccl.so* 2>/dev/null | head -1)
  [ -n "$nccl_lib" ] && nccl="-DBB_NCCL_INCLUDE=$(dirname "$nccl_h") -DBB_NCCL_LIB=$nccl_lib" &&
    export LD_LIBRARY_PATH=$(dirname "$nccl_lib"):${LD_LIBRARY_PATH:-}
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# The stages run under a sampler of the GPU's SM clock, power and clock event reasons, four times a second
# into $OUT/clocks.csv (SAMPLE_CLOCKS=0 leaves it out): training runs at the power cap, and this is the one
# record of the peers' clocks. At the end, benchmarks/clock_segments.py prints each run's busy span.
if [ "${SAMPLE_CLOCKS:-1}" = 1 ]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 250 > "$OUT/clocks.csv" 2>&1 &
  clock_sampler=$!
  trap 'kill $clock_sampler 2>/dev/null; python3 benchmarks/clock_segments.py "$OUT/clocks.csv"' EXIT
fi
# Stages that run only the PyTorch peers need no build of bb.
needs_bb=0
for stage in $stages; do case $stage in peers|baseline|cudnn_variants|gg_tiles) ;; *) needs_bb=1 ;; esac; done
if [ $needs_bb = 1 ]; then
  t0=$(date +%s)
  python_cfg=""
  case " $stages " in *" export "*)
    export PYTHONPATH=${NANOBIND_PATH:+$NANOBIND_PATH:}${PYTHONPATH:-}
    python_cfg="-DPython_EXECUTABLE=$(command -v python3)" ;; esac
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release $prefix $nccl $python_cfg > "$LOGS/cmake.log" 2>&1 || { tail -30 "$LOGS/cmake.log"; exit 1; }
  grep "Bumblebee:" "$LOGS/cmake.log"
  targets="bb_cuda_ops bb-bench bb-correctness"
  case " $stages " in *" sft "*) targets="$targets bb-train" ;; esac
  case " $stages " in *" nccl "*) targets="$targets bb_mpi_tests" ;; esac
  case " $stages " in *" gpu_unit "*) targets="$targets bb_tests bb-convert" ;; esac
  case " $stages " in *" export "*) grep -q "Python bindings for" "$LOGS/cmake.log" && targets="$targets _bumblebee" ;; esac
  ninja -C "$build" -j$(nproc) $targets > "$LOGS/build.log" 2>&1 || { grep -E "error" -A3 "$LOGS/build.log" | head -80; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
  cp "$build/.ninja_log" "$LOGS/ninja_log.txt"  # each unit's compile time, for the build's critical path
fi
bin=$build/bin
mpi2="mpirun --allow-run-as-root -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH${BB_ATTENTION_BACKEND:+ -x BB_ATTENTION_BACKEND}"
bench_1p7b="hf_path=configs/qwen3-1.7b backend.device=cuda bench.seq_len=4096 bench.micro_batch_size=2 bench.num_microbatches=4 bench.warmup=2"
# The parity model and tokens, made by HF transformers (benchmarks/parity).
parity_model() {
  [ -f /tmp/parity/hf_losses.json ] || timeout 200 $py benchmarks/parity/hf_bf16_reference.py --out /tmp/parity > "$LOGS/parity_hf.log" 2>&1 || tail -5 "$LOGS/parity_hf.log"
}
parity_train="backend.device=cuda steps=50 rows_per_step=8 optimizer.lr=1e-4 optimizer.adam_beta1=0.9 optimizer.adam_beta2=0.95 optimizer.adam_eps=1e-8 optimizer.weight_decay=0.1 optimizer.clip_grad=1.0"
parity_args="hf_path=/tmp/parity/model tokens=/tmp/parity/tokens.json $parity_train"
# The 50-step bf16 parity of an MoE model of hf_bf16_reference.py (moe, dsv3): HF's run made once per machine,
# bb with an fp32 and a bf16 residual stream, each loss within 2 % of HF's at every step.
moe_parity() {  # MODEL
  local d=/tmp/parity_$1 stage=$1_parity
  [ -f $d/hf_losses.json ] || timeout 300 $py benchmarks/parity/hf_bf16_reference.py --model $1 \
    --out $d > "$LOGS/${stage}_hf.log" 2>&1 || tail -5 "$LOGS/${stage}_hf.log"
  cp $d/hf_losses.json "$LOGS/${stage}_hf.json"
  for res in fp32 bf16; do
    flag=false; [ $res = fp32 ] && flag=true
    timeout 300 $bin/bb-correctness hf_path=$d/model tokens=$d/tokens.json $parity_train \
      backend.fp32_residual_connection=$flag > "$LOGS/${stage}_bb_res$res.json" 2> "$LOGS/${stage}_bb_res$res.err" ||
      tail -5 "$LOGS/${stage}_bb_res$res.err"
  done
  python3 benchmarks/parity/compare_runs.py --loss-bound 0.02 hf="$LOGS/${stage}_hf.json" \
    bb_fp32_residual="$LOGS/${stage}_bb_resfp32.json" bb_bf16_residual="$LOGS/${stage}_bb_resbf16.json"
}
# One JSON line per benchmark run (bb's and the peers'), the lines each runner prints.
results="$OUT/results.jsonl"
record_json() {  # FILE RUNNER: FILE's JSON object as one line, with "runner" added
  python3 -c "import json, sys; o = json.load(open(sys.argv[1])); o['runner'] = sys.argv[2]; print(json.dumps(o))" \
    "$1" "$2" >> "$results" 2>/dev/null || echo "no JSON in $1"
}
# Bench variants (BENCH_VARIANTS="base NAME ..."): variant NAME adds the keys of
# BENCH_ARGS_NAME (space-separated key=value) to bench and moe_bench; base adds none.
# Two are preset: bf16all (bf16 params and moments) and bf16grads (torchtitan's
# precision: bf16 params, moments and gradients).
: "${BENCH_ARGS_bf16all:=optimizer.exp_avg_dtype=bf16 optimizer.exp_avg_sq_dtype=bf16 optimizer.main_params_dtype=bf16}"
: "${BENCH_ARGS_bf16grads:=$BENCH_ARGS_bf16all optimizer.main_grads_dtype=bf16}"
variant_args() { local a=BENCH_ARGS_$1; echo "${!a:-}"; }
# moe_fit's layer counts per variant (MOE_FIT_LAYERS_NAME, else MOE_FIT_LAYERS), largest first, from the
# 4-layer breakdown: ~4.6 GiB of state a layer at bf16grads, ~10.4 at fp32 state, plus ~0.9 of activations.
: "${MOE_FIT_LAYERS_bf16grads:=23 22 21 20}"
: "${MOE_FIT_LAYERS_base:=11 10 9}"
fit_layers() { local a=MOE_FIT_LAYERS_$1; echo "${!a:-${MOE_FIT_LAYERS:-24 20 16 12 8}}"; }
variant_suffix() { [ "$1" = base ] || echo "_$1"; }

for stage in $stages; do
  echo "== $stage"
  case $stage in
    variants)
      for variant in ${VARIANTS:-}; do
        name=${variant%%:*}
        IFS=, read -ra patches <<< "${variant#*:}"
        echo "-- variant $name"
        applied=()
        for patch_file in "${patches[@]}"; do
          if patch -p1 -s --dry-run < "$patch_file" > /dev/null 2>&1 && patch -p1 -s --no-backup-if-mismatch < "$patch_file"; then
            applied+=("$patch_file")
          else
            echo "variant $name: $patch_file does not apply"
            break
          fi
        done
        if [ ${#applied[@]} = ${#patches[@]} ]; then
          t0=$(date +%s)
          if ninja -C "$build" bb_cuda_ops > "$LOGS/build_$name.log" 2>&1; then
            echo "build: $(( $(date +%s) - t0 )) s"
            timeout 240 $bin/bb_cuda_ops ${HARNESS_FILTER:+--filter $HARNESS_FILTER} > "$LOGS/harness_$name.log" 2>&1
            echo "harness exit $?"
            grep -E "FAIL|passed" "$LOGS/harness_$name.log" | tail -20
            timeout 200 $bin/bb_cuda_ops --perf ${PERF_FILTER:+--filter $PERF_FILTER} 2>&1 |
              tee "$LOGS/perf_$name.log" | grep -v "^$"
          else
            grep -E "error" -A3 "$LOGS/build_$name.log" | head -40
          fi
        fi
        for ((i = ${#applied[@]} - 1; i >= 0; i--)); do patch -p1 -R -s --no-backup-if-mismatch < "${applied[i]}"; done
      done ;;
    harness)
      timeout 240 $bin/bb_cuda_ops ${HARNESS_FILTER:+--filter $HARNESS_FILTER} > "$LOGS/harness.log" 2>&1; echo "exit $?"
      grep -E "FAIL|passed" "$LOGS/harness.log" | tail -40 ;;
    perf)
      for pv in ${PERF_VARIANTS:-default}; do
        # A variant is comma-separated VAR=VALUE settings for that run (default: none).
        [ "$pv" = default ] && envs=() || IFS=, read -ra envs <<< "$pv"
        echo "-- perf $pv"
        env ${envs[@]+"${envs[@]}"} timeout 200 $bin/bb_cuda_ops --perf ${PERF_FILTER:+--filter $PERF_FILTER} 2>&1 |
          tee -a "$LOGS/perf.log" | grep -v "^$"
      done
      [ "${PERF_SDPA:-1}" = 1 ] && timeout 150 $py benchmarks/baselines/sdpa_bench.py 2>&1 | tee "$LOGS/sdpa.log" ;;
    ncu)
      [ -n "${NCU_KERNELS:-}" ] || { echo "ncu: set NCU_KERNELS to a regex over kernel names"; continue; }
      # --kill yes ends the program after the last profiled launch.
      timeout 400 ncu --clock-control none --kill yes --kernel-name-base "${NCU_NAME_BASE:-function}" -k "regex:$NCU_KERNELS" \
        -s "${NCU_SKIP:-0}" -c "${NCU_COUNT:-2}" --set full -f -o "$LOGS/ncu" \
        $bin/bb_cuda_ops --perf ${NCU_FILTER:+--filter $NCU_FILTER} > "$LOGS/ncu_run.log" 2>&1
      ncu --import "$LOGS/ncu.ncu-rep" --page details > "$LOGS/ncu_details.txt" 2>&1
      cp "$LOGS/ncu_details.txt" "$OUT/" && grep -E "^  [a-z_].*\(|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per" \
        "$LOGS/ncu_details.txt" | head -60 ;;
    cudnn_variants)
      /usr/local/cuda/bin/nvcc -std=c++17 -O2 -arch=sm_90 -Ithird_party/cudnn-frontend/include \
        benchmarks/cudnn_sdpa_variants.cu -o "$LOGS/cudnn_sdpa_variants" -lcudnn -lnvrtc > "$LOGS/cudnn_variants_build.log" 2>&1 ||
        { grep -E "error" "$LOGS/cudnn_variants_build.log" | head -20; continue; }
      timeout 200 "$LOGS/cudnn_sdpa_variants" 2>&1 | tee "$LOGS/cudnn_variants_system.log"
      torch_cudnn=$(dirname "$(find /opt/torch/.venv/lib -name 'libcudnn.so.9*' 2>/dev/null | head -1)")
      [ "$torch_cudnn" != . ] && LD_LIBRARY_PATH=$torch_cudnn:${LD_LIBRARY_PATH:-} timeout 200 "$LOGS/cudnn_sdpa_variants" 2>&1 |
        tee "$LOGS/cudnn_variants_torch.log" ;;
    gg_tiles)
      # One executable a configuration, minutes each on one core, so all are built side by side.
      cfgs=${GG_CONFIGS:-0 1 2 3 4 5 6 7 8}
      t0=$(date +%s)
      printf '%s\n' $cfgs | xargs -P "$(nproc)" -I{} sh -c "rm -f '$LOGS/gg_tiles_c{}'; /usr/local/cuda/bin/nvcc \
        -std=c++17 -O3 -arch=sm_90a --expt-relaxed-constexpr -I. -Ithird_party/cutlass/include -DGG_CONFIG={} \
        benchmarks/grouped_gemm_tiles.cu -o '$LOGS/gg_tiles_c{}' > '$LOGS/gg_tiles_c{}_build.log' 2>&1"
      echo "gg_tiles build: $(( $(date +%s) - t0 )) s"
      for c in $cfgs; do
        [ -x "$LOGS/gg_tiles_c$c" ] || { echo "c$c: build failed"; grep -m5 "error" "$LOGS/gg_tiles_c${c}_build.log"; continue; }
        timeout 60 "$LOGS/gg_tiles_c$c" 2>&1 | tee "$LOGS/gg_tiles_c$c.log"
      done ;;
    fixtures)
      for f in ${FIXTURES:-qwen3_gqa qwen3_mha_sharded qwen3_tp llama3_gqa llama3_tied_f16 qwen3_moe_experts qwen3_moe_fused qwen3_moe_mixed}; do
        d=tests/fixtures/$f
        timeout 60 $bin/bb-correctness hf_path=$d tokens=$d/tokens.json backend.device=cuda steps=5 optimizer.lr=0.01 \
          optimizer.adam_beta1=0.9 optimizer.adam_beta2=0.95 optimizer.weight_decay=0.1 ${FIXTURE_ARGS:-} \
          > "$LOGS/fix_$f.json" 2> "$LOGS/fix_$f.err"
        python3 - "$d/reference.json" "$LOGS/fix_$f.json" "$f" "$LOGS/fix_$f.err" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))
try:
    o = json.load(open(sys.argv[2]))
except Exception:
    print(sys.argv[3], "FAILED:", open(sys.argv[4]).read()[-400:]); sys.exit()
rel = lambda a, b: abs(a - b) / abs(b) if b else abs(a)   # a zero reference (an untrained bias's grad): absolute
# (a fused-expert checkpoint's reference names its fused tensors; bb reports per expert)
pp = max(rel(o["per_param_grad_norm"][k], v) for k, v in ref["per_param_grad_norm"].items() if k in o["per_param_grad_norm"])
print(f"{sys.argv[3]:18s} bf16 vs HF f64: loss {rel(o['loss'], ref['loss']):.2e} grad_norm {rel(o['grad_norm'], ref['grad_norm']):.2e} "
      f"max per-param {pp:.2e} 5-step losses {max(rel(a, b) for a, b in zip(o['losses'], ref['losses'])):.2e}")
PY
      done ;;
    resume)
      # Resume on the GPU at the same layout (issue 14): 6 steps straight, twice (how far two identical runs
      # differ), against 3 steps, a training checkpoint, then a fresh process resuming for 3 more.
      # RESUME_ARGS adds keys (e.g. backend.deterministic=true).
      for f in ${RESUME_MODELS:-qwen3_gqa qwen3_moe_fused parity}; do
        ck=/tmp/resume_$f; rm -rf $ck
        if [ $f = parity ]; then   # the 100M-parameter parity model, 8 rows of 512 tokens a step
          parity_model; model="hf_path=/tmp/parity/model tokens=/tmp/parity/tokens.json rows_per_step=8 optimizer.lr=1e-4"
        else
          model="hf_path=tests/fixtures/$f tokens=tests/fixtures/$f/tokens.json optimizer.lr=0.01"
        fi
        run="$bin/bb-correctness $model backend.device=cuda ${RESUME_ARGS:-}"
        timeout 60 $run steps=6 > "$LOGS/resume_${f}_a.json" 2>> "$LOGS/resume_$f.err"
        timeout 60 $run steps=6 > "$LOGS/resume_${f}_b.json" 2>> "$LOGS/resume_$f.err"
        timeout 60 $run steps=3 checkpoint_out=$ck > "$LOGS/resume_${f}_first.json" 2>> "$LOGS/resume_$f.err"
        timeout 60 $run steps=3 resume_from=$ck > "$LOGS/resume_${f}_resumed.json" 2>> "$LOGS/resume_$f.err"
        python3 - "$LOGS/resume_$f" "$f" "${RESUME_ARGS:-}" <<'PY' | tee -a "$results" || tail -5 "$LOGS/resume_$f.err"
import json, sys
p, name, extra = sys.argv[1:]
a, b, first, resumed = (json.load(open(f"{p}_{k}.json"))["losses"] for k in ("a", "b", "first", "resumed"))
print(json.dumps({"bench": "gpu_resume", "fixture": name, "args": extra, "straight": a, "resumed": first + resumed,
                  "repeat_bitwise": a == b, "resume_bitwise": a == first + resumed,
                  "max_abs_repeat": max(abs(x - y) for x, y in zip(a, b)),
                  "max_abs_resume": max(abs(x - y) for x, y in zip(a, first + resumed))}))
PY
      done ;;
    offload)
      timeout 300 $bin/bb-bench hf_path=configs/qwen3-1.7b backend.device=cuda bench.seq_len=4096 bench.micro_batch_size=2 \
        bench.num_microbatches=2 bench.steps=2 bench.warmup=1 bench.offload=true \
        output_json="$LOGS/offload_qwen3-1.7b.json" > "$LOGS/offload_qwen3-1.7b.log" 2>&1; echo "exit $?"
      python3 -c "import json, sys; print('offload', json.dumps(json.load(open(sys.argv[1]))['offload']))" \
        "$LOGS/offload_qwen3-1.7b.json" 2>/dev/null || tail -5 "$LOGS/offload_qwen3-1.7b.log"
      record_json "$LOGS/offload_qwen3-1.7b.json" bb ;;
    optoff)
      for f in ${OFFLOAD_FRACTIONS:-0 0.5 1}; do
        timeout 400 $bin/bb-bench hf_path=configs/qwen3-1.7b backend.device=cuda bench.seq_len=4096 bench.micro_batch_size=2 \
          bench.num_microbatches=4 bench.steps=${BENCH_STEPS:-4} bench.warmup=2 optimizer.offload_fraction=$f \
          output_json="$LOGS/optoff_$f.json" > "$LOGS/optoff_$f.log" 2>&1; echo "offload_fraction $f: exit $?"
        grep -E "^step" "$LOGS/optoff_$f.log" | tail -1; grep -E "^(host )?memory" "$LOGS/optoff_$f.log"
        python3 -c "import json, sys; j = json.load(open(sys.argv[1])); m = j['memory']; print('optoff f=%s tok/s %.0f step_ms %.1f device peak %.2f GiB host state %.2f GiB' % (sys.argv[2], j['tok_per_s'], j['avg_step_ms'], j['peak_mem_gb'], m['host_master_gb'] + m['host_moments_gb'] + m['host_staging_gb']))" \
          "$LOGS/optoff_$f.json" "$f" 2>/dev/null || tail -5 "$LOGS/optoff_$f.log"
        record_json "$LOGS/optoff_$f.json" bb
      done ;;
    bench)
      # NAME:L cuts configs/NAME to its first L layers (issue 18's Qwen3-8B row: qwen3-8b:12).
      for entry in ${BENCH_MODELS:-qwen3-0.6b@4 qwen3-1.7b qwen3-8b:12}; do
        mb=2; [ "${entry#*@}" != "$entry" ] && mb=${entry#*@}; entry=${entry%@*}
        m=${entry%%:*}; layers=""; [ "$entry" != "$m" ] && layers=${entry#*:}
        for rc in ${BB_RECOMPUTE:-none}; do
          for v in ${BENCH_VARIANTS:-base}; do
            n=${m}${layers:+_${layers}l}_mb${mb}_${rc}$(variant_suffix $v)
            timeout 300 $bin/bb-bench hf_path=configs/$m ${layers:+bench.truncate_layers=$layers} backend.device=cuda \
              bench.seq_len=4096 bench.micro_batch_size=$mb \
              bench.num_microbatches=$((8 / mb)) bench.steps=${BENCH_STEPS:-4} bench.warmup=2 backend.recompute=$rc \
              bench.profile_steps=${BENCH_PROFILE:-0} $(variant_args $v) output_json="$LOGS/bench_$n.json" > "$LOGS/bench_$n.log" 2>&1
            echo "bench $n $(variant_args $v)"
            grep -E "^step" "$LOGS/bench_$n.log" | tail -2; grep -A25 "^profile over" "$LOGS/bench_$n.log"
            grep -E "^memory|^gpu over" "$LOGS/bench_$n.log"; tail -1 "$LOGS/bench_$n.log"
            record_json "$LOGS/bench_$n.json" bb
          done
        done
      done ;;
    moe_bench)
      for v in ${BENCH_VARIANTS:-base}; do
        m=qwen3-30b-a3b_${MOE_LAYERS:-4}l$(variant_suffix $v)
        timeout 400 $bin/bb-bench hf_path=configs/qwen3-30b-a3b backend.device=cuda bench.truncate_layers=${MOE_LAYERS:-4} \
          bench.seq_len=4096 bench.micro_batch_size=2 \
          bench.num_microbatches=4 bench.steps=${BENCH_STEPS:-4} bench.warmup=2 bench.profile_steps=${BENCH_PROFILE:-0} \
          $(variant_args $v) output_json="$LOGS/bench_$m.json" > "$LOGS/bench_$m.log" 2>&1
        echo "moe_bench $m $(variant_args $v)"
        grep -E "^step" "$LOGS/bench_$m.log" | tail -2; grep -A40 "^profile over" "$LOGS/bench_$m.log"
        grep -E "^memory|^gpu over" "$LOGS/bench_$m.log"; tail -1 "$LOGS/bench_$m.log"
        record_json "$LOGS/bench_$m.json" bb
      done ;;
    peers)
      site=/tmp/torchtitan_site
      ls .whl/torchtitan-*.whl > /dev/null 2>&1 &&
        $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $site .whl/*.whl \
        > "$LOGS/peers_pip.log" 2>&1 || { echo "torchtitan wheels missing or not installable (.whl/; carry it)"; tail -3 "$LOGS/peers_pip.log"; }
      tt="env PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} $py benchmarks/baselines/torchtitan_bench.py --steps ${PEER_STEPS:-5} --warmup 3"
      hf="$py benchmarks/baselines/hf_train_bench.py --steps ${PEER_STEPS:-5} --warmup 3"
      for p in ${PEERS:-tt-0.6b tt-1.7b tt-8b tt-30b-a3b hf-30b-a3b}; do
        case $p in
          tt-0.6b) cmd="$tt --flavor 0.6B --micro-batch 4" ;;
          tt-1.7b) cmd="$tt --flavor 1.7B --micro-batch 2" ;;
          tt-8b) cmd="$tt --flavor 8B --layers 12 --micro-batch 2" ;;
          tt-30b-a3b) cmd="$tt --flavor 30B-A3B --layers 4 --micro-batch 2" ;;
          hf-30b-a3b) cmd="$hf --models qwen3-30b-a3b --layers 4 --modes eager --micro-batch 2 --grad-accum 4" ;;
          *) echo "unknown peer $p"; continue ;;
        esac
        timeout 540 $cmd > "$LOGS/peer_$p.log" 2>&1; rc=$?
        if grep "^{" "$LOGS/peer_$p.log" | tee -a "$results"; then :; else echo "$p: exit $rc"; tail -8 "$LOGS/peer_$p.log"; fi
      done ;;
    longctx)
      for seq in ${LONGCTX_SEQS:-32768 65536}; do
        for rc in ${LONGCTX_MODES:-selective selective:core_attn,mlp full}; do
          mode=${rc%%:*}; mods=""; [ "$rc" != "$mode" ] && mods=${rc#*:}
          name="longctx_${seq}_${mode}${mods:+_${mods//,/_}}"
          timeout 400 $bin/bb-bench hf_path=configs/qwen3-1.7b backend.device=cuda bench.seq_len=$seq \
            bench.micro_batch_size=1 bench.num_microbatches=1 bench.steps=${LONGCTX_STEPS:-3} bench.warmup=1 \
            backend.recompute=$mode ${mods:+backend.recompute_modules=$mods} output_json="$LOGS/$name.json" \
            > "$LOGS/$name.log" 2>&1 || echo "$name: exit $?"
          echo "$name"; grep -E "^step" "$LOGS/$name.log" | tail -1; tail -1 "$LOGS/$name.log"
          record_json "$LOGS/$name.json" bb
        done
      done
      # HF materialises the [T, V] logits (fp32 in the loss), so it may not fit where bb does: the first that runs counts.
      for seq in ${LONGCTX_HF_SEQS:-65536 32768 16384}; do
        timeout 400 $py benchmarks/baselines/hf_train_bench.py --models qwen3-1.7b --modes eager --seq-len $seq \
          --micro-batch 1 --grad-accum 1 --steps ${LONGCTX_STEPS:-3} --warmup 1 --activation-checkpointing \
          > "$LOGS/longctx_hf_$seq.log" 2>&1
        if grep -q "^{" "$LOGS/longctx_hf_$seq.log"; then grep "^{" "$LOGS/longctx_hf_$seq.log" | tee -a "$results"; break; fi
        echo "HF at seq $seq: $(grep -m1 -oE 'OutOfMemoryError|out of memory' "$LOGS/longctx_hf_$seq.log" || tail -1 "$LOGS/longctx_hf_$seq.log")"
      done ;;
    baseline)
      gpu_clocks="clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active"
      nvidia-smi --query-gpu=$gpu_clocks --format=csv
      $py -c "import torch; print('torch', torch.__version__, 'cuDNN', torch.backends.cudnn.version())"
      timeout 450 $py benchmarks/baselines/hf_train_bench.py --models ${BENCH_MODELS:-qwen3-0.6b qwen3-1.7b} ${BASELINE_ARGS:-} 2>&1 |
        tee "$LOGS/baseline.log" | grep "^{" | tee -a "$results"
      nvidia-smi --query-gpu=$gpu_clocks --format=csv,noheader ;;
    parity)
      parity_model
      cp /tmp/parity/hf_losses.json "$LOGS/parity_hf.json"
      for res in fp32 bf16; do
        flag=false; [ $res = fp32 ] && flag=true
        timeout 200 $bin/bb-correctness $parity_args backend.fp32_residual_connection=$flag \
          > "$LOGS/parity_bb_res$res.json" 2> "$LOGS/parity_bb_res$res.err" || tail -5 "$LOGS/parity_bb_res$res.err"
      done
      python3 benchmarks/parity/compare_runs.py hf="$LOGS/parity_hf.json" bb_fp32_residual="$LOGS/parity_bb_resfp32.json" \
        bb_bf16_residual="$LOGS/parity_bb_resbf16.json"
      # HF with a bf16 residual stream (bf16 weights and activations, fp32 master weights and AdamW).
      timeout 200 $py benchmarks/parity/hf_bf16_reference.py --out /tmp/parity_bf16act --precision bf16act \
        > "$LOGS/parity_hf_bf16act.log" 2>&1 || tail -5 "$LOGS/parity_hf_bf16act.log"
      cp /tmp/parity_bf16act/hf_losses.json "$LOGS/parity_hf_bf16act.json"
      python3 benchmarks/parity/compare_runs.py hf="$LOGS/parity_hf.json" hf_bf16act="$LOGS/parity_hf_bf16act.json"
      python3 benchmarks/parity/compare_runs.py hf_bf16act="$LOGS/parity_hf_bf16act.json" \
        bb_bf16_residual="$LOGS/parity_bb_resbf16.json" ;;
    moe_parity) moe_parity moe ;;
    dsv3_parity) moe_parity dsv3 ;;
    moe_fit)
      # The largest truncation of the Qwen3-30B-A3B architecture that trains on one GPU (same batch as moe_bench):
      # per variant, the layer counts of fit_layers tried from the first; the first that runs is kept.
      for v in ${BENCH_VARIANTS:-bf16grads base}; do
        for l in $(fit_layers $v); do
          m=qwen3-30b-a3b_${l}l$(variant_suffix $v)
          if timeout 300 $bin/bb-bench hf_path=configs/qwen3-30b-a3b backend.device=cuda bench.truncate_layers=$l \
              bench.seq_len=4096 bench.micro_batch_size=2 bench.num_microbatches=4 bench.steps=2 bench.warmup=1 \
              $(variant_args $v) output_json="$LOGS/bench_$m.json" > "$LOGS/bench_$m.log" 2>&1; then
            echo "moe_fit $m $(variant_args $v): fits"
            grep -E "^step" "$LOGS/bench_$m.log" | tail -1; grep -E "^memory" "$LOGS/bench_$m.log"
            record_json "$LOGS/bench_$m.json" bb
            break
          fi
          echo "moe_fit $m: does not fit: $(grep -m1 -iE "out of memory|error" "$LOGS/bench_$m.log" | cut -c1-200)"
        done
      done ;;
    dsv3_bench)
      m=deepseek-v3-16e_4l
      timeout 400 $bin/bb-bench hf_path=configs/deepseek-v3 backend.device=cuda bench.truncate_layers=4 \
        'backend.model_overrides={"n_routed_experts": 16, "first_k_dense_replace": 1, "num_nextn_predict_layers": 0}' \
        bench.seq_len=4096 bench.micro_batch_size=1 bench.num_microbatches=4 bench.steps=${BENCH_STEPS:-4} bench.warmup=2 \
        bench.profile_steps=${BENCH_PROFILE:-0} output_json="$LOGS/bench_$m.json" > "$LOGS/bench_$m.log" 2>&1
      grep -E "^step|^memory" "$LOGS/bench_$m.log" | tail -3; grep -A40 "^profile over" "$LOGS/bench_$m.log"
      tail -1 "$LOGS/bench_$m.log"
      record_json "$LOGS/bench_$m.json" bb
      [ -n "${DSV3_HF-1}" ] && timeout 400 $py benchmarks/baselines/hf_train_bench.py --models deepseek-v3-16e --layers 4 \
        --modes eager --micro-batch 1 --grad-accum 4 --steps ${PEER_STEPS:-4} --warmup 2 > "$LOGS/hf_$m.log" 2>&1
      grep "^{" "$LOGS/hf_$m.log" | tee -a "$results" || tail -5 "$LOGS/hf_$m.log" ;;
    hfload)
      # Train 20 steps, export, load the export in HF transformers and compare logits (benchmarks/parity/hf_load_check.py).
      for m in ${HFLOAD_MODELS:-dense moe}; do
        d=/tmp/hfload_$m
        rm -rf $d; timeout 120 $py benchmarks/parity/hf_load_check.py make --out $d --model $m > "$LOGS/hfload_$m.log" 2>&1
        timeout 120 $bin/bb-correctness hf_path=$d/model tokens=$d/tokens.json backend.device=cuda steps=20 \
          optimizer.lr=1e-3 params_out=$d/trained > "$LOGS/hfload_${m}_train.json" 2>> "$LOGS/hfload_$m.log"
        # float32 logits from the host (the CUDA backend computes in bf16), bf16 ones from the GPU.
        timeout 60 $bin/bb-correctness hf_path=$d/trained tokens=$d/tokens.json backend.device=cpu backend.dtype=float32 \
          steps=0 logits_out=$d/bb_logits_float32.bin > /dev/null 2>> "$LOGS/hfload_$m.log"
        timeout 60 $bin/bb-correctness hf_path=$d/trained tokens=$d/tokens.json backend.device=cuda \
          steps=0 logits_out=$d/bb_logits_bfloat16.bin > /dev/null 2>> "$LOGS/hfload_$m.log"
        timeout 120 $py benchmarks/parity/hf_load_check.py check --out $d --model $m 2>> "$LOGS/hfload_$m.log" | tee -a "$results" ||
          tail -5 "$LOGS/hfload_$m.log"
      done ;;
    peftload)
      # A LoRA adapter trained 20 steps by bb, loaded by HF peft onto the base model: logits compared.
      d=/tmp/peftload; lora="peft.type=lora peft.target_modules=all-linear peft.rank=8 peft.alpha=16"
      rm -rf $d; timeout 120 $py benchmarks/parity/hf_load_check.py make --out $d --model dense > "$LOGS/peftload.log" 2>&1
      timeout 120 $bin/bb-correctness hf_path=$d/model tokens=$d/tokens.json backend.device=cuda steps=20 optimizer.lr=1e-3 \
        $lora adapter_out=$d/adapter > "$LOGS/peftload_train.json" 2>> "$LOGS/peftload.log"
      timeout 60 $bin/bb-correctness hf_path=$d/model tokens=$d/tokens.json backend.device=cpu backend.dtype=float32 $lora \
        peft.adapter_path=$d/adapter steps=0 logits_out=$d/bb_logits_float32.bin > /dev/null 2>> "$LOGS/peftload.log"
      timeout 60 $bin/bb-correctness hf_path=$d/model tokens=$d/tokens.json backend.device=cuda $lora \
        peft.adapter_path=$d/adapter steps=0 logits_out=$d/bb_logits_bfloat16.bin > /dev/null 2>> "$LOGS/peftload.log"
      timeout 120 $py benchmarks/parity/hf_load_check.py check --out $d --model dense --adapter $d/adapter \
        2>> "$LOGS/peftload.log" | tee -a "$results" || tail -5 "$LOGS/peftload.log" ;;
    sft)
      # bb-train tokenises data/chat.jsonl: a build without PCRE2 cannot load a tokenizer.json.
      grep -q "PCRE2 ON" "$LOGS/cmake.log" || echo "sft: this build has no PCRE2 (libpcre2-dev); bb-train cannot load" \
        "data/tokenizer.json here: unpack libpcre2-dev (and libutf8proc-dev) into .deps/usr and carry it"
      for r in ${SFT_RECIPES:-qwen3_1.7b_sft_full qwen3_1.7b_sft_lora}; do
        timeout 400 $bin/bb-train recipe=recipes/$r.json model.hf_path=configs/qwen3-1.7b model.load_hf_weights=false \
          data.tokenizer=data/tokenizer.json data.chat_template=qwen3 train.steps=${SFT_STEPS:-8} optimizer.lr_warmup_steps=1 train.eval_batches=0 \
          train.log_interval=1 output.save_hf=false output.dir="$LOGS/sft_$r" > "$LOGS/sft_$r.log" 2>&1 || echo "$r: exit $?"
        grep -E "^sft data|^step" "$LOGS/sft_$r.log" | tail -3; tail -1 "$LOGS/sft_$r.log"
        [ -f "$LOGS/sft_$r/final_metrics.json" ] && python3 - "$LOGS/sft_$r" "$r" >> "$results" <<'PY'
import json, sys
m = json.load(open(sys.argv[1] + "/final_metrics.json"))
steps = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if '"train"' in l]
timed = steps[2:] or steps   # the first two steps warm up (allocator pool, cuBLASLt heuristics)
tok_per_s = sum(s["tokens"] for s in timed) / sum(s["step_time_s"] for s in timed)
print(json.dumps({"runner": "bb-train", "run": sys.argv[2], "model": "qwen3-1.7b", "seq_len": 4096,
                  "steps": m["steps"], "tok_per_s": tok_per_s, "peak_mem_gb": m["peak_mem_gb"],
                  "num_parameters": m["num_parameters"],
                  "trained_tokens_per_step": sum(s["loss_tokens"] for s in steps) / max(len(steps), 1),
                  "tokens_per_step": sum(s["tokens"] for s in steps) / max(len(steps), 1)}))
PY
      done ;;
    export)
      if [ ! -e "$build/python/bumblebee/__init__.py" ]; then
        echo "export: the Python module was not built ($(grep -m1 'Python bindings' "$LOGS/cmake.log"))"
      else
        # A crash prints its native frames (benchmarks/native_backtrace.c: the machine has no gdb).
        gcc -shared -fPIC -O1 -o /tmp/native_backtrace.so benchmarks/native_backtrace.c -ldl
        pyb="env PYTHONPATH=$build/python:${PYTHONPATH:-} LD_PRELOAD=/tmp/native_backtrace.so python3 -X faulthandler"
        # Every import order of numpy, torch and bumblebee, each in a fresh process.
        for order in "numpy bumblebee" "bumblebee numpy" "torch bumblebee" "bumblebee torch"; do
          timeout 120 $pyb -c "import ${order// /, }" > "$LOGS/import_${order// /_}.log" 2>&1
          echo "import ${order// /, }: exit $?"; grep -A24 "native_backtrace" "$LOGS/import_${order// /_}.log" | head -26
        done
        # Host numpy alone first (no torch in the process), then with torch's GPU tensors as the targets (from host and device buckets).
        for targets in host_numpy "host_numpy gpu_tensor gpu_dlpack"; do
          log="$LOGS/export_${targets// /_}.log"
          timeout 300 $pyb benchmarks/export_weights_bench.py configs/qwen3-1.7b --device cuda --dtype bfloat16 \
            --bucket-bytes $((512 << 20)) --targets $targets > "$log" 2>&1
          echo "export to $targets: exit $?"; grep -v '^{' "$log" | tail -30
          grep '^{' "$log" | python3 -c "import json, sys; [print(json.dumps({**json.loads(l), 'runner': 'bb'})) for l in sys.stdin]" | tee -a "$results"
        done
      fi ;;
    gpu_unit)
      timeout 120 $bin/bb_tests --gtest_filter="${GPU_UNIT_FILTER:-NcclOneGpu*:*Cuda*:*CUDA*}" > "$LOGS/gpu_unit.log" 2>&1
      echo "exit $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[ +(OK|FAILED) " "$LOGS/gpu_unit.log" | head -40 ;;
    sanitizer)
      d=tests/fixtures/qwen3_gqa
      run_fixture="$bin/bb-correctness hf_path=$d tokens=$d/tokens.json backend.device=cuda steps=5"
      for be in cudnn flash; do
        BB_ATTENTION_BACKEND=$be timeout 150 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
          $run_fixture > "$LOGS/memcheck_$be.log" 2>&1
        echo "memcheck ($be attention): exit $?"; grep -E "ERROR SUMMARY|Invalid|error" "$LOGS/memcheck_$be.log" | head -5
      done
      BB_ATTENTION_BACKEND=flash timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 \
        $run_fixture > "$LOGS/racecheck.log" 2>&1
      echo "racecheck (flash attention): exit $?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|hazard" "$LOGS/racecheck.log" | head -5 ;;
    nccl)
      timeout 90 $mpi2 $bin/bb_mpi_tests > "$LOGS/nccl.log" 2>&1; echo "exit $?"
      grep -E "^\[  (PASSED|FAILED|SKIPPED) |Nccl.*(OK|FAILED)" "$LOGS/nccl.log" | sort | uniq -c | head -20 ;;
    curves)
      parity_model
      timeout 200 $bin/bb-correctness $parity_args > "$LOGS/curve_1gpu.json" 2> "$LOGS/curve_1gpu.err" || tail -5 "$LOGS/curve_1gpu.err"
      # Two ranks without tp are dp=2 (dp is what the world leaves over). CURVES picks the runs.
      for p in ${CURVES:-tp dp}; do
        extra=""; [ $p = tp ] && extra="backend.parallel.tp=2"
        timeout 200 $mpi2 $bin/bb-correctness $parity_args $extra > "$LOGS/curve_${p}2.json" 2> "$LOGS/curve_${p}2.err" ||
          tail -5 "$LOGS/curve_${p}2.err"
      done
      cp /tmp/parity/hf_losses.json "$LOGS/curve_hf.json"
      python3 - "$LOGS" <<'PY'
import json, sys
d = sys.argv[1]
one = json.load(open(f"{d}/curve_1gpu.json"))
hf = json.load(open(f"{d}/curve_hf.json"))
for name in ["tp2", "dp2"]:
    try:
        o = json.load(open(f"{d}/curve_{name}.json"))
    except Exception as e:
        print(name, "FAILED:", e); continue
    dl = [abs(a - b) / b for a, b in zip(o["losses"], one["losses"])]
    dg = [abs(a - b) / b for a, b in zip(o["grad_norms"], one["grad_norms"])]
    dh = [abs(a - b) / b for a, b in zip(o["losses"], hf["losses"])]
    print(f"{name} vs 1 GPU over {len(dl)} steps: max loss diff {max(dl):.3%} (step {dl.index(max(dl))}), "
          f"max grad-norm diff {max(dg):.2%}; vs HF loss {max(dh):.3%}")
    print(f"  loss every 10 steps: 1gpu {[round(x, 4) for x in one['losses'][::10]]} {name} {[round(x, 4) for x in o['losses'][::10]]}")
PY
      ;;
    dpscale)
      timeout 200 env CUDA_VISIBLE_DEVICES=0 $bin/bb-bench $bench_1p7b bench.steps=4 output_json="$LOGS/dpscale_1gpu.json" > "$LOGS/dpscale_1gpu.log" 2>&1
      tail -1 "$LOGS/dpscale_1gpu.log"
      timeout 250 $mpi2 $bin/bb-bench $bench_1p7b bench.steps=4 bench.profile_steps=2 \
        output_json="$LOGS/dpscale_dp2.json" > "$LOGS/dpscale_dp2.log" 2>&1
      grep -E "^step" "$LOGS/dpscale_dp2.log" | tail -1; grep -A40 "^profile over" "$LOGS/dpscale_dp2.log" || tail -5 "$LOGS/dpscale_dp2.log"
      python3 -c "import json; a=json.load(open('$LOGS/dpscale_1gpu.json')); b=json.load(open('$LOGS/dpscale_dp2.json')); print(f\"dp=2 {b['tok_per_s']:.0f} tok/s vs 1 GPU {a['tok_per_s']:.0f}: {b['tok_per_s']/a['tok_per_s']:.3f}x\")" ;;
    tp8b)
      timeout 400 $mpi2 $bin/bb-bench hf_path=configs/qwen3-8b backend.device=cuda backend.parallel.tp=2 \
        bench.truncate_layers=${TP8B_LAYERS:-36} bench.seq_len=4096 bench.micro_batch_size=1 bench.num_microbatches=4 \
        bench.steps=${TP8B_STEPS:-3} bench.warmup=2 bench.profile_steps=1 output_json="$LOGS/tp8b.json" > "$LOGS/tp8b.log" 2>&1
      grep -E "^step|^\{" "$LOGS/tp8b.log" | tail -3; grep -A30 "^profile over" "$LOGS/tp8b.log" | head -32 || tail -5 "$LOGS/tp8b.log" ;;
  esac
  tar czf "$OUT/logs.tgz" -C "$LOGS" .
done
