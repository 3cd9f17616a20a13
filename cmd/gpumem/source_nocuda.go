//go:build !cuda

package main

import (
	"errors"

	"github.com/gpuscope/gpuscope/pool"
)

// extraDrivers names the drivers this build offers besides sim.
const extraDrivers = ""

func openCUDASource() (pool.Source, func(), error) {
	return nil, nil, errors.New("this build has no CUDA support (build with -tags cuda)")
}
