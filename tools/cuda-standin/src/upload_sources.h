// Which host memory each host-to-device copy reads: pinned (pinned.h) or pageable.
//
// Why count it: on a GPU an upload from pageable memory waits for the stream's queued
// work before it starts, and one from pinned memory does not, so whether a program
// stages its uploads through pinned buffers decides whether its host stalls behind the
// GPU. The stand-in cannot stall, but it can tell the two sources apart and count them
// (DITTO_CUDA_STANDIN_STATS: "htod_from_pinned" and "htod_from_pageable"), so a test can
// hold a training step to pinned uploads.
#pragma once

#include <cstddef>

namespace standin {

// Counts one host-to-device copy of `bytes` from `src`, as pinned when the whole range
// lies inside one live pinned allocation and as pageable otherwise.
void note_upload_source(const void* src, std::size_t bytes);

// The counts so far.
struct UploadCounts {
    unsigned long long pinned;
    unsigned long long pageable;
};
UploadCounts upload_counts();

}  // namespace standin
