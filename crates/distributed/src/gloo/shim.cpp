// A C ABI over Gloo's C++ API, for crates/distributed/src/gloo.rs (feature `gloo`).
//
// Gloo has no C API, so these few functions are the whole bridge: connect a full mesh
// through a key-value store that Rust implements (three callbacks), run one collective,
// free the context. Every entry point catches every exception: a C++ exception must not
// unwind into Rust. Failures return non-zero and write Gloo's message into `err`
// (truncated to `cap` bytes, always NUL-terminated); 2 means an I/O error (a peer that
// closed its connection, or an operation that timed out), 1 anything else.
//
// Built by crates/distributed/build.rs against Debian's libgloo-dev (2022-05 snapshot,
// the version PyTorch 1.13 shipped with).

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

extern "C" {

// The store Gloo's rendezvous writes its addresses to, implemented in Rust. Each
// callback returns 0 on success; on failure Rust keeps its own typed error and Gloo
// sees an IoException.
struct DittoGlooStore {
  void* store;
  int (*set)(void* store, const char* key, const char* data, size_t len);
  // Waits for `key` like `wait`, then hands its value to `fill(out, data, len)`.
  int (*get)(void* store, const char* key, void* out,
             void (*fill)(void* out, const char* data, size_t len));
  int (*wait)(void* store, const char* const* keys, size_t count, int64_t timeout_ms);
};

}  // extern "C"

namespace {

using std::chrono::milliseconds;

class CallbackStore : public gloo::rendezvous::Store {
 public:
  CallbackStore(const DittoGlooStore& f, milliseconds timeout) : f_(f), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    if (f_.set(f_.store, key.c_str(), data.data(), data.size()) != 0) {
      throw gloo::IoException("the rendezvous store refused to set " + key);
    }
  }

  std::vector<char> get(const std::string& key) override {
    std::vector<char> value;
    if (f_.get(f_.store, key.c_str(), &value, &CallbackStore::fill) != 0) {
      throw gloo::IoException("the rendezvous store has no value for " + key);
    }
    return value;
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    std::vector<const char*> names;
    for (const auto& key : keys) names.push_back(key.c_str());
    if (f_.wait(f_.store, names.data(), names.size(), timeout.count()) != 0) {
      throw gloo::IoException("waiting for the rendezvous store's keys failed");
    }
  }

 private:
  static void fill(void* out, const char* data, size_t len) {
    auto* value = static_cast<std::vector<char>*>(out);
    value->assign(data, data + len);
  }

  DittoGlooStore f_;
  milliseconds timeout_;
};

// Copies `message` into `err`, truncated to `cap` bytes including the NUL.
void write_error(char* err, size_t cap, const char* message) {
  if (cap == 0) return;
  size_t n = std::strlen(message);
  if (n >= cap) n = cap - 1;
  std::memcpy(err, message, n);
  err[n] = '\0';
}

// Runs `body`, turning any exception into a return code and a message.
template <typename Body>
int guarded(char* err, size_t cap, Body body) {
  try {
    body();
    return 0;
  } catch (const gloo::IoException& e) {
    write_error(err, cap, e.what());
    return 2;
  } catch (const std::exception& e) {
    write_error(err, cap, e.what());
    return 1;
  } catch (...) {
    write_error(err, cap, "an unknown C++ exception");
    return 1;
  }
}

// i64 sums wrap, as every ditto backend's do (signed overflow in C++ is undefined).
void wrapping_sum_i64(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<uint64_t*>(c);
  const auto* x = static_cast<const uint64_t*>(a);
  const auto* y = static_cast<const uint64_t*>(b);
  for (size_t i = 0; i < n; i++) out[i] = x[i] + y[i];
}

}  // namespace

struct DittoGloo {
  std::shared_ptr<gloo::rendezvous::Context> context;
};

extern "C" {

// Connects rank `rank` of `size` to every other rank over TCP, bound to `hostname`
// (an address of this host) or, when `iface` is non-empty, to that interface.
// `connect_ms` bounds the rendezvous; `timeout_ms` becomes each collective's default.
DittoGloo* ditto_gloo_connect(int rank, int size, const char* hostname, const char* iface,
                              int64_t connect_ms, int64_t timeout_ms,
                              const DittoGlooStore* store, char* err, size_t cap) {
  DittoGloo* made = nullptr;
  guarded(err, cap, [&] {
    gloo::transport::tcp::attr attr;
    if (iface[0] != '\0') {
      attr.iface = iface;
    } else {
      attr.hostname = hostname;
    }
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(milliseconds(connect_ms));
    CallbackStore bridge(*store, milliseconds(connect_ms));
    context->connectFullMesh(bridge, device);
    context->setTimeout(milliseconds(timeout_ms));
    made = new DittoGloo{std::move(context)};
  });
  return made;
}

void ditto_gloo_free(DittoGloo* gloo) { delete gloo; }

// In-place sum of `count` elements of `dtype` (0: f32, 1: f64, 2: i64).
int ditto_gloo_sum(DittoGloo* gloo, int dtype, void* data, size_t count, uint32_t tag,
                   int64_t timeout_ms, char* err, size_t cap) {
  return guarded(err, cap, [&] {
    gloo::AllreduceOptions opts(gloo->context);
    opts.setTag(tag);
    opts.setTimeout(milliseconds(timeout_ms));
    using Reduce = void (*)(void*, const void*, const void*, size_t);
    switch (dtype) {
      case 0:
        opts.setOutput(static_cast<float*>(data), count);
        opts.setReduceFunction(static_cast<Reduce>(&gloo::sum<float>));
        break;
      case 1:
        opts.setOutput(static_cast<double*>(data), count);
        opts.setReduceFunction(static_cast<Reduce>(&gloo::sum<double>));
        break;
      case 2:
        opts.setOutput(static_cast<int64_t*>(data), count);
        opts.setReduceFunction(static_cast<Reduce>(&wrapping_sum_i64));
        break;
      default:
        throw std::invalid_argument("unknown dtype code " + std::to_string(dtype));
    }
    gloo::allreduce(opts);
  });
}

// In-place broadcast of `bytes` bytes from rank `root`.
int ditto_gloo_broadcast(DittoGloo* gloo, void* data, size_t bytes, int root, uint32_t tag,
                         int64_t timeout_ms, char* err, size_t cap) {
  return guarded(err, cap, [&] {
    gloo::BroadcastOptions opts(gloo->context);
    opts.setTag(tag);
    opts.setTimeout(milliseconds(timeout_ms));
    opts.setRoot(root);
    opts.setOutput(static_cast<uint8_t*>(data), bytes);
    gloo::broadcast(opts);
  });
}

// Every rank's `input` (`counts[r]` bytes from rank r) into `output`, in rank order.
int ditto_gloo_all_gather(DittoGloo* gloo, const void* input, size_t input_bytes,
                          void* output, const size_t* counts, uint32_t tag,
                          int64_t timeout_ms, char* err, size_t cap) {
  return guarded(err, cap, [&] {
    gloo::AllgathervOptions opts(gloo->context);
    opts.setTag(tag);
    opts.setTimeout(milliseconds(timeout_ms));
    opts.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(input)), input_bytes);
    std::vector<size_t> elements(counts, counts + gloo->context->size);
    opts.setOutput(static_cast<uint8_t*>(output), std::move(elements));
    gloo::allgatherv(opts);
  });
}

// Sends `sent[q]` bytes of `input` to each rank q and receives `received[q]` bytes from
// each into `output`, in rank order.
int ditto_gloo_all_to_all(DittoGloo* gloo, const void* input, const int64_t* sent,
                          void* output, const int64_t* received, uint32_t tag,
                          int64_t timeout_ms, char* err, size_t cap) {
  return guarded(err, cap, [&] {
    const int size = gloo->context->size;
    gloo::AlltoallvOptions opts(gloo->context);
    opts.setTag(tag);
    opts.setTimeout(milliseconds(timeout_ms));
    opts.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(input)),
                  std::vector<int64_t>(sent, sent + size));
    opts.setOutput(static_cast<uint8_t*>(output), std::vector<int64_t>(received, received + size));
    gloo::alltoallv(opts);
  });
}

int ditto_gloo_barrier(DittoGloo* gloo, uint32_t tag, int64_t timeout_ms, char* err,
                       size_t cap) {
  return guarded(err, cap, [&] {
    gloo::BarrierOptions opts(gloo->context);
    opts.setTag(tag);
    opts.setTimeout(milliseconds(timeout_ms));
    gloo::barrier(opts);
  });
}

}  // extern "C"
