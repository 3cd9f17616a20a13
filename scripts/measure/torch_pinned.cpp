// torch_pinned measures PyTorch's caching host allocator (page-locked
// memory, at::getHostAllocator(at::kCUDA)) from C++, so that no interpreter
// sits in the timed loop, with the two benchmarks gpu's pinned benchmarks
// run on gpuscope (gpu/hostcache_test.go), and prints Go benchmark lines
// under the same names:
//
//   BenchmarkAllocHostFree/SIZE     an allocation and its free, of SIZE bytes:
//                                   after the first, the cache serves every one
//   BenchmarkPinnedFill/chunk=N     the host half of the next: 64 MiB copied
//                                   into page-locked chunks of N MiB, each
//                                   allocated and freed, no device copy
//   BenchmarkPinnedStaging/chunk=N  64 MiB of ordinary memory to the device
//                                   through page-locked chunks of N MiB: per
//                                   chunk, allocate, memcpy into it, an
//                                   asynchronous copy to the device with its
//                                   event recorded (as PyTorch's copy kernel
//                                   does), free; then one stream synchronize
//
//   torch_pinned [ROUNDS]           each benchmark ROUNDS times (default 5)
//
// Build and run it with pinned.sh.
#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/Allocator.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "torch_pinned: %s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

double nsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count();
}

// pair times n allocations of size bytes, each freed before the next.
double pair(at::HostAllocator* a, size_t size, long n) {
  { c10::DataPtr warm = a->allocate(size); }  // the first calls cudaHostAlloc
  auto start = Clock::now();
  for (long i = 0; i < n; i++) {
    c10::DataPtr p = a->allocate(size);
    if (!p.get()) std::abort();
  }
  return nsSince(start) / double(n);
}

// stage copies src to dst through page-locked chunks and waits for stream.
void stage(at::HostAllocator* a, c10::cuda::CUDAStream stream, char* dst, const std::vector<char>& src,
           size_t chunk) {
  for (size_t off = 0; off < src.size(); off += chunk) {
    c10::DataPtr h = a->allocate(chunk);
    std::memcpy(h.get(), src.data() + off, chunk);
    check(cudaMemcpyAsync(dst + off, h.get(), chunk, cudaMemcpyHostToDevice, stream.stream()), "cudaMemcpyAsync");
    a->record_event(h.get(), h.get_context(), stream.unwrap());
  }
  check(cudaStreamSynchronize(stream.stream()), "cudaStreamSynchronize");
}

// fill copies src into page-locked chunks, each freed at once.
void fill(at::HostAllocator* a, const std::vector<char>& src, size_t chunk) {
  for (size_t off = 0; off < src.size(); off += chunk) {
    c10::DataPtr h = a->allocate(chunk);
    std::memcpy(h.get(), src.data() + off, chunk);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaFree(nullptr), "cudaFree(0)");
  at::HostAllocator* a = at::getHostAllocator(at::kCUDA);

  struct Size {
    const char* name;
    size_t bytes;
  };
  const Size sizes[] = {{"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}, {"16MiB", 16 << 20}, {"64MiB", 64 << 20}};
  const long n = 500000;
  for (int r = 0; r < rounds; r++) {
    for (const Size& s : sizes) {
      std::printf("BenchmarkAllocHostFree/%s \t%ld\t%.1f ns/op\n", s.name, n, pair(a, s.bytes, n));
      std::fflush(stdout);
    }
  }

  const size_t total = 64 << 20;
  std::vector<char> src(total);
  for (size_t i = 0; i < total; i++) src[i] = char(i);
  for (int r = 0; r < rounds; r++) {
    for (size_t chunk : {size_t(1) << 20, size_t(4) << 20, size_t(16) << 20}) {
      fill(a, src, chunk);  // warm
      const long fops = 30;
      auto start = Clock::now();
      for (long i = 0; i < fops; i++) fill(a, src, chunk);
      double ns = nsSince(start) / double(fops);
      std::printf("BenchmarkPinnedFill/chunk=%zuMiB \t%ld\t%.0f ns/op\t%.2f MB/s\n", chunk >> 20, fops, ns,
                  double(total) / ns * 1e3);
      std::fflush(stdout);
    }
  }
  char* dst = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&dst), total), "cudaMalloc");
  c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool();
  const long ops = 30;
  for (int r = 0; r < rounds; r++) {
    for (size_t chunk : {size_t(1) << 20, size_t(4) << 20, size_t(16) << 20}) {
      stage(a, stream, dst, src, chunk);  // warm: the cache holds the chunks
      auto start = Clock::now();
      for (long i = 0; i < ops; i++) stage(a, stream, dst, src, chunk);
      double ns = nsSince(start) / double(ops);
      std::printf("BenchmarkPinnedStaging/chunk=%zuMiB \t%ld\t%.0f ns/op\t%.2f MB/s\n", chunk >> 20, ops, ns,
                  double(total) / ns * 1e3);
      std::fflush(stdout);
    }
  }
  check(cudaFree(dst), "cudaFree");
  return 0;
}
