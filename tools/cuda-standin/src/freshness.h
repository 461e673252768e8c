// The check that the stand-in's host builds of the kernels match the sources on disk.
#pragma once

#include "api.h"

namespace standin {

// CUDA_SUCCESS when every kernel source the stand-in was built from is unchanged (as
// listed in kernel_sources.txt beside the library); otherwise CUDA_ERROR_INVALID_IMAGE
// for `call`, with a message naming the file and saying how to rebuild.
CUresult check_kernel_sources_unchanged(const char* call);

}  // namespace standin
