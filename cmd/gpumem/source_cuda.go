//go:build cuda

package main

import (
	"fmt"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/cuda"
	"github.com/gpuscope/gpuscope/pool"
)

// cudaBuilt says whether this gpumem can run on --driver cuda.
const cudaBuilt = true

func openCUDASource() (pool.Source, func(), error) {
	d, err := cuda.Open(0)
	if err != nil {
		return nil, nil, fmt.Errorf("--driver cuda: opening GPU 0: %w", err)
	}
	return d, func() { _ = d.Close() }, nil
}

// openCUDADevice opens GPU 0 for stress.
func openCUDADevice() (*gpu.Device, error) {
	d, err := gpu.Open(0)
	if err != nil {
		return nil, fmt.Errorf("--driver cuda: opening GPU 0: %w", err)
	}
	return d, nil
}
