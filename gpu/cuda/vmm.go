//go:build cuda

package cuda

// The driver calls gorgonia.org/cu does not wrap: virtual memory management
// (reserve, create, map, set access, unmap) for the pool's expandable arenas,
// one Go call per driver call, and the stream-ordered allocator for
// benchmarks (test-only: export_test.go). This is the project's only cgo
// besides cu itself.

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
#include <string.h>

static CUmemAllocationProp gs_prop(int dev) {
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof prop);
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	return prop;
}

static CUresult gs_granularity(size_t *g, int dev) {
	CUmemAllocationProp prop = gs_prop(dev);
	return cuMemGetAllocationGranularity(g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
}

static CUresult gs_reserve(CUdeviceptr *ptr, size_t size, size_t align) {
	return cuMemAddressReserve(ptr, size, align, 0, 0);
}

static CUresult gs_address_free(CUdeviceptr ptr, size_t size) {
	return cuMemAddressFree(ptr, size);
}

static CUresult gs_create(CUmemGenericAllocationHandle *h, size_t size, int dev) {
	CUmemAllocationProp prop = gs_prop(dev);
	return cuMemCreate(h, size, &prop, 0);
}

static CUresult gs_release(CUmemGenericAllocationHandle h) {
	return cuMemRelease(h);
}

static CUresult gs_map(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle h) {
	return cuMemMap(ptr, size, 0, h, 0);
}

static CUresult gs_set_access(CUdeviceptr ptr, size_t size, int dev) {
	CUmemAccessDesc d;
	memset(&d, 0, sizeof d);
	d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	d.location.id = dev;
	d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	return cuMemSetAccess(ptr, size, &d, 1);
}

static CUresult gs_unmap(CUdeviceptr ptr, size_t size) {
	return cuMemUnmap(ptr, size);
}

// gs_enable_peer lets the current context reach peer's memory; enabling it
// twice is not an error.
static CUresult gs_enable_peer(CUcontext peer) {
	CUresult r = cuCtxEnablePeerAccess(peer, 0);
	return r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED ? CUDA_SUCCESS : r;
}

static CUresult gs_host_alloc(void **p, size_t n) {
	return cuMemHostAlloc(p, n, 0);
}

static CUresult gs_alloc_async(CUdeviceptr *p, size_t n, CUstream s) {
	return cuMemAllocAsync(p, n, s);
}

static CUresult gs_free_async(CUdeviceptr p, CUstream s) {
	return cuMemFreeAsync(p, s);
}

// gs_keep_pool raises the release threshold of the device's default
// stream-ordered pool so that it keeps freed memory, as a caching
// allocator does.
static CUresult gs_keep_pool(int dev) {
	CUmemoryPool pool;
	CUresult r = cuDeviceGetDefaultMemPool(&pool, dev);
	if (r != CUDA_SUCCESS) {
		return r;
	}
	cuuint64_t t = ~(cuuint64_t)0;
	return cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &t);
}
*/
import "C"

import (
	"unsafe"

	"gorgonia.org/cu"
)

// enablePeer is cuCtxEnablePeerAccess from the current context to peer.
func enablePeer(peer cu.CUContext) error {
	// cu.CUContext is a struct of one C.CUcontext, unexported: read it as one.
	c := *(*C.CUcontext)(unsafe.Pointer(&peer))
	if r := C.gs_enable_peer(c); r != C.CUDA_SUCCESS {
		return resultError("cuCtxEnablePeerAccess", int(r))
	}
	return nil
}

// hostAlloc is cuMemHostAlloc: page-locked host memory.
func hostAlloc(size int64) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	if r := C.gs_host_alloc(&p, C.size_t(size)); r != C.CUDA_SUCCESS {
		return nil, resultError("cuMemHostAlloc", int(r))
	}
	return p, nil
}

func granularity(dev int) (int64, error) {
	var g C.size_t
	if r := C.gs_granularity(&g, C.int(dev)); r != C.CUDA_SUCCESS {
		return 0, resultError("cuMemGetAllocationGranularity", int(r))
	}
	return int64(g), nil
}

func reserveAddress(size int64, align int64) (uintptr, error) {
	var p C.CUdeviceptr
	if r := C.gs_reserve(&p, C.size_t(size), C.size_t(align)); r != C.CUDA_SUCCESS {
		return 0, resultError("cuMemAddressReserve", int(r))
	}
	return uintptr(p), nil
}

func freeAddress(ptr uintptr, size int64) error {
	if r := C.gs_address_free(C.CUdeviceptr(ptr), C.size_t(size)); r != C.CUDA_SUCCESS {
		return resultError("cuMemAddressFree", int(r))
	}
	return nil
}

func createHandle(size int64, dev int) (uint64, error) {
	var h C.CUmemGenericAllocationHandle
	if r := C.gs_create(&h, C.size_t(size), C.int(dev)); r != C.CUDA_SUCCESS {
		return 0, resultError("cuMemCreate", int(r))
	}
	return uint64(h), nil
}

func releaseHandle(h uint64) error {
	if r := C.gs_release(C.CUmemGenericAllocationHandle(h)); r != C.CUDA_SUCCESS {
		return resultError("cuMemRelease", int(r))
	}
	return nil
}

func mapHandle(ptr uintptr, size int64, h uint64) error {
	if r := C.gs_map(C.CUdeviceptr(ptr), C.size_t(size), C.CUmemGenericAllocationHandle(h)); r != C.CUDA_SUCCESS {
		return resultError("cuMemMap", int(r))
	}
	return nil
}

func setAccess(ptr uintptr, size int64, dev int) error {
	if r := C.gs_set_access(C.CUdeviceptr(ptr), C.size_t(size), C.int(dev)); r != C.CUDA_SUCCESS {
		return resultError("cuMemSetAccess", int(r))
	}
	return nil
}

func unmap(ptr uintptr, size int64) error {
	if r := C.gs_unmap(C.CUdeviceptr(ptr), C.size_t(size)); r != C.CUDA_SUCCESS {
		return resultError("cuMemUnmap", int(r))
	}
	return nil
}

// rawStream is the CUstream inside a cu.Stream, which holds nothing else.
func rawStream(s cu.Stream) C.CUstream {
	return *(*C.CUstream)(unsafe.Pointer(&s))
}

// allocAsync and freeAsync are cuMemAllocAsync and cuMemFreeAsync on
// stream s (the zero Stream: the default stream); for benchmarks against
// the driver's own pool. The calling goroutine must hold the device's
// context (Driver.do).
func allocAsync(n int64, s cu.Stream) (uintptr, error) {
	var p C.CUdeviceptr
	if r := C.gs_alloc_async(&p, C.size_t(n), rawStream(s)); r != C.CUDA_SUCCESS {
		return 0, resultError("cuMemAllocAsync", int(r))
	}
	return uintptr(p), nil
}

// freeAsync: see allocAsync.
func freeAsync(p uintptr, s cu.Stream) error {
	if r := C.gs_free_async(C.CUdeviceptr(p), rawStream(s)); r != C.CUDA_SUCCESS {
		return resultError("cuMemFreeAsync", int(r))
	}
	return nil
}

// keepAsyncPool raises the release threshold of the device's default
// stream-ordered pool so that it keeps what is freed.
func keepAsyncPool(dev int) error {
	if r := C.gs_keep_pool(C.int(dev)); r != C.CUDA_SUCCESS {
		return resultError("cuMemPoolSetAttribute", int(r))
	}
	return nil
}
