// torch_streams wires PyTorch's record_stream to gpuscope. PyTorch offers a
// pluggable allocator that hook only in C++ (CUDAPluggableAllocator's
// set_record_stream_fn); torch.cuda.memory.CUDAPluggableAllocator takes the
// allocation and free functions alone. gpuscope.use_torch(streams=True)
// compiles this file against the PyTorch it runs with, loads it, and calls
// gpuscope_torch_record_stream with libgpuscope's gpuscope_record_stream.
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <atomic>
#include <cstdint>

namespace {
std::atomic<int64_t> calls{0};
}

extern "C" {

// gpuscope_torch_record_stream makes PyTorch's current allocator, which must
// be a pluggable one, call fn for each Tensor.record_stream. It returns 0,
// or -1 where the current allocator is not pluggable.
int gpuscope_torch_record_stream(void (*fn)(void* ptr, void* stream)) {
  namespace pa = torch::cuda::CUDAPluggableAllocator;
  auto a = std::dynamic_pointer_cast<pa::CUDAPluggableAllocator>(pa::getCurrentAllocator());
  if (!a || fn == nullptr) return -1;
  a->set_record_stream_fn([fn](void* ptr, cudaStream_t stream) {
    calls.fetch_add(1, std::memory_order_relaxed);
    fn(ptr, stream);
  });
  return 0;
}

// gpuscope_torch_record_stream_calls counts the calls passed on, for tests.
int64_t gpuscope_torch_record_stream_calls() { return calls.load(std::memory_order_relaxed); }
}
