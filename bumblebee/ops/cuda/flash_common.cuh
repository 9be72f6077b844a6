// Building blocks of our flash attention kernels: the tensor-core and
// shared-memory instructions (mma.sync m16n8k16 bf16, ldmatrix, cp.async) as
// thin wrappers, the tile loader, and the kernel parameters.
//
// Fragment layouts of mma.sync.m16n8k16 (PTX ISA), with g = lane / 4 and
// t = lane % 4:
//   A 16x16 (row): a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B 16x8 (col):  b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C 16x8 fp32:   c0,c1 (g, 2t..2t+1)   c2,c3 (g+8, 2t..2t+1)
// ldmatrix.x4 loads four 8x8 bf16 matrices whose row addresses come from
// lanes 0-7, 8-15, 16-23, 24-31; register i of a lane holds row g, columns
// 2t..2t+1 of matrix i (with .trans: row 2t..2t+1, column g). The C fragments
// of two adjacent 8-column blocks therefore form an A fragment directly,
// which is how P and dS feed the next product without shared memory.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

namespace bb::cuda::flash {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 128;  // 4 warps
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

#ifdef BB_WITH_CUTLASS
// Whether flash calls on this device go to the sm_90a kernels
// (cutlass/flash_forward_sm90.h, cutlass/flash_backward_sm90.h) for the head
// dims they take: compute capability 9.0 and BB_FLASH_SM90 unset, empty or 1
// (0 keeps the FlashAttention-2 kernels; anything else is an error). Read at
// every call; defined in flash_forward.cu.
bool sm90_kernels_selected();
#endif

// Shared-memory row stride for a tile with D columns: 16 bytes of padding
// make the 8 rows an ldmatrix reads start in 8 different bank groups.
template <int D>
constexpr int smem_stride() { return D + 8; }

// dqk is the q/k head dim, dv the v / out head dim (they differ in
// multi-head latent attention).
struct Params {
  const bf16* q;   // [Tq, Hq, dqk]
  const bf16* k;   // [Tkv, Hkv, dqk]
  const bf16* v;   // [Tkv, Hkv, dv]
  const int* cu_seqlens_q;   // [S + 1]
  const int* cu_seqlens_kv;  // [S + 1]
  // Causal with the diagonal bottom-right: query i of a sequence with Lq
  // queries and Lkv keys sees keys j <= i + Lkv - Lq. Else every key.
  bool causal;
  int heads_q, heads_kv, head_dim_qk, head_dim_v;
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e): scores go through exp2
  // forward
  bf16* out;   // [Tq, Hq, dv]
  float* lse;  // [Tq, Hq]
  // backward
  const bf16* dout;   // [Tq, Hq, dv]
  const float* lse_in;
  const float* dsum;  // [Tq, Hq]: rowsum(dout * out)
  float* dq_accum;    // [Tq, Hq, dqk], fp32, zeroed
  bf16* dk;           // [Tkv, Hkv, dqk]
  bf16* dv;           // [Tkv, Hkv, dv]
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy; when !valid the 16 bytes are zero-filled and
// nothing is read (src must still be a mapped address).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 4 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

// d += a * b on the tensor cores, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a bf16x2 register, `lo` in the low half (the lower column).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// A fragments for a 16 x 16 slice (columns 16*kk..) built from the C
// fragments c[2kk], c[2kk+1] of a 16 x (8 * 2K) accumulator.
template <int K>
__device__ __forceinline__ void c_to_a(const float (&c)[2 * K][4], uint32_t (&a)[K][4]) {
#pragma unroll
  for (int kk = 0; kk < K; ++kk) {
    a[kk][0] = pack_bf16(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = pack_bf16(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = pack_bf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = pack_bf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

// Loads rows [row0, row0 + ROWS) of a [rows, stride] bf16 matrix (columns
// [0, head_dim) of each row, head_dim <= D) into a ROWS x D shared tile; rows at or past
// `valid_rows` and columns past head_dim are zero-filled, so padding never
// contributes to a product (and never brings in NaN from outside the tensor).
template <int ROWS, int D>
__device__ __forceinline__ void load_tile(bf16* smem, const bf16* gmem, int64_t row_stride, int row0, int valid_rows,
                                          int head_dim) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr int S = smem_stride<D>();
  for (int c = threadIdx.x; c < ROWS * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = row0 + r < valid_rows && col < head_dim;
    const bf16* src = valid ? gmem + int64_t(row0 + r) * row_stride + col : gmem;
    cp_async_16(smem + r * S + col, src, valid);
  }
}


// Calls f(std::integral_constant<int, DQK>{}, std::integral_constant<int, DV>{})
// with the tile head dims (64, 64), (128, 128) or (192, 128) that hold
// head_dim_qk and head_dim_v (the caller checks they fit 192 and 128); the
// columns past the real head dims are zero-filled in shared memory.
template <typename F>
void dispatch_head_dims(int head_dim_qk, int head_dim_v, F&& f) {
  if (head_dim_qk <= 64 && head_dim_v <= 64) f(std::integral_constant<int, 64>{}, std::integral_constant<int, 64>{});
  else if (head_dim_qk <= 128) f(std::integral_constant<int, 128>{}, std::integral_constant<int, 128>{});
  else f(std::integral_constant<int, 192>{}, std::integral_constant<int, 128>{});
}

}  // namespace bb::cuda::flash
