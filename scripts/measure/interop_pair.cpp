// interop_pair times an allocation and free of device memory called from
// C++, with no interpreter in the loop, in one process and one run:
//
//   c10       PyTorch's CUDA caching allocator: c10's raw_alloc / raw_delete
//   gpuscope  libgpuscope's PyTorch-form entry points, gpuscope_alloc /
//             gpuscope_free (the library at the path given, opened by dlopen),
//             which its pair cache serves on the C side
//   gpuscope-go  the same in a scope begun with the pair cache off
//             (GPUSCOPE_PAIR_CACHE=0): every call crosses into Go
//   freelist  interop_freelist.so's fl_alloc / fl_free, the minimal allocator
//
//   interop_pair LIBGPUSCOPE FREELIST_SO   one JSON line per allocator and size
//
// Each size is warmed by one pair, then timed in ROUNDS rounds (default 7)
// of N pairs (default 200000); the allocators take turns within a round, so
// that a drift of the machine touches all of them. A line gives the median
// and the range of the rounds' nanoseconds per pair, and for gpuscope's
// rows, from gpuscope_stats around the timed pairs, how many of them the
// pair cache served and how many allocations crossed into Go. Build and
// run it with interop-gpu.sh, against the PyTorch wheel's c10.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace alloc = c10::cuda::CUDACachingAllocator;

// c10 asks, through a hook that libtorch_cuda registers, whether a device
// has a primary context; this program links c10 alone (torch_replay.cpp
// says more), so it registers the hook itself.
namespace c10::cuda::_internal {
void setHasPrimaryContext(bool (*func)(c10::DeviceIndex));
}

namespace {

bool hasPrimaryContext(c10::DeviceIndex device) { return device == 0; }

using AllocFn = void* (*)(ssize_t, int, void*);
using FreeFn = void (*)(void*, ssize_t, int, void*);

using BeginFn = int64_t (*)(int, const char*);
using EndFn = int (*)(int64_t, int);
using StatsFn = size_t (*)(int, char*, size_t);

// Counters are gpuscope_stats's figures that say who served the pairs:
// the pair cache on the C side (c_pair_hits), or Go (allocs).
struct Counters {
  long long pairHits = 0, allocs = 0, failures = 0;
};

struct Allocator {
  std::string name;
  AllocFn alloc;  // null: c10
  FreeFn free;
  std::vector<double> rounds;  // ns per pair, one a round, of the size timed now
  BeginFn begin = nullptr;     // gpuscope-go: its pairs run in a scope begun with the pair cache off
  EndFn end = nullptr;
  StatsFn stats = nullptr;  // gpuscope's: its counters, read around each batch of pairs
  Counters served;          // of the size timed now
};

// number returns the integer after "key": in the JSON text, or -1.
long long number(const char* text, const char* key) {
  std::string pat = std::string("\"") + key + "\":";
  const char* p = strstr(text, pat.c_str());
  return p == nullptr ? -1 : atoll(p + pat.size());
}

// counters reads device 0's counters (outside the timed loops: reading
// them empties the pair cache).
Counters counters(StatsFn stats) {
  static char text[1 << 16];
  stats(0, text, sizeof text);
  return Counters{number(text, "c_pair_hits"), number(text, "allocs"), number(text, "c_failures")};
}

void* c10Alloc(ssize_t size, int, void*) { return alloc::raw_alloc(size); }
void c10Free(void* p, ssize_t, int, void*) { alloc::raw_delete(p); }

Allocator open(const char* name, const char* path, const char* allocName, const char* freeName) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    fprintf(stderr, "interop_pair: %s: %s\n", path, dlerror());
    exit(1);
  }
  auto a = reinterpret_cast<AllocFn>(dlsym(lib, allocName));
  auto f = reinterpret_cast<FreeFn>(dlsym(lib, freeName));
  if (a == nullptr || f == nullptr) {
    fprintf(stderr, "interop_pair: %s lacks %s or %s\n", path, allocName, freeName);
    exit(1);
  }
  Allocator out{name, a, f, {}};
  out.stats = reinterpret_cast<StatsFn>(dlsym(lib, "gpuscope_stats"));  // null for the free list
  return out;
}

// goPath is gpuscope's allocator a in a scope of its own, begun with the
// pair cache off, for each batch of pairs.
Allocator goPath(const Allocator& a, const char* path) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  auto begin = reinterpret_cast<BeginFn>(dlsym(lib, "gpuscope_scope_begin"));
  auto end = reinterpret_cast<EndFn>(dlsym(lib, "gpuscope_scope_end"));
  if (begin == nullptr || end == nullptr) {
    fprintf(stderr, "interop_pair: %s lacks gpuscope_scope_begin or gpuscope_scope_end\n", path);
    exit(1);
  }
  return Allocator{"gpuscope-go", a.alloc, a.free, {}, begin, end, a.stats};
}

// pairs times n pairs of size bytes and returns nanoseconds per pair.
double pairs(const Allocator& a, ssize_t size, long n) {
  int64_t scope = 0;
  if (a.begin != nullptr) {
    setenv("GPUSCOPE_PAIR_CACHE", "0", 1);  // read as the scope begins
    scope = a.begin(0, "gpuscope-go");
    unsetenv("GPUSCOPE_PAIR_CACHE");  // the enclosing scope's cache is on again at its end
    if (scope <= 0) {
      fprintf(stderr, "interop_pair: gpuscope_scope_begin failed\n");
      exit(1);
    }
  }
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < n; i++) {
    void* p = a.alloc(size, 0, nullptr);
    if (p == nullptr) {
      fprintf(stderr, "interop_pair: %s: allocation of %zd bytes failed\n", a.name.c_str(), size);
      exit(1);
    }
    a.free(p, size, 0, nullptr);
  }
  double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / n;
  if (scope > 0 && a.end(scope, 0) != 0) {
    fprintf(stderr, "interop_pair: gpuscope_scope_end failed\n");
    exit(1);
  }
  return ns;
}

long envLong(const char* name, long def) {
  const char* v = getenv(name);
  return v != nullptr && *v != 0 ? atol(v) : def;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s LIBGPUSCOPE FREELIST_SO\n", argv[0]);
    return 64;
  }
  cudaSetDevice(0);
  if (cudaFree(nullptr) != cudaSuccess) {
    fprintf(stderr, "interop_pair: no CUDA device\n");
    return 1;
  }
  c10::cuda::_internal::setHasPrimaryContext(hasPrimaryContext);
  alloc::init(c10::cuda::device_count());
  Allocator gpuscope = open("gpuscope", argv[1], "gpuscope_alloc", "gpuscope_free");
  std::vector<Allocator> as = {
      Allocator{"c10", c10Alloc, c10Free, {}},
      gpuscope,
      open("freelist", argv[2], "fl_alloc", "fl_free"),
      goPath(gpuscope, argv[1]),
  };
  long n = envLong("N", 200000), rounds = envLong("ROUNDS", 7);
  for (ssize_t size : {ssize_t(256), ssize_t(1) << 20, ssize_t(64) << 20}) {
    for (auto& a : as) {
      a.rounds.clear();
      a.served = Counters{};
      pairs(a, size, 1);
    }
    for (long r = 0; r < rounds; r++)
      for (auto& a : as) {
        Counters before = a.stats != nullptr ? counters(a.stats) : Counters{};
        a.rounds.push_back(pairs(a, size, n));
        if (a.stats != nullptr) {
          Counters after = counters(a.stats);
          a.served.pairHits += after.pairHits - before.pairHits;
          a.served.allocs += after.allocs - before.allocs;
          a.served.failures += after.failures - before.failures;
        }
      }
    for (auto& a : as) {
      std::vector<double> v = a.rounds;
      std::sort(v.begin(), v.end());
      printf("{\"allocator\": \"%s\", \"size\": %zd, \"pairs\": %ld, \"rounds\": %ld, \"median_ns\": %.1f, \"min_ns\": %.1f, \"max_ns\": %.1f",
             a.name.c_str(), size, n, rounds, v[v.size() / 2], v.front(), v.back());
      if (a.stats != nullptr) {
        // Of the timed pairs: how many the pair cache served, how many
        // allocations crossed into Go, how many calls failed.
        printf(", \"pair_hits\": %lld, \"allocs\": %lld, \"c_failures\": %lld", a.served.pairHits, a.served.allocs,
               a.served.failures);
      }
      printf("}\n");
    }
  }
  return 0;
}
