// The device-memory registry: guarded host mappings and the ranges they hold.
#include "memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "context.h"
#include "errors.h"

namespace standin {
namespace {

struct Mapping {
    Allocation alloc;
    void* map = nullptr;  // the whole mapping, guard pages included
    size_t map_len = 0;
};

// Freed allocations stay mapped (inaccessible) until this many are waiting or they
// reserve this much address space; only then is the oldest unmapped.
constexpr size_t kQuarantineCount = 4096;
constexpr size_t kQuarantineBytes = size_t(1) << 32;

struct Registry {
    std::mutex lock;
    std::map<uintptr_t, Mapping> live;   // by base
    std::map<uintptr_t, Mapping> freed;  // by base, in quarantine
    std::deque<uintptr_t> freed_order;
    size_t quarantined_bytes = 0;
    std::map<int, size_t> used;
};

Registry& registry() {
    static Registry r;
    return r;
}

size_t page_size() {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return page;
}

// The mapping in `ranges` whose [base, base + size] holds `addr`, or nullptr.
const Mapping* holding(const std::map<uintptr_t, Mapping>& ranges, uintptr_t addr) {
    auto it = ranges.upper_bound(addr);
    if (it == ranges.begin()) return nullptr;
    --it;
    const Allocation& a = it->second.alloc;
    return addr <= a.base + a.size ? &it->second : nullptr;
}

void quarantine(Registry& r, Mapping m) {
    // Replace the pages with fresh inaccessible ones: the memory goes back to the host,
    // the addresses stay reserved.
    mmap(m.map, m.map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    r.quarantined_bytes += m.map_len;
    r.freed_order.push_back(m.alloc.base);
    r.freed[m.alloc.base] = m;
    while (r.freed_order.size() > kQuarantineCount || r.quarantined_bytes > kQuarantineBytes) {
        auto it = r.freed.find(r.freed_order.front());
        r.freed_order.pop_front();
        if (it == r.freed.end()) continue;
        munmap(it->second.map, it->second.map_len);
        r.quarantined_bytes -= it->second.map_len;
        r.freed.erase(it);
    }
}

void release(Registry& r, std::map<uintptr_t, Mapping>::iterator it) {
    Mapping m = it->second;
    r.used[m.alloc.device] -= m.alloc.size;
    r.live.erase(it);
    // An address freed before may come back from mmap once it left the quarantine.
    r.freed.erase(m.alloc.base);
    quarantine(r, m);
}

}  // namespace

CUresult device_alloc(int device, size_t bytes, const char* call, CUdeviceptr* out) {
    if (bytes == 0) return fail(CUDA_ERROR_INVALID_VALUE, call, "a 0-byte allocation");
    Registry& r = registry();
    std::lock_guard<std::mutex> guard(r.lock);
    const size_t total = devices()[device].total_memory;
    if (bytes > total - r.used[device]) {
        return fail(CUDA_ERROR_OUT_OF_MEMORY, call,
                    "%zu bytes requested on device %d, %zu of its %zu bytes free "
                    "(DITTO_CUDA_STANDIN_MEMORY_MB sets the size)",
                    bytes, device, total - r.used[device], total);
    }
    const size_t page = page_size();
    const size_t data_len = (bytes + page - 1) / page * page;
    const size_t map_len = data_len + 2 * page;
    void* map = mmap(nullptr, map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) {
        return fail(CUDA_ERROR_OUT_OF_MEMORY, call, "mmap of %zu bytes failed: %s", map_len, strerror(errno));
    }
    char* data = static_cast<char*>(map) + page;
    if (mprotect(data, data_len, PROT_READ | PROT_WRITE) != 0) {
        munmap(map, map_len);
        return fail(CUDA_ERROR_OUT_OF_MEMORY, call, "mprotect of %zu bytes failed: %s", data_len, strerror(errno));
    }
    char* base = data + data_len - bytes;
    std::memset(base, 0xFF, bytes);
    Mapping m;
    m.alloc = Allocation{reinterpret_cast<uintptr_t>(base), bytes, device};
    m.map = map;
    m.map_len = map_len;
    r.freed.erase(m.alloc.base);
    r.live[m.alloc.base] = m;
    r.used[device] += bytes;
    *out = m.alloc.base;
    return CUDA_SUCCESS;
}

CUresult device_free(CUdeviceptr ptr, const char* call, int* device) {
    Registry& r = registry();
    std::lock_guard<std::mutex> guard(r.lock);
    auto it = r.live.find(ptr);
    if (it == r.live.end()) {
        const Mapping* freed = holding(r.freed, ptr);
        if (freed != nullptr) {
            return fail(CUDA_ERROR_INVALID_VALUE, call, "%#" PRIx64 " was already freed", (uint64_t)ptr);
        }
        const Mapping* inside = holding(r.live, ptr);
        if (inside != nullptr) {
            return fail(CUDA_ERROR_INVALID_VALUE, call,
                        "%#" PRIx64 " is %zu bytes into an allocation, not its start", (uint64_t)ptr,
                        static_cast<size_t>(ptr - inside->alloc.base));
        }
        return fail(CUDA_ERROR_INVALID_VALUE, call, "%#" PRIx64 " is not device memory", (uint64_t)ptr);
    }
    if (device != nullptr) *device = it->second.alloc.device;
    release(r, it);
    return CUDA_SUCCESS;
}

CUresult check_device_range(CUdeviceptr ptr, size_t bytes, const char* call, const char* what,
                            Allocation* out) {
    Registry& r = registry();
    std::lock_guard<std::mutex> guard(r.lock);
    const Mapping* m = holding(r.live, ptr);
    if (m == nullptr) {
        const bool freed = holding(r.freed, ptr) != nullptr;
        return fail(CUDA_ERROR_INVALID_VALUE, call, "%s %#" PRIx64 " is %s", what, (uint64_t)ptr,
                    freed ? "in memory that was freed" : "not device memory");
    }
    const Allocation& a = m->alloc;
    const size_t offset = ptr - a.base;
    if (bytes > a.size - offset) {
        return fail(CUDA_ERROR_INVALID_VALUE, call,
                    "%s: %zu bytes at offset %zu overrun the %zu-byte allocation at %#" PRIx64
                    " on device %d by %zu bytes",
                    what, bytes, offset, a.size, (uint64_t)a.base, a.device, bytes - (a.size - offset));
    }
    if (out != nullptr) *out = a;
    return CUDA_SUCCESS;
}

bool find_allocation(uintptr_t addr, Allocation* out) {
    Registry& r = registry();
    std::lock_guard<std::mutex> guard(r.lock);
    const Mapping* m = holding(r.live, addr);
    if (m == nullptr) return false;
    *out = m->alloc;
    return true;
}

std::string describe_address(uintptr_t addr) {
    Registry& r = registry();
    std::lock_guard<std::mutex> guard(r.lock);
    char text[256];
    for (const auto* ranges : {&r.live, &r.freed}) {
        const char* kind = ranges == &r.live ? "" : "freed ";
        for (const auto& entry : *ranges) {
            const Mapping& m = entry.second;
            const uintptr_t start = reinterpret_cast<uintptr_t>(m.map);
            if (addr < start || addr >= start + m.map_len) continue;
            const Allocation& a = m.alloc;
            if (addr >= a.base + a.size) {
                std::snprintf(text, sizeof text, "%zu bytes past the end of the %s%zu-byte allocation at %#" PRIxPTR " on device %d",
                              static_cast<size_t>(addr - a.base - a.size), kind, a.size, a.base, a.device);
            } else if (addr < a.base) {
                std::snprintf(text, sizeof text, "%zu bytes before the %s%zu-byte allocation at %#" PRIxPTR " on device %d",
                              static_cast<size_t>(a.base - addr), kind, a.size, a.base, a.device);
            } else {
                std::snprintf(text, sizeof text, "byte %zu of the %s%zu-byte allocation at %#" PRIxPTR " on device %d",
                              static_cast<size_t>(addr - a.base), kind, a.size, a.base, a.device);
            }
            return text;
        }
    }
    std::snprintf(text, sizeof text, "%#" PRIxPTR ", which is no device memory", addr);
    return text;
}

bool overlaps_device_memory(const void* host, size_t bytes) {
    Registry& r = registry();
    std::lock_guard<std::mutex> guard(r.lock);
    const uintptr_t start = reinterpret_cast<uintptr_t>(host);
    auto it = r.live.upper_bound(start + (bytes == 0 ? 0 : bytes - 1));
    if (it == r.live.begin()) return false;
    --it;
    const Allocation& a = it->second.alloc;
    return start < a.base + a.size;
}

void free_all_on_device(int device) {
    Registry& r = registry();
    std::lock_guard<std::mutex> guard(r.lock);
    for (auto it = r.live.begin(); it != r.live.end();) {
        auto next = std::next(it);
        if (it->second.alloc.device == device) release(r, it);
        it = next;
    }
}

size_t used_on_device(int device) {
    Registry& r = registry();
    std::lock_guard<std::mutex> guard(r.lock);
    return r.used[device];
}

}  // namespace standin
