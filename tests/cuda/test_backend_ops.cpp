// bb_cuda_ops: the CUDA-vs-CPU op harness (the idea of ggml's
// test-backend-ops, kept table-driven and small).
//
// Every case draws fresh random inputs, rounds them through the CUDA dtype
// (bfloat16 activations, float32 statistics and optimizer state), runs the op
// on CUDA (bb::cuda::) and on the CPU oracle (bb::ops:: with float32 tensors
// holding the same values), and compares each output by
// ||cuda - cpu|| / ||cpu|| against a per-dtype bound. CUDA outputs are filled
// with NaN before the op runs, so an output element the kernel never writes
// fails the case; outputs that accumulate (+=) start from random values
// instead, which checks the accumulation.
//
//   bb_cuda_ops                 run every case; one line per checked output,
//                               then "N passed, M failed"; exit 1 on failure
//   bb_cuda_ops --filter A,B    only cases whose op name contains A or B
//   bb_cuda_ops --seed N        another draw of the random inputs
//   bb_cuda_ops --perf          time the GEMM, attention and memory-bound
//                               kernels instead (test_backend_ops_perf.cpp);
//                               with --filter, only the groups named
//                               (attention: both backends at the benches'
//                               shapes; backend_variants: our Hopper path on
//                               and off, cuDNN's graph variants);
//                               BB_PERF_LINE=A,B runs only the attention
//                               lines whose name contains A or B
//
// When the build has cuDNN attention, attention cases (plain causal
// self-attention and the partial attention of ring attention) run under both
// BB_ATTENTION_BACKEND=flash and =cudnn; our forward and backward cases run
// again under BB_FLASH_SM90=0 ("sm90=0" in the name), so on Hopper both the
// sm_90a and the FlashAttention-2 kernels are checked in both directions. The deterministic-mode cases
// (test_backend_ops_determinism.cpp) run each op twice and require the same bits.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/core/half.h"
#include "bumblebee/core/rng.h"
#include "bumblebee/ops/cuda/attention_backends.h"
#include "bumblebee/core/cuda/cuda_memory.h"
#include "bumblebee/ops/cuda/cuda_ops.h"
#include "bumblebee/ops/cuda/dropout.h"
#include "bumblebee/ops/dropout.h"
#include "bumblebee/ops/ops.h"
#include "tests/cuda/harness.h"

namespace bb::harness {
namespace {

// Relative-error bounds: bfloat16 outputs carry ~2^-9 relative rounding per
// element plus bf16 intermediates (P, dS in attention); float32 outputs of
// identical inputs differ only by accumulation order.
constexpr double kBf16Bound = 1e-2;
constexpr double kF32Bound = 1e-5;

double bound_for(DType dt) { return dt == DType::BF16 ? kBf16Bound : kF32Bound; }

const char* short_name(DType dt) { return dt == DType::BF16 ? "bf16" : dt == DType::F32 ? "f32" : dtype_name(dt); }

// ---- the table -------------------------------------------------------------------------

void matmul_cases(std::vector<Case>& cases) {
  struct Shape3 {
    int64_t m, n, k;
    bool ta, tb;
    DType ab, c;
    double alpha, beta;
  };
  const Shape3 shapes[] = {
      {64, 128, 96, false, false, DType::BF16, DType::BF16, 1.0, 0.0},
      {77, 45, 33, true, false, DType::BF16, DType::BF16, 1.0, 0.0},
      {128, 256, 64, false, true, DType::BF16, DType::BF16, 0.5, 1.0},
      {33, 65, 17, true, true, DType::BF16, DType::F32, 1.0, 1.0},
      {512, 384, 1024, true, false, DType::BF16, DType::F32, 1.0, 1.0},  // weight-gradient shape: a^T b into fp32
      {100, 72, 40, false, false, DType::F32, DType::F32, 1.0, 0.0},
      {16, 16, 0, false, false, DType::BF16, DType::BF16, 1.0, 0.0},     // empty sum
  };
  for (const Shape3& s : shapes) {
    std::string shape = fmt("m=%lld n=%lld k=%lld ta=%d tb=%d %s->%s alpha=%g beta=%g", (long long)s.m,
                            (long long)s.n, (long long)s.k, int(s.ta), int(s.tb), short_name(s.ab),
                            short_name(s.c), s.alpha, s.beta);
    cases.push_back({"matmul", shape, [s](Generator& gen) {
                       Pair a = random_pair(gen, s.ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, s.ab);
                       Pair b = random_pair(gen, s.tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, s.ab);
                       Pair c = s.beta != 0.0 ? random_pair(gen, {s.m, s.n}, s.c) : output_pair({s.m, s.n}, s.c);
                       cuda::matmul(a.gpu, s.ta, b.gpu, s.tb, c.gpu, s.alpha, s.beta);
                       ops::matmul(a.cpu, s.ta, b.cpu, s.tb, c.cpu, s.alpha, s.beta);
                       return std::vector<Check>{compare("c", c, bound_for(s.c))};
                     }});
  }
}

// The experts of an MoE layer, under each grouped GEMM engine
// (BB_GROUPED_GEMM=cublas, and cutlass when built; the op name carries it):
// groups of 0, 1, 17 and 300 rows, in a few groups and in 128 (the bench's
// expert count), every group empty, groups spanning several 128x256 tiles,
// and a K / N off the multiple of 8 CUTLASS needs (it falls back to cuBLAS).
// Forward (y = x W^T, also with alpha and beta = 1 onto random y), the input
// gradient (dx = dy W) and the weight gradient accumulated (beta = 1) into
// fp32 or bf16 grads and written fresh (beta = 0); bfloat16 and float32.
void grouped_gemm_cases(std::vector<Case>& cases) {
  struct Groups {
    const char* name;
    std::vector<int64_t> counts;
    int64_t k, n;
  };
  std::vector<int64_t> many;
  for (int g = 0; g < 128; ++g) many.push_back(std::vector<int64_t>{0, 1, 17, 300}[size_t(g % 4)]);
  const Groups layouts[] = {{"rows 0,1,17,300", {0, 1, 17, 300}, 96, 80},
                            {"128 groups", many, 96, 80},
                            {"all empty", {0, 0, 0}, 96, 80},
                            {"rows 129,0,700,2048,1", {129, 0, 700, 2048, 1}, 512, 384},
                            {"rows 0,33,250 K%8=4", {0, 33, 250}, 36, 20},
                            // Over 1,024 rows an expert on average: CUTLASS's
                            // 2x1-cluster kernels (fewer take its 1x1 ones).
                            {"rows 1500,0,3000,900", {1500, 0, 3000, 900}, 256, 128}};
  std::vector<std::string> engines{"cublas"};
  if (cuda::cutlass_grouped_gemm_built()) engines.push_back("cutlass");
  for (const std::string& engine : engines) {
    const std::string tag = "[" + engine + "]";
    for (const Groups& layout : layouts) {
      std::vector<int64_t> offsets{0};
      for (int64_t c : layout.counts) offsets.push_back(offsets.back() + c);
      const int64_t rows = offsets.back(), k = layout.k, n = layout.n;
      const size_t groups = layout.counts.size();
      for (DType dt : {DType::BF16, DType::F32}) {
        const std::string shape = fmt("%s N=%lld K=%lld Nout=%lld %s", layout.name, (long long)rows, (long long)k,
                                      (long long)n, short_name(dt));
        auto matrices = [](Generator& gen, size_t count, const Shape& shape, DType dtype, std::vector<Tensor>& gpu,
                           std::vector<Tensor>& cpu) {
          for (size_t g = 0; g < count; ++g) {
            Pair p = random_pair(gen, shape, dtype);
            gpu.push_back(p.gpu);
            cpu.push_back(p.cpu);
          }
        };
        for (double beta : {0.0, 1.0}) {
          const double alpha = beta == 0.0 ? 1.0 : 0.5;
          cases.push_back({"grouped_gemm" + tag, shape + fmt(" y=%gxW^T+%gy", alpha, beta), [=](Generator& gen) {
                             EnvOverride env("BB_GROUPED_GEMM", engine);
                             std::vector<Tensor> w_gpu, w_cpu;
                             matrices(gen, groups, {n, k}, dt, w_gpu, w_cpu);
                             Pair x = random_pair(gen, {rows, k}, dt);
                             Pair y = beta != 0.0 ? random_pair(gen, {rows, n}, dt) : output_pair({rows, n}, dt);
                             cuda::grouped_gemm(x.gpu, w_gpu, true, offsets, y.gpu, alpha, beta);
                             ops::grouped_gemm(x.cpu, w_cpu, true, offsets, y.cpu, alpha, beta);
                             return std::vector<Check>{compare("y", y, bound_for(dt))};
                           }});
        }
        cases.push_back({"grouped_gemm" + tag, shape + " dx=dyW", [=](Generator& gen) {
                           EnvOverride env("BB_GROUPED_GEMM", engine);
                           std::vector<Tensor> w_gpu, w_cpu;
                           matrices(gen, groups, {n, k}, dt, w_gpu, w_cpu);
                           Pair dy = random_pair(gen, {rows, n}, dt), dx = output_pair({rows, k}, dt);
                           cuda::grouped_gemm(dy.gpu, w_gpu, false, offsets, dx.gpu, 1.0, 0.0);
                           ops::grouped_gemm(dy.cpu, w_cpu, false, offsets, dx.cpu);
                           return std::vector<Check>{compare("dx", dx, bound_for(dt))};
                         }});
        // fp32 grads of either input dtype; bf16 grads of bf16 inputs.
        std::vector<DType> grad_dtypes{DType::F32};
        if (dt == DType::BF16) grad_dtypes.push_back(DType::BF16);
        for (DType gdt : grad_dtypes) {
          for (double beta : {1.0, 0.0}) {
            const std::string what = fmt(" dW=dy^Tx+%gdW %s grad", beta, short_name(gdt));
            cases.push_back({"grouped_gemm_weight_grad" + tag, shape + what, [=](Generator& gen) {
                               EnvOverride env("BB_GROUPED_GEMM", engine);
                               std::vector<Tensor> dw_gpu, dw_cpu;
                               matrices(gen, groups, {n, k}, gdt, dw_gpu, dw_cpu);
                               // An overwrite must not read dw: a lazily zeroed gradient holds stale values.
                               if (beta == 0.0)
                                 for (Tensor& t : dw_gpu) t.fill_(std::nan(""));
                               Pair dy = random_pair(gen, {rows, n}, dt), x = random_pair(gen, {rows, k}, dt);
                               cuda::grouped_gemm_weight_grad(dy.gpu, x.gpu, offsets, dw_gpu, 1.0, beta);
                               ops::grouped_gemm_weight_grad(dy.cpu, x.cpu, offsets, dw_cpu, 1.0, beta);
                               std::vector<Check> checks;
                               for (size_t g = 0; g < groups; ++g) {
                                 if (groups > 8 && g % 4 != 3 && g % 4 != 0) continue;  // of 128: 300 rows and empty
                                 checks.push_back(
                                     compare(fmt("dw[%zu]", g), Pair{dw_gpu[g], dw_cpu[g]}, bound_for(gdt)));
                               }
                               return checks;
                             }});
          }
        }
      }
    }
  }
}

// The dropout mask: a column slice (tensor-parallel shard) of a wider mask;
// both backends must drop the same elements (the zero counts agree exactly).
void dropout_cases(std::vector<Case>& cases) {
  for (DType dt : {DType::BF16, DType::F32}) {
    constexpr int64_t kRows = 37, kCols = 100, kStride = 130, kOffset = 17;
    cases.push_back({"dropout_mask", fmt("[%lld, %lld] of %lld p=0.3 %s", (long long)kRows, (long long)kCols,
                                         (long long)kStride, short_name(dt)),
                     [=](Generator&) {
                       Pair mask = output_pair({kRows, kCols}, dt);
                       cuda::dropout_mask(mask.gpu, 0x1234, kStride, kOffset, 0.3);
                       ops::dropout_mask(mask.cpu, 0x1234, kStride, kOffset, 0.3);
                       return std::vector<Check>{
                           compare("mask", mask, bound_for(dt)),
                           compare_scalar("dropped", double(ops::count_zeros(mask.gpu)),
                                          double(ops::count_zeros(mask.cpu)), 0.0)};
                     }});
  }
}

void elementwise_cases(std::vector<Case>& cases) {
  for (int64_t n : {int64_t(4096), int64_t(1001)}) {
    for (DType dt : {DType::BF16, DType::F32}) {
      std::string shape = fmt("n=%lld %s", (long long)n, short_name(dt));
      cases.push_back({"add", shape, [=](Generator& gen) {
                         Pair a = random_pair(gen, {n}, dt), b = random_pair(gen, {n}, dt);
                         Pair out = output_pair({n}, dt);
                         cuda::add(a.gpu, b.gpu, out.gpu);
                         ops::add(a.cpu, b.cpu, out.cpu);
                         return std::vector<Check>{compare("out", out, bound_for(dt))};
                       }});
      cases.push_back({"mul", shape, [=](Generator& gen) {
                         Pair a = random_pair(gen, {n}, dt), b = random_pair(gen, {n}, dt);
                         Pair out = output_pair({n}, dt);
                         cuda::mul(a.gpu, b.gpu, out.gpu);
                         ops::mul(a.cpu, b.cpu, out.cpu);
                         return std::vector<Check>{compare("out", out, bound_for(dt))};
                       }});
      cases.push_back({"scale_", shape, [=](Generator& gen) {
                         Pair x = random_pair(gen, {n}, dt);
                         cuda::scale_(x.gpu, 0.37);
                         ops::scale_(x.cpu, 0.37);
                         return std::vector<Check>{compare("x", x, bound_for(dt))};
                       }});
    }
    // The float32 residual stream plus a bfloat16 branch output.
    cases.push_back({"add", fmt("n=%lld f32+bf16->f32", (long long)n), [=](Generator& gen) {
                       Pair a = random_pair(gen, {n}, DType::F32), b = random_pair(gen, {n}, DType::BF16);
                       Pair out = output_pair({n}, DType::F32);
                       cuda::add(a.gpu, b.gpu, out.gpu);
                       // The CPU takes one dtype: b's values are already rounded.
                       ops::add(a.cpu, b.cpu, out.cpu);
                       return std::vector<Check>{compare("out", out, kF32Bound)};
                     }});
    // Accumulation with mixed dtypes: fp32 gradients += bf16, and bf16 += bf16.
    for (auto [acc_dt, x_dt] : {std::pair{DType::F32, DType::BF16}, std::pair{DType::BF16, DType::BF16},
                                std::pair{DType::F32, DType::F32}}) {
      std::string shape = fmt("n=%lld %s+=%s alpha=0.5", (long long)n, short_name(acc_dt), short_name(x_dt));
      cases.push_back({"add_", shape, [=](Generator& gen) {
                         Pair acc = random_pair(gen, {n}, acc_dt), x = random_pair(gen, {n}, x_dt);
                         cuda::add_(acc.gpu, x.gpu, 0.5);
                         // The CPU takes one dtype: x's values are already rounded.
                         ops::add_(acc.cpu, x.cpu, 0.5);
                         return std::vector<Check>{compare("acc", acc, bound_for(acc_dt))};
                       }});
    }
  }
}

// Column gathers as multi-head latent attention uses them (DeepSeek-V3's
// dims), one whose 16-byte groups mix runs, repeats and unread columns, an
// odd one with repeats (one element a thread), and one on a matrix that
// starts off 16-byte alignment; float64 runs on both sides in float64.
void column_gather_cases(std::vector<Case>& cases) {
  struct Gather {
    const char* name;
    int64_t rows, in;
    std::vector<int64_t> index;
    bool shifted = false;   // x and dy one element past an allocation's start
  };
  std::vector<int64_t> k_nope, k_rope_bcast, rope_deinterleave, q_nope, mixed, odd;
  for (int64_t h = 0; h < 16; ++h)
    for (int64_t c = 0; c < 128; ++c) k_nope.push_back(h * 256 + c);
  for (int64_t h = 0; h < 16; ++h)
    for (int64_t c = 0; c < 64; ++c) k_rope_bcast.push_back(c);
  for (int64_t j = 0; j < 64; ++j) rope_deinterleave.push_back(512 + (j < 32 ? 2 * j : 2 * (j - 32) + 1));
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t c = 0; c < 128; ++c) q_nope.push_back(h * 192 + c);
  for (int64_t j = 0; j < 16; ++j) mixed.push_back(j);
  for (int64_t j = 0; j < 8; ++j) mixed.push_back(j % 3 == 0 ? 20 + j : 5);
  for (int64_t j = 0; j < 8; ++j) mixed.push_back(24 + j);
  for (int64_t j = 0; j < 9; ++j) odd.push_back((j * 5) % 13 / 2);
  const Gather gathers[] = {{"kv_b k_nope 16 heads", 300, 16 * 256, k_nope},
                            {"k_rope to 16 heads", 257, 64, k_rope_bcast},
                            {"kv_a rope de-interleave", 129, 576, rope_deinterleave},
                            {"q nope 3 heads", 65, 3 * 192, q_nope},
                            {"mixed 16-byte groups", 33, 40, mixed},
                            {"q nope 3 heads, shifted", 65, 3 * 192, q_nope, true},
                            {"odd repeats", 37, 13, odd},
                            {"no rows", 0, 13, odd}};
  for (const Gather& g : gathers) {
    for (DType dt : {DType::BF16, DType::F32, DType::F64}) {
      const int64_t out = int64_t(g.index.size());
      const std::string shape =
          fmt("%s N=%lld in=%lld out=%lld %s", g.name, (long long)g.rows, (long long)g.in, (long long)out, short_name(dt));
      // Float64 stays float64 on the CPU side too (the harness's pairs are float32 there).
      auto input = [dt](Generator& gen, const Shape& shape) {
        if (dt != DType::F64) return random_pair(gen, shape, dt);
        Pair p;
        std::vector<double> v(size_t(shape_numel(shape)));
        for (double& x : v) x = gen.normal();
        p.cpu = Tensor::from_doubles(v, shape, DType::F64);
        p.gpu = p.cpu.to(Device::cuda(0));
        return p;
      };
      // The source matrix, shifted by one element where the case asks (the
      // kernels then take one element a thread).
      auto source = [input, shifted = g.shifted](Generator& gen, const Shape& shape) {
        if (!shifted) return input(gen, shape);
        const int64_t n = shape_numel(shape);
        Pair p = input(gen, {n + 1});
        return Pair{p.gpu.narrow(1, n).view(shape), p.cpu.narrow(1, n).view(shape)};
      };
      auto output = [dt](const Shape& shape) {
        if (dt != DType::F64) return output_pair(shape, dt);
        Pair p{Tensor::empty(shape, DType::F64, Device::cuda(0)), Tensor::empty(shape, DType::F64)};
        p.gpu.fill_(std::numeric_limits<double>::quiet_NaN());
        p.cpu.fill_(std::numeric_limits<double>::quiet_NaN());
        return p;
      };
      const double sum_bound = dt == DType::F64 ? 1e-15 : bound_for(dt);
      cases.push_back({"gather_columns", shape, [=](Generator& gen) {
                         const ops::ColumnIndex gpu = ops::make_column_index(g.in, g.index, Device::cuda(0));
                         const ops::ColumnIndex cpu = ops::make_column_index(g.in, g.index, Device::cpu());
                         Pair x = source(gen, {g.rows, g.in}), y = output({g.rows, out});
                         cuda::gather_columns(x.gpu, gpu, y.gpu);
                         ops::gather_columns(x.cpu, cpu, y.cpu);
                         return std::vector<Check>{compare("y", y, 0.0)};  // a copy: exact
                       }});
      for (bool accumulate : {false, true}) {
        cases.push_back({"scatter_add_columns", shape + (accumulate ? " dx+=" : " dx="), [=](Generator& gen) {
                           const ops::ColumnIndex gpu = ops::make_column_index(g.in, g.index, Device::cuda(0));
                           const ops::ColumnIndex cpu = ops::make_column_index(g.in, g.index, Device::cpu());
                           Pair dy = source(gen, {g.rows, out});
                           Pair dx = accumulate ? input(gen, {g.rows, g.in}) : output({g.rows, g.in});
                           cuda::scatter_add_columns(dy.gpu, gpu, dx.gpu, accumulate);
                           ops::scatter_add_columns(dy.cpu, cpu, dx.cpu, accumulate);
                           return std::vector<Check>{compare("dx", dx, sum_bound)};
                         }});
      }
    }
  }
}

void reduce_cases(std::vector<Case>& cases) {
  for (int64_t n : {int64_t(1), int64_t(4096), int64_t(1000003)}) {
    for (DType dt : {DType::BF16, DType::F32}) {
      std::string shape = fmt("n=%lld %s", (long long)n, short_name(dt));
      cases.push_back({"sum", shape, [=](Generator& gen) {
                         Pair x = random_pair(gen, {n}, dt);
                         return std::vector<Check>{
                             compare_scalar("sum", cuda::sum(x.gpu), ops::sum(x.cpu), kF32Bound)};
                       }});
      cases.push_back({"sum_squares", shape, [=](Generator& gen) {
                         Pair x = random_pair(gen, {n}, dt);
                         return std::vector<Check>{compare_scalar("sum_squares", cuda::sum_squares(x.gpu),
                                                                  ops::sum_squares(x.cpu), kF32Bound)};
                       }});
      cases.push_back({"dot", shape, [=](Generator& gen) {
                         Pair a = random_pair(gen, {n}, dt), b = random_pair(gen, {n}, dt);
                         Tensor out_gpu = Tensor::zeros({1}, DType::F64, a.gpu.device());
                         Tensor out_cpu = Tensor::zeros({1}, DType::F64);
                         cuda::dot(a.gpu, b.gpu, out_gpu);
                         ops::dot(a.cpu, b.cpu, out_cpu);
                         return std::vector<Check>{compare_scalar("dot", out_gpu.to_doubles()[0],
                                                                  out_cpu.to_doubles()[0], kF32Bound)};
                       }});
      cases.push_back({"count_zeros", shape, [=](Generator& gen) {
                         Pair x = random_pair_with(gen, {n}, dt, [&](std::vector<double>& v) {
                           for (size_t i = 0; i < v.size(); i += 3) v[i] = 0.0;
                         });
                         return std::vector<Check>{compare_scalar("count", double(cuda::count_zeros(x.gpu)),
                                                                  double(ops::count_zeros(x.cpu)), 0.0)};
                       }});
      cases.push_back({"sum_squares_and_zeros", shape, [=](Generator& gen) {
                         Pair x = random_pair_with(gen, {n}, dt, [&](std::vector<double>& v) {
                           for (size_t i = 0; i < v.size(); i += 3) v[i] = 0.0;
                         });
                         const ops::SquaresAndZeros gpu = cuda::sum_squares_and_zeros(x.gpu);
                         return std::vector<Check>{
                             compare_scalar("sum_squares", gpu.sum_squares, ops::sum_squares(x.cpu), kF32Bound),
                             compare_scalar("zeros", double(gpu.zeros), double(ops::count_zeros(x.cpu)), 0.0)};
                       }});
      for (bool poison : {false, true}) {
        cases.push_back({"all_finite", shape + (poison ? " with inf" : " finite"), [=](Generator& gen) {
                           Pair x = random_pair_with(gen, {n}, dt, [&](std::vector<double>& v) {
                             if (poison) v[v.size() / 2] = std::numeric_limits<double>::infinity();
                           });
                           return std::vector<Check>{compare_scalar("finite", double(cuda::all_finite(x.gpu)),
                                                                    double(ops::all_finite(x.cpu)), 0.0)};
                         }});
      }
    }
  }
}

void embedding_cases(std::vector<Case>& cases) {
  struct E {
    int64_t vocab_local, hidden, rows, vocab_start;
    DType ids;
  };
  for (E e : {E{100, 64, 37, 0, DType::I32}, E{100, 64, 37, 50, DType::I64}, E{73, 36, 130, 20, DType::I32}}) {
    std::string shape = fmt("V_local=%lld H=%lld N=%lld vocab_start=%lld ids=%s", (long long)e.vocab_local,
                            (long long)e.hidden, (long long)e.rows, (long long)e.vocab_start, dtype_name(e.ids));
    // Ids over twice the local range, so some rows belong to other ranks.
    auto draw_ids = [e](Generator& gen) {
      std::vector<double> ids(size_t(e.rows));
      for (double& id : ids) id = double(int64_t(gen.uniform() * double(2 * e.vocab_local)));
      return index_pair(ids, e.ids);
    };
    // A bfloat16 table into bfloat16 activations, or into the float32
    // residual stream (the conversion is exact, hence the zero bound).
    for (DType out_dt : {DType::BF16, DType::F32}) {
      cases.push_back({"embedding_forward", shape + fmt(" bf16->%s", short_name(out_dt)), [=](Generator& gen) {
                         Pair w = random_pair(gen, {e.vocab_local, e.hidden}, DType::BF16);
                         Pair ids = draw_ids(gen);
                         Pair out = output_pair({e.rows, e.hidden}, out_dt);
                         cuda::embedding_forward(w.gpu, ids.gpu, e.vocab_start, out.gpu);
                         ops::embedding_forward(w.cpu, ids.cpu, e.vocab_start, out.cpu);
                         return std::vector<Check>{compare("out", out, 0.0)};
                       }});
    }
    // grad_weight float32, or bfloat16 (optimizer.main_grads_dtype=bf16: each
    // id's fp32 sum rounded once into the row).
    for (DType grad_dt : {DType::BF16, DType::F32}) {
      for (DType weight_grad_dt : {DType::F32, DType::BF16}) {
        cases.push_back({"embedding_backward",
                         shape + fmt(" grad_out=%s grad_weight=%s", short_name(grad_dt), short_name(weight_grad_dt)),
                         [=](Generator& gen) {
                           Pair grad_out = random_pair(gen, {e.rows, e.hidden}, grad_dt);
                           Pair ids = draw_ids(gen);
                           Pair grad_w = random_pair(gen, {e.vocab_local, e.hidden}, weight_grad_dt);
                           cuda::embedding_backward(grad_out.gpu, ids.gpu, e.vocab_start, grad_w.gpu);
                           ops::embedding_backward(grad_out.cpu, ids.cpu, e.vocab_start, grad_w.cpu);
                           return std::vector<Check>{compare("grad_weight", grad_w, bound_for(weight_grad_dt))};
                         }});
      }
    }
  }
}

// rstd of x under w from the CPU forward, as a pair: the backward cases
// give both sides the same values.
Pair rstd_from_cpu_forward(const Pair& x, const Pair& w, double eps) {
  Tensor y = Tensor::empty(x.cpu.shape(), DType::F32);
  Tensor rstd = Tensor::empty({x.cpu.numel() / w.cpu.numel()}, DType::F32);
  ops::rmsnorm_forward(x.cpu, w.cpu, eps, y, rstd);
  return pair_from_cpu(rstd, DType::F32);
}

void rmsnorm_cases(std::vector<Case>& cases) {
  // x's dtype with w's: bfloat16 activations, the float32 residual stream
  // normalised into bfloat16, and all float32. y and dy take w's dtype, dx x's.
  const std::pair<DType, DType> dtypes[] = {
      {DType::BF16, DType::BF16}, {DType::F32, DType::BF16}, {DType::F32, DType::F32}};
  // Rows of 64 to 4096 take the team kernels, one shape per team width and
  // group count (n = 768, 1536 and 3072 leave some of a lane's groups past
  // the row's end), the backward from 1024 with its dw share in shared
  // memory; a float32 x or w takes the general backward past 2048; 100 and
  // 8192 the general kernels.
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{37, 4096}, {1000, 128}, {5, 100}, {3, 8192}, {300, 64}, {77, 96},
                         {130, 192}, {65, 256}, {40, 768}, {33, 1536}, {500, 2048}, {21, 3072}}) {
    for (auto [x_dt, w_dt] : dtypes) {
      std::string shape = fmt("R=%lld n=%lld x=%s w=%s", (long long)rows, (long long)n, short_name(x_dt),
                              short_name(w_dt));
      const double eps = 1e-6;
      cases.push_back({"rmsnorm_forward", shape, [=](Generator& gen) {
                         Pair x = random_pair(gen, {rows, n}, x_dt);
                         Pair w = random_pair(gen, {n}, w_dt, 0.2, 1.0);
                         Pair y = output_pair({rows, n}, w_dt), rstd = output_pair({rows}, DType::F32);
                         cuda::rmsnorm_forward(x.gpu, w.gpu, eps, y.gpu, rstd.gpu);
                         // The CPU takes one dtype: w's values are already rounded, and
                         // its xhat rounding to float32 is what a float32 x gets on CUDA.
                         ops::rmsnorm_forward(x.cpu, w.cpu, eps, y.cpu, rstd.cpu);
                         return std::vector<Check>{compare("y", y, bound_for(w_dt)),
                                                   compare("rstd", rstd, kF32Bound)};
                       }});
      // dw float32, or bfloat16 beside bfloat16 weights (optimizer.main_grads_dtype=bf16).
      for (DType dw_dt : {DType::F32, DType::BF16}) {
        if (dw_dt == DType::BF16 && w_dt != DType::BF16) continue;
        cases.push_back({"rmsnorm_backward", shape + fmt(" dw=%s", short_name(dw_dt)), [=](Generator& gen) {
                           Pair x = random_pair(gen, {rows, n}, x_dt);
                           Pair w = random_pair(gen, {n}, w_dt, 0.2, 1.0);
                           Pair dy = random_pair(gen, {rows, n}, w_dt);
                           Pair rstd = rstd_from_cpu_forward(x, w, eps);
                           Pair dx = output_pair({rows, n}, x_dt);
                           Pair dw = random_pair(gen, {n}, dw_dt);
                           cuda::rmsnorm_backward(dy.gpu, x.gpu, w.gpu, rstd.gpu, dx.gpu, dw.gpu);
                           ops::rmsnorm_backward(dy.cpu, x.cpu, w.cpu, rstd.cpu, dx.cpu, dw.cpu);
                           // dw sums dy * xhat with xhat rounded to x's dtype (as HF does);
                           // for a bf16 x the float32 oracle does not round: a bf16-sized
                           // difference.
                           return std::vector<Check>{compare("dx", dx, bound_for(x_dt)),
                                                     compare("dw", dw, bound_for(dw_dt == DType::BF16 ? dw_dt : x_dt))};
                         }});
      }
    }
  }
}

// The residual add with RMSNorm (a decoder layer's residual stream into its
// next norm) at rmsnorm_cases' shapes and dtype pairs, the branch and dy of
// w's dtype, h and the residual gradient of x's: rows of 64 to 4096 (the
// backward only to 2048 with a float32 x) take the fused kernels, the others
// the two ops in sequence. Each against the CPU op (the two CPU ops in sequence) and bit
// for bit against the two CUDA ops it stands for: h, y, rstd, dx and dw (the
// backward runs on rmsnorm_backward's grid, so dw's sums are its sums).
void add_rmsnorm_cases(std::vector<Case>& cases) {
  const std::pair<DType, DType> dtypes[] = {
      {DType::BF16, DType::BF16}, {DType::F32, DType::BF16}, {DType::F32, DType::F32}};
  const Device gpu = Device::cuda(0);
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{37, 4096}, {1000, 128}, {5, 100}, {3, 8192}, {300, 64}, {77, 96},
                         {130, 192}, {65, 256}, {40, 768}, {33, 1536}, {500, 2048}, {21, 3072}}) {
    for (auto [x_dt, w_dt] : dtypes) {
      const std::string shape = fmt("R=%lld n=%lld x=%s w=%s", (long long)rows, (long long)n, short_name(x_dt),
                                    short_name(w_dt));
      const double eps = 1e-6;
      cases.push_back({"add_rmsnorm_forward", shape, [=](Generator& gen) {
                         Pair x = random_pair(gen, {rows, n}, x_dt, 2.0);
                         Pair branch = random_pair(gen, {rows, n}, w_dt);
                         Pair w = random_pair(gen, {n}, w_dt, 0.2, 1.0);
                         Pair h = output_pair({rows, n}, x_dt), y = output_pair({rows, n}, w_dt);
                         Pair rstd = output_pair({rows}, DType::F32);
                         cuda::add_rmsnorm_forward(x.gpu, branch.gpu, w.gpu, eps, h.gpu, y.gpu, rstd.gpu);
                         // The float32 oracle does not round h to bfloat16: a bf16-sized
                         // difference in h and in the y and rstd of a bfloat16 stream.
                         ops::add_rmsnorm_forward(x.cpu, branch.cpu, w.cpu, eps, h.cpu, y.cpu, rstd.cpu);
                         Tensor h2 = Tensor::empty({rows, n}, x_dt, gpu), y2 = Tensor::empty({rows, n}, w_dt, gpu);
                         Tensor rstd2 = Tensor::empty({rows}, DType::F32, gpu);
                         cuda::add(x.gpu, branch.gpu, h2);
                         cuda::rmsnorm_forward(h2, w.gpu, eps, y2, rstd2);
                         return std::vector<Check>{
                             compare("h", h, bound_for(x_dt)), compare("y", y, bound_for(w_dt)),
                             compare("rstd", rstd, bound_for(x_dt)),
                             compare("h = unfused", {h.gpu, h2.to(Device::cpu())}, 0.0),
                             compare("y = unfused", {y.gpu, y2.to(Device::cpu())}, 0.0),
                             compare("rstd = unfused", {rstd.gpu, rstd2.to(Device::cpu())}, 0.0)};
                       }});
      for (DType dw_dt : {DType::F32, DType::BF16}) {
        if (dw_dt == DType::BF16 && w_dt != DType::BF16) continue;
        cases.push_back({"add_rmsnorm_backward", shape + fmt(" dw=%s", short_name(dw_dt)), [=](Generator& gen) {
                           Pair x = random_pair(gen, {rows, n}, x_dt);
                           Pair w = random_pair(gen, {n}, w_dt, 0.2, 1.0);
                           Pair dy = random_pair(gen, {rows, n}, w_dt);
                           Pair residual_grad = random_pair(gen, {rows, n}, x_dt);
                           Pair rstd = rstd_from_cpu_forward(x, w, eps);
                           Pair dx = output_pair({rows, n}, x_dt);
                           Pair dw = random_pair(gen, {n}, dw_dt);
                           Tensor dw2 = Tensor::empty({n}, dw_dt, gpu), dx2 = Tensor::empty({rows, n}, x_dt, gpu);
                           dw2.copy_from(dw.gpu);
                           cuda::add_rmsnorm_backward(dy.gpu, x.gpu, w.gpu, rstd.gpu, residual_grad.gpu, dx.gpu,
                                                      dw.gpu);
                           ops::add_rmsnorm_backward(dy.cpu, x.cpu, w.cpu, rstd.cpu, residual_grad.cpu, dx.cpu,
                                                     dw.cpu);
                           cuda::rmsnorm_backward(dy.gpu, x.gpu, w.gpu, rstd.gpu, dx2, dw2);
                           cuda::add_(dx2, residual_grad.gpu);
                           // As in rmsnorm_backward's cases: dw's xhat is rounded to x's
                           // dtype on CUDA only.
                           return std::vector<Check>{
                               compare("dx", dx, bound_for(x_dt)),
                               compare("dw", dw, bound_for(dw_dt == DType::BF16 ? dw_dt : x_dt)),
                               compare("dx = unfused", {dx.gpu, dx2.to(Device::cpu())}, 0.0),
                               compare("dw = unfused", {dw.gpu, dw2.to(Device::cpu())}, 0.0)};
                         }});
      }
    }
  }
}

// Dtype combinations the CUDA ops refuse: each must throw bb::Error whose
// message starts with the op and names the dtypes it got (`named`).
void dtype_rejection_cases(std::vector<Case>& cases) {
  struct Reject {
    std::string op, what, named;
    std::function<void()> call;
  };
  const Shape row{4, 64}, col{64};
  auto t = [](const Shape& shape, DType dt) { return Tensor::empty(shape, dt, Device::cuda(0)); };
  const std::vector<Reject> rejects = {
      {"add", "a=bf16 b=f32 out=bf16", "a bfloat16, b float32, out bfloat16",
       [=] {
         Tensor out = t(row, DType::BF16);
         cuda::add(t(row, DType::BF16), t(row, DType::F32), out);
       }},
      {"add", "a=f32 b=bf16 out=bf16", "a float32, b bfloat16, out bfloat16",
       [=] {
         Tensor out = t(row, DType::BF16);
         cuda::add(t(row, DType::F32), t(row, DType::BF16), out);
       }},
      {"mul", "a=f32 b=bf16 out=f32", "a float32, b bfloat16, out float32",
       [=] {
         Tensor out = t(row, DType::F32);
         cuda::mul(t(row, DType::F32), t(row, DType::BF16), out);
       }},
      {"rmsnorm_forward", "x=bf16 w=f32 y=f32", "x bfloat16, w float32",
       [=] {
         Tensor y = t(row, DType::F32), rstd = t({4}, DType::F32);
         cuda::rmsnorm_forward(t(row, DType::BF16), t(col, DType::F32), 1e-6, y, rstd);
       }},
      {"rmsnorm_forward", "x=f32 w=bf16 y=f32", "y is float32 but w is bfloat16",
       [=] {
         Tensor y = t(row, DType::F32), rstd = t({4}, DType::F32);
         cuda::rmsnorm_forward(t(row, DType::F32), t(col, DType::BF16), 1e-6, y, rstd);
       }},
      {"rmsnorm_backward", "dy=bf16 x=f32 w=bf16 dx=bf16", "dy bfloat16, x float32, w bfloat16, dx bfloat16",
       [=] {
         Tensor dx = t(row, DType::BF16), dw = t(col, DType::F32);
         cuda::rmsnorm_backward(t(row, DType::BF16), t(row, DType::F32), t(col, DType::BF16), t({4}, DType::F32),
                                dx, dw);
       }},
      {"add_rmsnorm_forward", "x=f32 branch=f32 w=bf16", "branch float32, w bfloat16",
       [=] {
         Tensor h = t(row, DType::F32), y = t(row, DType::BF16), rstd = t({4}, DType::F32);
         cuda::add_rmsnorm_forward(t(row, DType::F32), t(row, DType::F32), t(col, DType::BF16), 1e-6, h, y, rstd);
       }},
      {"add_rmsnorm_backward", "x=f32 w=bf16 residual_grad=bf16", "residual_grad bfloat16",
       [=] {
         Tensor dx = t(row, DType::F32), dw = t(col, DType::F32);
         cuda::add_rmsnorm_backward(t(row, DType::BF16), t(row, DType::F32), t(col, DType::BF16), t({4}, DType::F32),
                                    t(row, DType::BF16), dx, dw);
       }},
      {"rmsnorm_rope_forward", "x=bf16 w=f32 y=f32", "x bfloat16, w float32",
       [=] {
         const Shape heads{4, 1, 64};
         Tensor y = t(heads, DType::F32), rstd = t({4}, DType::F32);
         cuda::rmsnorm_rope_forward(t(heads, DType::BF16), t(col, DType::F32), 1e-6,
                                    index_pair({0.0, 1.0, 2.0, 3.0}, DType::I64).gpu, rope_inv_freq(64, 1e6), y, rstd);
       }},
      {"embedding_forward", "weight=f32 out=bf16", "weight float32, out bfloat16",
       [=] {
         Tensor out = t(row, DType::BF16);
         cuda::embedding_forward(t({10, 64}, DType::F32), index_pair({1.0, 2.0, 3.0, 4.0}, DType::I32).gpu, 0, out);
       }},
  };
  for (const Reject& r : rejects) {
    cases.push_back({r.op, r.what + " rejected", [r](Generator&) {
                       std::string message;
                       try {
                         r.call();
                       } catch (const Error& e) {
                         message = e.what();
                       }
                       const bool named =
                           message.rfind(r.op + ":", 0) == 0 && message.find(r.named) != std::string::npos;
                       if (!named) std::printf("      %s threw \"%s\"\n", r.op.c_str(), message.c_str());
                       return std::vector<Check>{{"error", named ? 0.0 : 1.0, 0.0}};
                     }});
  }
}

void rope_cases(std::vector<Case>& cases) {
  for (auto [tokens, heads, dim] : {std::tuple<int64_t, int64_t, int64_t>{37, 4, 128}, {64, 8, 64}, {9, 3, 20}}) {
    for (bool in_place : {false, true}) {
      std::string shape = fmt("N=%lld heads=%lld D=%lld bf16%s", (long long)tokens, (long long)heads,
                              (long long)dim, in_place ? " in-place" : "");
      for (bool backward : {false, true}) {
        cases.push_back({backward ? "rope_backward" : "rope_forward", shape, [=](Generator& gen) {
                           Pair x = random_pair(gen, {tokens, heads, dim}, DType::BF16);
                           std::vector<double> pos(static_cast<size_t>(tokens));
                           for (double& p : pos) p = double(int64_t(gen.uniform() * 4096));
                           Pair positions = index_pair(pos, DType::I64);
                           Tensor inv_freq = rope_inv_freq(dim, 1e6);
                           Pair out = in_place ? x : output_pair({tokens, heads, dim}, DType::BF16);
                           if (backward) {
                             cuda::rope_backward(x.gpu, positions.gpu, inv_freq, out.gpu);
                             ops::rope_backward(x.cpu, positions.cpu, inv_freq, out.cpu);
                           } else {
                             cuda::rope_forward(x.gpu, positions.gpu, inv_freq, out.gpu);
                             ops::rope_forward(x.cpu, positions.cpu, inv_freq, out.cpu);
                           }
                           return std::vector<Check>{compare("out", out, kBf16Bound)};
                         }});
      }
    }
  }
}

// RMSNorm then RoPE over heads (Qwen3's q/k norms): the fused kernels at
// head dims 64, 128 and 256 (1 to 32 heads, odd token counts, one token), and
// D = 96, which runs the two ops in sequence. Each against the CPU op (the
// two CPU ops in sequence), and against the two CUDA ops it stands for: y,
// rstd and dx to the bit, dw (summed over the fused kernel's own grid) to
// fp32 rounding. On top of the norms' bounds, a float32 rotation differs from
// the oracle's by its fp32 angle position * inv_freq (the CPU forms it in
// double): up to 1e-5 at positions below 4096 on an H200.
void rmsnorm_rope_cases(std::vector<Case>& cases) {
  constexpr double kF32RopeBound = 1e-4;
  const std::pair<DType, DType> dtypes[] = {
      {DType::BF16, DType::BF16}, {DType::F32, DType::BF16}, {DType::F32, DType::F32}};
  struct Heads {
    int64_t tokens, heads, dim;
    DType positions;
  };
  const Heads shapes[] = {{1, 1, 128, DType::I64},  {37, 32, 128, DType::I64}, {129, 4, 128, DType::I32},
                          {2, 16, 128, DType::I64}, {64, 8, 64, DType::I32},   {33, 1, 64, DType::I64},
                          {301, 5, 64, DType::I64}, {17, 32, 256, DType::I32}, {90, 4, 256, DType::I64},
                          {1, 3, 256, DType::I64},  {13, 2, 96, DType::I64}};
  const Device gpu = Device::cuda(0);
  for (const Heads& h : shapes) {
    for (auto [x_dt, w_dt] : dtypes) {
      const std::string shape = fmt("N=%lld heads=%lld D=%lld x=%s w=%s pos=%s", (long long)h.tokens,
                                    (long long)h.heads, (long long)h.dim, short_name(x_dt), short_name(w_dt),
                                    h.positions == DType::I32 ? "i32" : "i64");
      const Shape xs{h.tokens, h.heads, h.dim};
      const int64_t rows = h.tokens * h.heads;
      const double eps = 1e-6, rope_bound = w_dt == DType::BF16 ? kBf16Bound : kF32RopeBound;
      auto draw_positions = [h](Generator& gen) {
        std::vector<double> pos(size_t(h.tokens));
        for (double& p : pos) p = double(int64_t(gen.uniform() * 4096));
        return index_pair(pos, h.positions);
      };
      cases.push_back({"rmsnorm_rope_forward", shape, [=](Generator& gen) {
                         Pair x = random_pair(gen, xs, x_dt);
                         Pair w = random_pair(gen, {h.dim}, w_dt, 0.2, 1.0);
                         Pair positions = draw_positions(gen);
                         const Tensor inv_freq = rope_inv_freq(h.dim, 1e6);
                         Pair y = output_pair(xs, w_dt), rstd = output_pair({rows}, DType::F32);
                         cuda::rmsnorm_rope_forward(x.gpu, w.gpu, eps, positions.gpu, inv_freq, y.gpu, rstd.gpu);
                         ops::rmsnorm_rope_forward(x.cpu, w.cpu, eps, positions.cpu, inv_freq, y.cpu, rstd.cpu);
                         Tensor y2 = Tensor::empty(xs, w_dt, gpu), rstd2 = Tensor::empty({rows}, DType::F32, gpu);
                         cuda::rmsnorm_forward(x.gpu, w.gpu, eps, y2, rstd2);
                         cuda::rope_forward(y2, positions.gpu, inv_freq, y2);
                         return std::vector<Check>{compare("y", y, rope_bound), compare("rstd", rstd, kF32Bound),
                                                   compare("y = unfused", {y.gpu, y2.to(Device::cpu())}, 0.0),
                                                   compare("rstd = unfused", {rstd.gpu, rstd2.to(Device::cpu())}, 0.0)};
                       }});
      for (DType dw_dt : {DType::F32, DType::BF16}) {
        if (dw_dt == DType::BF16 && w_dt != DType::BF16) continue;
        cases.push_back({"rmsnorm_rope_backward", shape + fmt(" dw=%s", short_name(dw_dt)), [=](Generator& gen) {
                           Pair x = random_pair(gen, xs, x_dt);
                           Pair w = random_pair(gen, {h.dim}, w_dt, 0.2, 1.0);
                           Pair dy = random_pair(gen, xs, w_dt);
                           Pair positions = draw_positions(gen);
                           const Tensor inv_freq = rope_inv_freq(h.dim, 1e6);
                           Pair rstd = rstd_from_cpu_forward(x, w, eps);
                           Pair dx = output_pair(xs, x_dt);
                           Pair dw = random_pair(gen, {h.dim}, dw_dt);
                           Tensor dw2 = Tensor::empty({h.dim}, dw_dt, gpu), dx2 = Tensor::empty(xs, x_dt, gpu);
                           dw2.copy_from(dw.gpu);
                           cuda::rmsnorm_rope_backward(dy.gpu, x.gpu, w.gpu, rstd.gpu, positions.gpu, inv_freq, dx.gpu,
                                                       dw.gpu);
                           ops::rmsnorm_rope_backward(dy.cpu, x.cpu, w.cpu, rstd.cpu, positions.cpu, inv_freq, dx.cpu,
                                                      dw.cpu);
                           Tensor dnorm = Tensor::empty(xs, w_dt, gpu);
                           cuda::rope_backward(dy.gpu, positions.gpu, inv_freq, dnorm);
                           cuda::rmsnorm_backward(dnorm, x.gpu, w.gpu, rstd.gpu, dx2, dw2);
                           // As in rmsnorm_backward's cases: dw's xhat is rounded to x's
                           // dtype on CUDA only.
                           const bool bf16_dw = dw_dt == DType::BF16 || x_dt == DType::BF16;
                           const double dw_bound = bf16_dw ? kBf16Bound : rope_bound;
                           return std::vector<Check>{
                               compare("dx", dx, rope_bound), compare("dw", dw, dw_bound),
                               compare("dx = unfused", {dx.gpu, dx2.to(Device::cpu())}, 0.0),
                               compare("dw ~ unfused", {dw.gpu, dw2.to(Device::cpu())}, bound_for(dw_dt))};
                         }});
      }
    }
  }
}

void swiglu_cases(std::vector<Case>& cases) {
  for (auto [rows, f] : {std::pair<int64_t, int64_t>{37, 256}, {16, 100}, {7, 13}}) {
    std::string shape = fmt("N=%lld F=%lld bf16", (long long)rows, (long long)f);
    cases.push_back({"swiglu_forward", shape, [=](Generator& gen) {
                       Pair gu = random_pair(gen, {rows, 2 * f}, DType::BF16, 2.0);
                       Pair out = output_pair({rows, f}, DType::BF16);
                       cuda::swiglu_forward(gu.gpu, out.gpu);
                       ops::swiglu_forward(gu.cpu, out.cpu);
                       return std::vector<Check>{compare("out", out, kBf16Bound)};
                     }});
    cases.push_back({"swiglu_backward", shape, [=](Generator& gen) {
                       Pair gu = random_pair(gen, {rows, 2 * f}, DType::BF16, 2.0);
                       Pair dout = random_pair(gen, {rows, f}, DType::BF16);
                       Pair dgu = output_pair({rows, 2 * f}, DType::BF16);
                       cuda::swiglu_backward(dout.gpu, gu.gpu, dgu.gpu);
                       ops::swiglu_backward(dout.cpu, gu.cpu, dgu.cpu);
                       return std::vector<Check>{compare("d_gate_up", dgu, kBf16Bound)};
                     }});
  }
}

void cross_entropy_cases(std::vector<Case>& cases) {
  struct CE {
    int64_t rows, vocab_local, vocab_start, vocab_total;
  };
  auto shape_of = [](const CE& c, DType dt) {
    return fmt("N=%lld V_local=%lld vocab_start=%lld V=%lld %s", (long long)c.rows, (long long)c.vocab_local,
               (long long)c.vocab_start, (long long)c.vocab_total, short_name(dt));
  };
  // Labels over the whole vocabulary, with a few masked (-100) rows.
  auto draw_labels = [](const CE& c, Generator& gen) {
    std::vector<double> labels(size_t(c.rows));
    for (size_t i = 0; i < labels.size(); ++i)
      labels[i] = i % 7 == 3 ? -100.0 : double(int64_t(gen.uniform() * double(c.vocab_total)));
    return index_pair(labels, DType::I64);
  };
  // cross_entropy_backward out of place and in place, logits and dlogits in `dt`.
  auto add_backward = [&](const CE& c, DType dt) {
    for (bool in_place : {false, true}) {
      cases.push_back({"cross_entropy_backward", shape_of(c, dt) + (in_place ? " in-place" : ""), [=](Generator& gen) {
                         Pair logits = random_pair(gen, {c.rows, c.vocab_local}, dt, 3.0);
                         Pair labels = draw_labels(c, gen);
                         // lse of the local shard stands in for the group-reduced one.
                         Tensor max_cpu = Tensor::empty({c.rows}, DType::F32), s_cpu = Tensor::empty({c.rows}, DType::F32),
                                t_cpu = Tensor::empty({c.rows}, DType::F32), lse_cpu = Tensor::empty({c.rows}, DType::F32),
                                loss_cpu = Tensor::empty({c.rows}, DType::F32);
                         ops::logits_row_max(logits.cpu, max_cpu);
                         ops::logits_sumexp_target(logits.cpu, max_cpu, labels.cpu, c.vocab_start, s_cpu, t_cpu);
                         ops::cross_entropy_loss(max_cpu, s_cpu, t_cpu, lse_cpu, loss_cpu);
                         Pair lse = pair_from_cpu(lse_cpu, DType::F32);
                         Pair dloss = random_pair(gen, {c.rows}, DType::F32);
                         Pair dlogits = in_place ? logits : output_pair({c.rows, c.vocab_local}, dt);
                         cuda::cross_entropy_backward(logits.gpu, labels.gpu, c.vocab_start, lse.gpu, dloss.gpu,
                                                      dlogits.gpu);
                         ops::cross_entropy_backward(logits.cpu, labels.cpu, c.vocab_start, lse.cpu, dloss.cpu,
                                                     dlogits.cpu);
                         return std::vector<Check>{compare("dlogits", dlogits, bound_for(dt))};
                       }});
    }
  };
  for (CE c : {CE{37, 1000, 0, 1000}, CE{16, 999, 500, 2000}, CE{64, 4096, 4096, 8192}}) {
    const std::string shape = shape_of(c, DType::BF16);
    cases.push_back({"logits_row_max", shape, [=](Generator& gen) {
                       Pair logits = random_pair(gen, {c.rows, c.vocab_local}, DType::BF16, 3.0);
                       Pair row_max = output_pair({c.rows}, DType::F32);
                       cuda::logits_row_max(logits.gpu, row_max.gpu);
                       ops::logits_row_max(logits.cpu, row_max.cpu);
                       return std::vector<Check>{compare("row_max", row_max, 0.0)};
                     }});
    cases.push_back({"logits_sumexp_target", shape, [=](Generator& gen) {
                       Pair logits = random_pair(gen, {c.rows, c.vocab_local}, DType::BF16, 3.0);
                       Pair labels = draw_labels(c, gen);
                       Tensor max_cpu = Tensor::empty({c.rows}, DType::F32);
                       ops::logits_row_max(logits.cpu, max_cpu);
                       Pair row_max = pair_from_cpu(max_cpu, DType::F32);
                       Pair sumexp = output_pair({c.rows}, DType::F32), target = output_pair({c.rows}, DType::F32);
                       cuda::logits_sumexp_target(logits.gpu, row_max.gpu, labels.gpu, c.vocab_start, sumexp.gpu,
                                                  target.gpu);
                       ops::logits_sumexp_target(logits.cpu, row_max.cpu, labels.cpu, c.vocab_start, sumexp.cpu,
                                                 target.cpu);
                       return std::vector<Check>{compare("sumexp", sumexp, kF32Bound),
                                                 compare("target_logit", target, 0.0)};
                     }});
    cases.push_back({"cross_entropy_loss", shape, [=](Generator& gen) {
                       Pair row_max = random_pair(gen, {c.rows}, DType::F32);
                       Pair sumexp = random_pair(gen, {c.rows}, DType::F32, 100.0, 200.0);
                       Pair target = random_pair(gen, {c.rows}, DType::F32);
                       Pair lse = output_pair({c.rows}, DType::F32), loss = output_pair({c.rows}, DType::F32);
                       cuda::cross_entropy_loss(row_max.gpu, sumexp.gpu, target.gpu, lse.gpu, loss.gpu);
                       ops::cross_entropy_loss(row_max.cpu, sumexp.cpu, target.cpu, lse.cpu, loss.cpu);
                       return std::vector<Check>{compare("lse", lse, kF32Bound), compare("loss", loss, kF32Bound)};
                     }});
    add_backward(c, DType::BF16);
    // Entropy: the shard's sum of exp(z - max) z, the entropy from the sums, and the joint backward.
    cases.push_back({"logits_zexp_sum", shape, [=](Generator& gen) {
                       Pair logits = random_pair(gen, {c.rows, c.vocab_local}, DType::BF16, 3.0);
                       Tensor max_cpu = Tensor::empty({c.rows}, DType::F32);
                       ops::logits_row_max(logits.cpu, max_cpu);
                       Pair row_max = pair_from_cpu(max_cpu, DType::F32);
                       Pair zexp = output_pair({c.rows}, DType::F32);
                       cuda::logits_zexp_sum(logits.gpu, row_max.gpu, zexp.gpu);
                       ops::logits_zexp_sum(logits.cpu, row_max.cpu, zexp.cpu);
                       return std::vector<Check>{compare("zexp_sum", zexp, kF32Bound)};
                     }});
    cases.push_back({"entropy_from_sums", shape, [=](Generator& gen) {
                       Pair lse = random_pair(gen, {c.rows}, DType::F32, 3.0);
                       Pair sumexp = random_pair(gen, {c.rows}, DType::F32, 100.0, 200.0);
                       Pair zexp = random_pair(gen, {c.rows}, DType::F32, 50.0);
                       Pair entropy = output_pair({c.rows}, DType::F32);
                       cuda::entropy_from_sums(lse.gpu, sumexp.gpu, zexp.gpu, entropy.gpu);
                       ops::entropy_from_sums(lse.cpu, sumexp.cpu, zexp.cpu, entropy.cpu);
                       return std::vector<Check>{compare("entropy", entropy, kF32Bound)};
                     }});
    for (bool in_place : {false, true}) {
      cases.push_back({"cross_entropy_entropy_backward", shape + (in_place ? " in-place" : ""), [=](Generator& gen) {
                         Pair logits = random_pair(gen, {c.rows, c.vocab_local}, DType::BF16, 3.0);
                         Pair labels = draw_labels(c, gen);
                         // The local shard's statistics stand in for the group-reduced ones.
                         Tensor max_cpu = Tensor::empty({c.rows}, DType::F32), s_cpu = Tensor::empty({c.rows}, DType::F32),
                                t_cpu = Tensor::empty({c.rows}, DType::F32), lse_cpu = Tensor::empty({c.rows}, DType::F32),
                                loss_cpu = Tensor::empty({c.rows}, DType::F32), z_cpu = Tensor::empty({c.rows}, DType::F32),
                                h_cpu = Tensor::empty({c.rows}, DType::F32);
                         ops::logits_row_max(logits.cpu, max_cpu);
                         ops::logits_sumexp_target(logits.cpu, max_cpu, labels.cpu, c.vocab_start, s_cpu, t_cpu);
                         ops::cross_entropy_loss(max_cpu, s_cpu, t_cpu, lse_cpu, loss_cpu);
                         ops::logits_zexp_sum(logits.cpu, max_cpu, z_cpu);
                         ops::entropy_from_sums(lse_cpu, s_cpu, z_cpu, h_cpu);
                         Pair lse = pair_from_cpu(lse_cpu, DType::F32), entropy = pair_from_cpu(h_cpu, DType::F32);
                         Pair dloss = random_pair(gen, {c.rows}, DType::F32);
                         Pair dentropy = random_pair(gen, {c.rows}, DType::F32);
                         Pair dlogits = in_place ? logits : output_pair({c.rows, c.vocab_local}, DType::BF16);
                         cuda::cross_entropy_entropy_backward(logits.gpu, labels.gpu, c.vocab_start, lse.gpu,
                                                              entropy.gpu, dloss.gpu, dentropy.gpu, dlogits.gpu);
                         ops::cross_entropy_entropy_backward(logits.cpu, labels.cpu, c.vocab_start, lse.cpu,
                                                             entropy.cpu, dloss.cpu, dentropy.cpu, dlogits.cpu);
                         return std::vector<Check>{compare("dlogits", dlogits, kBf16Bound)};
                       }});
    }
  }
  // float32 logits (4 to a 16-byte pack), and more rows than one launch of the
  // backward takes (its grid holds 65535 rows in y).
  add_backward(CE{37, 1000, 0, 1000}, DType::F32);
  add_backward(CE{70000, 64, 0, 64}, DType::BF16);
}

void adamw_cases(std::vector<Case>& cases) {
  // One AdamW step in the given storage dtypes; the CPU op steps the same
  // rounded values in the same dtypes. The kernels differ in one rounding
  // (CUDA multiplies by 1/sqrt(bc2), the CPU divides by sqrt(bc2)), which can
  // flip a rare bf16 rounding by one unit: a bf16 tensor gets the bf16 bound.
  auto adamw_case = [&](int64_t n, DType p_dt, DType g_dt, DType m_dt, DType v_dt) {
    std::string shape = fmt("n=%lld param %s grad %s exp_avg %s exp_avg_sq %s step=7", (long long)n,
                            short_name(p_dt), short_name(g_dt), short_name(m_dt), short_name(v_dt));
    cases.push_back({"adamw_step", shape, [=](Generator& gen) {
                       Pair p = random_pair(gen, {n}, p_dt);
                       Pair g = random_pair(gen, {n}, g_dt, 0.1);
                       Pair m = random_pair(gen, {n}, m_dt, 0.01);
                       Pair v = random_pair(gen, {n}, v_dt, 1e-4, 2e-4);
                       for (Pair* t : {&p, &g, &m, &v}) t->cpu = t->cpu.to(t->gpu.dtype());
                       ops::AdamWParams hp;
                       hp.lr = 3e-4;
                       hp.weight_decay = 0.1;
                       hp.step = 7;
                       hp.grad_scale = 0.8;
                       cuda::adamw_step(p.gpu, g.gpu, m.gpu, v.gpu, hp);
                       ops::adamw_step(p.cpu, g.cpu, m.cpu, v.cpu, hp);
                       return std::vector<Check>{compare("param", p, bound_for(p_dt)),
                                                 compare("exp_avg", m, bound_for(m_dt)),
                                                 compare("exp_avg_sq", v, bound_for(v_dt))};
                     }});
  };
  // fp32 state with an fp32 or bf16 gradient at a vectorised and a ragged length.
  for (int64_t n : {int64_t(4096), int64_t(1001)})
    for (DType g_dt : {DType::F32, DType::BF16}) adamw_case(n, DType::F32, g_dt, DType::F32, DType::F32);
  // The storage dtypes of optimizer.*_dtype, each at a packed and a ragged length.
  for (int64_t n : {int64_t(4096), int64_t(1001)})
    for (DType p_dt : {DType::F32, DType::BF16})
      for (DType g_dt : {DType::F32, DType::BF16})
        for (DType m_dt : {DType::F32, DType::BF16})
          for (DType v_dt : {DType::F32, DType::BF16})
            if (p_dt != DType::F32 || m_dt != DType::F32 || v_dt != DType::F32) adamw_case(n, p_dt, g_dt, m_dt, v_dt);
}

// The same values as `p.gpu` in a view that starts 2 bytes past the start of
// its allocation, so not on a 16-byte boundary (the pool's blocks are).
Pair unaligned_view(const Pair& p) {
  Tensor view = Tensor::empty({p.gpu.numel() + 1}, p.gpu.dtype(), p.gpu.device()).flat_slice(1, p.gpu.shape());
  view.copy_from(p.gpu);
  return {view, p.cpu};
}

// The one-pass statistics (tp = 1) against the CPU's two passes: the vocabularies
// of Qwen3 (151936) and DeepSeek-V3 (129280), a small one and a tiny one (7,
// not a multiple of the 16-byte pack), both sides of the warp-per-row limit
// (4096 / 4097), a shard whose targets lie partly outside it, logits off
// the 16-byte grid, and a vocabulary padded with -inf logits (its last
// kPaddedVocab columns, which no label names); N from 1 to 8192; bf16 and
// fp32 logits; every 7th row masked. row_max and target_logit are single
// elements, so exact; sumexp is an fp32 sum in another order with one extra
// rounding per rescale of the running sum, within kF32Bound of the CPU's
// float64 sum.
void softmax_stats_cases(std::vector<Case>& cases) {
  struct Stats {
    int64_t rows, vocab_local, vocab_start, vocab_total;
    DType dt;
    bool unaligned;
    bool padded = false;
  };
  constexpr int64_t kPaddedVocab = 1000;
  std::vector<Stats> shapes;
  for (DType dt : {DType::BF16, DType::F32}) {
    for (int64_t v : {int64_t(151936), int64_t(129280)})
      for (int64_t n : {int64_t(1), int64_t(64)}) shapes.push_back({n, v, 0, v, dt, false});
    for (int64_t v : {int64_t(1000), int64_t(7)})
      for (int64_t n : {int64_t(1), int64_t(37), int64_t(8192)}) shapes.push_back({n, v, 0, v, dt, false});
    shapes.push_back({9, 4096, 0, 4096, dt, false});
    shapes.push_back({9, 4097, 0, 4097, dt, false});
    shapes.push_back({16, 75968, 75968, 151936, dt, false});
    shapes.push_back({5, 151936, 0, 151936, dt, true});
    shapes.push_back({37, 1000, 0, 1000, dt, true});
    shapes.push_back({64, 151936, 0, 151936, dt, false, true});
    shapes.push_back({37, 1003, 0, 1003, dt, true, true});
  }
  for (const Stats c : shapes) {
    std::string shape = fmt("N=%lld V_local=%lld vocab_start=%lld V=%lld %s%s%s", (long long)c.rows,
                            (long long)c.vocab_local, (long long)c.vocab_start, (long long)c.vocab_total,
                            short_name(c.dt), c.unaligned ? " unaligned" : "", c.padded ? " padded" : "");
    // N(0, 9) logits; in a padded vocabulary the last kPaddedVocab columns are -inf.
    auto draw_logits = [c](Generator& gen) {
      if (!c.padded) return random_pair(gen, {c.rows, c.vocab_local}, c.dt, 3.0);
      return random_pair_with(gen, {c.rows, c.vocab_local}, c.dt, [&](std::vector<double>& x) {
        for (size_t i = 0; i < x.size(); ++i)
          x[i] = int64_t(i) % c.vocab_local < c.vocab_local - kPaddedVocab ? 3.0 * x[i] : -INFINITY;
      });
    };
    cases.push_back({"logits_softmax_stats", shape, [=](Generator& gen) {
                       Pair logits = draw_logits(gen);
                       if (c.unaligned) logits = unaligned_view(logits);
                       const double labelled = double(c.vocab_total - (c.padded ? kPaddedVocab : 0));
                       std::vector<double> lab(size_t(c.rows));
                       for (size_t i = 0; i < lab.size(); ++i)
                         lab[i] = i % 7 == 3 ? -100.0 : double(int64_t(gen.uniform() * labelled));
                       Pair labels = index_pair(lab, DType::I64);
                       Pair row_max = output_pair({c.rows}, DType::F32), sumexp = output_pair({c.rows}, DType::F32),
                            target = output_pair({c.rows}, DType::F32);
                       cuda::logits_softmax_stats(logits.gpu, labels.gpu, c.vocab_start, row_max.gpu, sumexp.gpu,
                                                  target.gpu);
                       ops::logits_softmax_stats(logits.cpu, labels.cpu, c.vocab_start, row_max.cpu, sumexp.cpu,
                                                 target.cpu);
                       return std::vector<Check>{compare("row_max", row_max, 0.0),
                                                 compare("sumexp", sumexp, kF32Bound),
                                                 compare("target_logit", target, 0.0)};
                     }});
  }
}

// The backward case for one shape, run under BB_ATTENTION_BACKEND=`backend`
// and named attention_backward[`label`]; with `unaligned`, every bf16 tensor
// is a view off the 16-byte grid. A non-empty `gqa_expand` runs it under
// BB_ATTENTION_GQA_EXPAND=`gqa_expand` and adds " gqa_expand=..." to the label;
// `autotune` runs it under BB_CUDNN_ATTENTION_AUTOTUNE=1 (" autotune"), a
// non-empty `flash_sm90` under BB_FLASH_SM90=`flash_sm90` (" sm90=...").
void add_attention_backward_case(std::vector<Case>& cases, const std::string& backend, const std::string& label,
                                 const AttentionShape& a, bool unaligned, const std::string& gqa_expand,
                                 bool autotune = false, const std::string& flash_sm90 = "") {
  const std::vector<double> cu = a.cu_seqlens();
  const int64_t max_seqlen = a.max_seqlen(), tokens = a.tokens();
  const double scale = a.scale();
  const Shape q_shape{tokens, a.heads_q, a.head_dim}, k_shape{tokens, a.heads_kv, a.head_dim};
  const Shape v_shape{tokens, a.heads_kv, a.dv()}, out_shape{tokens, a.heads_q, a.dv()};
  const std::string shape = attention_shape(a) + (unaligned ? " unaligned" : "");
  auto place = [unaligned](const Pair& p) { return unaligned ? unaligned_view(p) : p; };
  const std::string name = label + (gqa_expand.empty() ? "" : " gqa_expand=" + gqa_expand) +
                           (autotune ? " autotune" : "") + (flash_sm90.empty() ? "" : " sm90=" + flash_sm90);
  cases.push_back({"attention_backward[" + name + "]", shape, [=](Generator& gen) {
                     EnvOverride env("BB_ATTENTION_BACKEND", backend);
                     std::optional<EnvOverride> expand, tune, sm90;
                     if (!gqa_expand.empty()) expand.emplace("BB_ATTENTION_GQA_EXPAND", gqa_expand);
                     if (autotune) tune.emplace("BB_CUDNN_ATTENTION_AUTOTUNE", "1");
                     if (!flash_sm90.empty()) sm90.emplace("BB_FLASH_SM90", flash_sm90);
                     Pair q = place(random_pair(gen, q_shape, DType::BF16)),
                          k = place(random_pair(gen, k_shape, DType::BF16)),
                          v = place(random_pair(gen, v_shape, DType::BF16));
                     Pair dout = place(random_pair(gen, out_shape, DType::BF16));
                     Pair cu_seqlens = index_pair(cu, DType::I32);
                     // out and lse from the CPU forward (out rounded to bf16), the same on both sides.
                     Tensor out_cpu = Tensor::empty(out_shape, DType::F32);
                     Tensor lse_cpu = Tensor::empty({tokens, a.heads_q}, DType::F32);
                     ops::attention_forward(q.cpu, k.cpu, v.cpu, cu_seqlens.cpu, max_seqlen, scale, out_cpu, lse_cpu);
                     Pair out = place(pair_from_cpu(out_cpu, DType::BF16)), lse = pair_from_cpu(lse_cpu, DType::F32);
                     Pair dq = place(output_pair(q_shape, DType::BF16)), dk = place(output_pair(k_shape, DType::BF16)),
                          dv = place(output_pair(v_shape, DType::BF16));
                     cuda::attention_backward(dout.gpu, q.gpu, k.gpu, v.gpu, out.gpu, lse.gpu, cu_seqlens.gpu,
                                              max_seqlen, scale, dq.gpu, dk.gpu, dv.gpu);
                     ops::attention_backward(dout.cpu, q.cpu, k.cpu, v.cpu, out.cpu, lse.cpu, cu_seqlens.cpu,
                                             max_seqlen, scale, dq.cpu, dk.cpu, dv.cpu);
                     return std::vector<Check>{compare("dq", dq, kBf16Bound), compare("dk", dk, kBf16Bound),
                                               compare("dv", dv, kBf16Bound)};
                   }});
}

// The forward case for one shape, run under BB_ATTENTION_BACKEND=`backend`
// and named attention_forward[`label`]. With `unaligned`, every bf16 tensor is
// a view off the 16-byte grid; with `autotune`, under
// BB_CUDNN_ATTENTION_AUTOTUNE=1 (" autotune" in the name). A non-empty
// `flash_sm90` runs it under BB_FLASH_SM90=`flash_sm90` (" sm90=..." in the
// name): "0" keeps the FlashAttention-2 forward on Hopper, where the sm_90a
// kernel is the default for the head dims it takes.
void add_attention_forward_case(std::vector<Case>& cases, const std::string& backend, const std::string& label,
                                const AttentionShape& a, bool unaligned, bool autotune = false,
                                const std::string& flash_sm90 = "") {
  const std::vector<double> cu = a.cu_seqlens();
  const int64_t max_seqlen = a.max_seqlen(), tokens = a.tokens();
  const double scale = a.scale();
  const Shape q_shape{tokens, a.heads_q, a.head_dim}, k_shape{tokens, a.heads_kv, a.head_dim};
  const Shape v_shape{tokens, a.heads_kv, a.dv()}, out_shape{tokens, a.heads_q, a.dv()};
  const std::string shape = attention_shape(a) + (unaligned ? " unaligned" : "");
  auto place = [unaligned](const Pair& p) { return unaligned ? unaligned_view(p) : p; };
  const std::string name =
      label + (autotune ? " autotune" : "") + (flash_sm90.empty() ? "" : " sm90=" + flash_sm90);
  cases.push_back({"attention_forward[" + name + "]", shape, [=](Generator& gen) {
                     EnvOverride env("BB_ATTENTION_BACKEND", backend);
                     std::optional<EnvOverride> tune, sm90;
                     if (autotune) tune.emplace("BB_CUDNN_ATTENTION_AUTOTUNE", "1");
                     if (!flash_sm90.empty()) sm90.emplace("BB_FLASH_SM90", flash_sm90);
                     Pair q = place(random_pair(gen, q_shape, DType::BF16)),
                          k = place(random_pair(gen, k_shape, DType::BF16)),
                          v = place(random_pair(gen, v_shape, DType::BF16));
                     Pair cu_seqlens = index_pair(cu, DType::I32);
                     Pair out = place(output_pair(out_shape, DType::BF16)),
                          lse = output_pair({tokens, a.heads_q}, DType::F32);
                     cuda::attention_forward(q.gpu, k.gpu, v.gpu, cu_seqlens.gpu, max_seqlen, scale, out.gpu,
                                             lse.gpu);
                     ops::attention_forward(q.cpu, k.cpu, v.cpu, cu_seqlens.cpu, max_seqlen, scale, out.cpu,
                                            lse.cpu);
                     // lse comes from fp32 sums of exact bf16 products; exp2 is the
                     // hardware approximation (2 ulp).
                     return std::vector<Check>{compare("out", out, kBf16Bound), compare("lse", lse, 1e-4)};
                   }});
}

// Forward and backward cases for one shape (the arguments of
// add_attention_forward_case).
void add_attention_cases(std::vector<Case>& cases, const std::string& backend, const std::string& label,
                         const AttentionShape& a, bool unaligned, bool autotune = false) {
  add_attention_forward_case(cases, backend, label, a, unaligned, autotune);
  add_attention_backward_case(cases, backend, label, a, unaligned, "", autotune);
}

void attention_cases(std::vector<Case>& cases) {
  const AttentionShape shapes[] = {
      {{37}, 4, 4, 64},           {{64}, 2, 1, 128},         {{100, 37, 1, 64}, 8, 4, 128},
      {{129, 200}, 8, 2, 128},    {{65, 3}, 4, 2, 64},       {{300}, 4, 1, 96},
      {{77, 50}, 2, 2, 32},       {{1}, 2, 2, 128},
      // Every sequence of one length (S x L rows): cuDNN's dense graph
      // (attention_cudnn.cpp); flash runs them as any packing.
      {{128, 128}, 8, 2, 128},    {{64, 64, 64}, 4, 4, 64},  {{256, 256}, 32, 4, 128},
  };
  // Shapes flash and cuDNN do not take: attention_small.cu runs them whichever
  // backend is asked for, hence the "->small" in their names.
  const AttentionShape small_head_shapes[] = {
      {{37, 20, 9}, 6, 2, 6}, {{50, 13}, 6, 3, 10},  {{64, 1, 30}, 8, 4, 12},
      {{40, 25}, 4, 2, 100},  {{45, 70}, 4, 1, 160},
  };
  // A v head dim other than the q/k one (multi-head latent attention): DeepSeek-V3's
  // 192/128 with MHA and GQA, and smaller pairs both tiled backends take.
  const AttentionShape mla_shapes[] = {
      {{100, 37, 1, 64}, 16, 16, 192, 128}, {{129, 200}, 8, 2, 192, 128}, {{300}, 4, 1, 192, 128},
      {{65, 3}, 4, 2, 64, 32},              {{77, 50}, 4, 2, 128, 64},
      {{96, 96}, 16, 16, 192, 128},
  };
  // Pairs neither tiled backend takes (a head dim not a multiple of 8, or q/k above 192).
  const AttentionShape mla_small_shapes[] = {{{37, 20, 9}, 4, 2, 20, 12}, {{45, 30}, 4, 1, 256, 128}};
  const AttentionShape unaligned_shapes[] = {{{33, 17}, 4, 2, 64}, {{33, 17}, 4, 2, 192, 128}};
  // The grouped-query backward with K/V expanded to the query heads and without
  // (attention.cpp): ratio 8 as in Qwen3-30B-A3B (32 / 4), with the 192/128 of
  // multi-head latent attention, and ratio 2, below the auto threshold.
  const AttentionShape gqa_expand_shapes[] = {
      {{129, 200}, 16, 2, 128}, {{100, 37, 1, 64}, 8, 1, 64}, {{129, 200}, 8, 1, 192, 128}, {{65, 3}, 4, 2, 64},
  };
  // Ragged packings whose lengths are not multiples of any tile, GQA from
  // 1:1 to 8:1, and sequences long enough that blocks walk several key tiles
  // past the masked ones: the tile edges of the sm_90a forward (128 x 128)
  // and backward (128 keys x 64 queries).
  const AttentionShape varlen_shapes[] = {
      {{1, 37, 130, 257}, 8, 8, 128}, {{1, 37, 130, 257}, 8, 4, 64}, {{257, 130, 37, 1}, 8, 2, 128},
      {{130, 257}, 8, 1, 64},         {{300, 129}, 16, 2, 128},      {{513, 7}, 4, 1, 128},
      {{384, 128}, 8, 4, 64},         {{1, 37, 130, 257}, 16, 2, 192, 128},
  };
  std::vector<std::string> backends = {"flash"};
  if (cuda::cudnn_attention_built()) backends.push_back("cudnn");
  // Our kernels with the sm_90a ones where they apply (the default) and with
  // the FlashAttention-2 ones throughout (BB_FLASH_SM90=0). The varlen
  // backward runs the grouped shapes from 4:1 as auto chooses (expansion on
  // FlashAttention-2, the group walk on sm_90a) and walking the group in one
  // block (gqa_expand=0); gqa_expand_shapes force both ways on sm_90a.
  for (const char* sm90 : {"", "0"}) {
    for (const AttentionShape& a : varlen_shapes) {
      add_attention_forward_case(cases, "flash", "flash", a, false, false, sm90);
      add_attention_backward_case(cases, "flash", "flash", a, false, "", false, sm90);
      if (a.heads_q >= 4 * a.heads_kv) add_attention_backward_case(cases, "flash", "flash", a, false, "0", false, sm90);
    }
    if (*sm90) {
      for (const AttentionShape& a : shapes) {
        add_attention_forward_case(cases, "flash", "flash", a, false, false, sm90);
        add_attention_backward_case(cases, "flash", "flash", a, false, "", false, sm90);
      }
      for (const AttentionShape& a : mla_shapes) {
        add_attention_forward_case(cases, "flash", "flash", a, false, false, sm90);
        add_attention_backward_case(cases, "flash", "flash", a, false, "", false, sm90);
      }
      for (const AttentionShape& a : gqa_expand_shapes)
        for (const char* expand : {"0", "1"})
          add_attention_backward_case(cases, "flash", "flash", a, false, expand, false, sm90);
    }
  }
  for (const std::string& backend : backends) {
    for (const AttentionShape& a : shapes) add_attention_cases(cases, backend, backend, a, false);
    for (const AttentionShape& a : mla_shapes) add_attention_cases(cases, backend, backend, a, false);
    for (const AttentionShape& a : small_head_shapes)
      add_attention_cases(cases, backend, backend + "->small", a, false);
    for (const AttentionShape& a : mla_small_shapes)
      add_attention_cases(cases, backend, backend + "->small", a, false);
    for (const AttentionShape& a : unaligned_shapes)
      add_attention_cases(cases, backend, backend + "->small", a, true);
    for (const AttentionShape& a : gqa_expand_shapes)
      for (const char* expand : {"0", "1"}) add_attention_backward_case(cases, backend, backend, a, false, expand);
  }
  // cuDNN with every engine configuration timed and the fastest kept: whichever
  // plan wins must be as right as the heuristics' choice (MHA, GQA 8:1, 192/128).
  if (cuda::cudnn_attention_built())
    for (const AttentionShape& a : {AttentionShape{{100, 37, 1, 64}, 8, 8, 128}, AttentionShape{{129, 200}, 16, 2, 128},
                                    AttentionShape{{100, 37, 1, 64}, 16, 16, 192, 128}})
      add_attention_cases(cases, "cudnn", "cudnn", a, false, true);
}

// Partial attention, the step of ring attention: query sequence s against
// key/value sequence s, causal (diagonal bottom-right) or unmasked.
struct PartialAttentionShape {
  std::vector<int64_t> seqlens_q, seqlens_kv;
  int64_t heads_q, heads_kv, head_dim, head_dim_v;
  ops::AttentionMask mask;
};

std::string partial_attention_shape(const PartialAttentionShape& a) {
  auto lens = [](const std::vector<int64_t>& ls) {
    std::string out;
    for (int64_t l : ls) out += (out.empty() ? "" : ",") + std::to_string(l);
    return out;
  };
  return fmt("q=[%s] kv=[%s] Hq=%lld Hkv=%lld %s %s", lens(a.seqlens_q).c_str(), lens(a.seqlens_kv).c_str(),
             (long long)a.heads_q, (long long)a.heads_kv, head_dims(a.head_dim, a.head_dim_v).c_str(),
             ops::attention_mask_name(a.mask));
}

// Offsets [0, l0, l0 + l1, ...] and the longest length.
std::pair<std::vector<double>, int64_t> offsets_of(const std::vector<int64_t>& lens) {
  std::vector<double> cu{0.0};
  int64_t longest = 0;
  for (int64_t l : lens) {
    cu.push_back(cu.back() + double(l));
    longest = std::max(longest, l);
  }
  return {cu, longest};
}

// lse compared on the rows that saw a key; a row that saw none (-inf on the
// CPU) must be -inf on CUDA too, counted as "lse -inf rows" mismatches.
std::vector<Check> compare_lse(const Pair& lse, double bound) {
  const std::vector<double> gpu = lse.gpu.to_doubles(), cpu = lse.cpu.to_doubles();
  double diff = 0.0, ref = 0.0, mismatches = 0.0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (cpu[i] == -INFINITY) {
      mismatches += gpu[i] == -INFINITY ? 0.0 : 1.0;
      continue;
    }
    if (!std::isfinite(gpu[i])) return {{"lse", std::numeric_limits<double>::infinity(), bound}};
    diff += (gpu[i] - cpu[i]) * (gpu[i] - cpu[i]);
    ref += cpu[i] * cpu[i];
  }
  return {{"lse", ref > 0.0 ? std::sqrt(diff / ref) : std::sqrt(diff), bound}, {"lse -inf rows", mismatches, 0.0}};
}

// The forward case of one partial-attention shape under
// BB_ATTENTION_BACKEND=`backend`, named attention_partial_forward[`label`];
// a non-empty `flash_sm90` runs it under BB_FLASH_SM90=`flash_sm90`
// (" sm90=..." in the name).
void add_partial_attention_forward_case(std::vector<Case>& cases, const std::string& backend,
                                        const std::string& label, const PartialAttentionShape& a,
                                        const std::string& flash_sm90 = "") {
  const std::vector<double> cu_q = offsets_of(a.seqlens_q).first, cu_kv = offsets_of(a.seqlens_kv).first;
  const int64_t max_q = offsets_of(a.seqlens_q).second, max_kv = offsets_of(a.seqlens_kv).second;
  const int64_t tokens_q = int64_t(cu_q.back()), tokens_kv = int64_t(cu_kv.back());
  const double scale = 1.0 / std::sqrt(double(a.head_dim));
  const Shape q_shape{tokens_q, a.heads_q, a.head_dim}, k_shape{tokens_kv, a.heads_kv, a.head_dim};
  const Shape v_shape{tokens_kv, a.heads_kv, a.head_dim_v}, out_shape{tokens_q, a.heads_q, a.head_dim_v};
  const ops::AttentionMask mask = a.mask;
  const std::string shape = partial_attention_shape(a);
  const std::string name = label + (flash_sm90.empty() ? "" : " sm90=" + flash_sm90);
  auto spans_of = [=](const Pair& q_offsets, const Pair& kv_offsets, bool gpu) {
    return ops::AttentionSpans{gpu ? q_offsets.gpu : q_offsets.cpu, gpu ? kv_offsets.gpu : kv_offsets.cpu, max_q,
                               max_kv, mask};
  };
  cases.push_back({"attention_partial_forward[" + name + "]", shape, [=](Generator& gen) {
                     EnvOverride env("BB_ATTENTION_BACKEND", backend);
                     std::optional<EnvOverride> sm90;
                     if (!flash_sm90.empty()) sm90.emplace("BB_FLASH_SM90", flash_sm90);
                     Pair q = random_pair(gen, q_shape, DType::BF16), k = random_pair(gen, k_shape, DType::BF16),
                          v = random_pair(gen, v_shape, DType::BF16);
                     Pair cq = index_pair(cu_q, DType::I32), ckv = index_pair(cu_kv, DType::I32);
                     Pair out = output_pair(out_shape, DType::BF16), lse = output_pair({tokens_q, a.heads_q}, DType::F32);
                     cuda::attention_forward(q.gpu, k.gpu, v.gpu, spans_of(cq, ckv, true), scale, out.gpu, lse.gpu);
                     ops::attention_forward(q.cpu, k.cpu, v.cpu, spans_of(cq, ckv, false), scale, out.cpu, lse.cpu);
                     std::vector<Check> checks{compare("out", out, kBf16Bound)};
                     for (const Check& c : compare_lse(lse, 1e-4)) checks.push_back(c);
                     return checks;
                   }});
}

// The backward case of one partial-attention shape, named
// attention_partial_backward[`label`], with `flash_sm90` as in the forward's.
void add_partial_attention_backward_case(std::vector<Case>& cases, const std::string& backend,
                                         const std::string& label, const PartialAttentionShape& a,
                                         const std::string& flash_sm90 = "") {
  const std::vector<double> cu_q = offsets_of(a.seqlens_q).first, cu_kv = offsets_of(a.seqlens_kv).first;
  const int64_t max_q = offsets_of(a.seqlens_q).second, max_kv = offsets_of(a.seqlens_kv).second;
  const int64_t tokens_q = int64_t(cu_q.back()), tokens_kv = int64_t(cu_kv.back());
  const double scale = 1.0 / std::sqrt(double(a.head_dim));
  const Shape q_shape{tokens_q, a.heads_q, a.head_dim}, k_shape{tokens_kv, a.heads_kv, a.head_dim};
  const Shape v_shape{tokens_kv, a.heads_kv, a.head_dim_v}, out_shape{tokens_q, a.heads_q, a.head_dim_v};
  const ops::AttentionMask mask = a.mask;
  const std::string shape = partial_attention_shape(a);
  auto spans_of = [=](const Pair& q_offsets, const Pair& kv_offsets, bool gpu) {
    return ops::AttentionSpans{gpu ? q_offsets.gpu : q_offsets.cpu, gpu ? kv_offsets.gpu : kv_offsets.cpu, max_q,
                               max_kv, mask};
  };
  const std::string name = label + (flash_sm90.empty() ? "" : " sm90=" + flash_sm90);
  cases.push_back({"attention_partial_backward[" + name + "]", shape, [=](Generator& gen) {
                     EnvOverride env("BB_ATTENTION_BACKEND", backend);
                     std::optional<EnvOverride> sm90;
                     if (!flash_sm90.empty()) sm90.emplace("BB_FLASH_SM90", flash_sm90);
                     Pair q = random_pair(gen, q_shape, DType::BF16), k = random_pair(gen, k_shape, DType::BF16),
                          v = random_pair(gen, v_shape, DType::BF16);
                     Pair dout = random_pair(gen, out_shape, DType::BF16);
                     Pair cq = index_pair(cu_q, DType::I32), ckv = index_pair(cu_kv, DType::I32);
                     // As in the ring, out and lse are the merged ones: this partial's
                     // from the CPU forward with lse raised by 0.5 (as if other
                     // partials held 1 - e^-0.5 of the row's mass), so a kernel that
                     // recomputed its own normaliser would fail.
                     Tensor out_cpu = Tensor::empty(out_shape, DType::F32);
                     Tensor lse_cpu = Tensor::empty({tokens_q, a.heads_q}, DType::F32);
                     ops::attention_forward(q.cpu, k.cpu, v.cpu, spans_of(cq, ckv, false), scale, out_cpu, lse_cpu);
                     std::vector<double> merged = lse_cpu.to_doubles();
                     for (double& l : merged) l += 0.5;
                     Pair out = pair_from_cpu(out_cpu, DType::BF16);
                     Pair lse = pair_from_cpu(Tensor::from_doubles(merged, lse_cpu.shape(), DType::F32), DType::F32);
                     Pair dq = output_pair(q_shape, DType::BF16), dk = output_pair(k_shape, DType::BF16),
                          dv = output_pair(v_shape, DType::BF16);
                     cuda::attention_backward(dout.gpu, q.gpu, k.gpu, v.gpu, out.gpu, lse.gpu, spans_of(cq, ckv, true),
                                              scale, dq.gpu, dk.gpu, dv.gpu);
                     ops::attention_backward(dout.cpu, q.cpu, k.cpu, v.cpu, out.cpu, lse.cpu, spans_of(cq, ckv, false),
                                             scale, dq.cpu, dk.cpu, dv.cpu);
                     return std::vector<Check>{compare("dq", dq, kBf16Bound), compare("dk", dk, kBf16Bound),
                                               compare("dv", dv, kBf16Bound)};
                   }});
}

// The forward and backward cases of one partial-attention shape.
void add_partial_attention_cases(std::vector<Case>& cases, const std::string& backend, const std::string& label,
                                 const PartialAttentionShape& a) {
  add_partial_attention_forward_case(cases, backend, label, a);
  add_partial_attention_backward_case(cases, backend, label, a);
}

// What ring attention asks of the op (primitive/parallel/ring_attention.cpp):
// zigzag halves of equal length per sequence, causal on the diagonal step
// and unmasked elsewhere; then q half or double the kv length (bottom-right
// diagonal, so with q longer the first rows see no key), the small-head path,
// GQA, head dims 64 and 128, and the q/k 192, v 128 of multi-head latent
// attention (ring attention over DeepSeek-V3 layers).
void partial_attention_cases(std::vector<Case>& cases) {
  using ops::AttentionMask;
  struct Lens {
    std::vector<int64_t> q, kv;
    int64_t heads_q, heads_kv, head_dim;
    int64_t head_dim_v = 0;   // 0: the q/k head dim
    int64_t dv() const { return head_dim_v ? head_dim_v : head_dim; }
  };
  const Lens lens[] = {
      {{37, 20}, {37, 20}, 8, 2, 128},       {{64, 19, 1}, {64, 19, 1}, 4, 4, 64},
      {{128}, {128}, 16, 8, 128},            {{100, 3}, {100, 3}, 8, 1, 64},
      {{32, 20}, {64, 40}, 4, 2, 64},        {{64, 40}, {32, 20}, 4, 1, 128},
      {{70, 5}, {140, 10}, 8, 2, 128},
      {{37, 20}, {37, 20}, 16, 16, 192, 128}, {{32, 20}, {64, 40}, 8, 2, 192, 128},
      {{64, 40}, {32, 20}, 8, 2, 192, 128},
  };
  const Lens small_head_lens[] = {{{13, 7}, {13, 7}, 6, 2, 12}, {{10, 4}, {5, 8}, 4, 2, 12},
                                  {{10, 4}, {5, 8}, 4, 2, 20, 12}};
  // Our kernels only: ragged lengths off the tiles of the sm_90a kernels, q
  // shorter and longer than kv within one packing (so some blocks see no
  // key), a key/value sequence of length 0, GQA 1:1 to 8:1.
  const Lens varlen_lens[] = {
      {{1, 37, 130, 257}, {257, 130, 37, 1}, 8, 2, 128}, {{1, 37, 130, 257}, {1, 37, 130, 257}, 8, 8, 64},
      {{300, 64}, {150, 200}, 8, 4, 64},                 {{130, 20}, {257, 40}, 16, 2, 128},
      {{20, 37, 5}, {0, 50, 5}, 4, 2, 64},               {{200, 3}, {70, 3}, 8, 1, 128},
  };
  for (AttentionMask mask : {AttentionMask::Causal, AttentionMask::None}) {
    for (const char* sm90 : {"", "0"}) {
      for (const Lens& l : varlen_lens) {
        const PartialAttentionShape a{l.q, l.kv, l.heads_q, l.heads_kv, l.head_dim, l.dv(), mask};
        add_partial_attention_forward_case(cases, "flash", "flash", a, sm90);
        add_partial_attention_backward_case(cases, "flash", "flash", a, sm90);
      }
      if (*sm90)
        for (const Lens& l : lens) {
          const PartialAttentionShape a{l.q, l.kv, l.heads_q, l.heads_kv, l.head_dim, l.dv(), mask};
          add_partial_attention_forward_case(cases, "flash", "flash", a, sm90);
          add_partial_attention_backward_case(cases, "flash", "flash", a, sm90);
        }
    }
  }
  std::vector<std::string> backends = {"flash"};
  if (cuda::cudnn_attention_built()) backends.push_back("cudnn");
  for (const std::string& backend : backends) {
    for (AttentionMask mask : {AttentionMask::Causal, AttentionMask::None}) {
      for (const Lens& l : lens)
        add_partial_attention_cases(cases, backend, backend,
                                    {l.q, l.kv, l.heads_q, l.heads_kv, l.head_dim, l.dv(), mask});
      for (const Lens& l : small_head_lens)
        add_partial_attention_cases(cases, backend, backend + "->small",
                                    {l.q, l.kv, l.heads_q, l.heads_kv, l.head_dim, l.dv(), mask});
    }
  }
}

// The log-sum-exp merge of ring attention on random partials; in a few rows
// one side saw no key (lse -inf), so the other side passes through.
void attention_merge_cases(std::vector<Case>& cases) {
  for (auto [rows, heads, d] : {std::tuple<int64_t, int64_t, int64_t>{37, 4, 64}, {300, 8, 128}, {5, 2, 12}}) {
    const std::string shape = fmt("T=%lld H=%lld D=%lld bf16, lse f32", (long long)rows, (long long)heads, (long long)d);
    cases.push_back({"attention_merge", shape, [=](Generator& gen) {
                       Pair out = random_pair(gen, {rows, heads, d}, DType::BF16);
                       Pair part = random_pair(gen, {rows, heads, d}, DType::BF16);
                       Pair lse = random_pair_with(gen, {rows, heads}, DType::F32,
                                                   [](std::vector<double>& v) { v[0] = -INFINITY; });
                       Pair part_lse = random_pair_with(gen, {rows, heads}, DType::F32,
                                                        [](std::vector<double>& v) { v[1] = -INFINITY; });
                       cuda::attention_merge(out.gpu, lse.gpu, part.gpu, part_lse.gpu);
                       ops::attention_merge(out.cpu, lse.cpu, part.cpu, part_lse.cpu);
                       return std::vector<Check>{compare("out", out, kBf16Bound), compare("lse", lse, kF32Bound)};
                     }});
  }
}

// A routing of T tokens to k distinct experts each, drawn from the first
// `used` of E experts (the rest get zero rows), as the rows the dispatcher
// makes: sorted by expert, token_of_row naming each row's token. With
// `local_half`, only the rows of experts [0, E/2) are kept, as on one rank of
// ep=2, so tokens have anywhere from 0 to k rows.
struct MoeRouting {
  int64_t tokens, hidden, experts, used, topk;
  bool local_half;
  DType index;
};

std::vector<double> draw_token_of_row(Generator& gen, const MoeRouting& r) {
  std::vector<std::pair<int64_t, int64_t>> expert_token;
  std::vector<int64_t> pool(size_t(r.used));
  for (int64_t t = 0; t < r.tokens; ++t) {
    for (int64_t e = 0; e < r.used; ++e) pool[size_t(e)] = e;
    for (int64_t j = 0; j < r.topk; ++j) {  // partial Fisher-Yates: k distinct experts
      const int64_t pick = j + int64_t(gen.uniform() * double(r.used - j));
      std::swap(pool[size_t(j)], pool[size_t(pick)]);
      if (!r.local_half || pool[size_t(j)] < r.experts / 2) expert_token.push_back({pool[size_t(j)], t});
    }
  }
  std::sort(expert_token.begin(), expert_token.end());
  std::vector<double> rows;
  for (const auto& [expert, token] : expert_token) rows.push_back(double(token));
  return rows;
}

void moe_cases(std::vector<Case>& cases) {
  const MoeRouting routings[] = {
      {1, 64, 8, 8, 2, false, DType::I32},       // one token
      {37, 100, 8, 8, 1, false, DType::I64},     // k = 1, hidden not a multiple of 8
      {16, 13, 8, 8, 8, false, DType::I32},      // k = E, odd hidden
      {50, 256, 64, 20, 4, false, DType::I64},   // 44 experts with zero rows
      {33, 2048, 128, 128, 8, false, DType::I32},  // Qwen3-30B-A3B's hidden and routing
      {29, 72, 16, 16, 6, true, DType::I32},     // one ep=2 rank: tokens with 0 to 6 rows
      {5, 7, 16, 16, 3, false, DType::I64},
      {4, 64, 8, 8, 0, false, DType::I32},       // no rows at all
  };
  for (const MoeRouting& r : routings) {
    for (DType dt : {DType::BF16, DType::F32}) {
      if (dt == DType::F32 && r.hidden != 100) continue;  // one float32 routing is enough
      const std::string shape = fmt("T=%lld H=%lld E=%lld used=%lld k=%lld%s %s idx=%s", (long long)r.tokens,
                                    (long long)r.hidden, (long long)r.experts, (long long)r.used,
                                    (long long)r.topk, r.local_half ? " ep-local" : "", short_name(dt),
                                    dtype_name(r.index));
      const Shape token_major{r.tokens, r.hidden};
      cases.push_back({"moe_permute", shape, [=](Generator& gen) {
                         Pair tok = index_pair(draw_token_of_row(gen, r), r.index);
                         const int64_t n = tok.cpu.size(0);
                         Pair x = random_pair(gen, token_major, dt), out = output_pair({n, r.hidden}, dt);
                         cuda::moe_permute(x.gpu, tok.gpu, out.gpu);
                         ops::moe_permute(x.cpu, tok.cpu, out.cpu);
                         return std::vector<Check>{compare("out", out, 0.0)};  // a copy: exact
                       }});
      cases.push_back({"moe_permute_backward", shape, [=](Generator& gen) {
                         Pair tok = index_pair(draw_token_of_row(gen, r), r.index);
                         const int64_t n = tok.cpu.size(0);
                         Pair dout = random_pair(gen, {n, r.hidden}, dt), dx = output_pair(token_major, dt);
                         cuda::moe_permute_backward(dout.gpu, tok.gpu, dx.gpu);
                         ops::moe_permute_backward(dout.cpu, tok.cpu, dx.cpu);
                         return std::vector<Check>{compare("dx", dx, bound_for(dt))};
                       }});
      // Routing weights in float32, or (as the MoE layer keeps them) in the rows' dtype.
      for (DType pdt : {DType::F32, dt}) {
        if (pdt == dt && dt == DType::F32) continue;
        const std::string pshape = shape + " probs=" + short_name(pdt);
        cases.push_back({"moe_unpermute", pshape, [=](Generator& gen) {
                           Pair tok = index_pair(draw_token_of_row(gen, r), r.index);
                           const int64_t n = tok.cpu.size(0);
                           Pair y = random_pair(gen, {n, r.hidden}, dt);
                           Pair probs = random_pair(gen, {n}, pdt, 0.0, 1.0);
                           Pair out = output_pair(token_major, dt);
                           cuda::moe_unpermute(y.gpu, tok.gpu, probs.gpu, out.gpu);
                           ops::moe_unpermute(y.cpu, tok.cpu, probs.cpu, out.cpu);
                           return std::vector<Check>{compare("out", out, bound_for(dt))};
                         }});
        cases.push_back({"moe_unpermute_backward", pshape, [=](Generator& gen) {
                           Pair tok = index_pair(draw_token_of_row(gen, r), r.index);
                           const int64_t n = tok.cpu.size(0);
                           Pair dout = random_pair(gen, token_major, dt), y = random_pair(gen, {n, r.hidden}, dt);
                           Pair probs = random_pair(gen, {n}, pdt, 0.0, 1.0);
                           Pair dy = output_pair({n, r.hidden}, dt), dprobs = output_pair({n}, pdt);
                           cuda::moe_unpermute_backward(dout.gpu, y.gpu, tok.gpu, probs.gpu, dy.gpu, dprobs.gpu);
                           ops::moe_unpermute_backward(dout.cpu, y.cpu, tok.cpu, probs.cpu, dy.cpu, dprobs.cpu);
                           // float32 dprobs: dot products of the same values, summed in another order.
                           return std::vector<Check>{compare("dy", dy, bound_for(dt)),
                                                     compare("dprobs", dprobs, bound_for(pdt))};
                         }});
      }
    }
  }
}

// MoE routing: the router (softmax, and sigmoid with a bias and groups), the
// sorted rows of its experts and the gathers around them. Softmax experts are
// compared exactly: distinct bfloat16 logits leave gaps between scores far
// wider than the fp32 vs double difference of the two backends. Sums of
// sigmoid scores (biased scores, group scores) can come within fp32 rounding
// of each other, where the backends may order two nearly equal experts
// differently; their weights then agree to fp32, so the experts get a loose
// bound and the weights the fp32 one.
struct RouterShape {
  int64_t tokens, experts, topk;
  bool sigmoid;
  int64_t groups, kept;
  bool norm;
  double scaling;
  bool forced;
};

ops::MoeRouterConfig router_config(const RouterShape& r) {
  ops::MoeRouterConfig c;
  c.score = r.sigmoid ? ops::MoeScore::Sigmoid : ops::MoeScore::Softmax;
  c.top_k = r.topk;
  c.norm_topk_prob = r.norm;
  c.num_groups = r.groups;
  c.topk_groups = r.kept;
  c.routed_scaling_factor = r.scaling;
  return c;
}

// k distinct experts per token out of the first `used`.
std::vector<double> draw_experts(Generator& gen, int64_t tokens, int64_t used, int64_t k) {
  std::vector<double> out;
  std::vector<int64_t> pool(static_cast<size_t>(used));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < used; ++e) pool[size_t(e)] = e;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t pick = j + int64_t(gen.uniform() * double(used - j));
      std::swap(pool[size_t(j)], pool[size_t(pick)]);
      out.push_back(double(pool[size_t(j)]));
    }
  }
  return out;
}

void moe_router_cases(std::vector<Case>& cases) {
  const RouterShape shapes[] = {
      {37, 8, 2, false, 0, 0, false, 1.0, false},
      {333, 128, 8, false, 0, 0, true, 1.0, false},    // Qwen3-30B-A3B, T a multiple of nothing
      {333, 128, 8, false, 0, 0, true, 1.0, true},     // router replay
      {257, 256, 8, true, 8, 4, true, 2.5, false},     // DeepSeek-V3: sigmoid, 8 groups / 4 kept
      {100, 64, 6, true, 0, 0, false, 16.0, false},
      {8192, 128, 8, false, 0, 0, true, 1.0, false},   // the bench's microbatch: 1024 blocks of 8 warps
      {61, 100, 6, false, 0, 0, false, 1.0, false},    // E not a multiple of the warp
      {200, 256, 8, true, 64, 8, true, 1.0, false},    // groups past 32: two per lane
  };
  for (const RouterShape& r : shapes) {
    const std::string shape = fmt("T=%lld E=%lld k=%lld %s groups=%lld/%lld norm=%d scale=%g%s", (long long)r.tokens,
                                  (long long)r.experts, (long long)r.topk, r.sigmoid ? "sigmoid" : "softmax",
                                  (long long)r.groups, (long long)r.kept, int(r.norm), r.scaling,
                                  r.forced ? " forced" : "");
    const ops::MoeRouterConfig cfg = router_config(r);
    const Shape te{r.tokens, r.experts}, tk{r.tokens, r.topk};
    cases.push_back({"moe_router_forward", shape, [=](Generator& gen) {
                       Pair logits = random_pair(gen, te, DType::BF16, 2.0);
                       Pair bias = r.sigmoid ? random_pair(gen, {r.experts}, DType::BF16, 0.1) : Pair{};
                       if (r.sigmoid) bias = pair_from_cpu(bias.cpu, DType::F32);
                       Pair forced = r.forced ? index_pair(draw_experts(gen, r.tokens, r.experts, r.topk), DType::I64)
                                              : Pair{};
                       Pair scores = output_pair(te, DType::F32), weights = output_pair(tk, DType::F32);
                       Pair experts = index_pair(std::vector<double>(size_t(r.tokens * r.topk), -1.0), DType::I64);
                       // The router takes expert ids as [T, k]; index_pair makes them flat.
                       for (Pair* ids : {&forced, &experts})
                         if (ids->cpu.defined()) *ids = Pair{ids->gpu.view(tk), ids->cpu.view(tk)};
                       cuda::moe_router_forward(logits.gpu, cfg, bias.gpu, forced.gpu, scores.gpu, experts.gpu,
                                                weights.gpu);
                       ops::moe_router_forward(logits.cpu, cfg, bias.cpu, forced.cpu, scores.cpu, experts.cpu,
                                               weights.cpu);
                       return std::vector<Check>{compare("scores", scores, kF32Bound),
                                                 compare("experts", experts, r.sigmoid ? 0.05 : 0.0),
                                                 compare("weights", weights, kF32Bound)};
                     }});
    cases.push_back({"moe_router_lse+z_loss_backward", shape, [=](Generator& gen) {
                       Pair logits = random_pair(gen, te, DType::BF16, 2.0);
                       Pair lse = output_pair({r.tokens}, DType::F32);
                       cuda::moe_router_lse(logits.gpu, lse.gpu);
                       ops::moe_router_lse(logits.cpu, lse.cpu);
                       Pair dlogits = random_pair(gen, te, DType::BF16, 0.01);
                       cuda::moe_router_z_loss_backward(logits.gpu, lse.gpu, 0.003, dlogits.gpu);
                       ops::moe_router_z_loss_backward(logits.cpu, lse.cpu, 0.003, dlogits.cpu);
                       return std::vector<Check>{compare("lse", lse, kF32Bound),
                                                 compare("dlogits", dlogits, kBf16Bound)};
                     }});
    for (bool per_token : {true, false}) {
      cases.push_back({"moe_router_backward", shape + (per_token ? " dscores=[T,E]" : " dscores=[E]"),
                       [=](Generator& gen) {
                         Pair logits = random_pair(gen, te, DType::BF16, 2.0);
                         Tensor scores = Tensor::empty(te, DType::F32), experts = Tensor::empty(tk, DType::I64);
                         Tensor weights = Tensor::empty(tk, DType::F32);
                         ops::moe_router_forward(logits.cpu, cfg, Tensor(), Tensor(), scores, experts, weights);
                         Pair s = pair_from_cpu(scores, DType::F32), w = pair_from_cpu(weights, DType::F32);
                         Pair ex{experts.to(Device::cuda(0)), experts};
                         Pair dw = random_pair(gen, tk, DType::F32);
                         Pair extra = random_pair(gen, per_token ? te : Shape{r.experts}, DType::F32, 0.01);
                         Pair dlogits = output_pair(te, DType::BF16);
                         cuda::moe_router_backward(dw.gpu, extra.gpu, logits.gpu, s.gpu, ex.gpu, w.gpu, cfg,
                                                   dlogits.gpu);
                         ops::moe_router_backward(dw.cpu, extra.cpu, logits.cpu, s.cpu, ex.cpu, w.cpu, cfg,
                                                  dlogits.cpu);
                         return std::vector<Check>{compare("dlogits", dlogits, kBf16Bound)};
                       }});
    }
  }
  // Sorted rows: `used` of E experts get rows, so some experts get none.
  struct SortShape {
    int64_t tokens, experts, used, topk;
  };
  for (const SortShape& r : {SortShape{333, 128, 128, 8}, SortShape{50, 64, 20, 4}, SortShape{1, 8, 8, 8},
                             SortShape{4097, 128, 100, 8}}) {
    const std::string shape = fmt("T=%lld E=%lld used=%lld k=%lld", (long long)r.tokens, (long long)r.experts,
                                  (long long)r.used, (long long)r.topk);
    const int64_t n = r.tokens * r.topk;
    cases.push_back({"moe_sort_rows", shape, [=](Generator& gen) {
                       Pair experts = index_pair(draw_experts(gen, r.tokens, r.used, r.topk), DType::I64);
                       Tensor e = experts.cpu.view({r.tokens, r.topk});
                       Pair ex{e.to(Device::cuda(0)), e};
                       const std::vector<double> minus(size_t(n), -1.0);
                       Pair tok = index_pair(minus, DType::I64), slot = index_pair(minus, DType::I64);
                       Pair counts = index_pair(std::vector<double>(size_t(r.experts), -1.0), DType::I64);
                       cuda::moe_sort_rows(ex.gpu, r.experts, tok.gpu, slot.gpu, counts.gpu);
                       ops::moe_sort_rows(ex.cpu, r.experts, tok.cpu, slot.cpu, counts.cpu);
                       return std::vector<Check>{compare("token_of_row", tok, 0.0), compare("slot_of_row", slot, 0.0),
                                                 compare("rows_per_expert", counts, 0.0)};
                     }});
    // The token sums through the index equal the CPU and, bit for bit, the
    // same sums through their own sort of token_of_row.
    for (int64_t hidden : {int64_t(72), int64_t(13)}) {
      cases.push_back({"moe_rows_by_token+token_sums", shape + fmt(" H=%lld", (long long)hidden), [=](Generator& gen) {
                         Tensor e = index_pair(draw_experts(gen, r.tokens, r.used, r.topk), DType::I64)
                                        .cpu.view({r.tokens, r.topk});
                         Tensor tok = Tensor::empty({n}, DType::I64), slot = Tensor::empty({n}, DType::I64);
                         Tensor counts = Tensor::empty({r.experts}, DType::I64);
                         ops::moe_sort_rows(e, r.experts, tok, slot, counts);
                         const Device gpu = Device::cuda(0);
                         Pair t{tok.to(gpu), tok}, sl{slot.to(gpu), slot};
                         Pair index = index_pair(std::vector<double>(size_t(n), -2.0), DType::I64);
                         index = {index.gpu.view({r.tokens, r.topk}), index.cpu.view({r.tokens, r.topk})};
                         cuda::moe_rows_by_token(t.gpu, sl.gpu, index.gpu);
                         ops::moe_rows_by_token(t.cpu, sl.cpu, index.cpu);
                         Pair y = random_pair(gen, {n, hidden}, DType::BF16);
                         Pair probs = random_pair(gen, {n}, DType::F32, 0.0, 1.0);
                         Pair out = output_pair({r.tokens, hidden}, DType::BF16);
                         Pair dx = output_pair({r.tokens, hidden}, DType::BF16);
                         cuda::moe_unpermute(y.gpu, t.gpu, probs.gpu, out.gpu, index.gpu);
                         ops::moe_unpermute(y.cpu, t.cpu, probs.cpu, out.cpu, index.cpu);
                         cuda::moe_permute_backward(y.gpu, t.gpu, dx.gpu, index.gpu);
                         ops::moe_permute_backward(y.cpu, t.cpu, dx.cpu, index.cpu);
                         Tensor own_out = Tensor::empty({r.tokens, hidden}, DType::BF16, gpu);
                         Tensor own_dx = Tensor::empty({r.tokens, hidden}, DType::BF16, gpu);
                         cuda::moe_unpermute(y.gpu, t.gpu, probs.gpu, own_out);
                         cuda::moe_permute_backward(y.gpu, t.gpu, own_dx);
                         return std::vector<Check>{compare("rows_by_token", index, 0.0),
                                                   compare("out", out, bound_for(DType::BF16)),
                                                   compare("out = own sort's", {out.gpu, own_out.to(Device::cpu())}, 0.0),
                                                   compare("dx", dx, bound_for(DType::BF16)),
                                                   compare("dx = own sort's", {dx.gpu, own_dx.to(Device::cpu())}, 0.0)};
                       }});
    }
    cases.push_back({"moe_row_weights+gather_row_grads", shape, [=](Generator& gen) {
                       Tensor e = index_pair(draw_experts(gen, r.tokens, r.used, r.topk), DType::I64)
                                      .cpu.view({r.tokens, r.topk});
                       Tensor tok = Tensor::empty({n}, DType::I64), slot = Tensor::empty({n}, DType::I64);
                       Tensor counts = Tensor::empty({r.experts}, DType::I64);
                       ops::moe_sort_rows(e, r.experts, tok, slot, counts);
                       Pair t{tok.to(Device::cuda(0)), tok}, sl{slot.to(Device::cuda(0)), slot};
                       Pair w = random_pair(gen, {r.tokens, r.topk}, DType::F32);
                       Pair rw = output_pair({n}, DType::F32), back = output_pair({r.tokens, r.topk}, DType::F32);
                       cuda::moe_row_weights(w.gpu, t.gpu, sl.gpu, rw.gpu);
                       ops::moe_row_weights(w.cpu, t.cpu, sl.cpu, rw.cpu);
                       cuda::moe_gather_row_grads(rw.gpu, t.gpu, sl.gpu, back.gpu);
                       ops::moe_gather_row_grads(rw.cpu, t.cpu, sl.cpu, back.cpu);
                       return std::vector<Check>{compare("row_weights", rw, 0.0), compare("dweights", back, 0.0)};
                     }});
    cases.push_back({"moe_score_sums", shape, [=](Generator& gen) {
                       Pair s = random_pair(gen, {r.tokens, r.experts}, DType::F32, 0.0, 1.0);
                       Pair sums = output_pair({r.experts}, DType::F32);
                       cuda::moe_score_sums(s.gpu, sums.gpu);
                       ops::moe_score_sums(s.cpu, sums.cpu);
                       return std::vector<Check>{compare("sums", sums, kF32Bound)};
                     }});
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  matmul_cases(cases);
  grouped_gemm_cases(cases);
  elementwise_cases(cases);
  dropout_cases(cases);
  reduce_cases(cases);
  embedding_cases(cases);
  rmsnorm_cases(cases);
  add_rmsnorm_cases(cases);
  dtype_rejection_cases(cases);
  rope_cases(cases);
  rmsnorm_rope_cases(cases);
  swiglu_cases(cases);
  cross_entropy_cases(cases);
  softmax_stats_cases(cases);
  attention_merge_cases(cases);
  adamw_cases(cases);
  attention_cases(cases);
  partial_attention_cases(cases);
  moe_cases(cases);
  moe_router_cases(cases);
  column_gather_cases(cases);
  determinism_cases(cases);
  return cases;
}

int run_cases(const std::string& filter, uint64_t seed) {
  int passed = 0, failed = 0;
  const std::vector<Case> cases = all_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (!filter_matches(filter, c.op)) continue;
    Generator gen(seed * 1000003ull + i);
    std::vector<Check> checks;
    try {
      checks = c.run(gen);
      cuda::synchronize(0);  // an asynchronous kernel fault surfaces here, inside this case
    } catch (const std::exception& e) {
      std::printf("FAIL  %-28s %-56s error: %s\n", c.op.c_str(), c.shape.c_str(), e.what());
      ++failed;
      continue;
    }
    for (const Check& k : checks) {
      const bool ok = k.error <= k.bound;  // NaN fails
      std::printf("%s  %-28s %-56s %-13s err=%-10.3g bound=%.0e\n", ok ? "PASS" : "FAIL", c.op.c_str(),
                  c.shape.c_str(), k.name.c_str(), k.error, k.bound);
      (ok ? passed : failed) += 1;
    }
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace bb::harness

int main(int argc, char** argv) {
  bool perf = false;
  std::string filter;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--perf") == 0) {
      perf = true;
    } else if (std::strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
      filter = argv[++i];
    } else if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: %s [--perf] [--filter NAME[,NAME...]] [--seed N]\n", argv[0]);
      return 2;
    }
  }
  if (bb::cuda_device_count() == 0) {
    std::fprintf(stderr, "bb_cuda_ops: no CUDA device is visible; run this on the GPU machine\n");
    return 1;
  }
  try {
    return perf ? bb::harness::run_perf(filter) : bb::harness::run_cases(filter, seed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bb_cuda_ops: %s\n", e.what());
    return 1;
  }
}
