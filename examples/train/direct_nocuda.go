//go:build !cuda

package main

import (
	"errors"

	"github.com/gpuscope/gpuscope/gpu"
)

// direct is the baseline on cuMemAllocAsync, which needs CUDA.
func direct(*gpu.Device, *gpu.Stream) (*stackArena, error) {
	return nil, errors.New("train: -bench direct allocates with cuMemAllocAsync: build with -tags cuda")
}
