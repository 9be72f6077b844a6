// The process-wide deterministic-mode setting.
#include "bumblebee/ops/deterministic.h"

#include <atomic>

namespace bb::ops {

namespace {

std::atomic<bool> g_deterministic{false};

}  // namespace

void set_deterministic(bool on) { g_deterministic = on; }

bool deterministic() { return g_deterministic; }

}  // namespace bb::ops
