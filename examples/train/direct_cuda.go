//go:build cuda

package main

import (
	"fmt"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/cuda"
)

// direct returns an arena that allocates with cuMemAllocAsync and frees
// with cuMemFreeAsync on st, CUDA's own stream-ordered pool, set to keep
// what is freed.
func direct(dev *gpu.Device, st *gpu.Stream) (*stackArena, error) {
	d, ok := dev.Driver().(*cuda.Driver)
	if !ok {
		return nil, fmt.Errorf("train: the direct baseline needs a CUDA device, not %s", dev)
	}
	if err := d.KeepAsyncPool(); err != nil {
		return nil, err
	}
	return &stackArena{
		newTensor: func(n int) (tensor, error) {
			p, err := d.AllocAsync(int64(n)*4, st.ID())
			return tensor{raw: p, n: n}, err
		},
		release: func(t tensor) error { return d.FreeAsync(t.raw, st.ID()) },
	}, nil
}
