// Device memory: host pages with guard pages around them, and the registry of which
// address ranges are live device allocations, of which device, and which were freed.
//
// This is the one place that knows what "device memory" is; copies, memsets, kernel
// arguments and cuBLAS operands are all checked against it (and a collective library's
// buffers can be, too).
//
// Layout of one allocation (pages of the host's page size):
//
//   [guard page][ ...data pages... ][guard page]
//                      ^base   ^base + size == start of the trailing guard page
//
// The data ends exactly where the trailing guard page starts, so the first byte read or
// written past the end faults. The price is alignment: `base` is aligned to the largest
// power of two dividing `size` (at most the page size), so a buffer of n elements of T
// is aligned to alignof(T) but not to the driver's 256 bytes. New memory is filled with
// 0xFF bytes (NaN for floats) so reading memory nobody wrote shows up in results. Freed
// memory stays reserved and inaccessible for a while (a quarantine), so a dangling
// pointer faults instead of reaching a newer allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "api.h"

namespace standin {

struct Allocation {
    uintptr_t base = 0;
    size_t size = 0;
    int device = -1;
};

// A new allocation of `bytes` (>= 1) on `device`; OUT_OF_MEMORY past the device's memory.
CUresult device_alloc(int device, size_t bytes, const char* call, CUdeviceptr* out);

// Frees the allocation starting at `ptr` (which must be a base returned by
// device_alloc); `device` receives its device.
CUresult device_free(CUdeviceptr ptr, const char* call, int* device);

// INVALID_VALUE unless [ptr, ptr + bytes) lies inside one live allocation; `what` names
// the operand in the message ("destination", "argument 3", ...).
CUresult check_device_range(CUdeviceptr ptr, size_t bytes, const char* call, const char* what,
                            Allocation* out);

// The live allocation holding `addr` (its one-past-the-end address included).
bool find_allocation(uintptr_t addr, Allocation* out);

// Where `addr` lies, in words: inside or past an allocation, in freed memory, or neither.
std::string describe_address(uintptr_t addr);

// True when [host, host + bytes) overlaps any device allocation (a device pointer passed
// where the driver expects host memory).
bool overlaps_device_memory(const void* host, size_t bytes);

// Frees every allocation of `device` (its context was destroyed).
void free_all_on_device(int device);

// Bytes allocated on `device` right now.
size_t used_on_device(int device);

}  // namespace standin
