// CUTLASS 3 Hopper ptr-array grouped GEMM for the MoE experts (see
// grouped_gemm_sm90.h). Compiled for sm_90a alone (wgmma and TMA need it).
//
// 128x256x64 tiles and the cooperative warp-specialized schedule (two
// consumer warp groups share a tile) for every case, with clusters of 2x1 (TMA
// multicast of B across the pair) or, for the forward and input-gradient
// GEMMs of experts averaging fewer than kSmallExpertRows rows, 1x1.
// benchmarks/grouped_gemm_tiles.cu measured nine tile, cluster and schedule
// choices at the Qwen3-30B-A3B (~512 rows an expert) and DeepSeek-V3 (~2,048)
// expert shapes: no tile or schedule beats this one on both; clusters of 1x1
// take 4-7 % off the forward and input-gradient GEMMs at ~512 rows (the pair's
// multicast saves less than the cluster's tile pairing costs on short
// problems) and add up to 3 % at ~2,048; on the weight gradients, where the
// rows are the reduction, the two are within 1 %.
//
// The row-major problems map directly onto CUTLASS's D [M, N] = A [M, K] B [K, N]
// with D row-major: Forward has A K-major (RowMajor) and B K-major
// (ColumnMajor, W [n, k]); InputGrad B N-major (RowMajor, W [k, n]);
// WeightGrad A M-major (ColumnMajor, dy [k, m]) and B N-major (x [k, n]).
//
// This unit chooses the kernel; grouped_gemm_sm90_fprop.cu, _dgrad.cu and
// _wgrad.cu instantiate them (grouped_gemm_sm90_run.cuh launches one, through
// the pinned argument rings of grouped_gemm_sm90_staging.h, defined here).
#include "bumblebee/ops/cuda/cutlass/grouped_gemm_sm90.h"

#include <cstdint>
#include <vector>

#include "bumblebee/ops/cuda/cutlass/grouped_gemm_sm90_roles.h"
#include "bumblebee/ops/cuda/cutlass/grouped_gemm_sm90_staging.h"

namespace bb::cuda {

namespace expert_gemm {

Staging& staging() {
  static Staging s;
  return s;
}

}  // namespace expert_gemm

namespace {

// Between the two measured shapes (~512 and ~2,048 rows an expert).
constexpr int64_t kSmallExpertRows = 1024;

// Whether the groups' rows (m) average fewer than kSmallExpertRows.
bool small_experts(const std::vector<ExpertGemmGroup>& groups) {
  int64_t rows = 0;
  for (const ExpertGemmGroup& g : groups) rows += g.m;
  return rows < kSmallExpertRows * int64_t(groups.size());
}

}  // namespace

bool cutlass_grouped_gemm_takes(ExpertGemm kind, DType ab, DType d) {
  if (ab != DType::BF16) return false;
  return d == DType::BF16 || (kind == ExpertGemm::WeightGrad && d == DType::F32);
}

void cutlass_grouped_gemm(ExpertGemm kind, DType d, const std::vector<ExpertGemmGroup>& groups, float alpha,
                          float beta) {
  if (groups.empty()) return;
  switch (kind) {
    case ExpertGemm::Forward:
      return expert_gemm::run_fprop(groups, small_experts(groups), alpha, beta);
    case ExpertGemm::InputGrad:
      return expert_gemm::run_dgrad(groups, small_experts(groups), alpha, beta);
    case ExpertGemm::WeightGrad:
      return expert_gemm::run_wgrad(groups, d, alpha, beta);
  }
}

}  // namespace bb::cuda
