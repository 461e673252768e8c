// The simulated devices: how many, their SM counts and limits, and the device queries.
//
// DITTO_CUDA_STANDIN_DEVICES is a count (default 2) or a comma list of SM counts
// ("132,46,20"). Device i of a count gets the i-th SM count of kDefaultSms (132 like an
// H100 SXM, 46, 108 like an A100, 20), so ditto's launch geometry differs per device while
// its values must not. All report compute capability 9.0 (NVRTC compiles compute_90).
// Even ordinals report memory pools (cudarc then allocates with cuMemAllocAsync), odd ones
// do not (cuMemAlloc_v2 with a sync before each free), so both of cudarc's paths run.
// DITTO_CUDA_STANDIN_MEMORY_MB caps each device's memory (default 8192).
//
// CUDA_VISIBLE_DEVICES is honoured as the driver does: a comma list of device indices
// picks which of those devices the process sees, in that order, renumbered from 0; the
// list ends at the first entry that is not a device (so "" or "-1" hides them all).
// Device names keep the index they have among all devices ("#2"), so two processes
// that see "device 0" can tell which one each has.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "context.h"
#include "deferred.h"
#include "errors.h"

namespace standin {
namespace {

constexpr int kDefaultSms[] = {132, 46, 108, 20};
constexpr int kMaxDevices = 16;

bool parse_int(const std::string& text, long min, long max, long* out) {
    if (text.empty()) return false;
    char* end = nullptr;
    const long v = std::strtol(text.c_str(), &end, 10);
    if (*end != '\0' || v < min || v > max) return false;
    *out = v;
    return true;
}

struct Config {
    std::vector<DeviceInfo> devices;
    int driver_version = 13000;  // cuDriverGetVersion's number: 1000 x major + 10 x minor
    std::string error;
};

// DITTO_CUDA_STANDIN_DRIVER_VERSION: the CUDA version the simulated driver supports, as
// cuDriverGetVersion reports it (12040) or as major.minor (12.4); CUDA 13.0 when unset.
// It lets CI play an older driver line without owning one: cuDriverGetVersion reports
// it and cuModuleLoadData refuses PTX newer than that driver reads (module.cpp).
bool read_driver_version(Config* config) {
    const char* env = std::getenv("DITTO_CUDA_STANDIN_DRIVER_VERSION");
    if (env == nullptr) return true;
    const std::string text = env;
    const size_t dot = text.find('.');
    long major = 0, minor = 0, number = 0;
    const bool ok = dot == std::string::npos
                        ? parse_int(text, 11000, 99990, &number)
                        : parse_int(text.substr(0, dot), 11, 99, &major) &&
                              parse_int(text.substr(dot + 1), 0, 9, &minor);
    if (!ok) {
        config->error = "DITTO_CUDA_STANDIN_DRIVER_VERSION=\"" + text +
                        "\": expected a CUDA version as cuDriverGetVersion reports it (12040) or "
                        "as major.minor (12.4), from 11.0 on";
        return false;
    }
    config->driver_version = static_cast<int>(dot == std::string::npos ? number : major * 1000 + minor * 10);
    return true;
}

Config read_config() {
    Config config;
    const char* env = std::getenv("DITTO_CUDA_STANDIN_DEVICES");
    const std::string spec = env != nullptr ? env : "2";
    std::vector<int> sms;
    long count = 0;
    if (parse_int(spec, 0, kMaxDevices, &count)) {
        for (long i = 0; i < count; ++i) sms.push_back(kDefaultSms[i % 4]);
    } else {
        size_t start = 0;
        while (start <= spec.size()) {
            const size_t comma = spec.find(',', start);
            const std::string item = spec.substr(start, comma - start);
            long sm = 0;
            if (!parse_int(item, 1, 1024, &sm) || sms.size() == kMaxDevices) {
                config.error = "DITTO_CUDA_STANDIN_DEVICES=\"" + spec +
                               "\": expected a device count (0 to 16) or a comma list of SM "
                               "counts (1 to 1024 each, at most 16 devices)";
                return config;
            }
            sms.push_back(static_cast<int>(sm));
            if (comma == std::string::npos) break;
            start = comma + 1;
        }
    }
    if (!read_driver_version(&config)) return config;
    long memory_mb = 8192;
    const char* mem = std::getenv("DITTO_CUDA_STANDIN_MEMORY_MB");
    if (mem != nullptr && !parse_int(mem, 1, 1L << 30, &memory_mb)) {
        config.error = std::string("DITTO_CUDA_STANDIN_MEMORY_MB=\"") + mem +
                       "\": expected a size in MiB (at least 1)";
        return config;
    }
    for (size_t i = 0; i < sms.size(); ++i) {
        DeviceInfo d;
        d.ordinal = static_cast<int>(i);
        d.physical = static_cast<int>(i);
        d.sm_count = sms[i];
        d.cc_major = 9;
        d.cc_minor = 0;
        d.memory_pools = i % 2 == 0;
        d.total_memory = static_cast<size_t>(memory_mb) << 20;
        char name[128];
        std::snprintf(name, sizeof name, STANDIN_LABEL " #%zu (%d SMs)", i, sms[i]);
        d.name = name;
        config.devices.push_back(d);
    }
    return config;
}

// The devices CUDA_VISIBLE_DEVICES (when set) leaves visible, renumbered.
void apply_visible_devices(Config* config) {
    const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
    if (env == nullptr || !config->error.empty()) return;
    const std::string list = env;
    std::vector<DeviceInfo> visible;
    size_t start = 0;
    while (start <= list.size()) {
        const size_t comma = list.find(',', start);
        std::string item = list.substr(start, comma - start);
        item.erase(0, item.find_first_not_of(' '));
        item.erase(item.find_last_not_of(' ') + 1);
        long index = -1;
        const bool known = parse_int(item, 0, long(config->devices.size()) - 1, &index);
        if (!known) break;
        bool repeated = false;
        for (const DeviceInfo& v : visible) repeated |= v.physical == int(index);
        if (repeated) break;
        visible.push_back(config->devices[size_t(index)]);
        visible.back().ordinal = int(visible.size()) - 1;
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    config->devices = visible;
}

const Config& config() {
    static const Config c = [] {
        Config read = read_config();
        apply_visible_devices(&read);
        return read;
    }();
    return c;
}

bool initialized = false;  // guarded by state_lock

// The value of a device attribute the stand-in models, or false for one it does not.
bool attribute_value(const DeviceInfo& d, int attribute, int* value) {
    switch (attribute) {
        case 1: *value = 1024; return true;        // MAX_THREADS_PER_BLOCK
        case 2: *value = 1024; return true;        // MAX_BLOCK_DIM_X
        case 3: *value = 1024; return true;        // MAX_BLOCK_DIM_Y
        case 4: *value = 64; return true;          // MAX_BLOCK_DIM_Z
        case 5: *value = 2147483647; return true;  // MAX_GRID_DIM_X
        case 6: *value = 65535; return true;       // MAX_GRID_DIM_Y
        case 7: *value = 65535; return true;       // MAX_GRID_DIM_Z
        case 8: *value = 49152; return true;       // MAX_SHARED_MEMORY_PER_BLOCK
        case 9: *value = 65536; return true;       // TOTAL_CONSTANT_MEMORY
        case 10: *value = 32; return true;         // WARP_SIZE
        case 12: *value = 65536; return true;      // MAX_REGISTERS_PER_BLOCK
        case 14: *value = 512; return true;        // TEXTURE_ALIGNMENT
        case 15: *value = 1; return true;          // GPU_OVERLAP
        case 16: *value = d.sm_count; return true; // MULTIPROCESSOR_COUNT
        case 17: *value = 0; return true;          // KERNEL_EXEC_TIMEOUT
        case 18: *value = 0; return true;          // INTEGRATED
        case 19: *value = 1; return true;          // CAN_MAP_HOST_MEMORY
        case 20: *value = 0; return true;          // COMPUTE_MODE (default)
        case 31: *value = 1; return true;          // CONCURRENT_KERNELS
        case 32: *value = 0; return true;          // ECC_ENABLED
        case 33: *value = d.physical + 1; return true;  // PCI_BUS_ID
        case 34: *value = 0; return true;          // PCI_DEVICE_ID
        case 39: *value = 2048; return true;       // MAX_THREADS_PER_MULTIPROCESSOR
        case 40: *value = 2; return true;          // ASYNC_ENGINE_COUNT
        case 41: *value = 1; return true;          // UNIFIED_ADDRESSING
        case 50: *value = 0; return true;          // PCI_DOMAIN_ID
        case 75: *value = d.cc_major; return true; // COMPUTE_CAPABILITY_MAJOR
        case 76: *value = d.cc_minor; return true; // COMPUTE_CAPABILITY_MINOR
        case 78: *value = 1; return true;          // STREAM_PRIORITIES_SUPPORTED
        case 81: *value = 233472; return true;     // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        case 82: *value = 65536; return true;      // MAX_REGISTERS_PER_MULTIPROCESSOR
        case 83: *value = 0; return true;          // MANAGED_MEMORY (not modelled)
        case 95: *value = 0; return true;          // COOPERATIVE_LAUNCH (not modelled)
        case 97: *value = 232448; return true;     // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        case 106: *value = 32; return true;        // MAX_BLOCKS_PER_MULTIPROCESSOR
        case 115: *value = d.memory_pools ? 1 : 0; return true;  // MEMORY_POOLS_SUPPORTED
        case 120: *value = 0; return true;         // CLUSTER_LAUNCH (not modelled)
        default: return false;
    }
}

}  // namespace

const std::vector<DeviceInfo>& devices() { return config().devices; }

int physical_device(int ordinal) {
    const auto& all = devices();
    return ordinal >= 0 && size_t(ordinal) < all.size() ? all[size_t(ordinal)].physical : ordinal;
}
const std::string& device_config_error() { return config().error; }

int driver_version() { return config().driver_version; }

CUresult require_init(const char* call) {
    std::lock_guard<std::mutex> guard(state_lock());
    if (!initialized) return fail(CUDA_ERROR_NOT_INITIALIZED, call, "cuInit has not succeeded");
    return CUDA_SUCCESS;
}

CUresult require_device(CUdevice device, const char* call) {
    const CUresult init = require_init(call);
    if (init != CUDA_SUCCESS) return init;
    if (device < 0 || static_cast<size_t>(device) >= devices().size()) {
        return fail(CUDA_ERROR_INVALID_DEVICE, call, "device %d does not exist (%zu devices)",
                    device, devices().size());
    }
    return CUDA_SUCCESS;
}

}  // namespace standin

using namespace standin;

extern "C" {

CUresult cuInit(unsigned int flags) {
    if (flags != 0) return fail(CUDA_ERROR_INVALID_VALUE, "cuInit", "flags must be 0, got %u", flags);
    if (!device_config_error().empty()) {
        return fail(CUDA_ERROR_INVALID_VALUE, "cuInit", "%s", device_config_error().c_str());
    }
    if (!mode_config_error().empty()) {
        return fail(CUDA_ERROR_INVALID_VALUE, "cuInit", "%s", mode_config_error().c_str());
    }
    if (devices().empty()) {
        return fail(CUDA_ERROR_NO_DEVICE, "cuInit", "%s",
                    std::getenv("CUDA_VISIBLE_DEVICES") != nullptr
                        ? "no device is visible (CUDA_VISIBLE_DEVICES)"
                        : "DITTO_CUDA_STANDIN_DEVICES=0");
    }
    std::lock_guard<std::mutex> guard(state_lock());
    initialized = true;
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* version) {
    if (version == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, "cuDriverGetVersion", "NULL pointer");
    if (!device_config_error().empty()) {
        return fail(CUDA_ERROR_INVALID_VALUE, "cuDriverGetVersion", "%s", device_config_error().c_str());
    }
    *version = driver_version();
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
    if (count == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetCount", "NULL pointer");
    const CUresult init = require_init("cuDeviceGetCount");
    if (init != CUDA_SUCCESS) return init;
    *count = static_cast<int>(devices().size());
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
    if (device == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGet", "NULL pointer");
    const CUresult ok = require_device(ordinal, "cuDeviceGet");
    if (ok != CUDA_SUCCESS) return ok;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice device) {
    if (name == nullptr || len <= 0) {
        return fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetName", "NULL buffer or length %d", len);
    }
    const CUresult ok = require_device(device, "cuDeviceGetName");
    if (ok != CUDA_SUCCESS) return ok;
    std::snprintf(name, static_cast<size_t>(len), "%s", devices()[device].name.c_str());
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, int attribute, CUdevice device) {
    if (value == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute", "NULL pointer");
    const CUresult ok = require_device(device, "cuDeviceGetAttribute");
    if (ok != CUDA_SUCCESS) return ok;
    if (attribute < 1 || attribute >= 162) {
        return fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute", "no attribute %d", attribute);
    }
    if (!attribute_value(devices()[device], attribute, value)) {
        char why[96];
        std::snprintf(why, sizeof why, "device attribute %d is not modelled", attribute);
        return not_supported("cuDeviceGetAttribute", why);
    }
    return CUDA_SUCCESS;
}

CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice device) {
    if (major == nullptr || minor == nullptr) {
        return fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceComputeCapability", "NULL pointer");
    }
    const CUresult ok = require_device(device, "cuDeviceComputeCapability");
    if (ok != CUDA_SUCCESS) return ok;
    *major = devices()[device].cc_major;
    *minor = devices()[device].cc_minor;
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice device) {
    if (bytes == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceTotalMem_v2", "NULL pointer");
    const CUresult ok = require_device(device, "cuDeviceTotalMem_v2");
    if (ok != CUDA_SUCCESS) return ok;
    *bytes = devices()[device].total_memory;
    return CUDA_SUCCESS;
}

// A made-up but stable UUID per device: "ditto-standin" plus the ordinal.
static CUresult device_uuid(unsigned char* uuid, CUdevice device, const char* call) {
    if (uuid == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, call, "NULL pointer");
    const CUresult ok = require_device(device, call);
    if (ok != CUDA_SUCCESS) return ok;
    std::memset(uuid, 0, 16);
    std::memcpy(uuid, "ditto-standin", 13);
    uuid[15] = static_cast<unsigned char>(device);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(unsigned char* uuid, CUdevice device) {
    return device_uuid(uuid, device, "cuDeviceGetUuid");
}

CUresult cuDeviceGetUuid_v2(unsigned char* uuid, CUdevice device) {
    return device_uuid(uuid, device, "cuDeviceGetUuid_v2");
}

// Peer access is not modelled: kernels may touch only their own device's memory.
CUresult cuDeviceCanAccessPeer(int* can, CUdevice device, CUdevice peer) {
    if (can == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceCanAccessPeer", "NULL pointer");
    CUresult ok = require_device(device, "cuDeviceCanAccessPeer");
    if (ok == CUDA_SUCCESS) ok = require_device(peer, "cuDeviceCanAccessPeer");
    if (ok != CUDA_SUCCESS) return ok;
    *can = 0;
    return CUDA_SUCCESS;
}

// NVRTC opens the driver and asks for its private export table; the real answer is
// undocumented, and NVRTC works without it when the call fails with a NULL table.
CUresult cuGetExportTable(const void** table, const void* /*id*/) {
    if (table != nullptr) *table = nullptr;
    return not_supported("cuGetExportTable");
}

}  // extern "C"
