// RMSNorm fused with rotary embedding over rows of one head (Qwen3's q/k
// norms), forward and backward: rope(rmsnorm(x)) in one read of x and one
// write of y, and its backward in one read of dy and x and one write of dx.
// Unfused, the normalised q and k are written, read back by RoPE and written
// again, and the backward makes the same detour.
//
// A team of L = D/8 lanes (8, 16 or 32 for head dims 64, 128, 256) owns one
// row (one head of one token), lane l holding columns [8l, 8l + 8) in
// registers: rmsnorm.cu's team layout with one 8-column group a lane, so the
// row is one 16-byte load a lane (two in float32) and one store. Rotation
// pairs column i with i + D/2, which lane l ^ L/2 holds: the two lanes swap
// their eight values with shuffles, and both use frequencies (l mod L/2) * 8
// onwards. A block's teams take consecutive rows, which span few tokens, so
// the block first computes cos/sin of those tokens' positions into shared
// memory (as rope.cu does once a token), not once an element.
//
// The same bits as the two ops in sequence: the norm's sum of squares, its
// roundings (x * rstd to x's dtype, y to w's) and the backward's row formulas
// are rmsnorm_common.cuh's, run with rmsnorm.cu's team shape for these rows;
// the angle, cos/sin and the rotation are rope_common.cuh's. So y and rstd
// equal rmsnorm_forward then rope_forward, and dx equals rope_backward (its
// output rounded to dy's dtype) then rmsnorm_backward. dw takes rmsnorm.cu's
// fixed order (a lane's rows, the block's teams, then the blocks) over this
// kernel's own grid: the same bits every run, but not necessarily the
// unfused op's, whose grid may differ.
//
// Other head dims (and tensors off the 16-byte grid) run the two CUDA ops in
// sequence: the forward rotates y in place, the backward goes through a
// temporary of dy's shape.
#include <type_traits>

#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"
#include "bumblebee/ops/cuda/rmsnorm_common.cuh"
#include "bumblebee/ops/cuda/rope_common.cuh"

namespace bb::cuda {
namespace {

using namespace rmsnorm;

constexpr int kForwardThreads = 256;

// ---- CUDA kernels ----

// Rows and tokens are counted in 32 bits (the launchers check rows < 2^31):
// the row -> token divisions run a few times a row, and a 64-bit division is
// a long software sequence where a 32-bit one is a handful of instructions.

// cos/sin of tokens [first_token, first_token + tokens) into the block's
// tables, [token - first_token][i] for the kHalf frequencies i.
template <typename T, typename I, int kHalf>
__device__ __forceinline__ void fill_rope_table(const I* __restrict__ positions, const rope::Frequencies& freq,
                                                uint32_t first_token, int tokens, float sign, float* cos_t,
                                                float* sin_t) {
  for (int k = threadIdx.x; k < tokens * kHalf; k += blockDim.x) {
    const float position = float(positions[first_token + k / kHalf]);
    rope::cos_sin<T>(freq, position, k % kHalf, sign, cos_t[k], sin_t[k]);
  }
}

// The tokens of rows [first_row, min(first_row + count, rows)), rows being
// token-major with `heads` rows a token.
__device__ __forceinline__ int tokens_spanned(uint32_t first_row, uint32_t first_token, int count, uint32_t rows,
                                              uint32_t heads) {
  const uint32_t last_row = (first_row + count < rows ? first_row + count : rows) - 1;
  return int(last_row / heads - first_token) + 1;
}

// The team's row v (lane `lane` of L holding columns [8 lane, 8 lane + 8))
// rotated by one token's cos_t/sin_t [D/2] (16-byte aligned): lane l pairs
// with lane l ^ L/2.
template <int L>
__device__ __forceinline__ void rotate_row(const float (&v)[8], const float* cos_t, const float* sin_t, int lane,
                                           unsigned mask, float (&out)[8]) {
  constexpr int kHalfLanes = L / 2;
  const bool upper = lane & kHalfLanes;
  const int i0 = (lane & (kHalfLanes - 1)) * 8;
  float c[8], s[8];
#pragma unroll
  for (int j = 0; j < 8; j += 4) {
    *reinterpret_cast<float4*>(c + j) = *reinterpret_cast<const float4*>(cos_t + i0 + j);
    *reinterpret_cast<float4*>(s + j) = *reinterpret_cast<const float4*>(sin_t + i0 + j);
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float partner = __shfl_xor_sync(mask, v[j], kHalfLanes);
    out[j] = upper ? rope::rotate_hi(partner, v[j], c[j], s[j]) : rope::rotate_lo(v[j], partner, c[j], s[j]);
  }
}

// y = rope(rmsnorm(x)) for rows of D = 8L; one row a team, kForwardThreads / L
// rows a block. TX types x, TW types w and y. The row's loads go out before
// the block computes its cos/sin table, which they then overlap. Eight
// blocks an SM (32 registers a thread) where that needs no spills: all but
// all-float32 rows, whose packs take twice the registers.
template <typename TX, typename TW, typename I, int L>
__global__ void __launch_bounds__(kForwardThreads, sizeof(TX) + sizeof(TW) == 8 ? 6 : 8)
    rmsnorm_rope_forward_kernel(const TX* __restrict__ x, const TW* __restrict__ w, float eps,
                                const I* __restrict__ positions, const __grid_constant__ rope::Frequencies freq,
                                uint32_t rows, uint32_t heads, TW* __restrict__ y, float* __restrict__ rstd) {
  constexpr int kTeams = kForwardThreads / L, kHalf = 4 * L, kDim = 8 * L;
  __shared__ __align__(16) float cos_s[kTeams * kHalf];
  __shared__ __align__(16) float sin_s[kTeams * kHalf];
  const uint32_t first_row = blockIdx.x * kTeams, first_token = first_row / heads;
  const int lane = threadIdx.x & (L - 1);
  const uint32_t row = first_row + threadIdx.x / L;
  const bool in_rows = row < rows;  // alike for a whole team, whose shuffles name only its own lanes
  const unsigned mask = team_mask<L>();
  RowGroups<TX, 1> xv;
  float wv[8], v[8];
  if (in_rows) xv.template load<L>(x + int64_t(row) * kDim, kDim, lane);
  load8(w + lane * 8, wv);
  fill_rope_table<TW, I, kHalf>(positions, freq, first_token,
                                tokens_spanned(first_row, first_token, kTeams, rows, heads), 1.0f, cos_s, sin_s);
  if (in_rows) {
    const float r = row_rstd<L, 1>(xv, kDim, lane, mask, eps);
    if (lane == 0) rstd[row] = r;
    // rmsnorm_forward's y, rounded to its dtype before the rotation.
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = to_float(from_float<TW>(normalise<TX>(xv.at(0, i), r, wv[i])));
  }
  __syncthreads();
  if (!in_rows) return;
  float out[8];
  const uint32_t t = row / heads - first_token;
  rotate_row<L>(v, cos_s + t * kHalf, sin_s + t * kHalf, lane, mask, out);
  store8(y + int64_t(row) * kDim + lane * 8, out);
}

// dx of y = rope(rmsnorm(x)) for rows of D = 8L: dy rotated back in
// registers (rounded to dy's dtype, as rope_backward writes it), then the
// norm's backward of the row. Block b's teams take rows b * teams onwards,
// then every (gridDim.x * teams)-th row after, as rmsnorm.cu's team backward
// does; each turn the block issues its rows' loads, then fills the cos/sin
// tables of those rows. dw_partials [gridDim.x, D] gets the block's partial.
template <typename TX, typename TW, typename I, int L>
__global__ void __launch_bounds__(kBackwardThreads)
    rmsnorm_rope_backward_kernel(const TW* __restrict__ dy, const TX* __restrict__ x, const TW* __restrict__ w,
                                 const float* __restrict__ rstd, const I* __restrict__ positions,
                                 const __grid_constant__ rope::Frequencies freq, uint32_t rows, uint32_t heads,
                                 TX* __restrict__ dx, float* __restrict__ dw_partials) {
  constexpr int kTeams = kBackwardThreads / L, kHalf = 4 * L, kDim = 8 * L;
  __shared__ __align__(16) float cos_s[kTeams * kHalf];
  __shared__ __align__(16) float sin_s[kTeams * kHalf];
  __shared__ float block_dw[kDim];
  const int lane = threadIdx.x & (L - 1), team = threadIdx.x / L;
  const unsigned mask = team_mask<L>();
  RegisterDw<1> dw;
  // first_row + gridDim.x * kTeams stays below 2^32: rows < 2^31 and the grid covers at most the rows.
  for (uint32_t first_row = blockIdx.x * kTeams; first_row < rows; first_row += gridDim.x * kTeams) {
    const uint32_t first_token = first_row / heads, row = first_row + team;
    const bool in_rows = row < rows;
    RowGroups<TX, 1> xv;
    RowGroups<TW, 1> dyv;
    float r = 0.f;
    if (in_rows) {
      xv.template load<L>(x + int64_t(row) * kDim, kDim, lane);
      dyv.template load<L>(dy + int64_t(row) * kDim, kDim, lane);
      r = rstd[row];
    }
    fill_rope_table<TW, I, kHalf>(positions, freq, first_token,
                                  tokens_spanned(first_row, first_token, kTeams, rows, heads), -1.0f, cos_s, sin_s);
    __syncthreads();
    if (in_rows) {
      float d[8], g[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) d[i] = dyv.at(0, i);
      const uint32_t t = row / heads - first_token;
      rotate_row<L>(d, cos_s + t * kHalf, sin_s + t * kHalf, lane, mask, g);
#pragma unroll
      for (int i = 0; i < 8; ++i) g[i] = to_float(from_float<TW>(g[i]));
      backward_row<TX, TW, L, 1>(
          xv, [&](int, int i) { return g[i]; }, w, r, kDim, lane, mask, dw, dx + int64_t(row) * kDim);
    }
    __syncthreads();  // the next turn's tables overwrite these
  }
  block_partial<L, 1, kTeams>(dw, kDim, lane, team, block_dw, dw_partials + int64_t(blockIdx.x) * kDim);
}

// ---- kernel launchers ----

// Calls f(L) as an integral constant for the head dims the fused kernels
// take (64, 128, 256: L = D / 8 lanes a row); returns false for others.
template <typename F>
bool dispatch_lanes(int64_t dim, F&& f) {
  using std::integral_constant;
  switch (dim) {
    case 64: f(integral_constant<int, 8>{}); return true;
    case 128: f(integral_constant<int, 16>{}); return true;
    case 256: f(integral_constant<int, 32>{}); return true;
    default: return false;
  }
}

bool fused_head_dim(int64_t dim) { return dispatch_lanes(dim, [](auto) {}); }

// f(TX{}, TW{}, I{}, lanes) for x's and w's dtypes, position_ids' index type and
// the team width of x's head dim: the four template arguments of both kernels.
template <typename F>
void dispatch_kernel(const Tensor& x, const Tensor& w, const Tensor& position_ids, const char* op, F&& f) {
  dispatch_x_w(x.dtype(), w.dtype(), op, [&](auto xtag, auto wtag) {
    dispatch_index(position_ids.dtype(), op,
                   [&](auto itag) { dispatch_lanes(x.size(2), [&](auto lanes) { f(xtag, wtag, itag, lanes); }); });
  });
}

// The checks both directions share: x [N, heads, D] with D even, w [D],
// rstd [N * heads] float32, position_ids [N]; x and w dtypes as RMSNorm takes them.
void check_shapes(const char* op, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& position_ids) {
  check_cuda(x, op, "x");
  check_cuda_same(x, w, op, "w");
  check_cuda_same(x, rstd, op, "rstd");
  check_cuda_same(x, position_ids, op, "position_ids");
  BB_CHECK(x.dim() == 3, op, ": x must be [N, heads, D], got ", shape_str(x.shape()));
  const int64_t tokens = x.size(0), dim = x.size(2);
  BB_CHECK(dim % 2 == 0, op, ": head dimension ", dim, " is odd");
  BB_CHECK(w.dim() == 1 && w.size(0) == dim, op, ": w has shape ", shape_str(w.shape()), ", expected [", dim, "]");
  BB_CHECK(rstd.numel() == tokens * x.size(1), op, ": rstd has ", rstd.numel(), " elements for ", tokens * x.size(1),
           " rows");
  check_dtype_in(rstd, op, "rstd", {DType::F32});
  BB_CHECK(position_ids.dim() == 1 && position_ids.size(0) == tokens, op, ": position_ids has shape ",
           shape_str(position_ids.shape()), ", expected [", tokens, "]");
  check_x_w_dtypes(x.dtype(), w.dtype(), op);
}

}  // namespace

void rmsnorm_rope_forward(const Tensor& x, const Tensor& w, double eps, const Tensor& position_ids,
                          const Tensor& inv_freq, Tensor& y, Tensor& rstd) {
  const char* op = "rmsnorm_rope_forward";
  check_shapes(op, x, w, rstd, position_ids);
  check_cuda_same(x, y, op, "y");
  BB_CHECK(y.shape() == x.shape(), op, ": y has shape ", shape_str(y.shape()), ", expected x's ",
           shape_str(x.shape()));
  BB_CHECK(y.dtype() == w.dtype(), op, ": y is ", dtype_name(y.dtype()), " but w is ", dtype_name(w.dtype()),
           "; y takes w's dtype");
  const int64_t heads = x.size(1), dim = x.size(2), rows = x.size(0) * heads;
  const rope::Frequencies freq = rope::frequencies(inv_freq, dim / 2, x, op);
  if (!fused_head_dim(dim) || !aligned16(x.raw()) || !aligned16(w.raw()) || !aligned16(y.raw())) {
    rmsnorm_forward(x, w, eps, y, rstd);
    rope_forward(y, position_ids, inv_freq, y);
    return;
  }
  if (rows == 0) return;
  BB_CHECK(rows <= INT32_MAX, op, ": too many rows (", rows, ")");
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  dispatch_kernel(x, w, position_ids, op, [&](auto xtag, auto wtag, auto itag, auto lanes) {
    using TX = decltype(xtag);
    using TW = decltype(wtag);
    using I = decltype(itag);
    constexpr int L = decltype(lanes)::value, kTeams = kForwardThreads / L;
    const int64_t blocks = (rows + kTeams - 1) / kTeams;
    rmsnorm_rope_forward_kernel<TX, TW, I, L><<<unsigned(blocks), kForwardThreads, 0, stream>>>(
        static_cast<const TX*>(x.raw()), static_cast<const TW*>(w.raw()), float(eps),
        static_cast<const I*>(position_ids.raw()), freq, uint32_t(rows), uint32_t(heads), static_cast<TW*>(y.raw()),
        static_cast<float*>(rstd.raw()));
  });
  CUDA_CHECK_LAUNCH(op);
}

void rmsnorm_rope_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           const Tensor& position_ids, const Tensor& inv_freq, Tensor& dx, Tensor& dw) {
  const char* op = "rmsnorm_rope_backward";
  check_shapes(op, x, w, rstd, position_ids);
  check_cuda_same(x, dy, op, "dy");
  check_cuda_same(x, dx, op, "dx");
  check_cuda_same(x, dw, op, "dw");
  BB_CHECK(dy.shape() == x.shape() && dx.shape() == x.shape(), op, ": dy ", shape_str(dy.shape()), " and dx ",
           shape_str(dx.shape()), " must have x's shape ", shape_str(x.shape()));
  BB_CHECK(dw.shape() == w.shape(), op, ": dw has shape ", shape_str(dw.shape()), ", expected w's ",
           shape_str(w.shape()));
  check_dtype_in(dw, op, "dw", {DType::F32, DType::BF16});
  BB_CHECK(dx.dtype() == x.dtype() && dy.dtype() == w.dtype(), op, ": dx takes x's dtype and dy w's, got dy ",
           dtype_name(dy.dtype()), ", x ", dtype_name(x.dtype()), ", w ", dtype_name(w.dtype()), ", dx ",
           dtype_name(dx.dtype()));
  const int64_t heads = x.size(1), dim = x.size(2), rows = x.size(0) * heads;
  const rope::Frequencies freq = rope::frequencies(inv_freq, dim / 2, x, op);
  if (!fused_head_dim(dim) || !aligned16(dy.raw()) || !aligned16(x.raw()) || !aligned16(w.raw()) ||
      !aligned16(dx.raw())) {
    Tensor dnorm = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
    rope_backward(dy, position_ids, inv_freq, dnorm);
    rmsnorm_backward(dnorm, x, w, rstd, dx, dw);
    return;
  }
  if (rows == 0) return;
  BB_CHECK(rows <= INT32_MAX, op, ": too many rows (", rows, ")");
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  Tensor partials;
  dispatch_kernel(x, w, position_ids, op, [&](auto xtag, auto wtag, auto itag, auto lanes) {
    using TX = decltype(xtag);
    using TW = decltype(wtag);
    using I = decltype(itag);
    constexpr int L = decltype(lanes)::value;
    auto kernel = rmsnorm_rope_backward_kernel<TX, TW, I, L>;
    const int blocks = backward_blocks(kernel, rows, kBackwardThreads / L, 0);
    partials = Tensor::empty({int64_t(blocks), dim}, DType::F32, x.device());
    kernel<<<blocks, kBackwardThreads, 0, stream>>>(
        static_cast<const TW*>(dy.raw()), static_cast<const TX*>(x.raw()), static_cast<const TW*>(w.raw()),
        static_cast<const float*>(rstd.raw()), static_cast<const I*>(position_ids.raw()), freq, uint32_t(rows),
        uint32_t(heads), static_cast<TX*>(dx.raw()), static_cast<float*>(partials.raw()));
  });
  CUDA_CHECK_LAUNCH(op);
  add_partials(partials, dw, stream, "rmsnorm_rope_backward (dw)");
}

}  // namespace bb::cuda
