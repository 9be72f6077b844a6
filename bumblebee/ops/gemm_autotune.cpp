// The process-wide GEMM autotuning setting.
#include "bumblebee/ops/gemm_autotune.h"

#include <atomic>

namespace bb::ops {

namespace {

std::atomic<bool> g_gemm_autotune{false};

}  // namespace

void set_gemm_autotune(bool on) { g_gemm_autotune = on; }

bool gemm_autotune() { return g_gemm_autotune; }

}  // namespace bb::ops
