// torch_replay replays an allocation trace (docs/trace-format.md) through
// PyTorch's CUDA caching allocator, called from C++ so that no interpreter
// sits in the timed loop, and prints one JSON line per trace.
//
//   torch_replay replay TRACE...    first pass, then warm passes (PASSES in all, default 3)
//   torch_replay smallest TRACE...  the smallest cap the first pass fits under
//
// The mode is PyTorch's own: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
// selects expandable segments, its absence the native allocator. CAP_BYTES=N
// caps what the allocator may reserve, as set_per_process_memory_fraction
// does (the fraction N / device memory). Build and run it with torch.sh.
//
// A pass times the allocator's calls and a hash-table lookup per event, as
// `gpumem replay` times the pool's; what a pass leaves live is freed after
// its clock stops. A pass that runs out of memory stops there: the line says
// "oom": 1 and the exit status is 3, as gpumem's.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace alloc = c10::cuda::CUDACachingAllocator;

// c10 asks whether a device has a primary context before it switches
// devices (a CUDAGuard's, as getStreamFromPool's first call makes), through
// a hook that libtorch_cuda registers; without it the hook throws, and a
// trace with several streams ended inside c10 (dummyHasPrimaryContext).
// The replayer links c10 alone, so it registers the hook itself: main
// creates the context of the one device it uses before anything else.
namespace c10::cuda::_internal {
void setHasPrimaryContext(bool (*func)(c10::DeviceIndex));
}

namespace {

bool primaryContextMade = false;

bool hasPrimaryContext(c10::DeviceIndex device) { return primaryContextMade && device == 0; }

struct Event {
  bool alloc;
  unsigned long long addr;
  size_t size;
  unsigned long long stream;
};

// Trace is the events a replay uses (alloc and free_requested) and the
// streams they name.
struct Trace {
  std::string path;
  std::vector<Event> events;
  std::unordered_map<unsigned long long, cudaStream_t> streams;
};

bool ignored(const std::string& action) {
  static const char* kinds[] = {"free_completed", "segment_alloc", "segment_free", "segment_map",
                                "segment_unmap", "snapshot", "oom"};
  for (const char* k : kinds)
    if (action == k) return true;
  return false;
}

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> f;
  size_t start = 0;
  for (;;) {
    size_t comma = line.find(',', start);
    f.push_back(line.substr(start, comma - start));
    if (comma == std::string::npos) return f;
    start = comma + 1;
  }
}

// read parses a trace; a name ending in .gz is read through gzip -dc.
Trace read(const std::string& path) {
  bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  std::string cmd = "gzip -dc -- '" + path + "'";
  FILE* in = gz ? popen(cmd.c_str(), "r") : fopen(path.c_str(), "r");
  if (!in) throw std::runtime_error("cannot open " + path);
  Trace t{path, {}, {}};
  std::string line;
  long n = 0;
  for (int c; (c = fgetc(in)) != EOF || !line.empty();) {
    if (c != EOF && c != '\n') {
      line.push_back((char)c);
      continue;
    }
    n++;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<std::string> f = fields(line);
    line.clear();
    if (f[0].empty() || f[0][0] == '#' || (n == 1 && f[0] == "action") || ignored(f[0])) continue;
    if ((f[0] != "alloc" && f[0] != "free_requested") || f.size() < 4)
      throw std::runtime_error(path + ":" + std::to_string(n) + ": not an alloc or free_requested line");
    Event e{f[0] == "alloc", std::stoull(f[1]), (size_t)std::stoull(f[2]), std::stoull(f[3])};
    t.events.push_back(e);
    if (!t.streams.count(e.stream))
      t.streams[e.stream] = e.stream == 0 ? c10::cuda::getDefaultCUDAStream().stream()
                                          : c10::cuda::getStreamFromPool().stream();
  }
  int rc = gz ? pclose(in) : fclose(in);
  if (rc != 0) throw std::runtime_error("reading " + path + " failed");
  return t;
}

struct Pass {
  double ms = 0;
  long long peak_requested = 0;
  bool oom = false;
};

// replay makes one pass over the trace and frees what it leaves live.
Pass replay(const Trace& t) {
  std::unordered_map<unsigned long long, std::pair<void*, size_t>> live;
  live.reserve(1 << 16);
  Pass p;
  long long requested = 0;
  cudaDeviceSynchronize();
  auto start = std::chrono::steady_clock::now();
  for (const Event& e : t.events) {
    if (e.alloc) {
      void* ptr = nullptr;
      try {
        ptr = alloc::raw_alloc_with_stream(e.size, t.streams.at(e.stream));
      } catch (const c10::Error&) {
        p.oom = true;
        break;
      }
      live[e.addr] = {ptr, e.size};
      requested += (long long)e.size;
      p.peak_requested = std::max(p.peak_requested, requested);
      continue;
    }
    auto it = live.find(e.addr);
    if (it == live.end()) continue;  // allocated before the trace began
    alloc::raw_delete(it->second.first);
    requested -= (long long)it->second.second;
    live.erase(it);
  }
  p.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (auto& kv : live) alloc::raw_delete(kv.second.first);
  cudaDeviceSynchronize();
  return p;
}

size_t device_memory() {
  size_t free = 0, total = 0;
  cudaMemGetInfo(&free, &total);
  return total;
}

// cap sets the most the allocator may reserve; 0 lifts the cap.
void cap(long long bytes) {
  double total = (double)device_memory();
  alloc::setMemoryFraction(bytes > 0 ? std::min(1.0, (double)bytes / total) : 1.0, 0);
}

// fresh gives back what the allocator caches and forgets its peaks, so
// that the next pass starts as a new process's would.
void fresh() {
  alloc::emptyCache();
  alloc::resetPeakStats(0);
}

const char* mode() {
  const char* conf = getenv("PYTORCH_CUDA_ALLOC_CONF");
  return conf && *conf ? conf : "native";
}

long long env(const char* name, long long def) {
  const char* v = getenv(name);
  return v && *v ? atoll(v) : def;
}

// median of the passes after the first, the mean of the middle two where
// their number is even.
double warm(const std::vector<Pass>& ps) {
  std::vector<double> ms;
  for (size_t i = 1; i < ps.size(); i++) ms.push_back(ps[i].ms);
  std::sort(ms.begin(), ms.end());
  size_t n = ms.size();
  return n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
}

// runReplay prints the first pass, the warm passes and the first pass's peaks.
int runReplay(const Trace& t) {
  long long passes = std::max(1LL, env("PASSES", 3)), limit = env("CAP_BYTES", 0);
  cap(limit);
  std::vector<Pass> ps;
  for (long long i = 0; i < passes; i++) {
    ps.push_back(replay(t));
    if (i == 0) {
      long long reserved = alloc::getDeviceStats(0).reserved_bytes[0].peak;
      printf("{\"trace\": \"%s\", \"mode\": \"%s\", \"cap_bytes\": %lld, \"events\": %zu, \"peak_requested_bytes\": %lld, "
             "\"peak_reserved_bytes\": %lld, \"reserved_ratio\": %.5f, \"first_ms\": %.3f",
             t.path.c_str(), mode(), limit, t.events.size(), ps[0].peak_requested, reserved,
             ps[0].peak_requested ? (double)reserved / (double)ps[0].peak_requested : 0.0, ps[0].ms);
    }
    if (ps.back().oom) break;
  }
  if (ps.size() > 1) printf(", \"warm_ms\": %.3f", warm(ps));
  printf(", \"pass_ms\": [");
  for (size_t i = 0; i < ps.size(); i++) printf("%s%.3f", i ? ", " : "", ps[i].ms);
  bool oom = ps.back().oom;
  printf("], \"oom\": %d}\n", oom ? 1 : 0);
  fflush(stdout);
  return oom ? 3 : 0;
}

// fits says whether a first pass fits under the cap, from an empty cache.
bool fits(const Trace& t, long long bytes) {
  cap(bytes);
  bool ok = !replay(t).oom;
  fresh();
  return ok;
}

// runSmallest bisects the cap, to a millionth of the trace's peak requested
// (step_bytes), between the peak requested (which nothing fits under) and
// what the uncapped first pass reserved. The step is the one gpuscope's
// bisection stops at (pool's bisectionStep): two smallest caps that are the
// same bytes then come out within a step of each other, which
// pressure_tables.py --check calls a tie; at 1/10,000 of the peak they came
// out apart by where the steps fell. It costs about seven passes more
// (20 for an uncapped pass that reserved 1.6 times the peak, 13 before).
// torch.sh checks the cap it prints in a new process, as a bisection in one
// process assumes that an emptied cache behaves as a new one.
int runSmallest(const Trace& t) {
  Pass free = replay(t);
  long long hi = alloc::getDeviceStats(0).reserved_bytes[0].peak;
  fresh();
  long long peak = free.peak_requested, step = std::max(1LL, peak / 1000000), lo = peak - 1;
  int tries = 0;
  while (!fits(t, hi) && tries < 16) hi *= 2, tries++;
  while (hi - lo > step) {
    long long mid = lo + (hi - lo) / 2;
    (fits(t, mid) ? hi : lo) = mid;
    tries++;
  }
  cap(0);
  printf("{\"trace\": \"%s\", \"mode\": \"%s\", \"peak_requested_bytes\": %lld, \"smallest_cap_bytes\": %lld, "
         "\"step_bytes\": %lld, \"ratio\": %.5f, \"tries\": %d}\n",
         t.path.c_str(), mode(), peak, hi, step, (double)hi / (double)peak, tries);
  fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || (strcmp(argv[1], "replay") != 0 && strcmp(argv[1], "smallest") != 0)) {
    fprintf(stderr, "usage: %s replay|smallest TRACE...\n", argv[0]);
    return 64;
  }
  cudaSetDevice(0);
  if (cudaFree(nullptr) != cudaSuccess) {
    fprintf(stderr, "torch_replay: no CUDA device\n");
    return 1;
  }
  primaryContextMade = true;
  c10::cuda::_internal::setHasPrimaryContext(hasPrimaryContext);
  alloc::init(c10::cuda::device_count());
  int status = 0;
  for (int i = 2; i < argc; i++) {
    try {
      Trace t = read(argv[i]);
      int rc = strcmp(argv[1], "replay") == 0 ? runReplay(t) : runSmallest(t);
      status = std::max(status, rc);
    } catch (const std::exception& e) {
      fprintf(stderr, "torch_replay: %s\n", e.what());
      return 1;
    }
  }
  return status;
}
