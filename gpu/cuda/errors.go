//go:build cuda

package cuda

import (
	"fmt"
	"reflect"
)

// cudaErrorOutOfMemory is CUDA_ERROR_OUT_OF_MEMORY.
const cudaErrorOutOfMemory = 2

// Error is a failed CUDA driver call.
type Error struct {
	Op     string // the driver call, such as "cuMemAlloc"
	Result int    // the CUresult
	Err    error  // cu's error, where cu made the call
}

func (e *Error) Error() string { return "cuda: " + e.Text() }

// Text is the message without the package's prefix, for a layer above
// that wraps it.
func (e *Error) Text() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %v (CUresult %d)", e.Op, e.Err, e.Result)
	}
	return fmt.Sprintf("%s: CUresult %d", e.Op, e.Result)
}

// Unwrap returns cu's error.
func (e *Error) Unwrap() error { return e.Err }

// OutOfMemory reports whether the call failed for lack of device memory;
// package pool then releases its cache and retries.
func (e *Error) OutOfMemory() bool { return e.Result == cudaErrorOutOfMemory }

func resultError(op string, r int) error { return &Error{Op: op, Result: r} }

// wrap turns an error from cu into an *Error that keeps the CUresult.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	code := -1
	if v := reflect.ValueOf(err); v.Kind() == reflect.Int {
		code = int(v.Int())
	}
	return &Error{Op: op, Result: code, Err: err}
}
