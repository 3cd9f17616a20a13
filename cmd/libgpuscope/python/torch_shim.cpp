// torch_shim is PyTorch's pluggable allocator over libgpuscope, with what
// torch.cuda.memory.CUDAPluggableAllocator's Python class cannot give, since
// it takes an allocation and a free function and nothing else:
//
//   - An allocation that gpuscope refuses for want of memory raises
//     torch.cuda.OutOfMemoryError with gpuscope's message (the cap, the
//     scopes that hold the memory): gpuscope_torch_alloc throws
//     c10::OutOfMemoryError, which the wrapper's std::function passes up to
//     Python as PyTorch's own allocator's error does. Without it the wrapper
//     stores the NULL as the tensor's address.
//   - The wrapper's C++ hooks act on gpuscope: record_stream
//     (gpuscope_record_stream), empty_cache (gpuscope_empty_cache) and
//     set_per_process_memory_fraction (gpuscope_set_memory_fraction). Its
//     graph-pool hooks (torch.cuda.graph, torch.cuda.MemPool) refuse with a
//     message: gpuscope keeps no private pool for a captured graph, whose
//     replays would write into memory given to others.
//
// gpuscope.use_torch() compiles this file against the PyTorch it runs with
// (g++, once per PyTorch version), hands gpuscope_torch_init libgpuscope's
// functions, makes PyTorch's allocator a CUDAPluggableAllocator over
// gpuscope_torch_alloc and gpuscope_torch_free of this library, and calls
// gpuscope_torch_wire. The library does not link libgpuscope: the functions
// come from the copy Python loaded, so that one process has one.
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <string>
#include <sys/types.h>
#include <type_traits>
#include <utility>

extern "C" {

// gpuscope_torch_fns is what gpuscope_torch_init takes: libgpuscope's
// functions, as gpuscope.h declares them.
struct gpuscope_torch_fns {
  void* (*alloc)(ssize_t size, int device, void* stream);
  void (*free)(void* ptr, ssize_t size, int device, void* stream);
  void (*record_stream)(void* ptr, void* stream);
  size_t (*last_error)(char* buf, size_t len, int* kind);
  int (*empty_cache)(int device);
  int (*set_memory_fraction)(int device, double fraction);
};

}  // extern "C"

namespace {

gpuscope_torch_fns fns{};

// What the shim passed on or raised, for tests and the harness's report.
enum Count { kRecordStream, kOutOfMemory, kEmptyCache, kMemoryFraction, kCounts };
std::atomic<int64_t> counts[kCounts];

// GPUSCOPE_OUT_OF_MEMORY, gpuscope.h's kind of a failure for want of memory.
constexpr int kOutOfMemoryKind = 1;

// lastError is the calling thread's last failure in libgpuscope.
std::string lastError(int* kind) {
  char buf[2048];
  size_t n = fns.last_error(buf, sizeof buf, kind);
  if (n == 0) {
    return "no message (gpuscope_last_error is empty)";
  }
  return std::string(buf, n < sizeof buf ? n : sizeof buf - 1);
}

// bytes writes n as PyTorch's messages do, "64.00 MiB", with the exact
// count after it.
std::string bytes(size_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(n);
  int u = 0;
  while (x >= 1024 && u < 4) {
    x /= 1024;
    u++;
  }
  char buf[96];
  snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s (%zu bytes)", x, units[u], n);
  return buf;
}

// PoolHook is the graph-pool setter of PyTorch 2.x's wrapper, where the
// PyTorch compiled against has it (its signature changed across versions).
using PoolHook = std::function<void(int, c10::cuda::MempoolId_t, std::function<bool(cudaStream_t)>)>;

template <typename A, typename = void>
struct HasPoolHooks : std::false_type {};
template <typename A>
struct HasPoolHooks<A, std::void_t<decltype(std::declval<A&>().set_begin_allocate_to_pool(std::declval<PoolHook>()))>>
    : std::true_type {};

// poolsRefused is 1 where the graph-pool hooks refuse, 0 where this
// PyTorch's wrapper has none of the shape known (gpuscope_torch_count(4)).
int poolsRefused = 0;

// wirePools makes the wrapper's graph-pool hooks refuse, with why, before
// a capture begins: gpuscope keeps no private pool for a graph.
template <typename A>
void wirePools(A& a) {
  if constexpr (HasPoolHooks<A>::value) {
    a.set_begin_allocate_to_pool([](int device, c10::cuda::MempoolId_t, std::function<bool(cudaStream_t)>) {
      TORCH_CHECK(false, "gpuscope keeps no private memory pool (device ", device,
                  "): CUDA graph capture (torch.cuda.graph) and torch.cuda.MemPool are not supported under "
                  "gpuscope, whose freed memory goes to other allocations while a captured graph could still "
                  "write it; use gpuscope.scope() to group memory, and PyTorch's own allocator to capture graphs");
    });
    a.set_end_allocate_to_pool_fn([](int, c10::cuda::MempoolId_t) {});
    a.set_release_pool([](int, c10::cuda::MempoolId_t) {});
    poolsRefused = 1;
  }
}

}  // namespace

extern "C" {

// gpuscope_torch_init takes libgpuscope's functions, before PyTorch's first
// allocation through this library. It returns 0, or -1 where one is missing.
int gpuscope_torch_init(const gpuscope_torch_fns* f) {
  if (f == nullptr || !f->alloc || !f->free || !f->record_stream || !f->last_error || !f->empty_cache ||
      !f->set_memory_fraction) {
    return -1;
  }
  fns = *f;
  return 0;
}

// gpuscope_torch_alloc is the pluggable allocator's allocation function.
// gpuscope has given back what its caches held and tried again before it
// refuses (as c10's allocator releases its cached blocks and retries); a
// refusal for want of memory throws c10::OutOfMemoryError, which PyTorch
// raises in Python as torch.cuda.OutOfMemoryError, and any other refusal
// (no such device, a size past any device) c10::Error, a RuntimeError.
// Size 0 is NULL, quietly, as c10's allocator gives it.
void* gpuscope_torch_alloc(size_t size, int device, cudaStream_t stream) {
  if (size == 0) {
    return nullptr;
  }
  void* p = fns.alloc(static_cast<ssize_t>(size), device, stream);
  if (p != nullptr) {
    return p;
  }
  int kind = 0;
  std::string msg = lastError(&kind);
  if (kind == kOutOfMemoryKind) {
    counts[kOutOfMemory].fetch_add(1, std::memory_order_relaxed);
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate ", bytes(size),
                     " on device ", device, " through gpuscope: ", msg);
  }
  TORCH_CHECK(false, "gpuscope could not allocate ", bytes(size), " on device ", device, ": ", msg);
  return nullptr;  // not reached: TORCH_CHECK(false, ...) throws
}

// gpuscope_torch_free is the pluggable allocator's free function.
void gpuscope_torch_free(void* ptr, size_t size, int device, cudaStream_t stream) {
  fns.free(ptr, static_cast<ssize_t>(size), device, stream);
}

// gpuscope_torch_wire sets the hooks of PyTorch's current allocator, which
// must be a CUDAPluggableAllocator made over this library's functions. It
// returns 0, or -1 where the current allocator is not a pluggable one.
int gpuscope_torch_wire(void) {
  namespace pa = torch::cuda::CUDAPluggableAllocator;
  auto a = std::dynamic_pointer_cast<pa::CUDAPluggableAllocator>(pa::getCurrentAllocator());
  if (!a || !fns.alloc) {
    return -1;
  }
  a->set_record_stream_fn([](void* ptr, cudaStream_t stream) {
    counts[kRecordStream].fetch_add(1, std::memory_order_relaxed);
    fns.record_stream(ptr, stream);
  });
  // torch.cuda.empty_cache(): what every device's pool caches goes back to
  // the driver, as c10's allocator empties every device's.
  a->set_reset_fn([] {
    counts[kEmptyCache].fetch_add(1, std::memory_order_relaxed);
    if (fns.empty_cache(-1) != 0) {
      int kind = 0;
      TORCH_CHECK(false, "gpuscope could not empty its cache: ", lastError(&kind));
    }
  });
  // torch.cuda.set_per_process_memory_fraction(f, device): gpuscope's cap
  // on what the device's pool reserves, f of the device's memory.
  a->set_memory_fraction_fn([](double fraction, int device) {
    counts[kMemoryFraction].fetch_add(1, std::memory_order_relaxed);
    if (fns.set_memory_fraction(device, fraction) != 0) {
      int kind = 0;
      TORCH_CHECK(false, "gpuscope could not set the memory fraction ", fraction, " on device ", device, ": ",
                  lastError(&kind));
    }
  });
  wirePools(*a);
  return 0;
}

// gpuscope_torch_count returns how many record_stream calls (0),
// out-of-memory errors (1), empty_cache calls (2) and memory fractions (3)
// the shim passed on or raised, and (4) whether the graph-pool hooks
// refuse.
int64_t gpuscope_torch_count(int what) {
  if (what == kCounts) {
    return poolsRefused;
  }
  if (what < 0 || what > kCounts) {
    return -1;
  }
  return counts[what].load(std::memory_order_relaxed);
}

}  // extern "C"
