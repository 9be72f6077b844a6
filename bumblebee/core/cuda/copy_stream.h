// The CUDA side of HostCopyStream (core/host_copy_stream.h): a non-blocking
// stream and an event per stream for ordering it against the backend's
// compute stream. Plain C++ declarations; defined in copy_stream.cpp beside
// this file, which only CUDA builds compile.
#pragma once

#include <cstddef>

namespace bb::cuda {

struct CopyStream;

CopyStream* copy_stream_create(int device);
void copy_stream_destroy(CopyStream* s);
// The copy stream waits for the work queued so far on the device's current stream.
void copy_stream_wait_for_compute(CopyStream* s);
// cudaMemcpyAsync on the copy stream; one side is pinned host memory.
void copy_stream_copy(CopyStream* s, void* dst, const void* src, size_t nbytes);
void copy_stream_synchronize(CopyStream* s);
// The device's current stream waits for the copies queued so far.
void copy_stream_compute_waits(CopyStream* s);

}  // namespace bb::cuda
