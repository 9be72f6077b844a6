// MoE token permutation on CUDA: gather each token's rows for its experts
// (moe_permute), combine the experts' rows back with the routing weights
// (moe_unpermute), and their backwards.
//
// The two ops that sum rows into a token (moe_permute_backward, moe_unpermute)
// gather instead of scattering: an inverse index lists each token's rows in
// ascending row order (a stable radix sort of token_of_row, then where each
// token's rows start, read off the sorted keys), and one thread sums a
// token's rows in fp32 in that order. No atomics, so the result is the same
// bits on every run, and a token may have any number of rows (0 to N).
//
// The kernels are memory-bound and keep the shape that measured fastest on
// an H200: a thread moves one 16-byte group at a time (a warp per row in the
// unpermute backward), and full occupancy (32 registers a thread for bf16)
// supplies the loads in flight. Lanes that each keep 4 to 8 loads in flight
// (a warp per row or token with its column loop unrolled, a token's rows
// loaded in batches) hold more registers, run fewer warps, and measured
// slower, with the same bits. What keeps the ops from the bytes they must
// move (bb_cuda_ops --perf, the moe_* lines) is not the kernels' arithmetic:
// rows in expert order read x and dout (each token row k times) in no useful
// order, so most of those reads miss L2. A sum given no index first pays its
// sort of token_of_row, about half as long as the sum itself at
// Qwen3-30B-A3B's shapes; the MoE layer instead builds moe_rows_by_token's
// index once (a scatter of the rows into their (token, slot) pairs and a
// k-element sort a token) and hands it to both sums.
//
// token_of_row is not range-checked on the host (that would synchronise every
// layer); a row naming a token outside [0, T) instead gets NaN in the
// row-major outputs (out of moe_permute, dy and dprobs) and is left out of
// the token sums, so a bad routing shows up as a non-finite loss, not as an
// out-of-bounds access.
#include <cub/device/device_radix_sort.cuh>

#include <limits>
#include <type_traits>

#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"

namespace bb::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T, int W>
__device__ __forceinline__ void load_w(const T* p, float (&v)[8]) {
  if constexpr (W == 8) load8(p, v);
  else v[0] = to_float(*p);
}

template <typename T, int W>
__device__ __forceinline__ void store_w(T* p, const float (&v)[8]) {
  if constexpr (W == 8) store8(p, v);
  else *p = from_float<T>(v[0]);
}

// store_w through evict-first stores, for rows written once that should not
// push out of L2 what the kernel still reads.
template <typename T, int W>
__device__ __forceinline__ void store_w_streaming(T* p, const float (&v)[8]) {
  if constexpr (W == 8) store8<T, true>(p, v);
  else __stcs(p, from_float<T>(v[0]));
}

// ---- CUDA kernels -----------------------------------------------------------------------

// Sort keys: the row's token, or `tokens` for a row outside [0, tokens), so
// invalid rows sort after every token's rows and no token's range holds them.
template <typename I>
__global__ void token_keys_kernel(const I* __restrict__ token_of_row, int64_t rows, int64_t tokens,
                                  int32_t* __restrict__ keys, int32_t* __restrict__ row_ids) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = int64_t(token_of_row[i]);
    keys[i] = (t >= 0 && t < tokens) ? int32_t(t) : int32_t(tokens);
    row_ids[i] = int32_t(i);
  }
}

// offsets[t] = the first sorted position whose key is >= t, for t in [0, T];
// token t's rows are sorted_rows[offsets[t] .. offsets[t + 1]). Position i
// is that first position for the tokens in (key[i - 1], key[i]] (key[-1] =
// -1, key[rows] = T), so each offset is written once, by a load of two
// neighbouring keys instead of a binary search (a chain of dependent loads).
// A run of tokens with no rows is written by one thread.
__global__ void token_offsets_kernel(const int32_t* __restrict__ sorted_keys, int64_t rows, int64_t tokens,
                                     int32_t* __restrict__ offsets) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i <= rows; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t first = i == 0 ? 0 : int64_t(sorted_keys[i - 1]) + 1;
    const int64_t last = i == rows ? tokens : int64_t(sorted_keys[i]);
    for (int64_t t = first; t <= last; ++t) offsets[t] = int32_t(i);
  }
}

// out[i] = x[token_of_row[i]], W columns per thread. out (k times the size of
// x) is stored evict-first, so that x stays in L2 for more of its k reads
// (the same for dy in the unpermute backward measured no gain).
template <typename T, typename I, int W>
__global__ void permute_kernel(const T* __restrict__ x, const I* __restrict__ token_of_row, int64_t rows,
                               int64_t tokens, int64_t hidden, T* __restrict__ out) {
  const int64_t groups_per_row = hidden / W;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < rows * groups_per_row;
       g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = g / groups_per_row, col = (g % groups_per_row) * W;
    const int64_t t = int64_t(token_of_row[row]);
    float v[8];
    if (t >= 0 && t < tokens) {
      load_w<T, W>(x + t * hidden + col, v);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = NAN;
    }
    store_w_streaming<T, W>(out + row * hidden + col, v);
  }
}

// out[t] = sum over token t's rows r (ascending) of w_r * rows_in[r], in fp32;
// w_r = probs[r] when kWeighted (moe_unpermute), else 1 (moe_permute_backward).
// Token t's rows are sorted_rows[offsets[t] .. offsets[t + 1]), or, with no
// offsets, the per_token entries from t * per_token (moe_rows_by_token's
// index). An entry outside [0, rows) (a pair the index found no row for)
// makes the token's sum NaN.
template <typename T, typename P, typename R, int W, bool kWeighted>
__global__ void sum_token_rows_kernel(const T* __restrict__ rows_in, const R* __restrict__ sorted_rows,
                                      const int32_t* __restrict__ offsets, int64_t per_token, int64_t rows,
                                      const P* __restrict__ probs, int64_t tokens, int64_t hidden,
                                      T* __restrict__ out) {
  const int64_t groups_per_row = hidden / W;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < tokens * groups_per_row;
       g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = g / groups_per_row, col = (g % groups_per_row) * W;
    const int64_t begin = offsets ? offsets[t] : t * per_token, end = offsets ? offsets[t + 1] : begin + per_token;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int64_t p = begin; p < end; ++p) {
      const int64_t r = int64_t(sorted_rows[p]);
      if (r < 0 || r >= rows) {
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[j] = NAN;
        continue;
      }
      float v[8];
      load_w<T, W>(rows_in + r * hidden + col, v);
      const float w = kWeighted ? to_float(probs[r]) : 1.f;
#pragma unroll
      for (int j = 0; j < W; ++j) acc[j] = fmaf(w, v[j], acc[j]);
    }
    store_w<T, W>(out + t * hidden + col, acc);
  }
}

// row_of_pair[t * k + j] = i for row i of (token t, slot j); rows naming a
// pair outside [T, k] are left out.
__global__ void pair_rows_kernel(const int64_t* __restrict__ token_of_row, const int64_t* __restrict__ slot_of_row,
                                 int64_t rows, int64_t tokens, int64_t k, int64_t* __restrict__ row_of_pair) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = token_of_row[i], j = slot_of_row[i];
    if (t >= 0 && t < tokens && j >= 0 && j < k) row_of_pair[t * k + j] = i;
  }
}

// A thread per token puts its k rows in ascending order (insertion sort; k is
// the routing's top-k, a handful).
__global__ void sort_token_rows_kernel(int64_t tokens, int64_t k, int64_t* __restrict__ rows_by_token) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens; t += int64_t(gridDim.x) * blockDim.x) {
    int64_t* r = rows_by_token + t * k;
    for (int64_t a = 1; a < k; ++a) {
      const int64_t v = r[a];
      int64_t b = a;
      for (; b > 0 && r[b - 1] > v; --b) r[b] = r[b - 1];
      r[b] = v;
    }
  }
}

// One warp per row i: dy[i] = probs[i] * dout[t], dprobs[i] = dout[t] . y[i]
// (fp32, a warp reduction), t = token_of_row[i].
template <typename T, typename P, typename I, int W>
__global__ void unpermute_backward_kernel(const T* __restrict__ dout, const T* __restrict__ y,
                                          const I* __restrict__ token_of_row, const P* __restrict__ probs,
                                          int64_t rows, int64_t tokens, int64_t hidden, T* __restrict__ dy,
                                          P* __restrict__ dprobs) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  const int64_t groups_per_row = hidden / W;
  for (int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
    const int64_t t = int64_t(token_of_row[row]);
    const bool valid = t >= 0 && t < tokens;
    const float p = to_float(probs[row]);
    float acc = 0.f;
    for (int64_t g = lane; g < groups_per_row; g += 32) {
      const int64_t col = g * W;
      float d[8], v[8], o[8];
      if (valid) {
        load_w<T, W>(dout + t * hidden + col, d);
        load_w<T, W>(y + row * hidden + col, v);
#pragma unroll
        for (int j = 0; j < W; ++j) {
          o[j] = p * d[j];
          acc = fmaf(d[j], v[j], acc);
        }
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) o[j] = NAN;
      }
      store_w<T, W>(dy + row * hidden + col, o);
    }
    acc = warp_sum(acc);
    if (lane == 0) dprobs[row] = from_float<P>(valid ? acc : NAN);
  }
}

// ---- kernel launchers ---------------------------------------------------------------------

// Each token's rows in ascending row order: sorted_rows [N] and offsets [T + 1].
struct TokenRows {
  Tensor sorted_rows;
  Tensor offsets;
};

TokenRows token_rows(const Tensor& token_of_row, int64_t tokens, const char* op, cudaStream_t stream) {
  const int64_t rows = token_of_row.size(0);
  BB_CHECK(rows < std::numeric_limits<int32_t>::max() && tokens < std::numeric_limits<int32_t>::max(), op,
           ": the CUDA kernels index rows and tokens with int32, got ", rows, " rows and ", tokens, " tokens");
  const Device dev = token_of_row.device();
  TokenRows tr{Tensor::empty({rows}, DType::I32, dev), Tensor::empty({tokens + 1}, DType::I32, dev)};
  Tensor sorted_keys = Tensor::empty({rows}, DType::I32, dev);
  if (rows > 0) {
    Tensor keys = Tensor::empty({rows}, DType::I32, dev), row_ids = Tensor::empty({rows}, DType::I32, dev);
    dispatch_index(token_of_row.dtype(), op, [&](auto itag) {
      using I = decltype(itag);
      token_keys_kernel<<<grid_for(rows, kThreads), kThreads, 0, stream>>>(
          static_cast<const I*>(token_of_row.raw()), rows, tokens, keys.data<int32_t>(), row_ids.data<int32_t>());
    });
    CUDA_CHECK_LAUNCH(op);
    // Keys lie in [0, tokens]: sort only the bits that can be set.
    int end_bit = 1;
    while (end_bit < 31 && (int64_t(1) << end_bit) <= tokens) ++end_bit;
    size_t temp_bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys.data<int32_t>(),
                                               sorted_keys.data<int32_t>(), row_ids.data<int32_t>(),
                                               tr.sorted_rows.data<int32_t>(), rows, 0, end_bit, stream));
    Tensor temp = Tensor::empty({int64_t(temp_bytes)}, DType::U8, dev);
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw(), temp_bytes, keys.data<int32_t>(),
                                               sorted_keys.data<int32_t>(), row_ids.data<int32_t>(),
                                               tr.sorted_rows.data<int32_t>(), rows, 0, end_bit, stream));
  }
  token_offsets_kernel<<<grid_for(rows + 1, kThreads), kThreads, 0, stream>>>(
      sorted_keys.data<int32_t>(), rows, tokens, tr.offsets.data<int32_t>());
  CUDA_CHECK_LAUNCH(op);
  return tr;
}

// The 16-byte path reads 8 columns a thread: rows of a multiple of 8
// elements, every row pointer aligned.
bool vec8(int64_t hidden, std::initializer_list<const void*> ptrs) {
  if (hidden % 8 != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

// token_of_row [N] between a token-major [T, H] tensor and a row-major [N, H]
// one (ops_moe.cpp checks the same; the harness calls these launchers directly).
void check_rows(const char* op, const Tensor& token_major, const Tensor& row_major, const Tensor& token_of_row) {
  BB_CHECK(token_major.dim() == 2 && row_major.dim() == 2 && token_of_row.dim() == 1 &&
               token_of_row.size(0) == row_major.size(0) && token_major.size(1) == row_major.size(1),
           op, ": expected [T, H] tokens, [N, H] rows and token_of_row [N], got ", shape_str(token_major.shape()), ", ",
           shape_str(row_major.shape()), " and ", shape_str(token_of_row.shape()));
}

void check_activations(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> tensors) {
  const Tensor& first = *tensors.begin()->first;
  check_dtype_in(first, op, tensors.begin()->second, {DType::BF16, DType::F32});
  for (const auto& [t, name] : tensors)
    BB_CHECK(t->dtype() == first.dtype(), op, ": '", name, "' is ", dtype_name(t->dtype()), " but '",
             tensors.begin()->second, "' is ", dtype_name(first.dtype()));
}

// Calls f(P{}) with P the routing weights' element type: float32, or the
// rows' own dtype T (the MoE layer keeps them in the activation dtype, as HF
// rounds routing_weights to hidden_states.dtype).
template <typename T, typename F>
void dispatch_probs(const Tensor& probs, DType rows_dtype, const char* op, F&& f) {
  if (probs.dtype() == DType::F32) f(float{});
  else if (probs.dtype() == rows_dtype) f(T{});
  else BB_FAIL(op, ": probs must be float32 or the rows' dtype ", dtype_name(rows_dtype), ", got ",
               dtype_name(probs.dtype()));
}

// Both summing ops: out [T, H] from rows_in [N, H], weighted by probs when
// given, through rows_by_token when given, else through a sort of token_of_row.
void sum_token_rows(const char* op, const Tensor& rows_in, const Tensor& token_of_row, const Tensor* probs,
                    const Tensor& rows_by_token, Tensor& out) {
  const int64_t tokens = out.size(0), hidden = out.size(1), rows = rows_in.size(0);
  if (tokens * hidden == 0) return;
  DeviceGuard guard(out.device().index);
  cudaStream_t stream = current_stream();
  TokenRows tr;
  if (rows_by_token.defined())
    BB_CHECK(rows_by_token.dtype() == DType::I64 && rows_by_token.dim() == 2 && rows_by_token.size(0) == tokens &&
                 rows_by_token.numel() == rows,
             op, ": rows_by_token must be int64 [", tokens, ", k] with ", rows, " entries, got ",
             dtype_name(rows_by_token.dtype()), " ", shape_str(rows_by_token.shape()));
  else
    tr = token_rows(token_of_row, tokens, op, stream);
  const int64_t per_token = rows_by_token.defined() ? rows_by_token.size(1) : 0;
  const int32_t* offsets = rows_by_token.defined() ? nullptr : tr.offsets.data<int32_t>();
  dispatch_activation(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(rows_in.raw());
    T* o = static_cast<T*>(out.raw());
    const bool v8 = vec8(hidden, {in, o});
    const int blocks = grid_for(tokens * (v8 ? hidden / 8 : hidden), kThreads);
    auto launch = [&](auto kernel, const auto* index, auto p) {
      kernel<<<blocks, kThreads, 0, stream>>>(in, index, offsets, per_token, rows, p, tokens, hidden, o);
    };
    // Rows indexed by R (the sort's int32 or the index's int64), weighted by
    // P's probs when kWeighted.
    auto run = [&](auto weighted, auto ptag, const auto* p) {
      using P = decltype(ptag);
      constexpr bool kWeighted = decltype(weighted)::value;
      auto go = [&](const auto* index) {
        using R = std::remove_cv_t<std::remove_pointer_t<decltype(index)>>;
        if (v8) launch(sum_token_rows_kernel<T, P, R, 8, kWeighted>, index, p);
        else launch(sum_token_rows_kernel<T, P, R, 1, kWeighted>, index, p);
      };
      if (rows_by_token.defined()) go(rows_by_token.data<int64_t>());
      else go(tr.sorted_rows.data<int32_t>());
    };
    if (!probs) {
      run(std::false_type{}, float{}, static_cast<const float*>(nullptr));
      return;
    }
    dispatch_probs<T>(*probs, out.dtype(), op, [&](auto ptag) {
      using P = decltype(ptag);
      run(std::true_type{}, ptag, static_cast<const P*>(probs->raw()));
    });
  });
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace

void moe_permute(const Tensor& x, const Tensor& token_of_row, Tensor& out) {
  const char* op = "moe_permute";
  check_cuda(x, op, "x");
  check_cuda_same(x, token_of_row, op, "token_of_row");
  check_cuda_same(x, out, op, "out");
  check_activations(op, {{&x, "x"}, {&out, "out"}});
  check_rows(op, x, out, token_of_row);
  const int64_t rows = out.size(0), tokens = x.size(0), hidden = x.size(1);
  if (rows * hidden == 0) return;
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  dispatch_activation(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(token_of_row.dtype(), op, [&](auto itag) {
      using I = decltype(itag);
      const T* px = static_cast<const T*>(x.raw());
      const I* tok = static_cast<const I*>(token_of_row.raw());
      T* po = static_cast<T*>(out.raw());
      if (vec8(hidden, {px, po})) {
        permute_kernel<T, I, 8><<<grid_for(rows * hidden / 8, kThreads), kThreads, 0, stream>>>(px, tok, rows, tokens,
                                                                                                 hidden, po);
      } else {
        permute_kernel<T, I, 1><<<grid_for(rows * hidden, kThreads), kThreads, 0, stream>>>(px, tok, rows, tokens,
                                                                                             hidden, po);
      }
    });
  });
  CUDA_CHECK_LAUNCH(op);
}

void moe_permute_backward(const Tensor& dout, const Tensor& token_of_row, Tensor& dx, const Tensor& rows_by_token) {
  const char* op = "moe_permute_backward";
  check_cuda(dout, op, "dout");
  check_cuda_same(dout, token_of_row, op, "token_of_row");
  check_cuda_same(dout, dx, op, "dx");
  check_activations(op, {{&dout, "dout"}, {&dx, "dx"}});
  check_rows(op, dx, dout, token_of_row);
  if (rows_by_token.defined()) check_cuda_same(dout, rows_by_token, op, "rows_by_token");
  sum_token_rows(op, dout, token_of_row, nullptr, rows_by_token, dx);
}

void moe_unpermute(const Tensor& y, const Tensor& token_of_row, const Tensor& probs, Tensor& out,
                   const Tensor& rows_by_token) {
  const char* op = "moe_unpermute";
  check_cuda(y, op, "y");
  check_cuda_same(y, token_of_row, op, "token_of_row");
  check_cuda_same(y, probs, op, "probs");
  check_cuda_same(y, out, op, "out");
  check_activations(op, {{&y, "y"}, {&out, "out"}});
  check_rows(op, out, y, token_of_row);
  check_shape(probs, {y.size(0)}, "moe_unpermute: probs");
  if (rows_by_token.defined()) check_cuda_same(y, rows_by_token, op, "rows_by_token");
  sum_token_rows(op, y, token_of_row, &probs, rows_by_token, out);
}

void moe_unpermute_backward(const Tensor& dout, const Tensor& y, const Tensor& token_of_row, const Tensor& probs,
                            Tensor& dy, Tensor& dprobs) {
  const char* op = "moe_unpermute_backward";
  check_cuda(dout, op, "dout");
  check_cuda_same(dout, y, op, "y");
  check_cuda_same(dout, token_of_row, op, "token_of_row");
  check_cuda_same(dout, probs, op, "probs");
  check_cuda_same(dout, dy, op, "dy");
  check_cuda_same(dout, dprobs, op, "dprobs");
  check_activations(op, {{&dout, "dout"}, {&y, "y"}, {&dy, "dy"}});
  BB_CHECK(dprobs.dtype() == probs.dtype(), op, ": dprobs is ", dtype_name(dprobs.dtype()), " but probs is ",
           dtype_name(probs.dtype()));
  check_rows(op, dout, y, token_of_row);
  check_shape(probs, {y.size(0)}, "moe_unpermute_backward: probs");
  check_shape(dy, y.shape(), "moe_unpermute_backward: dy");
  check_shape(dprobs, {y.size(0)}, "moe_unpermute_backward: dprobs");
  const int64_t rows = y.size(0), tokens = dout.size(0), hidden = dout.size(1);
  if (rows == 0) return;
  DeviceGuard guard(dout.device().index);
  cudaStream_t stream = current_stream();
  const int blocks = grid_for(rows, kThreads / 32);  // a warp per row
  dispatch_activation(dout.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    dispatch_probs<T>(probs, dout.dtype(), op, [&](auto ptag) {
      using P = decltype(ptag);
      dispatch_index(token_of_row.dtype(), op, [&](auto itag) {
        using I = decltype(itag);
        const T* pd = static_cast<const T*>(dout.raw());
        const T* py = static_cast<const T*>(y.raw());
        const I* tok = static_cast<const I*>(token_of_row.raw());
        const P* pp = static_cast<const P*>(probs.raw());
        T* pdy = static_cast<T*>(dy.raw());
        P* pdp = static_cast<P*>(dprobs.raw());
        if (vec8(hidden, {pd, py, pdy})) {
          unpermute_backward_kernel<T, P, I, 8><<<blocks, kThreads, 0, stream>>>(pd, py, tok, pp, rows, tokens,
                                                                                   hidden, pdy, pdp);
        } else {
          unpermute_backward_kernel<T, P, I, 1><<<blocks, kThreads, 0, stream>>>(pd, py, tok, pp, rows, tokens,
                                                                                   hidden, pdy, pdp);
        }
      });
    });
  });
  CUDA_CHECK_LAUNCH(op);
}

void moe_rows_by_token(const Tensor& token_of_row, const Tensor& slot_of_row, Tensor& rows_by_token) {
  const char* op = "moe_rows_by_token";
  check_cuda(rows_by_token, op, "rows_by_token");
  check_cuda_same(rows_by_token, token_of_row, op, "token_of_row");
  check_cuda_same(rows_by_token, slot_of_row, op, "slot_of_row");
  BB_CHECK(rows_by_token.dim() == 2 && rows_by_token.dtype() == DType::I64 && token_of_row.dtype() == DType::I64 &&
               slot_of_row.dtype() == DType::I64 && token_of_row.numel() == rows_by_token.numel() &&
               slot_of_row.numel() == rows_by_token.numel(),
           op, ": expected int64 token_of_row and slot_of_row [T*k] and rows_by_token [T, k], got ",
           shape_str(token_of_row.shape()), ", ", shape_str(slot_of_row.shape()), " and ",
           shape_str(rows_by_token.shape()));
  const int64_t tokens = rows_by_token.size(0), k = rows_by_token.size(1), rows = token_of_row.size(0);
  if (tokens * k == 0) return;
  DeviceGuard guard(rows_by_token.device().index);
  cudaStream_t stream = current_stream();
  int64_t* index = rows_by_token.data<int64_t>();
  CUDA_CHECK(cudaMemsetAsync(index, 0xff, rows_by_token.nbytes(), stream));   // -1: no row yet
  pair_rows_kernel<<<grid_for(rows, kThreads), kThreads, 0, stream>>>(
      token_of_row.data<int64_t>(), slot_of_row.data<int64_t>(), rows, tokens, k, index);
  CUDA_CHECK_LAUNCH(op);
  if (k > 1) {
    sort_token_rows_kernel<<<grid_for(tokens, kThreads), kThreads, 0, stream>>>(tokens, k, index);
    CUDA_CHECK_LAUNCH(op);
  }
}

}  // namespace bb::cuda
