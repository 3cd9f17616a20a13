// standin.cpp is a stand-in libtorch_cuda.so for the tests of
// python/torch_shim.cpp on a machine without PyTorch: the pluggable
// allocator of include/torch/csrc/cuda/CUDAPluggableAllocator.h, which calls
// its functions and hooks through std::function as PyTorch's does (an
// exception an allocation function throws passes through it), and C
// functions through which python/gpuscope_test.py's stand-in torch module
// calls it as PyTorch would (a C++ exception becomes a kind and a message,
// which the module raises as PyTorch's Python binding does). Written for
// these tests, not PyTorch's code.
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <cstring>
#include <exception>

namespace torch::cuda::CUDAPluggableAllocator {

CUDAPluggableAllocator::CUDAPluggableAllocator(std::function<void*(size_t, int, cudaStream_t)> alloc_fn,
                                               std::function<void(void*, size_t, int, cudaStream_t)> free_fn)
    : alloc_fn_(std::move(alloc_fn)), free_fn_(std::move(free_fn)) {}

void CUDAPluggableAllocator::set_init_fn(std::function<void(int)> f) { init_fn_ = std::move(f); }
void CUDAPluggableAllocator::set_reset_fn(std::function<void()> f) { reset_fn_ = std::move(f); }
void CUDAPluggableAllocator::set_memory_fraction_fn(std::function<void(double, int)> f) {
  memory_fraction_fn_ = std::move(f);
}
void CUDAPluggableAllocator::set_base_alloc_fn(std::function<void*(void*, size_t*)> f) { base_alloc_fn_ = std::move(f); }
void CUDAPluggableAllocator::set_record_stream_fn(std::function<void(void*, cudaStream_t)> f) {
  record_stream_fn_ = std::move(f);
}
void CUDAPluggableAllocator::set_begin_allocate_to_pool(
    std::function<void(int, c10::cuda::MempoolId_t, std::function<bool(cudaStream_t)>)> f) {
  begin_allocate_to_pool_fn_ = std::move(f);
}
void CUDAPluggableAllocator::set_end_allocate_to_pool_fn(std::function<void(int, c10::cuda::MempoolId_t)> f) {
  end_allocate_to_pool_fn_ = std::move(f);
}
void CUDAPluggableAllocator::set_release_pool(std::function<void(int, c10::cuda::MempoolId_t)> f) {
  release_pool_fn_ = std::move(f);
}

// malloc keeps what the free needs, after the allocation function returned
// (an exception leaves nothing behind).
void* CUDAPluggableAllocator::malloc(size_t size, int device, cudaStream_t stream) {
  void* p = alloc_fn_(size, device, stream);
  std::lock_guard<std::mutex> lock(mu_);
  meta_[p] = Meta{size, device, stream};
  return p;
}

void CUDAPluggableAllocator::raw_delete(void* ptr) {
  Meta m;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = meta_.find(ptr);
    TORCH_CHECK(it != meta_.end(), "Trying to free a pointer not allocated here");
    m = it->second;
    meta_.erase(it);
  }
  free_fn_(ptr, m.size, m.device, m.stream);
}

void CUDAPluggableAllocator::emptyCache() {
  if (reset_fn_) {
    reset_fn_();
  }
}

void CUDAPluggableAllocator::setMemoryFraction(double fraction, int device) {
  if (memory_fraction_fn_) {
    memory_fraction_fn_(fraction, device);
  }
}

void CUDAPluggableAllocator::recordStream(void* ptr, cudaStream_t stream) {
  if (record_stream_fn_) {
    record_stream_fn_(ptr, stream);
  }
}

void CUDAPluggableAllocator::beginAllocateToPool(int device, c10::cuda::MempoolId_t id) {
  if (begin_allocate_to_pool_fn_) {
    begin_allocate_to_pool_fn_(device, id, [](cudaStream_t) { return true; });
  }
}

namespace {
std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator> current;
}

std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator> getCurrentAllocator() { return current; }

void changeCurrentAllocator(const std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator>& a) {
  current = a;
}

}  // namespace torch::cuda::CUDAPluggableAllocator

namespace {

namespace pa = torch::cuda::CUDAPluggableAllocator;

pa::CUDAPluggableAllocator* allocator() {
  return static_cast<pa::CUDAPluggableAllocator*>(pa::getCurrentAllocator().get());
}

// caught runs fn, and returns 0, or the kind of the exception it threw (1:
// c10::OutOfMemoryError, 2: another) with its message in msg.
template <typename F>
int caught(F fn, char* msg, size_t n) {
  try {
    fn();
    return 0;
  } catch (const c10::OutOfMemoryError& e) {
    snprintf(msg, n, "%s", e.what());
    return 1;
  } catch (const std::exception& e) {
    snprintf(msg, n, "%s", e.what());
    return 2;
  }
}

}  // namespace

extern "C" {

// standin_use makes the current allocator a pluggable one over the C
// functions at alloc and free (torch.cuda.memory.change_current_allocator).
void standin_use(void* alloc, void* free) {
  using Alloc = void*(size_t, int, cudaStream_t);
  using Free = void(void*, size_t, int, cudaStream_t);
  pa::changeCurrentAllocator(std::make_shared<pa::CUDAPluggableAllocator>(
      reinterpret_cast<Alloc*>(alloc), reinterpret_cast<Free*>(free)));
}

// standin_malloc allocates as torch.empty does on device 0's stream.
int standin_malloc(size_t size, void* stream, void** out, char* msg, size_t n) {
  return caught([&] { *out = allocator()->malloc(size, 0, static_cast<cudaStream_t>(stream)); }, msg, n);
}

int standin_free(void* ptr, char* msg, size_t n) {
  return caught([&] { allocator()->raw_delete(ptr); }, msg, n);
}

int standin_empty_cache(char* msg, size_t n) {
  return caught([&] { allocator()->emptyCache(); }, msg, n);
}

int standin_set_memory_fraction(double fraction, int device, char* msg, size_t n) {
  return caught([&] { allocator()->setMemoryFraction(fraction, device); }, msg, n);
}

int standin_record_stream(void* ptr, void* stream, char* msg, size_t n) {
  return caught([&] { allocator()->recordStream(ptr, static_cast<cudaStream_t>(stream)); }, msg, n);
}

int standin_graph_capture(char* msg, size_t n) {
  return caught([&] { allocator()->beginAllocateToPool(0, {1, 0}); }, msg, n);
}

}  // extern "C"
