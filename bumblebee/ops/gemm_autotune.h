// GEMM autotuning, set from the runtime's backend.gemm_autotune at build_model.
//
// Off (the default), a cuBLASLt GEMM runs the first algorithm of cuBLASLt's
// heuristic for its shape, the same on every run and every rank. On, the
// first call of each shape times the heuristic's leading candidates on that
// call's operands and keeps the fastest for the rest of the process (a few
// milliseconds a shape, once). Timing picks the algorithm, so two runs, or
// two ranks, may pick differently and differ in the last bits: the runtime
// refuses it with backend.deterministic and with tensor parallelism (whose
// ranks repeat some GEMMs, such as the router's, and must agree on them).
// CPU GEMMs have one implementation and ignore it.
#pragma once

namespace bb::ops {

void set_gemm_autotune(bool on);
bool gemm_autotune();

}  // namespace bb::ops
