// Flash attention backward (FlashAttention-2 scheme) on mma.sync tensor cores.
//
// Three kernels:
//   1. dsum = rowsum(dO * O) per query row and head (the softmax backward's
//      correction term), fp32.
//   2. The main kernel: one block of 4 warps owns 64 keys of one kv head of
//      one sequence (16 keys per warp) and walks every query head of its
//      group and every 32-row query tile that sees its keys (with the causal
//      mask, the tiles from the keys' diagonal on; without, all). Per tile it
//      recomputes P^T = exp(S^T - lse) from K Q^T, accumulates
//      dV += P^T dO and dK += dS^T Q in registers (so grouped-query heads are
//      summed without atomics and without repeating K/V), and adds
//      dQ += dS K into an fp32 buffer with atomics (dS goes through shared
//      memory for that product).
//   3. dq = dq_accum * scale, rounded to bf16.
// All products are bf16 on the tensor cores with fp32 accumulation.
//
// Templated on the tile head dims (DQK for Q, K, dQ, dK; DV for V, dO, dV) as
// the forward: (64, 64), (128, 128), (192, 128), the last for multi-head
// latent attention. At (192, 128) the dK and dV accumulators alone take 160
// fp32 registers a thread; ptxas still fits the kernel in 255 without spills
// (docs/cuda.md).
//
// On Hopper (compute capability 9.0) in builds with CUTLASS, all three run
// the FlashAttention-3-style kernels of cutlass/flash_backward_sm90.h instead
// (their own row statistics, dQ sums and conversion), unless BB_FLASH_SM90=0,
// as for the forward (flash_forward.cu).
#include "bumblebee/ops/cuda/attention_backends.h"
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/flash_common.cuh"
#ifdef BB_WITH_CUTLASS
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90.h"
#endif

namespace bb::cuda {
namespace flash {
namespace {

constexpr int kBlockN = 64;  // keys per block
constexpr int kBlockM = 32;  // query rows per step
constexpr int kDsStride = kBlockM + 8;  // dS^T tile row stride (padded like the others)

template <int DQK, int DV>
constexpr size_t backward_smem_bytes() {
  return size_t(kBlockN + 2 * kBlockM) * smem_stride<DQK>() * sizeof(bf16)  // K, 2 x Q
         + size_t(kBlockN + 2 * kBlockM) * smem_stride<DV>() * sizeof(bf16)  // V, 2 x dO
         + size_t(kBlockN) * kDsStride * sizeof(bf16)                       // dS^T
         + size_t(4 * kBlockM) * sizeof(float);                             // 2 x lse, 2 x dsum
}

// dsum[row] = sum_d dout[row, d] * out[row, d]; one warp per row of head_dim (the v head dim).
__global__ void dsum_kernel(const bf16* __restrict__ out, const bf16* __restrict__ dout, int64_t rows, int head_dim,
                            float* __restrict__ dsum) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= rows) return;
  float acc = 0.f;
  for (int c = lane * 8; c < head_dim; c += 32 * 8) {
    float o[8], d[8];
    load8(out + row * head_dim + c, o);
    load8(dout + row * head_dim + c, d);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc += o[i] * d[i];
  }
  acc = warp_sum(acc);
  if (lane == 0) dsum[row] = acc;
}

__global__ void dq_convert_kernel(const float* __restrict__ dq_accum, float scale, int64_t n, bf16* __restrict__ dq) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dq[i] = __float2bfloat16_rn(dq_accum[i] * scale);
}

template <int DQK, int DV>
__global__ void __launch_bounds__(kThreads) flash_backward_kernel(const Params p) {
  constexpr int SQK = smem_stride<DQK>();   // row stride of the K and Q tiles
  constexpr int SV = smem_stride<DV>();     // row stride of the V and dO tiles
  constexpr int kQkBlocks = DQK / 8;        // 8-column blocks of dK
  constexpr int kVBlocks = DV / 8;          // 8-column blocks of dV
  constexpr int kQkSteps = DQK / 16;        // 16-deep k-steps of K Q^T
  constexpr int kVSteps = DV / 16;          // 16-deep k-steps of V dO^T
  constexpr int kMBlocks = kBlockM / 8;     // 8-query blocks of S^T
  constexpr int kHalfDBlocks = DQK / 16;    // 8-column blocks of one warp's half of dQ

  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(smem_raw);
  bf16* sQ = sK + kBlockN * SQK;        // two buffers of kBlockM * SQK
  bf16* sV = sQ + 2 * kBlockM * SQK;
  bf16* sdO = sV + kBlockN * SV;        // two buffers of kBlockM * SV
  bf16* sdS = sdO + 2 * kBlockM * SV;   // [kBlockN][kDsStride], dS^T
  float* sLse = reinterpret_cast<float*>(sdS + kBlockN * kDsStride);  // two buffers of kBlockM
  float* sDsum = sLse + 2 * kBlockM;                                   // two buffers

  const int n_block = blockIdx.x, kv_head = blockIdx.y, seq = blockIdx.z;
  const int q_start = p.cu_seqlens_q[seq], len_q = p.cu_seqlens_q[seq + 1] - q_start;
  const int kv_start = p.cu_seqlens_kv[seq], len_kv = p.cu_seqlens_kv[seq + 1] - kv_start;
  const int n0 = n_block * kBlockN;
  if (n0 >= len_kv) return;
  const int shift = len_kv - len_q;  // causal: query row i sees keys j <= i + shift

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int group = p.heads_q / p.heads_kv;
  const int64_t q_stride = int64_t(p.heads_q) * p.head_dim_qk;
  const int64_t o_stride = int64_t(p.heads_q) * p.head_dim_v;
  const int64_t k_stride = int64_t(p.heads_kv) * p.head_dim_qk;
  const int64_t v_stride = int64_t(p.heads_kv) * p.head_dim_v;
  const bf16* k = p.k + int64_t(kv_start) * k_stride + int64_t(kv_head) * p.head_dim_qk;
  const bf16* v = p.v + int64_t(kv_start) * v_stride + int64_t(kv_head) * p.head_dim_v;

  // Causal: query tiles from the one holding key n0's diagonal to the
  // sequence's end (none when that diagonal is past the last query).
  const int m_first = p.causal ? max(0, n0 - shift) / kBlockM : 0;
  const int m_count = max(0, (len_q + kBlockM - 1) / kBlockM - m_first);
  const int steps = group * m_count;

  auto load_step = [&](int step, int buf) {
    const int head = kv_head * group + step / m_count;
    const int m0 = (m_first + step % m_count) * kBlockM;
    const bf16* q = p.q + int64_t(q_start) * q_stride + int64_t(head) * p.head_dim_qk;
    const bf16* dout = p.dout + int64_t(q_start) * o_stride + int64_t(head) * p.head_dim_v;
    load_tile<kBlockM, DQK>(sQ + buf * kBlockM * SQK, q, q_stride, m0, len_q, p.head_dim_qk);
    load_tile<kBlockM, DV>(sdO + buf * kBlockM * SV, dout, o_stride, m0, len_q, p.head_dim_v);
    for (int i = threadIdx.x; i < kBlockM; i += kThreads) {
      const bool valid = m0 + i < len_q;
      const int64_t idx = (int64_t(q_start) + m0 + i) * p.heads_q + head;
      cp_async_4(sLse + buf * kBlockM + i, valid ? p.lse_in + idx : p.lse_in, valid);
      cp_async_4(sDsum + buf * kBlockM + i, valid ? p.dsum + idx : p.dsum, valid);
    }
  };

  load_tile<kBlockN, DQK>(sK, k, k_stride, n0, len_kv, p.head_dim_qk);
  load_tile<kBlockN, DV>(sV, v, v_stride, n0, len_kv, p.head_dim_v);
  if (steps > 0) load_step(0, 0);
  cp_async_commit();

  float dk[kQkBlocks][4], dv[kVBlocks][4];
#pragma unroll
  for (int i = 0; i < kQkBlocks; ++i) dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.f;
#pragma unroll
  for (int i = 0; i < kVBlocks; ++i) dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.f;
  const int key_row[2] = {n0 + warp * 16 + g, n0 + warp * 16 + g + 8};

  for (int step = 0; step < steps; ++step) {
    const int buf = step & 1;
    if (step + 1 < steps) load_step(step + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    const int head = kv_head * group + step / m_count;
    const int m0 = (m_first + step % m_count) * kBlockM;
    const bf16* tq = sQ + buf * kBlockM * SQK;
    const bf16* tdo = sdO + buf * kBlockM * SV;
    const float* tlse = sLse + buf * kBlockM;
    const float* tdsum = sDsum + buf * kBlockM;

    // S^T = K Q^T (this warp's 16 keys x 32 queries) and dP^T = V dO^T.
    float s[kMBlocks][4], dp[kMBlocks][4];
#pragma unroll
    for (int i = 0; i < kMBlocks; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.f;
    }
    const int ar = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int ks = 0; ks < kQkSteps; ++ks) {
      uint32_t ak[4];
      ldmatrix_x4(ak, sK + ar * SQK + ks * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int mb2 = 0; mb2 < kMBlocks / 2; ++mb2) {
        uint32_t bq[4];
        const int br = mb2 * 16 + (lane & 7) + (lane >> 4) * 8;
        ldmatrix_x4(bq, tq + br * SQK + ks * 16 + ((lane >> 3) & 1) * 8);
        mma_16816(s[2 * mb2], ak, bq[0], bq[1]);
        mma_16816(s[2 * mb2 + 1], ak, bq[2], bq[3]);
      }
    }
#pragma unroll
    for (int ks = 0; ks < kVSteps; ++ks) {
      uint32_t av[4];
      ldmatrix_x4(av, sV + ar * SV + ks * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int mb2 = 0; mb2 < kMBlocks / 2; ++mb2) {
        uint32_t bdo[4];
        const int br = mb2 * 16 + (lane & 7) + (lane >> 4) * 8;
        ldmatrix_x4(bdo, tdo + br * SV + ks * 16 + ((lane >> 3) & 1) * 8);
        mma_16816(dp[2 * mb2], av, bdo[0], bdo[1]);
        mma_16816(dp[2 * mb2 + 1], av, bdo[2], bdo[3]);
      }
    }

    // P^T = exp(scale * S^T - lse), zero where masked and in rows that see
    // no key at all (lse -inf); dS^T = P^T (dP^T - dsum).
#pragma unroll
    for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = mb * 8 + 2 * t + (e & 1);  // query within the tile
        const int query = m0 + qi;
        const int key = key_row[e >> 1];
        const bool masked = (p.causal && key > query + shift) || query >= len_q || key >= len_kv ||
                            tlse[qi] == -INFINITY;
        const float prob = masked ? 0.f : exp2f(fmaf(s[mb][e], p.scale_log2, -tlse[qi] * kLog2e));
        s[mb][e] = prob;
        dp[mb][e] = prob * (dp[mb][e] - tdsum[qi]);
      }
    }

    uint32_t pa[kBlockM / 16][4], dsa[kBlockM / 16][4];
    c_to_a<kBlockM / 16>(s, pa);
    c_to_a<kBlockM / 16>(dp, dsa);

    // dV += P^T dO and dK += dS^T Q; dO and Q through ldmatrix.trans.
#pragma unroll
    for (int db2 = 0; db2 < kVBlocks / 2; ++db2) {
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk) {
        uint32_t bdo[4];
        const int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4_trans(bdo, tdo + r * SV + db2 * 16 + (lane >> 4) * 8);
        mma_16816(dv[2 * db2], pa[kk], bdo[0], bdo[1]);
        mma_16816(dv[2 * db2 + 1], pa[kk], bdo[2], bdo[3]);
      }
    }
#pragma unroll
    for (int db2 = 0; db2 < kQkBlocks / 2; ++db2) {
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk) {
        uint32_t bq[4];
        const int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4_trans(bq, tq + r * SQK + db2 * 16 + (lane >> 4) * 8);
        mma_16816(dk[2 * db2], dsa[kk], bq[0], bq[1]);
        mma_16816(dk[2 * db2 + 1], dsa[kk], bq[2], bq[3]);
      }
    }

    // dS^T to shared memory, [key][query], for dQ = dS K across all warps' keys.
#pragma unroll
    for (int mb = 0; mb < kMBlocks; ++mb) {
      const int row = warp * 16 + g, col = mb * 8 + 2 * t;
      *reinterpret_cast<uint32_t*>(sdS + row * kDsStride + col) = pack_bf16(dp[mb][0], dp[mb][1]);
      *reinterpret_cast<uint32_t*>(sdS + (row + 8) * kDsStride + col) = pack_bf16(dp[mb][2], dp[mb][3]);
    }
    __syncthreads();

    // dQ tile (32 x DQK) = dS (32 x 64) K (64 x DQK): warp w takes query rows
    // 16 * (w % 2) and columns DQK/2 * (w / 2); dS read transposed from dS^T.
    {
      const int qr0 = (warp & 1) * 16, dc0 = (warp >> 1) * (DQK / 2);
      float dq[kHalfDBlocks][4];
#pragma unroll
      for (int i = 0; i < kHalfDBlocks; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4_trans(a, sdS + (kk * 16 + (lane & 7) + (lane >> 4) * 8) * kDsStride + qr0 + ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int db2 = 0; db2 < kHalfDBlocks / 2; ++db2) {
          uint32_t b[4];
          const int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          const int c = dc0 + db2 * 16 + (lane >> 4) * 8;
          ldmatrix_x4_trans(b, sK + r * SQK + c);
          mma_16816(dq[2 * db2], a, b[0], b[1]);
          mma_16816(dq[2 * db2 + 1], a, b[2], b[3]);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int query = m0 + qr0 + g + 8 * r;
        if (query < len_q) {
          float* dst = p.dq_accum + ((int64_t(q_start) + query) * p.heads_q + head) * p.head_dim_qk;
#pragma unroll
          for (int db = 0; db < kHalfDBlocks; ++db) {
            const int col = dc0 + db * 8 + 2 * t;
            if (col < p.head_dim_qk) {
              atomicAdd(dst + col, dq[db][2 * r]);
              atomicAdd(dst + col + 1, dq[db][2 * r + 1]);
            }
          }
        }
      }
    }
    __syncthreads();  // sdS and this step's buffers are rewritten next step
  }
  cp_async_wait<0>();  // a block with no query step still has its K/V loads in flight

  // dK (with the softmax scale applied once here) and dV, rows in the sequence.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key_row[r];
    if (key >= len_kv) continue;
    const int64_t row = (int64_t(kv_start) + key) * p.heads_kv + kv_head;
#pragma unroll
    for (int db = 0; db < kQkBlocks; ++db) {
      const int col = db * 8 + 2 * t;
      if (col < p.head_dim_qk)
        *reinterpret_cast<uint32_t*>(p.dk + row * p.head_dim_qk + col) =
            pack_bf16(dk[db][2 * r] * p.scale, dk[db][2 * r + 1] * p.scale);
    }
#pragma unroll
    for (int db = 0; db < kVBlocks; ++db) {
      const int col = db * 8 + 2 * t;
      if (col < p.head_dim_v)
        *reinterpret_cast<uint32_t*>(p.dv + row * p.head_dim_v + col) = pack_bf16(dv[db][2 * r], dv[db][2 * r + 1]);
    }
  }
}

template <int DQK, int DV>
void launch_backward(const Params& p, int max_seqlen, int num_seqs, cudaStream_t stream) {
  const size_t smem = backward_smem_bytes<DQK, DV>();
  CUDA_CHECK(cudaFuncSetAttribute(flash_backward_kernel<DQK, DV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(smem)));
  dim3 grid(unsigned((max_seqlen + kBlockN - 1) / kBlockN), unsigned(p.heads_kv), unsigned(num_seqs));
  flash_backward_kernel<DQK, DV><<<grid, kThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH("flash_attention_backward");
}

// Kernels 1 and 2: dsum, then dK, dV and the unscaled dQ sums into dq_accum.
void fa2_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const ops::AttentionSpans& spans, double scale, Tensor& dq_accum, Tensor& dk,
                  Tensor& dv) {
  const int64_t tokens = q.size(0), heads_q = q.size(1), head_dim_qk = q.size(2), head_dim_v = v.size(2);
  cudaStream_t stream = current_stream();
  Tensor dsum = Tensor::empty({tokens, heads_q}, DType::F32, q.device());

  const int64_t rows = tokens * heads_q;
  constexpr int kRowsPerBlock = 8;
  dsum_kernel<<<unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock), kRowsPerBlock * 32, 0, stream>>>(
      static_cast<const bf16*>(out.raw()), static_cast<const bf16*>(dout.raw()), rows, int(head_dim_v),
      static_cast<float*>(dsum.raw()));
  CUDA_CHECK_LAUNCH("flash_attention_backward (dsum)");

  Params p{};
  p.q = static_cast<const bf16*>(q.raw());
  p.k = static_cast<const bf16*>(k.raw());
  p.v = static_cast<const bf16*>(v.raw());
  p.cu_seqlens_q = static_cast<const int*>(spans.cu_seqlens_q.raw());
  p.cu_seqlens_kv = static_cast<const int*>(spans.cu_seqlens_kv.raw());
  p.causal = spans.mask == ops::AttentionMask::Causal;
  p.heads_q = int(heads_q);
  p.heads_kv = int(k.size(1));
  p.head_dim_qk = int(head_dim_qk);
  p.head_dim_v = int(head_dim_v);
  p.scale = float(scale);
  p.scale_log2 = float(scale) * kLog2e;
  p.dout = static_cast<const bf16*>(dout.raw());
  p.lse_in = static_cast<const float*>(lse.raw());
  p.dsum = static_cast<const float*>(dsum.raw());
  p.dq_accum = static_cast<float*>(dq_accum.raw());
  p.dk = static_cast<bf16*>(dk.raw());
  p.dv = static_cast<bf16*>(dv.raw());
  const int num_seqs = int(spans.cu_seqlens_q.numel() - 1);
  const int max_seqlen_kv = int(spans.max_seqlen_kv);
  dispatch_head_dims(p.head_dim_qk, p.head_dim_v, [&](auto dqk, auto dv) {
    launch_backward<decltype(dqk)::value, decltype(dv)::value>(p, max_seqlen_kv, num_seqs, stream);
  });
}

}  // namespace
}  // namespace flash

bool flash_backward_on_sm90([[maybe_unused]] int64_t head_dim_qk, [[maybe_unused]] int64_t head_dim_v) {
#ifdef BB_WITH_CUTLASS
  return flash_sm90_backward_takes(head_dim_qk, head_dim_v) && flash::sm90_kernels_selected();
#else
  return false;
#endif
}

void flash_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const ops::AttentionSpans& spans, double scale,
                              Tensor& dq, Tensor& dk, Tensor& dv) {
  const int64_t tokens = q.size(0), heads_q = q.size(1), head_dim_qk = q.size(2), head_dim_v = v.size(2);
  BB_CHECK(head_dim_qk <= kFlashMaxHeadDimQk && head_dim_v <= kFlashMaxHeadDimV,
           "flash_attention_backward: head dims q/k ", head_dim_qk, " and v ", head_dim_v, " exceed its tiles (",
           kFlashMaxHeadDimQk, ", ", kFlashMaxHeadDimV, ")");
#ifdef BB_WITH_CUTLASS
  // TMA descriptors need every dimension non-empty.
  if (tokens > 0 && k.size(0) > 0 && flash_backward_on_sm90(head_dim_qk, head_dim_v)) {
    flash_sm90_backward(dout, q, k, v, out, lse, spans, scale, dq, dk, dv);
    return;
  }
#endif
  cudaStream_t stream = current_stream();
  Tensor dq_accum = Tensor::empty({tokens, heads_q, head_dim_qk}, DType::F32, q.device());
  CUDA_CHECK(cudaMemsetAsync(dq_accum.raw(), 0, dq_accum.nbytes(), stream));
  flash::fa2_backward(dout, q, k, v, out, lse, spans, scale, dq_accum, dk, dv);

  const int64_t n = dq.numel();
  flash::dq_convert_kernel<<<grid_for(n, 256), 256, 0, stream>>>(static_cast<const float*>(dq_accum.raw()),
                                                                 float(scale), n, static_cast<bf16*>(dq.raw()));
  CUDA_CHECK_LAUNCH("flash_attention_backward (dq)");
}

}  // namespace bb::cuda
