// CPU entropy of the vocab-parallel softmax: a shard's sum of exp(z - max) z,
// the entropy from the group-reduced sums, and the backward of a loss over the
// cross entropy and the entropy together (ops.h has the formulas).
#include <cmath>

#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/cpu/dtype_dispatch.h"

namespace bb::cpu {

void logits_zexp_sum(const Tensor& logits, const Tensor& row_max, Tensor& zexp_sum) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  visit_float(logits.dtype(), "logits_zexp_sum", [&](auto tag) {
    using T = decltype(tag);
    const T* pl = logits.data<T>();
    const T* pm = row_max.data<T>();
    T* pz = zexp_sum.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const double m = double(pm[r]);
      double s = 0.0;
      for (int64_t j = 0; j < vocab; ++j) {
        const double z = double(pl[r * vocab + j]);
        s += std::exp(z - m) * z;
      }
      pz[r] = T(s);
    }
  });
}

void entropy_from_sums(const Tensor& lse, const Tensor& sumexp, const Tensor& zexp_sum, Tensor& entropy) {
  visit_float(lse.dtype(), "entropy_from_sums", [&](auto tag) {
    using T = decltype(tag);
    const T* pl = lse.data<T>();
    const T* ps = sumexp.data<T>();
    const T* pz = zexp_sum.data<T>();
    T* ph = entropy.data<T>();
    for (int64_t r = 0, n = lse.numel(); r < n; ++r) ph[r] = T(double(pl[r]) - double(pz[r]) / double(ps[r]));
  });
}

void cross_entropy_entropy_backward(const Tensor& logits, const Tensor& labels, int64_t vocab_start, const Tensor& lse,
                                    const Tensor& entropy, const Tensor& dloss, const Tensor& dentropy,
                                    Tensor& dlogits) {
  const std::vector<int64_t> label = read_indices(labels, "cross_entropy_entropy_backward");
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  visit_float(logits.dtype(), "cross_entropy_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    // Elementwise read-then-write, so dlogits may alias logits.
    const T* pl = logits.data<T>();
    const T* plse = lse.data<T>();
    const T* ph = entropy.data<T>();
    const T* pd = dloss.data<T>();
    const T* pe = dentropy.data<T>();
    T* pg = dlogits.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const double row_lse = double(plse[r]), d = double(pd[r]), de = double(pe[r]);
      const double mean_logit = row_lse - double(ph[r]);   // sum_v p_v z_v
      const int64_t col = label[size_t(r)] - vocab_start;
      for (int64_t j = 0; j < vocab; ++j) {
        const double z = double(pl[r * vocab + j]);
        const double p = std::exp(z - row_lse);
        pg[r * vocab + j] = T((p - (j == col ? 1.0 : 0.0)) * d - de * p * (z - mean_logit));
      }
    }
  });
}

}  // namespace bb::cpu
