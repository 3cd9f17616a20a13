//go:build !cuda

package main

import (
	"errors"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/pool"
)

// cudaBuilt says whether this gpumem can run on --driver cuda.
const cudaBuilt = false

// errNoCUDA is what the CUDA openers return in a build without it;
// checkDriver says so first, in a user's words.
var errNoCUDA = errors.New("--driver cuda: this gpumem was built without CUDA")

func openCUDASource() (pool.Source, func(), error) { return nil, nil, errNoCUDA }

func openCUDADevice() (*gpu.Device, error) { return nil, errNoCUDA }
