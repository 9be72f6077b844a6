// Pieces of the CUDA-vs-CPU op harness: paired CPU/CUDA tensors holding the
// same values, NaN-poisoned outputs, error measures, and the case table type.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bumblebee/core/rng.h"
#include "bumblebee/core/tensor.h"

namespace bb::harness {

// One op input or output on both backends: `gpu` in the CUDA dtype on cuda:0,
// `cpu` in float32 (or the index dtype) with exactly the same values.
struct Pair {
  Tensor gpu;
  Tensor cpu;
};

// N(0, std^2) values rounded through `gpu_dtype`.
Pair random_pair(Generator& gen, const Shape& shape, DType gpu_dtype, double std = 1.0);
// U(lo, hi) values rounded through `gpu_dtype`.
Pair random_pair(Generator& gen, const Shape& shape, DType gpu_dtype, double lo, double hi);
// N(0, 1) values edited by `edit` before rounding (to plant zeros or infinities).
Pair random_pair_with(Generator& gen, const Shape& shape, DType gpu_dtype,
                      const std::function<void(std::vector<double>&)>& edit);
// An output: both sides filled with NaN, so elements an op never writes fail.
Pair output_pair(const Shape& shape, DType gpu_dtype);
// Integer values (ids, labels, positions, offsets) in `dtype` on both sides.
Pair index_pair(const std::vector<double>& values, DType dtype);
// A CPU float32 result reused as input on both sides, rounded through gpu_dtype.
Pair pair_from_cpu(const Tensor& cpu, DType gpu_dtype);

struct Check {
  std::string name;
  double error;  // relative error, NaN or inf when the CUDA side is not finite
  double bound;
};

// ||gpu - cpu|| / ||cpu|| (||gpu - cpu|| when cpu is all zeros); infinite when
// the CUDA output holds a non-finite value the CPU output does not.
Check compare(const std::string& name, const Pair& p, double bound);
Check compare_scalar(const std::string& name, double gpu, double cpu, double bound);

struct Case {
  std::string op;
  std::string shape;
  std::function<std::vector<Check>(Generator&)> run;
};

// Sets an environment variable for a scope and restores it after.
class EnvOverride {
 public:
  EnvOverride(const char* name, const std::string& value);
  ~EnvOverride();
  EnvOverride(const EnvOverride&) = delete;
  EnvOverride& operator=(const EnvOverride&) = delete;

 private:
  std::string name_, old_;
  bool had_old_ = false;
};

std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));

// RoPE's inv_freq [dim / 2] (float64 on the host): base^(-2i / dim).
Tensor rope_inv_freq(int64_t dim, double base);

// "D=128", or "D=192/128" for a v head dim other than the q/k one (multi-head
// latent attention).
std::string head_dims(int64_t head_dim_qk, int64_t head_dim_v);

// One attention case's packed (THD) sequences and heads.
struct AttentionShape {
  std::vector<int64_t> seqlens;
  int64_t heads_q, heads_kv, head_dim;
  int64_t head_dim_v = 0;   // 0: the q/k head dim
  int64_t dv() const { return head_dim_v ? head_dim_v : head_dim; }
  int64_t tokens() const;
  int64_t max_seqlen() const;
  std::vector<double> cu_seqlens() const;   // 0, then each sequence's end (for index_pair)
  double scale() const;                     // 1 / sqrt(head_dim)
};
// "seqs=[4096,4096] Hq=32 Hkv=4 D=128": the label of a shape.
std::string attention_shape(const AttentionShape& a);

// The deterministic-mode cases (test_backend_ops_determinism.cpp): ops run
// twice on the same inputs must agree bit for bit.
void determinism_cases(std::vector<Case>& cases);

// Whether `name` contains one of the comma-separated parts of `filter` (an
// empty filter takes everything): --filter rmsnorm,moe_permute.
bool filter_matches(const std::string& filter, const std::string& name);

// --perf (test_backend_ops_perf.cpp): times the kernel groups `filter` takes
// (gemm, grouped_gemm, attention, rmsnorm, memory_bound, column_gather,
// moe_router, moe_dispatch) and prints rates; returns the process exit code.
int run_perf(const std::string& filter);

}  // namespace bb::harness
