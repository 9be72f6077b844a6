// Ring attention: causal attention over sequences split across the cp ranks
// in zigzag order, with K/V passed around the cp ring (context parallelism).
//
// Every rank holds, of each sequence, chunk r and chunk 2cp-1-r of 2cp equal
// chunks, laid out as two halves: A = chunk r of every sequence, then B =
// chunk 2cp-1-r of every sequence (runtime/microbatch.h). Both halves have
// the per-sequence offsets `cu_half`. At step i a rank holds the K/V of rank
// j = r - i (mod cp) and computes the partial attention it owes them, as
// TransformerEngine's AttnFuncWithCPAndKVP2P does:
//   j == r: A with A causal, B with B causal, B with A in full;
//   j <  r: A and B with j's first half (chunk j) in full;
//   j >  r: B with both of j's halves in full (A sees none of them).
// Partials merge by log-sum-exp. The K/V for step i+1 travel while step i
// computes. The backward circulates K/V again and, behind them, their dK/dV
// accumulators, which after cp steps arrive back at their owner.
//
// GQA: only the kv heads travel. q [T, Hq, D], k and v [T, Hkv, D], T = 2 x cu_half[S].
#pragma once

#include "bumblebee/core/tensor.h"
#include "bumblebee/distributed/communicator.h"

namespace bb {

struct RingAttentionLayout {
  Tensor cu_half;        // [S+1] int32 on the compute device: sequence offsets within one half
  int64_t max_half = 0;  // the longest chunk
};

// out [T, Hq, D] and lse [T, Hq] (stat dtype) as ops::attention_forward gives them.
void ring_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const RingAttentionLayout& layout,
                            double scale, dist::Communicator& cp, Tensor& out, Tensor& lse);
// dq, dk, dv are overwritten with the gradients of this rank's q, k, v.
void ring_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const RingAttentionLayout& layout, double scale,
                             dist::Communicator& cp, Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace bb
