// CPU MoE token permutation: gather a token's rows for its experts, and
// combine the experts' rows back with the routing weights.
#include <algorithm>
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

// Each token's rows in the order the token sums add them, ascending: from
// rows_by_token when given (each entry checked to be a row of that token),
// else gathered from token_of_row.
using RowsOfTokens = std::vector<std::vector<int64_t>>;
RowsOfTokens rows_of_tokens(const Tensor& token_of_row, const Tensor& rows_by_token, int64_t tokens, const char* op) {
  const std::vector<int64_t> token = token_rows(token_of_row, tokens, op);
  RowsOfTokens rows(static_cast<size_t>(tokens));
  if (!rows_by_token.defined()) {
    for (size_t i = 0; i < token.size(); ++i) rows[size_t(token[i])].push_back(int64_t(i));
    return rows;
  }
  const int64_t k = rows_by_token.size(1);
  const int64_t* index = rows_by_token.data<int64_t>();
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = index[t * k + j];
      BB_CHECK(r >= 0 && r < int64_t(token.size()) && token[size_t(r)] == t, op, ": rows_by_token[", t, ", ", j,
               "] = ", r, " is not a row of token ", t);
      BB_CHECK(j == 0 || r > index[t * k + j - 1], op, ": rows_by_token[", t, "] is not in ascending order");
      rows[size_t(t)].push_back(r);
    }
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

void moe_permute_backward(const Tensor& dout, const Tensor& token_of_row, Tensor& dx, const Tensor& rows_by_token) {
  const int64_t h = dx.size(1);
  const RowsOfTokens rows = rows_of_tokens(token_of_row, rows_by_token, dx.size(0), "moe_permute_backward");
  dx.zero_();
  visit_float(dx.dtype(), "moe_permute_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pd = dout.data<T>();
    T* px = dx.data<T>();
    for (size_t t = 0; t < rows.size(); ++t)
      for (int64_t r : rows[t])
        for (int64_t j = 0; j < h; ++j) px[int64_t(t) * h + j] += pd[r * h + j];
  });
}

void moe_unpermute(const Tensor& y, const Tensor& token_of_row, const Tensor& probs, Tensor& out,
                   const Tensor& rows_by_token) {
  const int64_t h = out.size(1);
  const RowsOfTokens rows = rows_of_tokens(token_of_row, rows_by_token, out.size(0), "moe_unpermute");
  out.zero_();
  visit_float(out.dtype(), "moe_unpermute", [&](auto tag) {
    using T = decltype(tag);
    const T* py = y.data<T>();
    const T* pp = probs.data<T>();
    T* po = out.data<T>();
    for (size_t t = 0; t < rows.size(); ++t)
      for (int64_t r : rows[t])
        for (int64_t j = 0; j < h; ++j) po[int64_t(t) * h + j] += pp[r] * py[r * h + j];
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

void moe_rows_by_token(const Tensor& token_of_row, const Tensor& slot_of_row, Tensor& rows_by_token) {
  const char* op = "moe_rows_by_token";
  const int64_t tokens = rows_by_token.size(0), k = rows_by_token.size(1);
  const std::vector<int64_t> token = read_indices(token_of_row, op), slot = read_indices(slot_of_row, op);
  std::vector<int64_t> row_of_pair(size_t(tokens * k), -1);
  for (size_t i = 0; i < token.size(); ++i) {
    const int64_t t = token[i], j = slot[i];
    BB_CHECK(t >= 0 && t < tokens && j >= 0 && j < k, op, ": row ", i, " names token ", t, " slot ", j,
             ", outside the [", tokens, ", ", k, "] pairs");
    int64_t& at = row_of_pair[size_t(t * k + j)];
    BB_CHECK(at < 0, op, ": rows ", at, " and ", i, " both name token ", t, " slot ", j);
    at = int64_t(i);
  }
  int64_t* out = rows_by_token.data<int64_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int64_t> mine(row_of_pair.begin() + t * k, row_of_pair.begin() + (t + 1) * k);
    std::sort(mine.begin(), mine.end());
    std::copy(mine.begin(), mine.end(), out + t * k);
  }
}

}  // namespace bb::cpu
