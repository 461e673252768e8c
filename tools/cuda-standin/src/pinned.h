// Page-locked ("pinned") host memory: cuMemHostAlloc, cuMemAllocHost, cuMemFreeHost.
//
// The stand-in's host memory is all the same to the host, but the driver treats the two
// kinds differently, and the deferred mode (deferred.h) follows it: an asynchronous copy
// from or to pinned memory is a DMA that runs when the stream reaches it, so the buffer
// must stay untouched until then; one from pageable memory is staged (host to device) or
// completed (device to host) before the call returns, which cudarc's copies and ditto's
// uploads rely on. This registry tells the two apart.
#pragma once

#include <cstddef>

namespace standin {

// True when [host, host + bytes) lies inside one pinned allocation.
bool is_pinned(const void* host, size_t bytes);

}  // namespace standin
