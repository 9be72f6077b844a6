// CPU vocab-parallel cross entropy pieces: row max, sum of exponentials and
// target logit over a shard of the vocabulary, the loss from the reduced
// statistics, and the backward.
//
// A rank holds columns [vocab_start, vocab_start + V_local). A label outside
// them contributes target_logit 0 here, so summing target_logit over the
// tensor-parallel ranks gives the true target logit (and masked rows, whose
// label is outside every shard, give 0 everywhere).
#include <algorithm>
#include <cmath>
#include <limits>

#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/cpu/dtype_dispatch.h"

namespace bb::cpu {

void logits_row_max(const Tensor& logits, Tensor& row_max) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  visit_float(logits.dtype(), "logits_row_max", [&](auto tag) {
    using T = decltype(tag);
    const T* pl = logits.data<T>();
    T* pm = row_max.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < vocab; ++j) m = std::max(m, pl[r * vocab + j]);
      pm[r] = m;
    }
  });
}

void logits_sumexp_target(const Tensor& logits, const Tensor& row_max, const Tensor& labels, int64_t vocab_start,
                          Tensor& sumexp, Tensor& target_logit) {
  const std::vector<int64_t> label = read_indices(labels, "logits_sumexp_target");
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  visit_float(logits.dtype(), "logits_sumexp_target", [&](auto tag) {
    using T = decltype(tag);
    const T* pl = logits.data<T>();
    const T* pm = row_max.data<T>();
    T* ps = sumexp.data<T>();
    T* pt = target_logit.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const double m = double(pm[r]);
      double s = 0.0;
      for (int64_t j = 0; j < vocab; ++j) s += std::exp(double(pl[r * vocab + j]) - m);
      ps[r] = T(s);
      const int64_t col = label[size_t(r)] - vocab_start;
      pt[r] = (col >= 0 && col < vocab) ? pl[r * vocab + col] : T(0);
    }
  });
}

// The two passes in sequence, so the CPU oracle's statistics are bit for bit
// those of the two-op path.
void logits_softmax_stats(const Tensor& logits, const Tensor& labels, int64_t vocab_start, Tensor& row_max,
                          Tensor& sumexp, Tensor& target_logit) {
  logits_row_max(logits, row_max);
  logits_sumexp_target(logits, row_max, labels, vocab_start, sumexp, target_logit);
}

void cross_entropy_loss(const Tensor& row_max, const Tensor& sumexp, const Tensor& target_logit, Tensor& lse,
                        Tensor& loss) {
  visit_float(lse.dtype(), "cross_entropy_loss", [&](auto tag) {
    using T = decltype(tag);
    const T* pm = row_max.data<T>();
    const T* ps = sumexp.data<T>();
    const T* pt = target_logit.data<T>();
    T* pl = lse.data<T>();
    T* ploss = loss.data<T>();
    for (int64_t r = 0, n = lse.numel(); r < n; ++r) {
      const double row_lse = double(pm[r]) + std::log(double(ps[r]));
      pl[r] = T(row_lse);
      ploss[r] = T(row_lse - double(pt[r]));
    }
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& labels, int64_t vocab_start, const Tensor& lse,
                            const Tensor& dloss, Tensor& dlogits) {
  const std::vector<int64_t> label = read_indices(labels, "cross_entropy_backward");
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  visit_float(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    // Elementwise read-then-write, so dlogits may alias logits.
    const T* pl = logits.data<T>();
    const T* plse = lse.data<T>();
    const T* pd = dloss.data<T>();
    T* pg = dlogits.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const double row_lse = double(plse[r]), d = double(pd[r]);
      const int64_t col = label[size_t(r)] - vocab_start;
      for (int64_t j = 0; j < vocab; ++j) {
        const double p = std::exp(double(pl[r * vocab + j]) - row_lse);
        pg[r * vocab + j] = T((p - (j == col ? 1.0 : 0.0)) * d);
      }
    }
  });
}

}  // namespace bb::cpu
