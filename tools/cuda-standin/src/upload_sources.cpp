// Counts of host-to-device copies by the kind of host memory they read (upload_sources.h).
#include "upload_sources.h"

#include <atomic>

#include "pinned.h"

namespace {

std::atomic<unsigned long long> pinned_uploads{0};
std::atomic<unsigned long long> pageable_uploads{0};

}  // namespace

namespace standin {

void note_upload_source(const void* src, std::size_t bytes) {
    auto& counter = is_pinned(src, bytes) ? pinned_uploads : pageable_uploads;
    counter.fetch_add(1, std::memory_order_relaxed);
}

UploadCounts upload_counts() {
    return {pinned_uploads.load(std::memory_order_relaxed), pageable_uploads.load(std::memory_order_relaxed)};
}

}  // namespace standin
