// CPU MoE token permutation: gather a token's rows for its experts, and
// combine the experts' rows back with the routing weights.
#include <cstring>

#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/cpu/dtype_dispatch.h"

namespace bb::cpu {
namespace {
// Row indices checked against the token count once, so the loops index freely.
std::vector<int64_t> token_rows(const Tensor& token_of_row, int64_t tokens, const char* op) {
  std::vector<int64_t> rows = read_indices(token_of_row, op);
  for (size_t i = 0; i < rows.size(); ++i)
    BB_CHECK(rows[i] >= 0 && rows[i] < tokens, op, ": token_of_row[", i, "] = ", rows[i], " is outside [0, ",
             tokens, ")");
  return rows;
}
}  // namespace

void moe_permute(const Tensor& x, const Tensor& token_of_row, Tensor& out) {
  const int64_t h = x.size(1);
  const std::vector<int64_t> rows = token_rows(token_of_row, x.size(0), "moe_permute");
  visit_float(x.dtype(), "moe_permute", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (size_t i = 0; i < rows.size(); ++i) std::memcpy(po + int64_t(i) * h, px + rows[i] * h, sizeof(T) * size_t(h));
  });
}

void moe_permute_backward(const Tensor& dout, const Tensor& token_of_row, Tensor& dx) {
  const int64_t h = dx.size(1);
  const std::vector<int64_t> rows = token_rows(token_of_row, dx.size(0), "moe_permute_backward");
  dx.zero_();
  visit_float(dx.dtype(), "moe_permute_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pd = dout.data<T>();
    T* px = dx.data<T>();
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t j = 0; j < h; ++j) px[rows[i] * h + j] += pd[int64_t(i) * h + j];
  });
}

void moe_unpermute(const Tensor& y, const Tensor& token_of_row, const Tensor& probs, Tensor& out) {
  const int64_t h = out.size(1);
  const std::vector<int64_t> rows = token_rows(token_of_row, out.size(0), "moe_unpermute");
  out.zero_();
  visit_float(out.dtype(), "moe_unpermute", [&](auto tag) {
    using T = decltype(tag);
    const T* py = y.data<T>();
    const T* pp = probs.data<T>();
    T* po = out.data<T>();
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t j = 0; j < h; ++j) po[rows[i] * h + j] += pp[i] * py[int64_t(i) * h + j];
  });
}

void moe_unpermute_backward(const Tensor& dout, const Tensor& y, const Tensor& token_of_row, const Tensor& probs,
                            Tensor& dy, Tensor& dprobs) {
  const int64_t h = dout.size(1);
  const std::vector<int64_t> rows = token_rows(token_of_row, dout.size(0), "moe_unpermute_backward");
  visit_float(dout.dtype(), "moe_unpermute_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pd = dout.data<T>();
    const T* py = y.data<T>();
    const T* pp = probs.data<T>();
    T* pdy = dy.data<T>();
    T* pdp = dprobs.data<T>();
    for (size_t i = 0; i < rows.size(); ++i) {
      const T* d = pd + rows[i] * h;
      T acc = 0;
      for (int64_t j = 0; j < h; ++j) {
        pdy[int64_t(i) * h + j] = pp[i] * d[j];
        acc += d[j] * py[int64_t(i) * h + j];
      }
      pdp[i] = acc;
    }
  });
}

}  // namespace bb::cpu
