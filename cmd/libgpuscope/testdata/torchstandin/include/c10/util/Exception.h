// A stand-in for PyTorch's c10/util/Exception.h, for the tests of
// python/torch_shim.cpp on a machine without PyTorch: the two error types
// and the two macros the shim uses, with PyTorch's meaning (a failed check
// throws the named c10 error with its arguments streamed into the message;
// OutOfMemoryError is an Error). Written for these tests, not PyTorch's
// code; the GPU run (scripts/measure/interop-gpu.sh) builds the shim
// against the real headers.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace c10 {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct OutOfMemoryError : Error {
  using Error::Error;
};

namespace standin {
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
}
}  // namespace standin

}  // namespace c10

#define TORCH_CHECK_WITH(kind, cond, ...)                           \
  do {                                                              \
    if (!(cond)) {                                                  \
      throw ::c10::kind(::c10::standin::str(__VA_ARGS__));          \
    }                                                               \
  } while (0)

#define TORCH_CHECK(cond, ...) TORCH_CHECK_WITH(Error, cond, __VA_ARGS__)
