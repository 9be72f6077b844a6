// bb_cuda_ops --perf: kernel timings with CUDA events.
//
// Each measurement runs the op 3 times to warm up (cuBLASLt plans, pool,
// clocks), then times 10 single runs between two events on the backend's
// stream and reports the median. Compute-bound ops print TFLOP/s
// (attention FLOPs count the causal half only, FlashAttention's convention:
// forward 4 * S^2 * D * Hq / 2 per sequence, backward 2.5 times that);
// memory-bound ops print GB/s of the bytes they must read and write.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bumblebee/ops/cuda/attention_backends.h"
#include "bumblebee/core/cuda/cuda_context.h"
#include "bumblebee/core/cuda/cuda_memory.h"
#include "bumblebee/ops/cuda/cuda_ops.h"
#include "tests/cuda/harness.h"

namespace bb::harness {
namespace {

const Device kGpu = Device::cuda(0);

double median_ms(const std::function<void()>& op, int warmup = 3, int repeats = 10) {
  for (int i = 0; i < warmup; ++i) op();
  cudaStream_t stream = cuda::current_stream();
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < repeats; ++i) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    op();
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return double(times[times.size() / 2]);
}

// Uniform(-1, 1) values in `dtype` on the GPU; a fast host generator, since
// these tensors run to gigabytes.
Tensor random_gpu(const Shape& shape, DType dtype, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::vector<float> v(size_t(shape_numel(shape)));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (float& x : v) x = dist(rng);
  Tensor t = Tensor::empty(shape, dtype, kGpu);
  t.copy_from(Tensor::from_vector(v, shape));
  return t;
}

Tensor index_gpu(const std::vector<int64_t>& v, DType dtype) {
  Tensor host = Tensor::from_vector(v, {int64_t(v.size())});
  Tensor t = Tensor::empty(host.shape(), dtype, kGpu);
  t.copy_from(host);
  return t;
}

// Whether the perf line `name` runs: BB_PERF_LINE, when set, is a
// comma-separated list of strings one of which the name must contain (so a
// profiler sees one line's kernels alone); the attention lines honour it.
bool line_selected(const std::string& name) {
  const char* lines = std::getenv("BB_PERF_LINE");
  return lines == nullptr || filter_matches(lines, name);
}

void report_flops(const std::string& what, double ms, double flops) {
  std::printf("%-64s %9.3f ms %8.1f TFLOP/s\n", what.c_str(), ms, flops / (ms * 1e-3) / 1e12);
}

void report_bytes(const std::string& what, double ms, double bytes) {
  std::printf("%-64s %9.3f ms %8.1f GB/s\n", what.c_str(), ms, bytes / (ms * 1e-3) / 1e9);
}

void perf_gemm() {
  const int64_t n = 8192;
  Tensor a = random_gpu({n, n}, DType::BF16, 1), b = random_gpu({n, n}, DType::BF16, 2);
  Tensor c = Tensor::empty({n, n}, DType::BF16, kGpu);
  const double flops = 2.0 * double(n) * double(n) * double(n);
  report_flops("matmul 8192^3 bf16 -> bf16 (NN)", median_ms([&] { cuda::matmul(a, false, b, false, c); }), flops);
  report_flops("matmul 8192^3 bf16 -> bf16 (NT, x W^T)", median_ms([&] { cuda::matmul(a, false, b, true, c); }),
               flops);
  Tensor c32 = Tensor::zeros({n, n}, DType::F32, kGpu);
  report_flops("matmul 8192^3 bf16 -> f32 beta=1 (TN, weight grad)",
               median_ms([&] { cuda::matmul(a, true, b, false, c32, 1.0, 1.0); }), flops);
}

// The experts of the Qwen3-30B-A3B bench layer: 128 experts sharing 65536
// rows unevenly (counts from a fixed draw, one expert empty), gate|up (K = 2048,
// Nout = 1536) and down (K = 768, Nout = 2048): forward, input gradient and
// fp32 and bf16 weight gradients, each as one grouped call under each engine
// (BB_GROUPED_GEMM=cublas, and cutlass when built) and, for comparison, as
// the loop of per-expert GEMMs it replaces.
void perf_grouped_gemm() {
  const int64_t experts = 128, rows = 65536;
  std::mt19937 rng(12);
  std::uniform_real_distribution<double> share(0.2, 1.8);
  std::vector<double> weights(static_cast<size_t>(experts));
  for (double& w : weights) w = share(rng);
  weights[5] = 0.0;
  double total = 0.0;
  for (double w : weights) total += w;
  std::vector<int64_t> offsets{0};
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t count = e + 1 == experts ? rows - offsets.back() : int64_t(double(rows) * weights[size_t(e)] / total);
    offsets.push_back(offsets.back() + count);
  }
  struct Projection {
    const char* name;
    int64_t k, n;
  };
  for (const Projection& p : {Projection{"gate_up", 2048, 1536}, Projection{"down", 768, 2048}}) {
    std::vector<Tensor> w, dw, dw_bf16;
    for (int64_t e = 0; e < experts; ++e) {
      w.push_back(random_gpu({p.n, p.k}, DType::BF16, uint32_t(100 + e)));
      dw.push_back(Tensor::zeros({p.n, p.k}, DType::F32, kGpu));
      dw_bf16.push_back(Tensor::zeros({p.n, p.k}, DType::BF16, kGpu));
    }
    Tensor x = random_gpu({rows, p.k}, DType::BF16, 20), dy = random_gpu({rows, p.n}, DType::BF16, 21);
    Tensor y = Tensor::empty({rows, p.n}, DType::BF16, kGpu), dx = Tensor::empty({rows, p.k}, DType::BF16, kGpu);
    const double flops = 2.0 * double(rows) * double(p.k) * double(p.n);
    auto loop = [&](const std::function<void(int64_t, int64_t, int64_t)>& gemm) {
      for (int64_t e = 0; e < experts; ++e) {
        const int64_t first = offsets[size_t(e)], count = offsets[size_t(e + 1)] - first;
        if (count > 0) gemm(e, first, count);
      }
    };
    const std::string shape = fmt("%s 128 experts N=65536 K=%lld Nout=%lld", p.name, (long long)p.k, (long long)p.n);
    std::vector<std::string> engines{"cublas"};
    if (cuda::cutlass_grouped_gemm_built()) engines.push_back("cutlass");
    for (const std::string& engine : engines) {
      EnvOverride env("BB_GROUPED_GEMM", engine);
      const std::string tag = "[" + engine + "] ";
      report_flops("grouped_gemm" + tag + shape + " y=xW^T",
                   median_ms([&] { cuda::grouped_gemm(x, w, true, offsets, y, 1.0, 0.0); }), flops);
      report_flops("grouped_gemm" + tag + shape + " dx=dyW",
                   median_ms([&] { cuda::grouped_gemm(dy, w, false, offsets, dx, 1.0, 0.0); }), flops);
      report_flops("grouped_gemm_weight_grad" + tag + shape + " dW+=dy^Tx f32",
                   median_ms([&] { cuda::grouped_gemm_weight_grad(dy, x, offsets, dw, 1.0, 1.0); }), flops);
      report_flops("grouped_gemm_weight_grad" + tag + shape + " dW+=dy^Tx bf16",
                   median_ms([&] { cuda::grouped_gemm_weight_grad(dy, x, offsets, dw_bf16, 1.0, 1.0); }), flops);
    }
    report_flops("  loop of matmul, y=xW^T", median_ms([&] {
                   loop([&](int64_t e, int64_t first, int64_t count) {
                     Tensor y_e = y.narrow(first, count);
                     cuda::matmul(x.narrow(first, count), false, w[size_t(e)], true, y_e);
                   });
                 }),
                 flops);
    report_flops("  loop of matmul, dx=dyW", median_ms([&] {
                   loop([&](int64_t e, int64_t first, int64_t count) {
                     Tensor dx_e = dx.narrow(first, count);
                     cuda::matmul(dy.narrow(first, count), false, w[size_t(e)], false, dx_e);
                   });
                 }),
                 flops);
    report_flops("  loop of matmul, dW+=dy^Tx f32", median_ms([&] {
                   loop([&](int64_t e, int64_t first, int64_t count) {
                     cuda::matmul(dy.narrow(first, count), true, x.narrow(first, count), false, dw[size_t(e)], 1.0,
                                  1.0);
                   });
                 }),
                 flops);
  }
}

// The operands of one causal attention call over `batch` sequences of 4096
// tokens (random q, k, v, dout; out, lse, dq, dk, dv allocated), its offsets,
// scale, forward FLOPs (Q K^T and P V, 2 flops per multiply-add, the causal
// half) and the shape as the perf lines print it.
struct AttentionBench {
  static constexpr int64_t kSeq = 4096;
  Tensor cu_seqlens, q, k, v, dout, out, lse, dq, dk, dv;
  double scale, fwd_flops;
  std::string shape;

  AttentionBench(int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t dim_qk, int64_t dim_v) {
    const int64_t tokens = kSeq * batch;
    std::vector<int64_t> cu;
    for (int64_t s = 0; s <= batch; ++s) cu.push_back(s * kSeq);
    cu_seqlens = index_gpu(cu, DType::I32);
    q = random_gpu({tokens, heads_q, dim_qk}, DType::BF16, 3);
    k = random_gpu({tokens, heads_kv, dim_qk}, DType::BF16, 4);
    v = random_gpu({tokens, heads_kv, dim_v}, DType::BF16, 5);
    dout = random_gpu({tokens, heads_q, dim_v}, DType::BF16, 6);
    out = Tensor::empty({tokens, heads_q, dim_v}, DType::BF16, kGpu);
    lse = Tensor::empty({tokens, heads_q}, DType::F32, kGpu);
    dq = Tensor::empty(q.shape(), DType::BF16, kGpu);
    dk = Tensor::empty(k.shape(), DType::BF16, kGpu);
    dv = Tensor::empty(v.shape(), DType::BF16, kGpu);
    scale = 1.0 / std::sqrt(double(dim_qk));
    fwd_flops = double(batch) * 2.0 * double(kSeq) * double(kSeq) * double(dim_qk + dim_v) * double(heads_q) / 2.0;
    const std::string dims = dim_qk == dim_v ? fmt("D=%lld", (long long)dim_qk)
                                             : fmt("D=%lld/%lld", (long long)dim_qk, (long long)dim_v);
    shape = fmt("seq=%lld x %lld Hq=%lld Hkv=%lld %s causal", (long long)kSeq, (long long)batch,
                (long long)heads_q, (long long)heads_kv, dims.c_str());
  }

  // Times the forward and the backward over `spans` under `label`; the
  // forward runs untimed when time_forward is false (the backward reads a real
  // out and lse).
  // Lines BB_PERF_LINE does not select are skipped (the forward still runs
  // once, untimed, for a selected backward).
  void report(const std::string& label, const ops::AttentionSpans& spans, bool time_forward = true) {
    const std::string forward_line = "attention_forward[" + label + "] " + shape;
    const std::string backward_line = "attention_backward[" + label + "] " + shape;
    time_forward = time_forward && line_selected(forward_line);
    if (!time_forward && !line_selected(backward_line)) return;
    const auto forward = [&] { cuda::attention_forward(q, k, v, spans, scale, out, lse); };
    if (time_forward) report_flops(forward_line, median_ms(forward), fwd_flops);
    else forward();
    if (!line_selected(backward_line)) return;
    report_flops(backward_line, median_ms([&] {
                   cuda::attention_backward(dout, q, k, v, out, lse, spans, scale, dq, dk, dv);
                 }),
                 2.5 * fwd_flops);
  }

  ops::AttentionSpans self_spans() const {
    return {cu_seqlens, cu_seqlens, kSeq, kSeq, ops::AttentionMask::Causal};
  }
};

// Causal self-attention for each batch from first_batch to last_batch; dim_v
// differs from dim_qk in multi-head latent attention (DeepSeek-V3: 192 / 128).
// A non-empty `gqa_expand` runs the backward under
// BB_ATTENTION_GQA_EXPAND=`gqa_expand` (the forward, which the variable does
// not change, is timed only when it is not "1"); `autotune` runs cuDNN under
// BB_CUDNN_ATTENTION_AUTOTUNE=1 (its timing of every engine configuration
// happens in the warm-up runs).
void perf_attention(const std::string& backend, const std::string& gqa_expand, bool autotune, int64_t heads_q,
                    int64_t heads_kv, int64_t dim_qk, int64_t dim_v, int64_t first_batch, int64_t last_batch) {
  EnvOverride env("BB_ATTENTION_BACKEND", backend);
  std::optional<EnvOverride> expand, tune;
  if (!gqa_expand.empty()) expand.emplace("BB_ATTENTION_GQA_EXPAND", gqa_expand);
  if (autotune) tune.emplace("BB_CUDNN_ATTENTION_AUTOTUNE", "1");
  const std::string label = backend + (gqa_expand.empty() ? "" : " gqa_expand=" + gqa_expand) +
                            (autotune ? " autotune" : "");
  for (int64_t batch = first_batch; batch <= last_batch; ++batch) {
    AttentionBench bench(batch, heads_q, heads_kv, dim_qk, dim_v);
    bench.report(label, bench.self_spans(), gqa_expand != "1");
  }
}

// Our two kernels a direction on the same causal attention, labelled
// flash sm90=1 (the sm_90a FlashAttention-3-style kernels, where the device,
// build and head dims have them; else the same as 0) and flash sm90=0
// (FlashAttention-2). The backward runs the grouped-query rule of auto
// (expansion from 4:1, attention.cpp) and, from 4:1, also without it
// (gqa_expand=0: one block walks the group).
void perf_flash_kernels(int64_t heads_q, int64_t heads_kv, int64_t dim_qk, int64_t dim_v, int64_t batch) {
  EnvOverride env("BB_ATTENTION_BACKEND", "flash");
  AttentionBench bench(batch, heads_q, heads_kv, dim_qk, dim_v);
  const ops::AttentionSpans spans = bench.self_spans();
  for (const char* sm90 : {"1", "0"}) {
    EnvOverride kernel("BB_FLASH_SM90", sm90);
    const std::string label = "flash sm90=" + std::string(sm90);
    bench.report(label, spans);
    if (heads_q >= 4 * heads_kv) {
      EnvOverride expand("BB_ATTENTION_GQA_EXPAND", "0");
      bench.report(label + " gqa_expand=0", spans, false);
    }
  }
}

// cuDNN's three graphs for the same causal attention over equal lengths:
// dense (one cu_seqlens tensor and S x max_seqlen rows: no ragged offsets, no
// padding mask), ragged with the diagonal aligned top-left (one tensor, but a
// max_seqlen past the longest sequence, so the host cannot see the lengths are
// uniform; that needs two sequences, as max_seqlen may not pass the rows) and
// ragged bottom-right (the offsets in a second tensor, as partial attention
// with unequal lengths passes them).
void perf_cudnn_graphs(int64_t heads_q, int64_t heads_kv, int64_t dim_qk, int64_t dim_v, int64_t batch) {
  EnvOverride env("BB_ATTENTION_BACKEND", "cudnn");
  AttentionBench bench(batch, heads_q, heads_kv, dim_qk, dim_v);
  const Tensor cu_kv = bench.cu_seqlens.clone();
  constexpr int64_t kSeq = AttentionBench::kSeq;
  bench.report("cudnn dense", bench.self_spans());
  if (batch > 1)
    bench.report("cudnn ragged top-left",
                 {bench.cu_seqlens, bench.cu_seqlens, kSeq + 1, kSeq + 1, ops::AttentionMask::Causal});
  bench.report("cudnn ragged bottom-right", {bench.cu_seqlens, cu_kv, kSeq, kSeq, ops::AttentionMask::Causal});
}

// RMSNorm at the benches' shapes: a decoder norm of Qwen3-8B (4096) and of
// Qwen3-1.7B / 30B-A3B (2048), both over 2 x 4096 tokens, and the q and k
// norms over head_dim 128 of Qwen3-30B-A3B's 32 / 4 heads on the same tokens.
// Bytes: x and y (forward); dy, x and dx (backward). Then those q and k
// norms with their RoPE: the fused op against rmsnorm then rope (forward)
// and rope then rmsnorm (backward), both rated by the bytes the fused op
// moves, so the rates compare as the times do. Then the residual add with the
// norm of Qwen3-1.7B's decoder layers (8192 x 2048, bfloat16 and the float32
// residual stream) against add then rmsnorm (forward) and rmsnorm then add_
// (backward), rated likewise: x, branch, h and y (forward); dy, x, the
// residual gradient and dx (backward).
void perf_rmsnorm() {
  const std::pair<int64_t, int64_t> shapes[] = {{16384, 4096}, {8192, 2048}, {8192 * 32, 128}, {8192 * 4, 128}};
  for (auto [rows, n] : shapes) {
    Tensor x = random_gpu({rows, n}, DType::BF16, 7), w = random_gpu({n}, DType::BF16, 8);
    Tensor y = Tensor::empty(x.shape(), DType::BF16, kGpu), rstd = Tensor::empty({rows}, DType::F32, kGpu);
    Tensor dy = random_gpu(x.shape(), DType::BF16, 9), dx = Tensor::empty(x.shape(), DType::BF16, kGpu);
    Tensor dw = Tensor::zeros({n}, DType::F32, kGpu);
    const double act = double(rows) * double(n) * 2.0;
    const std::string shape = fmt("%lld x %lld bf16", (long long)rows, (long long)n);
    report_bytes("rmsnorm_forward " + shape, median_ms([&] { cuda::rmsnorm_forward(x, w, 1e-6, y, rstd); }),
                 2.0 * act);
    report_bytes("rmsnorm_backward " + shape, median_ms([&] { cuda::rmsnorm_backward(dy, x, w, rstd, dx, dw); }),
                 3.0 * act);
  }
  for (DType x_dt : {DType::BF16, DType::F32}) {
    const int64_t rows = 8192, n = 2048;
    const Shape shape{rows, n};
    Tensor x = random_gpu(shape, x_dt, 21), branch = random_gpu(shape, DType::BF16, 22);
    Tensor w = random_gpu({n}, DType::BF16, 23), dy = random_gpu(shape, DType::BF16, 24);
    Tensor residual_grad = random_gpu(shape, x_dt, 25);
    Tensor h = Tensor::empty(shape, x_dt, kGpu), y = Tensor::empty(shape, DType::BF16, kGpu);
    Tensor dx = Tensor::empty(shape, x_dt, kGpu), rstd = Tensor::empty({rows}, DType::F32, kGpu);
    Tensor dw = Tensor::zeros({n}, DType::F32, kGpu);
    const double elems = double(rows) * double(n), x_bytes = double(dtype_size(x_dt)), w_bytes = 2.0;
    const std::string label = fmt("%lld x %lld x=%s w=bf16", (long long)rows, (long long)n,
                                  x_dt == DType::BF16 ? "bf16" : "f32");
    report_bytes("add_rmsnorm_forward " + label,
                 median_ms([&] { cuda::add_rmsnorm_forward(x, branch, w, 1e-6, h, y, rstd); }),
                 elems * (2.0 * x_bytes + 2.0 * w_bytes));
    report_bytes("  unfused: add, rmsnorm_forward", median_ms([&] {
                   cuda::add(x, branch, h);
                   cuda::rmsnorm_forward(h, w, 1e-6, y, rstd);
                 }),
                 elems * (2.0 * x_bytes + 2.0 * w_bytes));
    report_bytes("add_rmsnorm_backward " + label,
                 median_ms([&] { cuda::add_rmsnorm_backward(dy, x, w, rstd, residual_grad, dx, dw); }),
                 elems * (3.0 * x_bytes + w_bytes));
    report_bytes("  unfused: rmsnorm_backward, add_", median_ms([&] {
                   cuda::rmsnorm_backward(dy, x, w, rstd, dx, dw);
                   cuda::add_(dx, residual_grad);
                 }),
                 elems * (3.0 * x_bytes + w_bytes));
  }
  for (int64_t heads : {32, 4}) {
    const int64_t tokens = 8192, dim = 128;
    const Shape xs{tokens, heads, dim};
    Tensor x = random_gpu(xs, DType::BF16, 15), w = random_gpu({dim}, DType::BF16, 16);
    Tensor y = Tensor::empty(xs, DType::BF16, kGpu), rstd = Tensor::empty({tokens * heads}, DType::F32, kGpu);
    Tensor dy = random_gpu(xs, DType::BF16, 17), dx = Tensor::empty(xs, DType::BF16, kGpu);
    Tensor dnorm = Tensor::empty(xs, DType::BF16, kGpu), dw = Tensor::zeros({dim}, DType::F32, kGpu);
    std::vector<int64_t> pos(static_cast<size_t>(tokens));
    for (int64_t i = 0; i < tokens; ++i) pos[size_t(i)] = i % 4096;
    const Tensor positions = index_gpu(pos, DType::I64), inv_freq = rope_inv_freq(dim, 1e6);
    const double act = double(tokens * heads * dim) * 2.0;
    const std::string shape = fmt("%lld x %lld x %lld bf16", (long long)tokens, (long long)heads, (long long)dim);
    report_bytes("rmsnorm_rope_forward " + shape,
                 median_ms([&] { cuda::rmsnorm_rope_forward(x, w, 1e-6, positions, inv_freq, y, rstd); }), 2.0 * act);
    report_bytes("  unfused: rmsnorm_forward, rope_forward", median_ms([&] {
                   cuda::rmsnorm_forward(x, w, 1e-6, y, rstd);
                   cuda::rope_forward(y, positions, inv_freq, y);
                 }),
                 2.0 * act);
    report_bytes("rmsnorm_rope_backward " + shape,
                 median_ms([&] { cuda::rmsnorm_rope_backward(dy, x, w, rstd, positions, inv_freq, dx, dw); }),
                 3.0 * act);
    report_bytes("  unfused: rope_backward, rmsnorm_backward", median_ms([&] {
                   cuda::rope_backward(dy, positions, inv_freq, dnorm);
                   cuda::rmsnorm_backward(dnorm, x, w, rstd, dx, dw);
                 }),
                 3.0 * act);
  }
}

void perf_memory_bound() {
  const int64_t rows = 16384, hidden = 4096, ffn = 11008, vocab = 151936, heads = 16, dim = 128;
  {
    Tensor x = random_gpu({rows, hidden}, DType::BF16, 7), dy = random_gpu({rows, hidden}, DType::BF16, 9);
    Tensor sum = Tensor::empty(x.shape(), DType::BF16, kGpu);
    report_bytes("add 16384 x 4096 bf16", median_ms([&] { cuda::add(x, dy, sum); }),
                 3.0 * double(rows) * double(hidden) * 2.0);
  }
  {
    Tensor gu = random_gpu({rows, 2 * ffn}, DType::BF16, 10), out = Tensor::empty({rows, ffn}, DType::BF16, kGpu);
    Tensor dout = random_gpu({rows, ffn}, DType::BF16, 11), dgu = Tensor::empty(gu.shape(), DType::BF16, kGpu);
    const double half = double(rows) * double(ffn) * 2.0;
    report_bytes("swiglu_forward 16384 x 11008 bf16", median_ms([&] { cuda::swiglu_forward(gu, out); }), 3.0 * half);
    report_bytes("swiglu_backward 16384 x 11008 bf16", median_ms([&] { cuda::swiglu_backward(dout, gu, dgu); }),
                 5.0 * half);
  }
  {
    Tensor x = random_gpu({rows, heads, dim}, DType::BF16, 12), out = Tensor::empty(x.shape(), DType::BF16, kGpu);
    std::vector<int64_t> pos(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) pos[size_t(i)] = i % 4096;
    Tensor positions = index_gpu(pos, DType::I64);
    std::vector<double> f(size_t(dim / 2));
    for (int64_t i = 0; i < dim / 2; ++i) f[size_t(i)] = std::pow(1e6, -double(2 * i) / double(dim));
    Tensor inv_freq = Tensor::from_doubles(f, {dim / 2}, DType::F64);
    report_bytes("rope_forward 16384 x 16 x 128 bf16",
                 median_ms([&] { cuda::rope_forward(x, positions, inv_freq, out); }),
                 2.0 * double(x.numel()) * 2.0);
  }
  {
    const int64_t n = 8192;
    Tensor logits = random_gpu({n, vocab}, DType::BF16, 13, -5.f, 5.f);
    std::vector<int64_t> lab(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) lab[size_t(i)] = (i * 7919) % vocab;
    Tensor labels = index_gpu(lab, DType::I64);
    Tensor row_max = Tensor::empty({n}, DType::F32, kGpu), sumexp = Tensor::empty({n}, DType::F32, kGpu),
           target = Tensor::empty({n}, DType::F32, kGpu), lse = Tensor::empty({n}, DType::F32, kGpu),
           loss = Tensor::empty({n}, DType::F32, kGpu);
    Tensor dloss = random_gpu({n}, DType::F32, 14);
    const double bytes = double(n) * double(vocab) * 2.0;
    report_bytes("logits_row_max 8192 x 151936 bf16", median_ms([&] { cuda::logits_row_max(logits, row_max); }),
                 bytes);
    report_bytes("logits_sumexp_target 8192 x 151936 bf16", median_ms([&] {
                   cuda::logits_sumexp_target(logits, row_max, labels, 0, sumexp, target);
                 }),
                 bytes);
    cuda::cross_entropy_loss(row_max, sumexp, target, lse, loss);
    Tensor dlogits = Tensor::empty(logits.shape(), DType::BF16, kGpu);
    report_bytes("cross_entropy_backward 8192 x 151936 bf16", median_ms([&] {
                   cuda::cross_entropy_backward(logits, labels, 0, lse, dloss, dlogits);
                 }),
                 2.0 * bytes);
  }
  {
    // One LM-head chunk of the dense bench at tp = 1: the one-pass statistics
    // against the two passes they replace, then the backward, on the same logits.
    const int64_t n = 4096;
    Tensor logits = random_gpu({n, vocab}, DType::BF16, 18, -5.f, 5.f);
    std::vector<int64_t> lab(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) lab[size_t(i)] = (i * 7919) % vocab;
    Tensor labels = index_gpu(lab, DType::I64);
    Tensor row_max = Tensor::empty({n}, DType::F32, kGpu), sumexp = Tensor::empty({n}, DType::F32, kGpu),
           target = Tensor::empty({n}, DType::F32, kGpu);
    const double bytes = double(n) * double(vocab) * 2.0;
    report_bytes("logits_softmax_stats 4096 x 151936 bf16 (one read)", median_ms([&] {
                   cuda::logits_softmax_stats(logits, labels, 0, row_max, sumexp, target);
                 }),
                 bytes);
    report_bytes("row_max + sumexp_target 4096 x 151936 bf16 (two reads)", median_ms([&] {
                   cuda::logits_row_max(logits, row_max);
                   cuda::logits_sumexp_target(logits, row_max, labels, 0, sumexp, target);
                 }),
                 2.0 * bytes);
    Tensor lse = Tensor::empty({n}, DType::F32, kGpu), loss = Tensor::empty({n}, DType::F32, kGpu);
    Tensor dloss = random_gpu({n}, DType::F32, 19), dlogits = Tensor::empty(logits.shape(), DType::BF16, kGpu);
    cuda::cross_entropy_loss(row_max, sumexp, target, lse, loss);
    report_bytes("cross_entropy_backward 4096 x 151936 bf16", median_ms([&] {
                   cuda::cross_entropy_backward(logits, labels, 0, lse, dloss, dlogits);
                 }),
                 2.0 * bytes);
  }
  {
    const int64_t n = int64_t(256) << 20;
    Tensor p = random_gpu({n}, DType::F32, 15), g = random_gpu({n}, DType::F32, 16);
    Tensor m = Tensor::zeros({n}, DType::F32, kGpu), v = Tensor::zeros({n}, DType::F32, kGpu);
    ops::AdamWParams hp;
    report_bytes("adamw_step 256M fp32 (p, g, m, v)", median_ms([&] { cuda::adamw_step(p, g, m, v, hp); }),
                 28.0 * double(n));
    report_bytes("sum_squares 256M fp32 (one sync)", median_ms([&] { cuda::sum_squares(g); }), 4.0 * double(n));
    Tensor m16 = Tensor::zeros({n}, DType::BF16, kGpu), v16 = Tensor::zeros({n}, DType::BF16, kGpu);
    report_bytes("adamw_step 256M fp32 p, g; bf16 exp_avg, exp_avg_sq",
                 median_ms([&] { cuda::adamw_step(p, g, m16, v16, hp); }), 20.0 * double(n));
  }
  {
    const int64_t vocab_local = 151936, n = 16384;
    Tensor w = random_gpu({vocab_local, hidden}, DType::BF16, 17), out = Tensor::empty({n, hidden}, DType::BF16, kGpu);
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = (i * 104729) % vocab_local;
    Tensor id = index_gpu(ids, DType::I64);
    report_bytes("embedding_forward 16384 rows x 4096 bf16",
                 median_ms([&] { cuda::embedding_forward(w, id, 0, out); }), 2.0 * double(n) * double(hidden) * 2.0);
  }
}

// Multi-head latent attention's column copies at DeepSeek-V3's widths (128
// local heads, qk_nope 128, qk_rope 64, v 128, kv_lora_rank 512) on one 4096
// token microbatch, in the order one layer's forward and backward call them
// (mla_attention.cpp). GB/s counts the bytes the op must move: the columns
// it reads (each distinct one once; under accumulate only the columns some
// output reads, the others are left untouched) and the columns it writes.
// The last line is the sum over one layer, forward and backward.
void perf_column_gather() {
  const int64_t tokens = 4096, heads = 128, nope = 128, rope = 64, v = 128, kv_lora = 512;
  const int64_t qk = nope + rope, kv_b = nope + v, kv_a = kv_lora + rope, th = tokens * heads;
  auto iota = [](int64_t begin, int64_t count) {
    std::vector<int64_t> idx;
    for (int64_t j = 0; j < count; ++j) idx.push_back(begin + j);
    return idx;
  };
  auto deinterleave = [&](int64_t begin) {
    std::vector<int64_t> idx;
    for (int64_t j = 0; j < rope; ++j) idx.push_back(begin + (j < rope / 2 ? 2 * j : 2 * (j - rope / 2) + 1));
    return idx;
  };
  std::vector<int64_t> bcast;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < rope; ++j) bcast.push_back(j);
  struct Call {
    const char* name;
    bool scatter, accumulate;
    int64_t rows, in;
    std::vector<int64_t> index;
  };
  const Call calls[] = {
      {"sel_c (kv_a -> c)", false, false, tokens, kv_a, iota(0, kv_lora)},
      {"sel_q_rope (q -> q_rope, de-interleave)", false, false, th, qk, deinterleave(nope)},
      {"sel_k_rope (kv_a -> k_rope, de-interleave)", false, false, tokens, kv_a, deinterleave(kv_lora)},
      {"att_nope (q -> q_nope)", false, false, th, qk, iota(0, nope)},
      {"att_nope^T (q_nope -> q)", true, false, th, qk, iota(0, nope)},
      {"att_rope^T (q_rope -> q)", true, true, th, qk, iota(nope, rope)},
      {"sel_k_nope (kv_b -> k_nope)", false, false, th, kv_b, iota(0, nope)},
      {"att_nope^T (k_nope -> k)", true, false, th, qk, iota(0, nope)},
      {"bcast_k_rope (k_rope -> heads)", false, false, tokens, rope, bcast},
      {"att_rope^T (k_rope heads -> k)", true, true, th, qk, iota(nope, rope)},
      {"sel_v (kv_b -> v)", false, false, th, kv_b, iota(nope, v)},
      {"att_rope (dq -> dq_rope)", false, false, th, qk, iota(nope, rope)},
      {"att_rope (dk -> dk_rope)", false, false, th, qk, iota(nope, rope)},
      {"bcast_k_rope^T (sum over heads)", true, false, tokens, rope, bcast},
      {"att_nope (dk -> dk_nope)", false, false, th, qk, iota(0, nope)},
      {"sel_k_nope^T (dk_nope -> d_kv_b)", true, false, th, kv_b, iota(0, nope)},
      {"sel_v^T (dv -> d_kv_b)", true, true, th, kv_b, iota(nope, v)},
      {"sel_c^T (d_c -> d_kv_a)", true, false, tokens, kv_a, iota(0, kv_lora)},
      {"sel_k_rope^T (dk_rope -> d_kv_a)", true, true, tokens, kv_a, deinterleave(kv_lora)},
      {"att_nope (dq -> dq_nope)", false, false, th, qk, iota(0, nope)},
      {"att_nope^T (dq_nope -> d_q)", true, false, th, qk, iota(0, nope)},
      {"sel_q_rope^T (dq_rope -> d_q)", true, true, th, qk, deinterleave(nope)},
  };
  double layer_ms = 0, layer_bytes = 0;
  for (const Call& c : calls) {
    const int64_t out = int64_t(c.index.size());
    const int64_t read = int64_t(std::set<int64_t>(c.index.begin(), c.index.end()).size());
    const ops::ColumnIndex index = ops::make_column_index(c.in, c.index, kGpu);
    // The values do not change a copy's time; zeros spare generating gigabytes.
    Tensor wide = Tensor::zeros({c.rows, c.in}, DType::BF16, kGpu), narrow = Tensor::zeros({c.rows, out}, DType::BF16, kGpu);
    const double bytes = 2.0 * double(c.rows) *
                         double(!c.scatter ? read + out : c.accumulate ? out + 2 * read : out + c.in);
    const double ms = median_ms([&] {
      if (c.scatter) cuda::scatter_add_columns(narrow, index, wide, c.accumulate);
      else cuda::gather_columns(wide, index, narrow);
    });
    report_bytes(fmt("%s %s %lld x %lld -> %lld bf16", c.scatter ? "scatter_add_columns" : "gather_columns", c.name,
                     (long long)c.rows, (long long)(c.scatter ? out : c.in), (long long)(c.scatter ? c.in : out)),
                 ms, bytes);
    layer_ms += ms;
    layer_bytes += bytes;
  }
  report_bytes("column copies of one MLA layer, forward + backward", layer_ms, layer_bytes);
}

// The router of the Qwen3-30B-A3B bench: 8192 tokens a microbatch, 128
// experts, top-8 renormalised, bf16 logits; the backward with a per-token
// [T, E] score gradient (HF's aux loss). Bytes: logits, scores, ids and
// weights once each (forward), scores, extra, ids, weights, dweights and
// dlogits (backward).
void perf_moe_router() {
  const int64_t tokens = 8192, experts = 128, k = 8;
  ops::MoeRouterConfig cfg;
  cfg.top_k = k;
  cfg.norm_topk_prob = true;
  Tensor logits = random_gpu({tokens, experts}, DType::BF16, 30, -2.f, 2.f);
  Tensor scores = Tensor::empty({tokens, experts}, DType::F32, kGpu);
  Tensor ids = Tensor::empty({tokens, k}, DType::I64, kGpu), weights = Tensor::empty({tokens, k}, DType::F32, kGpu);
  const double te = double(tokens * experts), tk = double(tokens * k);
  report_bytes("moe_router_forward 8192 x 128 top-8 softmax bf16", median_ms([&] {
                 cuda::moe_router_forward(logits, cfg, Tensor(), Tensor(), scores, ids, weights);
               }),
               te * (2.0 + 4.0) + tk * (8.0 + 4.0));
  Tensor dweights = random_gpu({tokens, k}, DType::F32, 31), extra = random_gpu({tokens, experts}, DType::F32, 32);
  Tensor dlogits = Tensor::empty({tokens, experts}, DType::BF16, kGpu);
  report_bytes("moe_router_backward 8192 x 128 top-8 dscores=[T,E] bf16", median_ms([&] {
                 cuda::moe_router_backward(dweights, extra, logits, scores, ids, weights, cfg, dlogits);
               }),
               te * (4.0 + 4.0 + 2.0) + tk * (8.0 + 4.0 + 4.0));
  Tensor lse = Tensor::empty({tokens}, DType::F32, kGpu);
  report_bytes("moe_router_lse 8192 x 128 bf16", median_ms([&] { cuda::moe_router_lse(logits, lse); }),
               te * 2.0 + double(tokens) * 4.0);
}

// The token dispatch around the experts of the Qwen3-30B-A3B bench: 8192
// tokens, top-8 of 128 experts, hidden 2048, bf16, float32 routing weights.
// The rows are in expert order, as moe_sort_rows leaves them (tokens
// ascending within an expert), so a token's 8 rows lie far apart. The sums
// (moe_permute_backward, moe_unpermute) run with their own sort of
// token_of_row, and through moe_rows_by_token's index as the MoE layer runs
// them. Bytes count each tensor once: the token-major [T, H] one, the rows
// [N, H] (y and dy both in the unpermute backward), token_of_row, probs and dprobs.
void perf_moe_dispatch() {
  const int64_t tokens = 8192, experts = 128, k = 8, hidden = 2048, rows = tokens * k;
  std::mt19937 rng(33);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> pairs_of_expert(static_cast<size_t>(experts));
  std::vector<int64_t> pool(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < experts; ++e) pool[size_t(e)] = e;
    for (int64_t j = 0; j < k; ++j) {  // partial Fisher-Yates: k distinct experts
      std::swap(pool[size_t(j)], pool[size_t(j + int64_t(rng() % uint32_t(experts - j)))]);
      pairs_of_expert[size_t(pool[size_t(j)])].push_back({t, j});
    }
  }
  std::vector<int64_t> tok, slot;
  for (const auto& ps : pairs_of_expert)
    for (const auto& [t, j] : ps) tok.push_back(t), slot.push_back(j);
  Tensor token_of_row = index_gpu(tok, DType::I64), slot_of_row = index_gpu(slot, DType::I64);
  Tensor rows_by_token = Tensor::empty({tokens, k}, DType::I64, kGpu);
  Tensor x = random_gpu({tokens, hidden}, DType::BF16, 34), y = random_gpu({rows, hidden}, DType::BF16, 35);
  Tensor probs = random_gpu({rows}, DType::F32, 36, 0.f, 1.f);
  Tensor permuted = Tensor::empty({rows, hidden}, DType::BF16, kGpu);
  Tensor combined = Tensor::empty(x.shape(), DType::BF16, kGpu);
  Tensor dy = Tensor::empty(y.shape(), DType::BF16, kGpu), dprobs = Tensor::empty({rows}, DType::F32, kGpu);
  const double token_major = double(tokens) * double(hidden) * 2.0, row_major = double(rows) * double(hidden) * 2.0;
  const double index = double(rows) * 8.0, weights = double(rows) * 4.0;
  report_bytes("moe_permute 8192 tokens top-8 x 2048 bf16",
               median_ms([&] { cuda::moe_permute(x, token_of_row, permuted); }), token_major + row_major + index);
  report_bytes("moe_unpermute 8192 tokens top-8 x 2048 bf16 (sort included)",
               median_ms([&] { cuda::moe_unpermute(y, token_of_row, probs, combined); }),
               row_major + token_major + index + weights);
  report_bytes("moe_permute_backward 8192 tokens top-8 x 2048 bf16 (sort included)",
               median_ms([&] { cuda::moe_permute_backward(y, token_of_row, combined); }),
               row_major + token_major + index);
  report_bytes("moe_rows_by_token 8192 tokens top-8",
               median_ms([&] { cuda::moe_rows_by_token(token_of_row, slot_of_row, rows_by_token); }),
               3.0 * index);
  report_bytes("moe_unpermute 8192 tokens top-8 x 2048 bf16 (through the index)",
               median_ms([&] { cuda::moe_unpermute(y, token_of_row, probs, combined, rows_by_token); }),
               row_major + token_major + index + weights);
  report_bytes("moe_permute_backward 8192 tokens top-8 x 2048 bf16 (through the index)",
               median_ms([&] { cuda::moe_permute_backward(y, token_of_row, combined, rows_by_token); }),
               row_major + token_major + index);
  report_bytes("moe_unpermute_backward 8192 tokens top-8 x 2048 bf16", median_ms([&] {
                 cuda::moe_unpermute_backward(x, y, token_of_row, probs, dy, dprobs);
               }),
               token_major + 2.0 * row_major + index + 2.0 * weights);
}

// Attention at the benches' shapes, with both backends when cuDNN is built.
void perf_attention_all() {
  std::vector<std::string> backends = {"flash"};
  if (cuda::cudnn_attention_built()) backends.push_back("cudnn");
  for (const std::string& backend : backends) {
    perf_attention(backend, "", false, 16, 8, 128, 128, 1, 4);
    perf_attention(backend, "", false, 16, 8, 64, 64, 4, 4);  // head dim 64: both backends side by side
    perf_attention(backend, "", false, 16, 16, 192, 128, 1, 2);
    // Qwen3-30B-A3B's attention (32 q / 4 kv heads, 2 sequences a call), the
    // backward with K/V expanded to the query heads and without; and
    // DeepSeek-V3's multi-head latent attention (128 heads, 1 sequence a call).
    // cuDNN also with every engine configuration timed.
    for (bool autotune : {false, true}) {
      if (autotune && backend != "cudnn") continue;
      for (const char* expand : {"0", "1"}) perf_attention(backend, expand, autotune, 32, 4, 128, 128, 2, 2);
      perf_attention(backend, "", autotune, 128, 128, 192, 128, 1, 1);
    }
  }
}

// Our kernels with the Hopper path on and off (BB_FLASH_SM90), and cuDNN's
// graph variants: the lines that explain the side-by-side table above, kept
// in their own group so a call timing one kernel change can skip them.
void perf_attention_variants() {
  for (int64_t batch : {1, 4}) {
    perf_flash_kernels(16, 8, 128, 128, batch);
    perf_flash_kernels(32, 8, 128, 128, batch);
  }
  perf_flash_kernels(16, 8, 64, 64, 4);
  perf_flash_kernels(16, 16, 192, 128, 2);
  if (cuda::cudnn_attention_built()) {
    perf_cudnn_graphs(16, 8, 128, 128, 2);
    perf_cudnn_graphs(32, 4, 128, 128, 2);
    perf_cudnn_graphs(128, 128, 192, 128, 1);
  }
}

}  // namespace

int run_perf(const std::string& filter) {
  cudaDeviceProp props{};
  CUDA_CHECK(cudaGetDeviceProperties(&props, 0));
  std::printf("device: %s, %d SMs\n", props.name, props.multiProcessorCount);
  const std::pair<const char*, void (*)()> groups[] = {
      {"gemm", perf_gemm},           {"grouped_gemm", perf_grouped_gemm},   {"attention", perf_attention_all},
      {"backend_variants", perf_attention_variants},
      {"rmsnorm", perf_rmsnorm},     {"memory_bound", perf_memory_bound},   {"column_gather", perf_column_gather},
      {"moe_router", perf_moe_router}, {"moe_dispatch", perf_moe_dispatch}};
  for (const auto& [name, run] : groups)
    if (filter_matches(filter, name)) run();
  return 0;
}

}  // namespace bb::harness
