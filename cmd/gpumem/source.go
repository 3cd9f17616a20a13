package main

import (
	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

// openSource returns the memory source a replay runs on: the driver's,
// which checkDriver has accepted; capacity and pageSize are the simulated
// device's, checked by their flags.
func openSource(driver string, capacity, pageSize int64) (pool.Source, func(), error) {
	if driver == "cuda" {
		return openCUDASource()
	}
	return sim.New(capacity, pageSize), func() {}, nil
}
