package main

import (
	"fmt"

	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/pool/sim"
)

// openSource returns the memory source a replay runs on.
func openSource(driver string, capacity, pageSize int64) (pool.Source, func(), error) {
	if driver == "sim" {
		if capacity < 0 || pageSize <= 0 || pageSize&(pageSize-1) != 0 {
			return nil, nil, fmt.Errorf("--capacity must be >= 0 and --page-size a power of two")
		}
		return sim.New(capacity, pageSize), func() {}, nil
	}
	if driver == "cuda" && extraDrivers != "" {
		if capacity != 0 {
			return nil, nil, fmt.Errorf("--capacity is for --driver sim; cap a GPU with --max-reserved")
		}
		return openCUDASource()
	}
	return nil, nil, fmt.Errorf("--driver %q: unknown driver; this build has: sim%s", driver, extraDrivers)
}
