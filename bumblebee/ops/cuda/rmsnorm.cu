// Fused RMSNorm over the last dimension, forward and backward, fp32 math;
// and the residual add with the norm after it (add_rmsnorm_forward / _backward).
//
// Rows of up to 4096 elements (a decoder's hidden size, and the q/k norms
// over head_dim 64-256 with 32x as many rows) take the team kernels: a team
// of T lanes (8, 16 or 32, so short rows share a warp instead of leaving
// lanes idle) owns one row at a time, and lane l holds the row's 8-column
// groups l, l + T, ..., l + (G - 1) T in registers. G is a template argument,
// so a lane issues all of its loads of a row before the first one returns,
// and the row is read once. The backward keeps each lane's share of the
// weight gradient in registers for short rows and in its team's slice of
// shared memory for long ones (rows of 1024 bfloat16 and up, where the
// registers go to the row); the teams of a block then add theirs into one
// per-block partial, team after team.
//
// Longer rows and unaligned or odd-sized ones take the general kernels: one
// warp per row with a runtime column loop; the backward accumulates each
// warp's rows into its own shared-memory slice of dw (a lane owns fixed
// columns, so no atomics) and the block adds its slices in warp order. A
// slice is a row of floats, so warps per block shrink as rows grow.
//
// Either way the weight gradient repeats bitwise: row r goes to team (warp)
// r % (teams in the grid) whatever the timing, sums run in row order, then
// team order, and a last kernel adds the per-block partials in a fixed order.
//
// The kernels take x's dtype (TX, also dx's) apart from w's (TW, also y's and
// dy's), so a float32 residual stream (Megatron's fp32_residual_connection)
// can be normalised into bfloat16 activations. A lane's 8-column group is one
// 16-byte access in bfloat16 and two in float32 (load8/store8).
//
// The residual add (a pre-norm layer's h = x + branch, then the norm of h)
// runs in the team forward: the lane adds the branch onto its packs of x,
// rounds them to x's dtype, writes them as h and normalises them, so h is
// never read back. Its backward is the team backward with the residual
// gradient added where dx is written (dx rounded first, as rmsnorm_backward
// rounds it, then the sum as add_ rounds it), launched on rmsnorm_backward's
// grid so dw's sums are its sums. Both take rmsnorm_forward's / _backward's
// team shape for the row, so every output is the two unfused ops' bits; rows
// the team kernels do not take run the two ops.
//
// The team kernels' row math, the per-block dw partials and their fixed-order
// sum live in rmsnorm_common.cuh, shared with the fused RMSNorm + RoPE kernels
// (rmsnorm_rope.cu).
#include <algorithm>
#include <string>
#include <type_traits>

#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"
#include "bumblebee/ops/cuda/rmsnorm_common.cuh"

namespace bb::cuda {
namespace {

using namespace rmsnorm;

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * 32;

// Calls f(col, count) for this lane's columns of a row of n: groups of 8 when
// VEC, single columns otherwise.
template <bool VEC, typename F>
__device__ __forceinline__ void for_lane_columns(int64_t n, int lane, F f) {
  if constexpr (VEC) {
    for (int64_t c = int64_t(lane) * 8; c < n; c += 32 * 8) f(c);
  } else {
    for (int64_t c = lane; c < n; c += 32) f(c);
  }
}

template <typename T, bool VEC>
__device__ __forceinline__ void load_cols(const T* p, float (&v)[8]) {
  if constexpr (VEC) load8(p, v);
  else v[0] = to_float(*p);
}

template <typename T, bool VEC>
__device__ __forceinline__ void store_cols(T* p, const float (&v)[8]) {
  if constexpr (VEC) store8(p, v);
  else *p = from_float<T>(v[0]);
}

// ---- team kernels: rows of up to 4096 elements, held in registers ----

// Groups of 8 columns a lane may hold in the backward, where it keeps x's and
// dy's packs: 16 (n <= 4096 at T = 32) when both are bfloat16, 8 when either
// is float32 (its packs take twice the registers); up to 128 registers.
template <typename TX, typename TW>
constexpr int kMaxGroups = sizeof(TX) + sizeof(TW) == 4 ? 16 : 8;

// From 4 groups a lane on, the lane's dw share (8 floats a group) goes to
// shared memory, which leaves the registers to the row's packs: a bfloat16
// row of 2048 takes 167 registers instead of 228, and rows of 4096 (and of
// 2048 with a float32 x) fit at all.
template <int G>
constexpr bool kSharedDw = G >= 4;

// Dynamic shared memory of a team backward block: block_dw [n], or with
// SharedDw one slice of n floats a team.
template <int T, int G>
constexpr size_t backward_smem(int64_t n) {
  return size_t(n) * sizeof(float) * (kSharedDw<G> ? kBackwardThreads / T : 1);
}

// y and rstd of the team's row `row`, held in xv.
template <typename TX, typename TW, int T, int G>
__device__ __forceinline__ void normalise_row(const RowGroups<TX, G>& xv, const TW* __restrict__ w, float eps,
                                              int64_t row, int64_t n, int lane, TW* __restrict__ y,
                                              float* __restrict__ rstd) {
  const float r = row_rstd<T, G>(xv, n, lane, team_mask<T>(), eps);
  if (lane == 0) rstd[row] = r;
  for_lane_groups<T, G>(n, lane, [&](int g, int64_t c) {
    float wv[8], out[8];
    load8(w + c, wv);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = normalise<TX>(xv.at(g, i), r, wv[i]);
    store8(y + row * n + c, out);
  });
}

template <typename TX, typename TW, int T, int G>
__global__ void __launch_bounds__(kThreads) rmsnorm_forward_team_kernel(const TX* __restrict__ x,
                                                                      const TW* __restrict__ w, float eps,
                                                                      int64_t rows, int64_t n, TW* __restrict__ y,
                                                                      float* __restrict__ rstd) {
  const int lane = threadIdx.x & (T - 1);
  const int64_t row = int64_t(blockIdx.x) * (kThreads / T) + threadIdx.x / T;
  if (row >= rows) return;  // the whole team leaves; its shuffles name only its own lanes
  RowGroups<TX, G> xv;
  xv.template load<T>(x + row * n, n, lane);
  normalise_row<TX, TW, T, G>(xv, w, eps, row, n, lane, y, rstd);
}

// h = x + branch (rounded to x's dtype, as add rounds it), then the norm of
// that h: the lane adds the branch onto its packs of x in registers, writes
// them out as h and normalises them, as rmsnorm_forward_team_kernel does the
// row it reads back.
template <typename TX, typename TW, int T, int G>
__global__ void __launch_bounds__(kThreads)
    add_rmsnorm_forward_team_kernel(const TX* __restrict__ x, const TW* __restrict__ branch, const TW* __restrict__ w,
                                    float eps, int64_t rows, int64_t n, TX* __restrict__ h, TW* __restrict__ y,
                                    float* __restrict__ rstd) {
  constexpr int N = Pack16<TX>::N;
  const int lane = threadIdx.x & (T - 1);
  const int64_t row = int64_t(blockIdx.x) * (kThreads / T) + threadIdx.x / T;
  if (row >= rows) return;
  RowGroups<TX, G> hv;
  hv.template load<T>(x + row * n, n, lane);
  for_lane_groups<T, G>(n, lane, [&](int g, int64_t c) {
    float bv[8];
    load8(branch + row * n + c, bv);
#pragma unroll
    for (int k = 0; k < RowGroups<TX, G>::kPacks; ++k) {
#pragma unroll
      for (int j = 0; j < N; ++j) hv.p[g][k].v[j] = from_float<TX>(__fadd_rn(hv.at(g, k * N + j), bv[k * N + j]));
      store_pack(h + row * n + c + k * N, hv.p[g][k]);
    }
  });
  normalise_row<TX, TW, T, G>(hv, w, eps, row, n, lane, y, rstd);
}

// The general backward's formulas (backward_row) with the row and the lane's
// dw share on chip (RegisterDw, or SharedDw in its team's slice). Team t of
// block b takes rows b * teams + t, then every (gridDim.x * teams)-th row
// after it; at the end block_partial adds the teams' shares in team order.
// With kResidual (add_rmsnorm_backward) dx takes residual_grad on top.
template <typename TX, typename TW, int T, int G, bool kResidual>
__global__ void __launch_bounds__(kBackwardThreads)
    rmsnorm_backward_team_kernel(const TW* __restrict__ dy, const TX* __restrict__ x, const TW* __restrict__ w,
                                 const float* __restrict__ rstd, const TX* __restrict__ residual_grad, int64_t rows,
                                 int64_t n, TX* __restrict__ dx, float* __restrict__ dw_partials) {
  extern __shared__ __align__(16) float dw_smem[];  // backward_smem<T, G>(n)
  constexpr int kTeams = kBackwardThreads / T;
  const int lane = threadIdx.x & (T - 1), team = threadIdx.x / T;
  const unsigned mask = team_mask<T>();
  float* partial = dw_partials + int64_t(blockIdx.x) * n;
  auto team_rows = [&](auto& dw) {
    for (int64_t row = int64_t(blockIdx.x) * kTeams + team; row < rows; row += int64_t(gridDim.x) * kTeams) {
      RowGroups<TX, G> xv;
      RowGroups<TW, G> gv;
      xv.template load<T>(x + row * n, n, lane);
      gv.template load<T>(dy + row * n, n, lane);
      backward_row<TX, TW, T, G, kResidual>(
          xv, [&](int g, int i) { return gv.at(g, i); }, w, rstd[row], n, lane, mask, dw, dx + row * n,
          kResidual ? residual_grad + row * n : nullptr);
    }
  };
  if constexpr (kSharedDw<G>) {
    SharedDw dw{dw_smem + team * n};
    for_lane_groups<T, G>(n, lane, [&](int, int64_t c) { dw.zero(c); });
    team_rows(dw);
    block_partial<kTeams>(dw_smem, n, partial);
  } else {
    RegisterDw<G> dw;
    team_rows(dw);
    block_partial<T, G, kTeams>(dw, n, lane, team, dw_smem, partial);
  }
}

// Runs the team backward over `rows` on rmsnorm_backward's grid (that of the
// kernel without the residual gradient, so that add_rmsnorm_backward sums
// each block's rows as rmsnorm_backward does and dw is its bits too), and
// returns the blocks' dw partials [blocks, n].
template <typename TX, typename TW, int T, int G, bool kResidual>
Tensor team_backward(const TW* dy, const TX* x, const TW* w, const float* rstd, const TX* residual_grad, int64_t rows,
                     int64_t n, TX* dx, Device device, cudaStream_t stream) {
  auto grid_kernel = rmsnorm_backward_team_kernel<TX, TW, T, G, false>;
  auto kernel = rmsnorm_backward_team_kernel<TX, TW, T, G, kResidual>;
  const size_t smem = backward_smem<T, G>(n);
  if (smem > 48 * 1024) {
    CUDA_CHECK(cudaFuncSetAttribute(grid_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  const int blocks = backward_blocks(grid_kernel, rows, kBackwardThreads / T, smem);
  Tensor partials = Tensor::empty({int64_t(blocks), n}, DType::F32, device);
  kernel<<<blocks, kBackwardThreads, smem, stream>>>(dy, x, w, rstd, residual_grad, rows, n, dx,
                                                     static_cast<float*>(partials.raw()));
  return partials;
}

// ---- general kernels: any row length and alignment ----

// TX is the dtype of x (and dx), TW that of w (and y, dy): equal, or float32
// x with bfloat16 w when the residual stream is kept in float32.
template <typename TX, typename TW, bool VEC>
__global__ void rmsnorm_forward_kernel(const TX* __restrict__ x, const TW* __restrict__ w, float eps, int64_t rows,
                                       int64_t n, TW* __restrict__ y, float* __restrict__ rstd) {
  constexpr int W = VEC ? 8 : 1;
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const TX* xr = x + row * n;
  TW* yr = y + row * n;
  float ss = 0.f;
  for_lane_columns<VEC>(n, lane, [&](int64_t c) {
    float v[8];
    load_cols<TX, VEC>(xr + c, v);
#pragma unroll
    for (int i = 0; i < W; ++i) ss += v[i] * v[i];
  });
  ss = warp_sum(ss);
  const float r = 1.0f / sqrtf(ss / float(n) + eps);
  if (lane == 0) rstd[row] = r;
  for_lane_columns<VEC>(n, lane, [&](int64_t c) {
    float v[8], g[8], out[8];
    load_cols<TX, VEC>(xr + c, v);
    load_cols<TW, VEC>(w + c, g);
#pragma unroll
    for (int i = 0; i < W; ++i) out[i] = normalise<TX>(v[i], r, g[i]);
    store_cols<TW, VEC>(yr + c, out);
  });
}

// Shared-memory index of column c in a dw slice: one float of padding per
// 32 spreads a lane's 8 consecutive columns (lanes 8 apart) over all banks.
__device__ __host__ __forceinline__ int64_t padded(int64_t c) { return c + (c >> 5); }

// dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * w, xhat = x * rstd;
// dw_partial[block] = sum over the block's rows of dy * xhat (xhat rounded
// to x's dtype as in the forward). TX types x and dx, TW types dy and w.
// Row r goes to warp r % (gridDim.x * warps) whatever the timing, and every
// sum runs in row order within a warp, then warp order: the result is fixed.
template <typename TX, typename TW, bool VEC>
__global__ void rmsnorm_backward_kernel(const TW* __restrict__ dy, const TX* __restrict__ x, const TW* __restrict__ w,
                                        const float* __restrict__ rstd, int64_t rows, int64_t n, TX* __restrict__ dx,
                                        float* __restrict__ dw_partials) {
  extern __shared__ float dw_acc[];  // [warps][padded(n) + 1]
  constexpr int W = VEC ? 8 : 1;
  const int warps = int(blockDim.x >> 5);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t slice = padded(n) + 1;
  float* my_acc = dw_acc + warp * slice;
  for (int64_t c = threadIdx.x; c < int64_t(warps) * slice; c += blockDim.x) dw_acc[c] = 0.f;
  __syncthreads();
  for (int64_t row = int64_t(blockIdx.x) * warps + warp; row < rows; row += int64_t(gridDim.x) * warps) {
    const TX* xr = x + row * n;
    const TW* dyr = dy + row * n;
    const float r = rstd[row];
    float dot = 0.f;  // sum of g * xhat over the row
    for_lane_columns<VEC>(n, lane, [&](int64_t c) {
      float xv[8], gv[8], wv[8];
      load_cols<TX, VEC>(xr + c, xv);
      load_cols<TW, VEC>(dyr + c, gv);
      load_cols<TW, VEC>(w + c, wv);
#pragma unroll
      for (int i = 0; i < W; ++i) {
        const float xhat = xv[i] * r;
        dot += gv[i] * wv[i] * xhat;
        my_acc[padded(c + i)] += gv[i] * to_float(from_float<TX>(xhat));
      }
    });
    dot = warp_sum(dot);
    const float mean_dot = dot / float(n);
    for_lane_columns<VEC>(n, lane, [&](int64_t c) {
      float xv[8], gv[8], wv[8], out[8];
      load_cols<TX, VEC>(xr + c, xv);
      load_cols<TW, VEC>(dyr + c, gv);
      load_cols<TW, VEC>(w + c, wv);
#pragma unroll
      for (int i = 0; i < W; ++i) out[i] = r * (gv[i] * wv[i] - xv[i] * r * mean_dot);
      store_cols<TX, VEC>(dx + row * n + c, out);
    });
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    float s = 0.f;
    for (int k = 0; k < warps; ++k) s += dw_acc[k * slice + padded(c)];
    dw_partials[int64_t(blockIdx.x) * n + c] = s;
  }
}

int64_t row_count(const Tensor& x, int64_t n) { return n == 0 ? 0 : x.numel() / n; }

// The team kernels' shape for rows of n: T lanes a row and G groups of 8
// columns a lane (G a power of two, at most max_groups), or lanes = 0 when
// the rows take the general kernels (shorter than 64, not in 8-column
// groups, or longer than 32 * 8 * max_groups).
struct TeamShape {
  int lanes = 0, groups = 0;
};

TeamShape team_shape(int64_t n, int max_groups) {
  if (n % 8 != 0 || n < 64) return {};
  const int64_t columns8 = n / 8;
  const int lanes = columns8 >= 32 ? 32 : columns8 >= 16 ? 16 : 8;
  const int64_t needed = (columns8 + lanes - 1) / lanes;
  int groups = 1;
  while (groups < needed) groups *= 2;
  if (groups > max_groups) return {};
  return {lanes, groups};
}

// Calls f(T, G) as integral constants for a shape team_shape returned with
// max_groups <= MaxG. Teams narrower than a warp only occur with G <= 2.
template <int MaxG, typename F>
void dispatch_team(TeamShape shape, F&& f) {
  using std::integral_constant;
  auto wide = [&](auto g) {
    if constexpr (decltype(g)::value <= MaxG) f(integral_constant<int, 32>{}, g);
  };
  if (shape.lanes < 32) {
    auto narrow = [&](auto t) {
      if (shape.groups == 1) f(t, integral_constant<int, 1>{});
      else f(t, integral_constant<int, 2>{});
    };
    if (shape.lanes == 8) narrow(integral_constant<int, 8>{});
    else narrow(integral_constant<int, 16>{});
    return;
  }
  switch (shape.groups) {
    case 1: wide(integral_constant<int, 1>{}); return;
    case 2: wide(integral_constant<int, 2>{}); return;
    case 4: wide(integral_constant<int, 4>{}); return;
    case 8: wide(integral_constant<int, 8>{}); return;
    default: wide(integral_constant<int, 16>{}); return;
  }
}

// Forward: a lane holds x's packs only, so 16 groups (n = 4096) fit in
// bfloat16 and 8 in float32.
template <typename TX>
constexpr int kForwardMaxGroups = sizeof(TX) == 2 ? 16 : 8;

// What every RMSNorm op checks alike: x on CUDA with w and rstd beside it,
// w [n], rstd float32 with a value a row, and the x / w dtype pair. Returns
// the row count.
int64_t check_norm_args(const char* op, const Tensor& x, const Tensor& w, const Tensor& rstd) {
  check_cuda(x, op, "x");
  check_cuda_same(x, w, op, "w");
  check_cuda_same(x, rstd, op, "rstd");
  BB_CHECK(x.dim() >= 1, op, ": x must have a last dimension");
  const int64_t n = x.size(-1), rows = row_count(x, n);
  const std::string name(op);
  check_shape(w, {n}, (name + ": w").c_str());
  BB_CHECK(rstd.numel() == rows, op, ": rstd has ", rstd.numel(), " elements for ", rows, " rows");
  check_dtype(rstd, DType::F32, (name + ": rstd").c_str());
  check_x_w_dtypes(x.dtype(), w.dtype(), op);
  return rows;
}

// The arguments both forward ops take: check_norm_args' and y, shaped as x.
int64_t check_forward_args(const char* op, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd) {
  const int64_t rows = check_norm_args(op, x, w, rstd);
  check_cuda_same(x, y, op, "y");
  check_shape(y, x.shape(), (std::string(op) + ": y").c_str());
  return rows;
}

// The arguments both backward ops take: check_norm_args', dy and dx shaped as
// x, and dw as w in float32 or bfloat16.
int64_t check_backward_args(const char* op, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                            const Tensor& dx, const Tensor& dw) {
  const int64_t rows = check_norm_args(op, x, w, rstd);
  check_cuda_same(x, dy, op, "dy");
  check_cuda_same(x, dx, op, "dx");
  check_cuda_same(x, dw, op, "dw");
  const std::string name(op);
  check_shape(dy, x.shape(), (name + ": dy").c_str());
  check_shape(dx, x.shape(), (name + ": dx").c_str());
  check_shape(dw, {x.size(-1)}, (name + ": dw").c_str());
  check_dtype_in(dw, op, "dw", {DType::F32, DType::BF16});
  return rows;
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, Tensor& y, Tensor& rstd) {
  const char* op = "rmsnorm_forward";
  const int64_t rows = check_forward_args(op, x, w, y, rstd), n = x.size(-1);
  BB_CHECK(y.dtype() == w.dtype(), op, ": y is ", dtype_name(y.dtype()), " but w is ", dtype_name(w.dtype()),
           "; y takes w's dtype");
  if (rows == 0) return;
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  BB_CHECK(blocks <= INT32_MAX, op, ": too many rows (", rows, ")");
  dispatch_x_w(x.dtype(), w.dtype(), op, [&](auto xtag, auto wtag) {
    using TX = decltype(xtag);
    using TW = decltype(wtag);
    const TX* px = static_cast<const TX*>(x.raw());
    const TW* pw = static_cast<const TW*>(w.raw());
    TW* py = static_cast<TW*>(y.raw());
    float* pr = static_cast<float*>(rstd.raw());
    const bool vec = n % 8 == 0 && aligned16(px) && aligned16(pw) && aligned16(py);
    const TeamShape team = vec ? team_shape(n, kForwardMaxGroups<TX>) : TeamShape{};
    if (team.lanes > 0) {
      dispatch_team<kForwardMaxGroups<TX>>(team, [&](auto t, auto g) {
        constexpr int T = decltype(t)::value, G = decltype(g)::value;
        const int64_t team_blocks = (rows + kThreads / T - 1) / (kThreads / T);
        BB_CHECK(team_blocks <= INT32_MAX, op, ": too many rows (", rows, ")");
        rmsnorm_forward_team_kernel<TX, TW, T, G>
            <<<unsigned(team_blocks), kThreads, 0, stream>>>(px, pw, float(eps), rows, n, py, pr);
      });
    } else if (vec) {
      rmsnorm_forward_kernel<TX, TW, true>
          <<<unsigned(blocks), kThreads, 0, stream>>>(px, pw, float(eps), rows, n, py, pr);
    } else {
      rmsnorm_forward_kernel<TX, TW, false>
          <<<unsigned(blocks), kThreads, 0, stream>>>(px, pw, float(eps), rows, n, py, pr);
    }
  });
  CUDA_CHECK_LAUNCH(op);
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx, Tensor& dw) {
  const char* op = "rmsnorm_backward";
  const int64_t rows = check_backward_args(op, dy, x, w, rstd, dx, dw), n = x.size(-1);
  BB_CHECK(dx.dtype() == x.dtype() && dy.dtype() == w.dtype(), op, ": dx takes x's dtype and dy w's, got dy ",
           dtype_name(dy.dtype()), ", x ", dtype_name(x.dtype()), ", w ", dtype_name(w.dtype()), ", dx ",
           dtype_name(dx.dtype()));
  if (rows == 0) return;
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  const int sms = device_properties().multiProcessorCount;
  Tensor partials;
  dispatch_x_w(x.dtype(), w.dtype(), op, [&](auto xtag, auto wtag) {
    using TX = decltype(xtag);
    using TW = decltype(wtag);
    const TW* pdy = static_cast<const TW*>(dy.raw());
    const TX* px = static_cast<const TX*>(x.raw());
    const TW* pw = static_cast<const TW*>(w.raw());
    TX* pdx = static_cast<TX*>(dx.raw());
    const float* pr = static_cast<const float*>(rstd.raw());
    const bool vec = n % 8 == 0 && aligned16(pdy) && aligned16(px) && aligned16(pw) && aligned16(pdx);
    const TeamShape team = vec ? team_shape(n, kMaxGroups<TX, TW>) : TeamShape{};
    if (team.lanes > 0) {
      // As many blocks as are resident at once, each looping over its teams'
      // rows, so each block's dw partial covers many rows.
      dispatch_team<kMaxGroups<TX, TW>>(team, [&](auto t, auto g) {
        partials = team_backward<TX, TW, decltype(t)::value, decltype(g)::value, false>(pdy, px, pw, pr, nullptr, rows,
                                                                                        n, pdx, x.device(), stream);
      });
      return;
    }
    // Up to 8 warps per block, as many as leave two blocks' dw slices (and
    // the shared memory the driver reserves per block) room in one SM: the
    // grid is two blocks per SM.
    const size_t slice_bytes = size_t(padded(n) + 1) * sizeof(float);
    const size_t smem_budget =
        std::min<size_t>(device_properties().sharedMemPerBlockOptin,
                         device_properties().sharedMemPerMultiprocessor / 2 - device_properties().reservedSharedMemPerBlock);
    BB_CHECK(slice_bytes <= size_t(device_properties().sharedMemPerBlockOptin), op, ": rows of ", n,
             " elements exceed the shared memory of one block");
    const int warps = int(std::clamp<size_t>(smem_budget / slice_bytes, 1, kWarpsPerBlock));
    const size_t smem = slice_bytes * size_t(warps);
    const int blocks = int(std::min<int64_t>((rows + warps - 1) / warps, int64_t(sms) * 2));
    partials = Tensor::empty({int64_t(blocks), n}, DType::F32, x.device());
    auto launch = [&](auto kernel) {
      if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      kernel<<<blocks, warps * 32, smem, stream>>>(pdy, px, pw, pr, rows, n, pdx, static_cast<float*>(partials.raw()));
    };
    if (vec) launch(rmsnorm_backward_kernel<TX, TW, true>);
    else launch(rmsnorm_backward_kernel<TX, TW, false>);
  });
  CUDA_CHECK_LAUNCH(op);
  add_partials(partials, dw, stream, "rmsnorm_backward (dw)");
}

// ---- residual add with RMSNorm ----

void add_rmsnorm_forward(const Tensor& x, const Tensor& branch, const Tensor& w, double eps, Tensor& h, Tensor& y,
                         Tensor& rstd) {
  const char* op = "add_rmsnorm_forward";
  const int64_t rows = check_forward_args(op, x, w, y, rstd), n = x.size(-1);
  check_cuda_same(x, branch, op, "branch");
  check_cuda_same(x, h, op, "h");
  check_shape(branch, x.shape(), "add_rmsnorm_forward: branch");
  check_shape(h, x.shape(), "add_rmsnorm_forward: h");
  // The residual stream (x, h) keeps its dtype; a block's output (branch)
  // and the norm's (y) are activations of the weight's.
  BB_CHECK(h.dtype() == x.dtype() && branch.dtype() == w.dtype() && y.dtype() == w.dtype(), op,
           ": h takes x's dtype, branch and y w's, got x ", dtype_name(x.dtype()), ", branch ",
           dtype_name(branch.dtype()), ", w ", dtype_name(w.dtype()), ", h ", dtype_name(h.dtype()), ", y ",
           dtype_name(y.dtype()));
  if (rows == 0) return;
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  bool fused = false;
  dispatch_x_w(x.dtype(), w.dtype(), op, [&](auto xtag, auto wtag) {
    using TX = decltype(xtag);
    using TW = decltype(wtag);
    const TX* px = static_cast<const TX*>(x.raw());
    const TW* pb = static_cast<const TW*>(branch.raw());
    const TW* pw = static_cast<const TW*>(w.raw());
    TX* ph = static_cast<TX*>(h.raw());
    TW* py = static_cast<TW*>(y.raw());
    const bool vec = n % 8 == 0 && aligned16(px) && aligned16(pb) && aligned16(pw) && aligned16(ph) && aligned16(py);
    // rmsnorm_forward's team shape for these rows, so rstd and y are its bits.
    const TeamShape team = vec ? team_shape(n, kForwardMaxGroups<TX>) : TeamShape{};
    if (team.lanes == 0) return;
    dispatch_team<kForwardMaxGroups<TX>>(team, [&](auto t, auto g) {
      constexpr int T = decltype(t)::value, G = decltype(g)::value;
      const int64_t team_blocks = (rows + kThreads / T - 1) / (kThreads / T);
      BB_CHECK(team_blocks <= INT32_MAX, op, ": too many rows (", rows, ")");
      add_rmsnorm_forward_team_kernel<TX, TW, T, G><<<unsigned(team_blocks), kThreads, 0, stream>>>(
          px, pb, pw, float(eps), rows, n, ph, py, static_cast<float*>(rstd.raw()));
    });
    fused = true;
  });
  if (!fused) {
    // Rows the team kernels do not take: the two ops, which these are.
    add(x, branch, h);
    rmsnorm_forward(h, w, eps, y, rstd);
    return;
  }
  CUDA_CHECK_LAUNCH(op);
}

void add_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                          const Tensor& residual_grad, Tensor& dx, Tensor& dw) {
  const char* op = "add_rmsnorm_backward";
  const int64_t rows = check_backward_args(op, dy, x, w, rstd, dx, dw), n = x.size(-1);
  check_cuda_same(x, residual_grad, op, "residual_grad");
  check_shape(residual_grad, x.shape(), "add_rmsnorm_backward: residual_grad");
  BB_CHECK(dx.dtype() == x.dtype() && residual_grad.dtype() == x.dtype() && dy.dtype() == w.dtype(), op,
           ": dx and residual_grad take x's dtype and dy w's, got dy ", dtype_name(dy.dtype()), ", x ",
           dtype_name(x.dtype()), ", w ", dtype_name(w.dtype()), ", residual_grad ", dtype_name(residual_grad.dtype()),
           ", dx ", dtype_name(dx.dtype()));
  if (rows == 0) return;
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream();
  Tensor partials;
  dispatch_x_w(x.dtype(), w.dtype(), op, [&](auto xtag, auto wtag) {
    using TX = decltype(xtag);
    using TW = decltype(wtag);
    const TW* pdy = static_cast<const TW*>(dy.raw());
    const TX* px = static_cast<const TX*>(x.raw());
    const TW* pw = static_cast<const TW*>(w.raw());
    const TX* pres = static_cast<const TX*>(residual_grad.raw());
    TX* pdx = static_cast<TX*>(dx.raw());
    const bool vec =
        n % 8 == 0 && aligned16(pdy) && aligned16(px) && aligned16(pw) && aligned16(pres) && aligned16(pdx);
    const TeamShape team = vec ? team_shape(n, kMaxGroups<TX, TW>) : TeamShape{};
    if (team.lanes == 0) return;
    dispatch_team<kMaxGroups<TX, TW>>(team, [&](auto t, auto g) {
      partials = team_backward<TX, TW, decltype(t)::value, decltype(g)::value, true>(
          pdy, px, pw, static_cast<const float*>(rstd.raw()), pres, rows, n, pdx, x.device(), stream);
    });
  });
  if (!partials.defined()) {
    // Rows the team kernels do not take: the two ops, which these are.
    rmsnorm_backward(dy, x, w, rstd, dx, dw);
    add_(dx, residual_grad, 1.0);
    return;
  }
  CUDA_CHECK_LAUNCH(op);
  add_partials(partials, dw, stream, "add_rmsnorm_backward (dw)");
}

}  // namespace bb::cuda
