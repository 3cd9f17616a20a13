package cthreads_test

import (
	"testing"

	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/cthreads"
	"github.com/gpuscope/gpuscope/gpu"
)

// BenchmarkCPair is an alloc+free pair of 4 KiB through gpuscope_alloc and
// gpuscope_free, called from a C thread: two crossings into Go, the
// current scope, the table, the pool. testdata/pair_bench.c times the same
// from a C program over the shared library.
func BenchmarkCPair(b *testing.B) {
	b.Setenv("GPUSCOPE_HOST_MEMORY", "268435456")
	gpu.RecordStacks(false) // the leak check of TestMain turns them on; a library's process has none
	defer gpu.RecordStacks(true)
	if !cthreads.Pairs(1000, 4096) { // the device opens, the pool caches the size
		b.Fatal("allocation failed")
	}
	b.ResetTimer()
	if !cthreads.Pairs(b.N, 4096) {
		b.Fatal("allocation failed")
	}
}
