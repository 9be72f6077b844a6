// Argument checks shared by the kernels over the LM head's logits
// (cross_entropy.cu, softmax_stats.cu, entropy.cu): logits [N, V_local] on
// CUDA with N < 2^31 (one block or warp a row), and per-row float32
// statistics [N] on the same device.
#pragma once

#include <cstdint>
#include <string>

#include "bumblebee/ops/cuda/cuda_common.cuh"

namespace bb::cuda {

inline void check_logits(const char* op, const Tensor& logits) {
  check_cuda(logits, op, "logits");
  BB_CHECK(logits.dim() == 2, op, ": logits must be [N, V_local], got ", shape_str(logits.shape()));
  BB_CHECK(logits.size(0) <= INT32_MAX, op, ": too many rows (", logits.size(0), ")");
}

// `stat` is one float32 per row of `ref`.
inline void check_row_stat(const char* op, const Tensor& ref, const Tensor& stat, const char* name) {
  check_cuda_same(ref, stat, op, name);
  BB_CHECK(stat.dim() == 1 && stat.size(0) == ref.size(0), op, ": ", name, " must be [", ref.size(0), "], got ",
           shape_str(stat.shape()));
  BB_CHECK(stat.dtype() == DType::F32, op, ": ", name, " must be float32 on CUDA, got ", dtype_name(stat.dtype()));
}

// The softmax statistics' arguments (logits_sumexp_target, logits_softmax_stats):
// one label, row max, sumexp and target logit a row of the logits.
inline void check_softmax_stats(const char* op, const Tensor& logits, const Tensor& labels, const Tensor& row_max,
                                const Tensor& sumexp, const Tensor& target_logit) {
  check_logits(op, logits);
  check_row_stat(op, logits, row_max, "row_max");
  check_row_stat(op, logits, sumexp, "sumexp");
  check_row_stat(op, logits, target_logit, "target_logit");
  check_cuda_same(logits, labels, op, "labels");
  check_shape(labels, {logits.size(0)}, (std::string(op) + ": labels").c_str());
}

}  // namespace bb::cuda
