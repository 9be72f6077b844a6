// The wgmma issue shared by the sm_90a flash attention kernels (forward and
// backward): one warpgroup's GEMM over the k blocks of its operands, issued
// without waiting, so the caller can overlap it with other work.
#pragma once

#include <type_traits>

#include <cute/tensor.hpp>

namespace bb::cuda::flash_sm90 {

// Issues c (+)= a b on the warpgroup's tensor cores without waiting: a is in
// shared memory (descriptors, possibly a stage's slice) or registers, b in
// shared memory; the caller waits with warpgroup_wait<N>() and then fences c.
template <bool kZeroInit, class Mma, class A, class B, class C>
__device__ __forceinline__ void issue_gemm(Mma& mma, A&& a, const B& b, C& c) {
  using namespace cute;
  constexpr bool kARegs =
      !std::is_same_v<typename std::remove_reference_t<A>::value_type, GMMA::DescriptorIterator::value_type>;
  if constexpr (kARegs) warpgroup_fence_operand(a);
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  mma.accumulate_ = kZeroInit ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
#pragma unroll
  for (int k = 0; k < size<2>(a); ++k) {
    gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_fence_operand(c);
  if constexpr (kARegs) warpgroup_fence_operand(a);
}

}  // namespace bb::cuda::flash_sm90
