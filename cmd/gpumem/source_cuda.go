//go:build cuda

package main

import (
	"github.com/gpuscope/gpuscope/gpu/cuda"
	"github.com/gpuscope/gpuscope/pool"
)

// extraDrivers names the drivers this build offers besides sim.
const extraDrivers = ", cuda (GPU 0)"

func openCUDASource() (pool.Source, func(), error) {
	d, err := cuda.Open(0)
	if err != nil {
		return nil, nil, err
	}
	return d, func() { _ = d.Close() }, nil
}
