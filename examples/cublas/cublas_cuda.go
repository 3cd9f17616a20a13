//go:build cuda

package main

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// cublas_api holds the entry points of a libcublas opened at run time
// (the _v2 names, which every cuBLAS since CUDA 4 exports).
typedef struct {
	void *lib;
	int (*create)(void **);
	int (*destroy)(void *);
	int (*set_stream)(void *, void *);
	int (*set_workspace)(void *, void *, size_t);
	int (*sgemm)(void *, int, int, int, int, int, const float *, const float *, int,
	             const float *, int, const float *, float *, int);
} cublas_api;

// cublas_open fills a from the library at path; it returns NULL or what failed.
static const char *cublas_open(cublas_api *a, const char *path) {
	a->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!a->lib) return dlerror();
#define SYM(f, name) if (!(*(void **)&a->f = dlsym(a->lib, name))) return "symbol " name " missing";
	SYM(create, "cublasCreate_v2")
	SYM(destroy, "cublasDestroy_v2")
	SYM(set_stream, "cublasSetStream_v2")
	SYM(set_workspace, "cublasSetWorkspace_v2")
	SYM(sgemm, "cublasSgemm_v2")
#undef SYM
	return NULL;
}

static int cublas_create(cublas_api *a, void **h) { return a->create(h); }
static int cublas_destroy(cublas_api *a, void *h) { return a->destroy(h); }
// Device addresses and stream handles come from Go as integers (uintptr).
static int cublas_set_stream(cublas_api *a, void *h, uintptr_t st) { return a->set_stream(h, (void *)st); }
static int cublas_set_workspace(cublas_api *a, void *h, uintptr_t ws, size_t n) { return a->set_workspace(h, (void *)ws, n); }

// cublas_sgemm computes the row-major product c (m x n) = a (m x k) * b
// (k x n) as cuBLAS's column-major c^T = b^T a^T.
static int cublas_sgemm(cublas_api *a, void *h, int m, int n, int k, uintptr_t pa, uintptr_t pb, uintptr_t pc) {
	const float one = 1, zero = 0;
	return a->sgemm(h, 0, 0, n, m, k, &one, (const float *)pb, n, (const float *)pa, k, &zero, (float *)pc, n);
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"unsafe"

	"github.com/gpuscope/gpuscope/examples/internal/demo"
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/cuda"
)

// workspaceBytes is the workspace handed to cuBLAS: what cuBLAS asks for
// on a Hopper GPU (32 MiB, by NVIDIA's cuBLAS documentation of
// cublasSetWorkspace).
const workspaceBytes = 32 << 20

// cublas is a libcublas opened at run time.
type cublas struct{ api C.cublas_api }

// openCublas opens $CUBLAS_LIB, else the first libcublas the dynamic
// loader finds, else one in a CUDA toolkit's lib64 ($CUDA_HOME,
// /usr/local/cuda*), which the loader's cache may not list.
func openCublas() (*cublas, error) {
	names := []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"}
	for _, dir := range []string{os.Getenv("CUDA_HOME"), "/usr/local/cuda*"} {
		if dir != "" {
			found, _ := filepath.Glob(filepath.Join(dir, "lib64", "libcublas.so.*"))
			names = append(names, found...)
		}
	}
	if p := os.Getenv("CUBLAS_LIB"); p != "" {
		names = []string{p}
	}
	var errs []error
	for _, name := range names {
		cb := &cublas{}
		cname := C.CString(name)
		msg := C.cublas_open(&cb.api, cname)
		C.free(unsafe.Pointer(cname))
		if msg == nil {
			return cb, nil
		}
		errs = append(errs, fmt.Errorf("%s: %s", name, C.GoString(msg)))
	}
	return nil, fmt.Errorf("cublas: no usable libcublas (set CUBLAS_LIB): %w", errors.Join(errs...))
}

// status turns a cuBLAS status into an error naming the call.
func status(call string, st C.int) error {
	if st != 0 {
		return fmt.Errorf("cublas: %s: status %d", call, int(st))
	}
	return nil
}

// shapes are the products run: m, n, k, none a multiple of another's tile.
var shapes = [][3]int{{256, 384, 512}, {1000, 1, 777}, {63, 4096, 129}}

func run(w io.Writer) (err error) {
	// cuBLAS and the CUDA runtime under it work on the primary context,
	// the one gpu.Open retains, made current on this thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cb, err := openCublas()
	if err != nil {
		return err
	}
	dev, err := gpu.OpenDefault(gpu.MaxReserved(1 << 30))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	demo.Opened(w, dev)
	if _, ok := dev.Driver().(*cuda.Driver); !ok {
		return fmt.Errorf("cublas: needs a GPU, not %s", dev)
	}
	if err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error { return cb.gemms(w, s) }, gpu.Name("gemm")); err != nil {
		return err
	}
	fmt.Fprintf(w, "after the scopes: %d bytes allocated\n", dev.Stats().Allocated)
	return nil
}

// gemms runs the products on a stream of s, with a cuBLAS handle whose
// workspace is a buffer of a child scope, and checks them against Go.
func (cb *cublas) gemms(w io.Writer, s *gpu.Scope) (err error) {
	st, err := s.NewStream()
	if err != nil {
		return err
	}
	var h unsafe.Pointer
	if err := status("cublasCreate", C.cublas_create(&cb.api, &h)); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, status("cublasDestroy", C.cublas_destroy(&cb.api, h))) }()
	if err := status("cublasSetStream", C.cublas_set_stream(&cb.api, h, C.uintptr_t(st.ID()))); err != nil {
		return err
	}
	return gpu.WithScope(s.Context(), s.Device(), func(ws *gpu.Scope) (err error) {
		buf, err := ws.Alloc(workspaceBytes)
		if err != nil {
			return err
		}
		if err := buf.RecordUse(st); err != nil {
			return err
		}
		if err := status("cublasSetWorkspace", C.cublas_set_workspace(&cb.api, h, C.uintptr_t(buf.Ptr()), C.size_t(buf.Size()))); err != nil {
			return err
		}
		// cuBLAS lets go of the workspace before its scope frees it: the
		// GEMMs queued on st have completed, and the handle has none.
		defer func() {
			err = errors.Join(err, st.Synchronize(), status("cublasSetWorkspace", C.cublas_set_workspace(&cb.api, h, 0, 0)))
		}()
		fmt.Fprintf(w, "cuBLAS workspace: %d MiB from scope %q\n", buf.Size()>>20, ws.Path())
		r := rand.New(rand.NewPCG(1, 2))
		for i, sh := range shapes {
			if err := cb.gemm(w, s, st, h, r, sh[0], sh[1], sh[2]); err != nil {
				return err
			}
			if i == 0 {
				fmt.Fprint(w, s.Device().Summary())
			}
		}
		return nil
	}, gpu.Name("cublas workspace"))
}

// gemm multiplies random m x k and k x n matrices on st and compares each
// element with Go's product, within 1e-5 of the sum of its terms' sizes.
func (cb *cublas) gemm(w io.Writer, s *gpu.Scope, st *gpu.Stream, h unsafe.Pointer, r *rand.Rand, m, n, k int) error {
	a, b := random(r, m*k), random(r, k*n)
	da, err := gpu.Alloc[float32](s, m*k)
	if err != nil {
		return err
	}
	db, err := gpu.Alloc[float32](s, k*n)
	if err != nil {
		return err
	}
	dc, err := gpu.Alloc[float32](s, m*n)
	if err != nil {
		return err
	}
	for _, x := range []gpu.Slice[float32]{da, db, dc} {
		if err := x.RecordUse(st); err != nil {
			return err
		}
	}
	if err := errors.Join(da.CopyFromHost(a), db.CopyFromHost(b)); err != nil {
		return err
	}
	if err := status("cublasSgemm", C.cublas_sgemm(&cb.api, h, C.int(m), C.int(n), C.int(k),
		C.uintptr_t(da.Ptr()), C.uintptr_t(db.Ptr()), C.uintptr_t(dc.Ptr()))); err != nil {
		return err
	}
	if err := st.Synchronize(); err != nil {
		return err
	}
	c := make([]float32, m*n)
	if err := dc.CopyToHost(c); err != nil {
		return err
	}
	worst := 0.0
	for i := range m {
		for j := range n {
			var sum, size float64
			for l := range k {
				t := float64(a[i*k+l]) * float64(b[l*n+j])
				sum += t
				size += math.Abs(t)
			}
			e := math.Abs(float64(c[i*n+j])-sum) / max(size, 1e-30)
			if e > 1e-5 {
				return fmt.Errorf("cublas: %dx%dx%d: element (%d, %d) is %g, Go's is %g", m, n, k, i, j, c[i*n+j], sum)
			}
			worst = max(worst, e)
		}
	}
	fmt.Fprintf(w, "sgemm %dx%dx%d: all %d results equal Go's within 1e-5 (worst %.1e)\n", m, n, k, m*n, worst)
	return errors.Join(s.Free(da.Buffer), s.Free(db.Buffer), s.Free(dc.Buffer))
}

// random returns n numbers in [-1, 1).
func random(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 2*r.Float32() - 1
	}
	return v
}
