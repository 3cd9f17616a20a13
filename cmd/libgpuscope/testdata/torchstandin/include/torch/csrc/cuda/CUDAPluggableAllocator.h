// A stand-in for PyTorch's torch/csrc/cuda/CUDAPluggableAllocator.h, for the
// tests of python/torch_shim.cpp on a machine without PyTorch: the class
// and functions the shim uses, with the signatures of PyTorch 2.x's header
// (the setters of the C++ hooks, getCurrentAllocator), and what the tests
// call in their place of PyTorch (standin.cpp defines them, in a stand-in
// libtorch_cuda.so). Written for these tests, not PyTorch's code.
#pragma once

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

typedef struct CUstream_st* cudaStream_t;

namespace c10::cuda {
using MempoolId_t = std::pair<unsigned long long, unsigned long long>;
namespace CUDACachingAllocator {
struct CUDAAllocator {
  virtual ~CUDAAllocator() = default;
};
}  // namespace CUDACachingAllocator
}  // namespace c10::cuda

namespace torch::cuda::CUDAPluggableAllocator {

struct CUDAPluggableAllocator : c10::cuda::CUDACachingAllocator::CUDAAllocator {
  CUDAPluggableAllocator(std::function<void*(size_t, int, cudaStream_t)> alloc_fn,
                         std::function<void(void*, size_t, int, cudaStream_t)> free_fn);

  void set_init_fn(std::function<void(int)> init_fn);
  void set_reset_fn(std::function<void()> reset_fn);
  void set_memory_fraction_fn(std::function<void(double, int)> memory_fraction_fn);
  void set_base_alloc_fn(std::function<void*(void*, size_t*)> base_alloc_fn);
  void set_record_stream_fn(std::function<void(void* ptr, cudaStream_t stream)> record_stream_fn);
  void set_begin_allocate_to_pool(
      std::function<void(int, c10::cuda::MempoolId_t, std::function<bool(cudaStream_t)>)> capture_begin_fn);
  void set_end_allocate_to_pool_fn(std::function<void(int, c10::cuda::MempoolId_t)> capture_about_to_end_fn);
  void set_release_pool(std::function<void(int, c10::cuda::MempoolId_t)> capture_destroy_fn);

  // What PyTorch calls, as the tests call it (standin.cpp).
  void* malloc(size_t size, int device, cudaStream_t stream);
  void raw_delete(void* ptr);
  void emptyCache();
  void setMemoryFraction(double fraction, int device);
  void recordStream(void* ptr, cudaStream_t stream);
  void beginAllocateToPool(int device, c10::cuda::MempoolId_t id);

 protected:
  std::function<void*(size_t, int, cudaStream_t)> alloc_fn_;
  std::function<void(void*, size_t, int, cudaStream_t)> free_fn_;
  std::function<void(int)> init_fn_;
  std::function<void()> reset_fn_;
  std::function<void(double, int)> memory_fraction_fn_;
  std::function<void*(void*, size_t*)> base_alloc_fn_;
  std::function<void(void*, cudaStream_t)> record_stream_fn_;
  std::function<void(int, c10::cuda::MempoolId_t, std::function<bool(cudaStream_t)>)> begin_allocate_to_pool_fn_;
  std::function<void(int, c10::cuda::MempoolId_t)> end_allocate_to_pool_fn_;
  std::function<void(int, c10::cuda::MempoolId_t)> release_pool_fn_;
  std::mutex mu_;
  struct Meta {
    size_t size;
    int device;
    cudaStream_t stream;
  };
  std::unordered_map<void*, Meta> meta_;
};

std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator> getCurrentAllocator();
void changeCurrentAllocator(const std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator>& allocator);

}  // namespace torch::cuda::CUDAPluggableAllocator
