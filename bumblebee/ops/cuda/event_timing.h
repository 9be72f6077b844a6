// A pool of CUDA events for op_profile: plain C++ declarations, defined in
// event_timing.cpp (CUDA builds only).
#pragma once

namespace bb::cuda {

// Records a timing event on the current stream of `device`; returns its slot.
int record_timing_event(int device);
// Milliseconds between two recorded slots, waiting for the later one.
double timing_elapsed_ms(int first, int second);
// Hands every slot back to the pool.
void release_timing_events();

}  // namespace bb::cuda
