// The deterministic-mode cases of the op harness: each op with an
// order-dependent sum runs twice on the same inputs and must give the same
// bits both times, besides matching the CPU oracle.
//
//   rmsnorm_backward    always fixed-order (many rows, many blocks; the team
//                       kernels at n <= 4096, the general ones above and at 100)
//   add_rmsnorm_backward
//                       always fixed-order (the residual gradient on top of
//                       rmsnorm_backward's team kernels at Qwen3-8B's, 1.7B's
//                       and 0.6B's rows, bfloat16 and a float32 x)
//   rmsnorm_rope_backward
//                       always fixed-order (q/k norm with RoPE: dw over many
//                       blocks; head dims 64, 128, 256)
//   embedding_backward  under backend.deterministic (ids repeated hundreds of times)
//   attention_backward  cuDNN (and auto, which takes it) under backend.deterministic;
//                       flash refuses the mode
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "bumblebee/core/error.h"
#include "bumblebee/ops/cuda/attention_backends.h"
#include "bumblebee/ops/cuda/cuda_ops.h"
#include "bumblebee/ops/deterministic.h"
#include "bumblebee/ops/ops.h"
#include "tests/cuda/harness.h"

namespace bb::harness {
namespace {

constexpr double kBf16Bound = 1e-2;
constexpr double kF32Bound = 1e-5;

// ops::set_deterministic for a scope, restored after (cases run in one process).
class DeterministicMode {
 public:
  explicit DeterministicMode(bool on) : old_(ops::deterministic()) { ops::set_deterministic(on); }
  ~DeterministicMode() { ops::set_deterministic(old_); }
  DeterministicMode(const DeterministicMode&) = delete;
  DeterministicMode& operator=(const DeterministicMode&) = delete;

 private:
  bool old_;
};

// The fraction of elements whose values differ between two CUDA runs (NaN
// equals NaN); the bound is 0: the runs must agree bit for bit.
Check bitwise(const std::string& name, const Tensor& first, const Tensor& second) {
  const std::vector<double> a = first.to_doubles(), b = second.to_doubles();
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) ++differ;
  return {name + " run1==run2", a.empty() ? 0.0 : double(differ) / double(a.size()), 0.0};
}

Tensor gpu_copy(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device());
  c.copy_from(t);
  return c;
}

void rmsnorm_cases(std::vector<Case>& cases) {
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{20000, 1024}, {4096, 4096}, {2000, 8192}, {3001, 100},
                         {50000, 128}, {8192, 2048}}) {
    const std::string shape = fmt("R=%lld n=%lld x=bf16 w=bf16", (long long)rows, (long long)n);
    cases.push_back(
        {"rmsnorm_backward[deterministic]", shape, [=](Generator& gen) {
           const double eps = 1e-6;
           Pair x = random_pair(gen, {rows, n}, DType::BF16);
           Pair w = random_pair(gen, {n}, DType::BF16, 0.2, 1.0);
           Pair dy = random_pair(gen, {rows, n}, DType::BF16);
           Tensor y_cpu = Tensor::empty({rows, n}, DType::F32), rstd_cpu = Tensor::empty({rows}, DType::F32);
           ops::rmsnorm_forward(x.cpu, w.cpu, eps, y_cpu, rstd_cpu);
           Pair rstd = pair_from_cpu(rstd_cpu, DType::F32);
           Pair dx = output_pair({rows, n}, DType::BF16);
           Pair dw = random_pair(gen, {n}, DType::F32);
           Tensor dx2 = gpu_copy(dx.gpu), dw2 = gpu_copy(dw.gpu);
           cuda::rmsnorm_backward(dy.gpu, x.gpu, w.gpu, rstd.gpu, dx.gpu, dw.gpu);
           cuda::rmsnorm_backward(dy.gpu, x.gpu, w.gpu, rstd.gpu, dx2, dw2);
           ops::rmsnorm_backward(dy.cpu, x.cpu, w.cpu, rstd.cpu, dx.cpu, dw.cpu);
           return std::vector<Check>{compare("dx", dx, kBf16Bound), compare("dw", dw, kBf16Bound),
                                     bitwise("dx", dx.gpu, dx2), bitwise("dw", dw.gpu, dw2)};
         }});
  }
}

// The decoder norms of Qwen3-8B (4096), Qwen3-1.7B (2048) and Qwen3-0.6B
// (1024) over a micro-batch of 8192 tokens, with the residual gradient;
// bfloat16 and the float32 residual stream.
void add_rmsnorm_cases(std::vector<Case>& cases) {
  for (auto [rows, n, x_dt] : {std::tuple<int64_t, int64_t, DType>{8192, 2048, DType::BF16},
                               {8192, 2048, DType::F32}, {8192, 1024, DType::BF16},
                               {8192, 4096, DType::BF16}}) {
    const std::string shape =
        fmt("R=%lld n=%lld x=%s w=bf16", (long long)rows, (long long)n, x_dt == DType::BF16 ? "bf16" : "f32");
    const double bound = x_dt == DType::BF16 ? kBf16Bound : kF32Bound;
    cases.push_back(
        {"add_rmsnorm_backward[deterministic]", shape, [=](Generator& gen) {
           const double eps = 1e-6;
           Pair x = random_pair(gen, {rows, n}, x_dt);
           Pair w = random_pair(gen, {n}, DType::BF16, 0.2, 1.0);
           Pair dy = random_pair(gen, {rows, n}, DType::BF16);
           Pair residual_grad = random_pair(gen, {rows, n}, x_dt);
           Tensor y_cpu = Tensor::empty({rows, n}, DType::F32), rstd_cpu = Tensor::empty({rows}, DType::F32);
           ops::rmsnorm_forward(x.cpu, w.cpu, eps, y_cpu, rstd_cpu);
           Pair rstd = pair_from_cpu(rstd_cpu, DType::F32);
           Pair dx = output_pair({rows, n}, x_dt);
           Pair dw = random_pair(gen, {n}, DType::F32);
           Tensor dx2 = gpu_copy(dx.gpu), dw2 = gpu_copy(dw.gpu);
           cuda::add_rmsnorm_backward(dy.gpu, x.gpu, w.gpu, rstd.gpu, residual_grad.gpu, dx.gpu, dw.gpu);
           cuda::add_rmsnorm_backward(dy.gpu, x.gpu, w.gpu, rstd.gpu, residual_grad.gpu, dx2, dw2);
           ops::add_rmsnorm_backward(dy.cpu, x.cpu, w.cpu, rstd.cpu, residual_grad.cpu, dx.cpu, dw.cpu);
           return std::vector<Check>{compare("dx", dx, bound), compare("dw", dw, kBf16Bound),
                                     bitwise("dx", dx.gpu, dx2), bitwise("dw", dw.gpu, dw2)};
         }});
  }
}

// Qwen3-30B-A3B's q and k heads (32 and 4 of 128) over thousands of tokens,
// and the other two fused head dims.
void rmsnorm_rope_cases(std::vector<Case>& cases) {
  struct Heads {
    int64_t tokens, heads, dim;
  };
  for (Heads h : {Heads{2048, 32, 128}, Heads{8192, 4, 128}, Heads{3001, 5, 64}, Heads{1000, 16, 256}}) {
    const std::string shape =
        fmt("N=%lld heads=%lld D=%lld x=bf16 w=bf16", (long long)h.tokens, (long long)h.heads, (long long)h.dim);
    cases.push_back(
        {"rmsnorm_rope_backward[deterministic]", shape, [=](Generator& gen) {
           const double eps = 1e-6;
           const Shape xs{h.tokens, h.heads, h.dim};
           const int64_t rows = h.tokens * h.heads;
           Pair x = random_pair(gen, xs, DType::BF16);
           Pair w = random_pair(gen, {h.dim}, DType::BF16, 0.2, 1.0);
           Pair dy = random_pair(gen, xs, DType::BF16);
           std::vector<double> pos(size_t(h.tokens));
           for (size_t t = 0; t < pos.size(); ++t) pos[t] = double(t % 4096);
           Pair positions = index_pair(pos, DType::I64);
           const Tensor inv_freq = rope_inv_freq(h.dim, 1e6);
           Tensor y_cpu = Tensor::empty(xs, DType::F32), rstd_cpu = Tensor::empty({rows}, DType::F32);
           ops::rmsnorm_forward(x.cpu, w.cpu, eps, y_cpu, rstd_cpu);
           Pair rstd = pair_from_cpu(rstd_cpu, DType::F32);
           Pair dx = output_pair(xs, DType::BF16);
           Pair dw = random_pair(gen, {h.dim}, DType::F32);
           Tensor dx2 = gpu_copy(dx.gpu), dw2 = gpu_copy(dw.gpu);
           cuda::rmsnorm_rope_backward(dy.gpu, x.gpu, w.gpu, rstd.gpu, positions.gpu, inv_freq, dx.gpu, dw.gpu);
           cuda::rmsnorm_rope_backward(dy.gpu, x.gpu, w.gpu, rstd.gpu, positions.gpu, inv_freq, dx2, dw2);
           ops::rmsnorm_rope_backward(dy.cpu, x.cpu, w.cpu, rstd.cpu, positions.cpu, inv_freq, dx.cpu, dw.cpu);
           return std::vector<Check>{compare("dx", dx, kBf16Bound), compare("dw", dw, kBf16Bound),
                                     bitwise("dx", dx.gpu, dx2), bitwise("dw", dw.gpu, dw2)};
         }});
  }
}

void embedding_cases(std::vector<Case>& cases) {
  struct E {
    int64_t vocab_local, hidden, rows, vocab_start, distinct;
  };
  // `distinct` ids drawn from [0, vocab_start + 2 V_local): each repeats about
  // rows / distinct times, and the ids outside the local range belong to
  // other ranks.
  for (E e : {E{1000, 256, 8192, 0, 20}, E{50000, 1024, 4096, 10000, 4000}, E{64, 36, 3000, 32, 128}}) {
    const std::string shape =
        fmt("V_local=%lld H=%lld N=%lld vocab_start=%lld distinct=%lld", (long long)e.vocab_local, (long long)e.hidden,
            (long long)e.rows, (long long)e.vocab_start, (long long)e.distinct);
    cases.push_back({"embedding_backward[deterministic]", shape, [=](Generator& gen) {
                       DeterministicMode mode(true);
                       std::vector<double> pool(size_t(e.distinct)), ids(size_t(e.rows));
                       for (double& id : pool)
                         id = double(int64_t(gen.uniform() * double(e.vocab_start + 2 * e.vocab_local)));
                       for (double& id : ids) id = pool[size_t(gen.uniform() * double(e.distinct)) % pool.size()];
                       Pair id_pair = index_pair(ids, DType::I32);
                       Pair grad_out = random_pair(gen, {e.rows, e.hidden}, DType::BF16);
                       Pair grad_w = random_pair(gen, {e.vocab_local, e.hidden}, DType::F32);
                       Tensor grad_w2 = gpu_copy(grad_w.gpu);
                       cuda::embedding_backward(grad_out.gpu, id_pair.gpu, e.vocab_start, grad_w.gpu);
                       cuda::embedding_backward(grad_out.gpu, id_pair.gpu, e.vocab_start, grad_w2);
                       ops::embedding_backward(grad_out.cpu, id_pair.cpu, e.vocab_start, grad_w.cpu);
                       return std::vector<Check>{compare("grad_weight", grad_w, kF32Bound),
                                                 bitwise("grad_weight", grad_w.gpu, grad_w2)};
                     }});
  }
}

// Under BB_ATTENTION_BACKEND=`backend` (cudnn, or auto, which must take
// cuDNN's backward here) and deterministic mode: the CPU comparison and two
// runs' bitwise agreement of dq, dk and dv.
void add_deterministic_case(std::vector<Case>& cases, const std::string& backend, const AttentionShape& a) {
  const std::vector<double> cu = a.cu_seqlens();
  const int64_t max_seqlen = a.max_seqlen(), tokens = a.tokens();
  const double scale = a.scale();
  const Shape q_shape{tokens, a.heads_q, a.head_dim}, kv_shape{tokens, a.heads_kv, a.head_dim};
  cases.push_back({"attention_backward[" + backend + " deterministic]", attention_shape(a), [=](Generator& gen) {
                     EnvOverride env("BB_ATTENTION_BACKEND", backend);
                     DeterministicMode mode(true);
                     Pair q = random_pair(gen, q_shape, DType::BF16), k = random_pair(gen, kv_shape, DType::BF16),
                          v = random_pair(gen, kv_shape, DType::BF16), dout = random_pair(gen, q_shape, DType::BF16);
                     Pair cu_seqlens = index_pair(cu, DType::I32);
                     Tensor out_cpu = Tensor::empty(q_shape, DType::F32);
                     Tensor lse_cpu = Tensor::empty({tokens, a.heads_q}, DType::F32);
                     ops::attention_forward(q.cpu, k.cpu, v.cpu, cu_seqlens.cpu, max_seqlen, scale, out_cpu, lse_cpu);
                     Pair out = pair_from_cpu(out_cpu, DType::BF16), lse = pair_from_cpu(lse_cpu, DType::F32);
                     Pair dq = output_pair(q_shape, DType::BF16), dk = output_pair(kv_shape, DType::BF16),
                          dv = output_pair(kv_shape, DType::BF16);
                     Tensor dq2 = gpu_copy(dq.gpu), dk2 = gpu_copy(dk.gpu), dv2 = gpu_copy(dv.gpu);
                     cuda::attention_backward(dout.gpu, q.gpu, k.gpu, v.gpu, out.gpu, lse.gpu, cu_seqlens.gpu,
                                              max_seqlen, scale, dq.gpu, dk.gpu, dv.gpu);
                     cuda::attention_backward(dout.gpu, q.gpu, k.gpu, v.gpu, out.gpu, lse.gpu, cu_seqlens.gpu,
                                              max_seqlen, scale, dq2, dk2, dv2);
                     ops::attention_backward(dout.cpu, q.cpu, k.cpu, v.cpu, out.cpu, lse.cpu, cu_seqlens.cpu,
                                             max_seqlen, scale, dq.cpu, dk.cpu, dv.cpu);
                     return std::vector<Check>{compare("dq", dq, kBf16Bound), compare("dk", dk, kBf16Bound),
                                               compare("dv", dv, kBf16Bound), bitwise("dq", dq.gpu, dq2),
                                               bitwise("dk", dk.gpu, dk2),    bitwise("dv", dv.gpu, dv2)};
                   }});
}

// The flash backward under deterministic mode: an error naming backend.deterministic.
void add_flash_refusal_case(std::vector<Case>& cases) {
  cases.push_back({"attention_backward[flash deterministic]", "refused", [](Generator& gen) {
                     EnvOverride env("BB_ATTENTION_BACKEND", "flash");
                     DeterministicMode mode(true);
                     const Shape shape{64, 2, 64};
                     Pair q = random_pair(gen, shape, DType::BF16);
                     Tensor lse = Tensor::zeros({64, 2}, DType::F32, q.gpu.device());
                     Tensor cu = index_pair({0.0, 64.0}, DType::I32).gpu;
                     Tensor dq = gpu_copy(q.gpu), dk = gpu_copy(q.gpu), dv = gpu_copy(q.gpu);
                     std::string message;
                     try {
                       cuda::attention_backward(q.gpu, q.gpu, q.gpu, q.gpu, q.gpu, lse, cu, 64, 0.125, dq, dk, dv);
                     } catch (const Error& e) {
                       message = e.what();
                     }
                     const bool named = message.find("backend.deterministic") != std::string::npos &&
                                        message.find("backend.attention_backend=cudnn") != std::string::npos;
                     if (!named) std::printf("      attention_backward threw \"%s\"\n", message.c_str());
                     return std::vector<Check>{{"error", named ? 0.0 : 1.0, 0.0}};
                   }});
}

}  // namespace

void determinism_cases(std::vector<Case>& cases) {
  rmsnorm_cases(cases);
  add_rmsnorm_cases(cases);
  rmsnorm_rope_cases(cases);
  embedding_cases(cases);
  if (cuda::cudnn_attention_built())
    for (const AttentionShape& a : {AttentionShape{{1024}, 4, 4, 64}, AttentionShape{{512, 300, 37}, 8, 2, 128},
                                    AttentionShape{{256, 256}, 8, 2, 128}})
      for (const char* backend : {"cudnn", "auto"}) add_deterministic_case(cases, backend, a);
  add_flash_refusal_case(cases);
}

}  // namespace bb::harness
