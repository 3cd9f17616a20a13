//go:build cuda

package main

import (
	_ "embed"

	"github.com/gpuscope/gpuscope/gpu"
)

// saxpyPTX is our kernel, loaded by the driver at run time.
//
//go:embed saxpy.ptx
var saxpyPTX string

// saxpy loads the PTX in the scope (unloaded when the scope ends) and
// launches it on st on the buffers: the launch checks that they are live
// and holds them while it is queued; work queued on st after it waits for
// it.
func saxpy(s *gpu.Scope, st *gpu.Stream, y, x gpu.Slice[float32], a float32, n int) error {
	mod, err := s.LoadModule([]byte(saxpyPTX))
	if err != nil {
		return err
	}
	fn, err := mod.Function("saxpy")
	if err != nil {
		return err
	}
	const block = 256
	return fn.Launch(gpu.Dim{X: (n + block - 1) / block}, gpu.Dim{X: block}, 0, st, y, x, a, n)
}
