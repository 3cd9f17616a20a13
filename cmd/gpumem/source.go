package main

import (
	"fmt"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

// openSource returns the memory source a replay runs on.
func openSource(driver string, capacity, pageSize int64) (pool.Source, func(), error) {
	if driver == "sim" {
		if capacity < 0 || pageSize <= 0 || pageSize&(pageSize-1) != 0 {
			return nil, nil, fmt.Errorf("--capacity must be >= 0 and --page-size a power of two")
		}
		return sim.New(capacity, pageSize), func() {}, nil
	}
	if driver == "cuda" {
		if capacity != 0 {
			return nil, nil, fmt.Errorf("--capacity is for --driver sim; cap a GPU with --max-reserved")
		}
		if extraDrivers == "" {
			return nil, nil, fmt.Errorf("--driver cuda: this gpumem was built without CUDA; build it with -tags cuda (go build -tags cuda ./cmd/gpumem)")
		}
		return openCUDASource()
	}
	return nil, nil, fmt.Errorf("--driver %q: unknown driver; the drivers are sim and cuda (in a build with -tags cuda)", driver)
}
