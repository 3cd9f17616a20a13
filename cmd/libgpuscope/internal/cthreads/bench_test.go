package cthreads_test

import (
	"fmt"
	"testing"

	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/cthreads"
	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/foreign"
	"github.com/gpuscope/gpuscope/gpu"
)

// benchSizes are the sizes issue 37 times the pair at, as
// scripts/measure/interop_pair.cpp does on a GPU.
var benchSizes = []int64{256, 1 << 20, 64 << 20}

// BenchmarkCPair is an alloc+free pair through gpuscope_alloc and
// gpuscope_free, called from a C thread: the pair cache serves it, with
// no crossing into Go. testdata/pair_bench.c times the same from a C
// program over the shared library.
func BenchmarkCPair(b *testing.B) {
	benchPairs(b, cthreads.Pairs)
}

// BenchmarkCPairGo is BenchmarkCPair with the pair cache off
// (GPUSCOPE_PAIR_CACHE=0, read as the device opens): two crossings into
// Go, the scope, the table, the pool.
func BenchmarkCPairGo(b *testing.B) {
	reopen := func() {
		if err := foreign.Shutdown(); err != nil {
			b.Fatal(err)
		}
	}
	reopen()
	b.Setenv("GPUSCOPE_PAIR_CACHE", "0")
	defer reopen() // the device opens again, with the cache on, on the next call
	benchPairs(b, cthreads.Pairs)
}

// BenchmarkCFreeList is the same pair through the minimal free list per
// size of scripts/measure/interop_freelist.c, on host memory: the floor
// that PyTorch's pluggable path is measured over.
func BenchmarkCFreeList(b *testing.B) {
	benchPairs(b, cthreads.FreeListPairs)
}

// BenchmarkCupyPair is BenchmarkCPair through CuPy's entry points, as
// cupy.cuda.memory.CFunctionAllocator calls them: the free gives no size,
// and the pair cache's table knows it, so the pair stays on the C side too.
func BenchmarkCupyPair(b *testing.B) {
	benchPairs(b, cthreads.CupyPairs)
}

// BenchmarkCupyFreeList is the free list in CuPy's form: issue 47's floor.
func BenchmarkCupyFreeList(b *testing.B) {
	benchPairs(b, cthreads.CupyFreeListPairs)
}

func benchPairs(b *testing.B, pairs func(n int, size int64) bool) {
	b.Setenv("GPUSCOPE_HOST_MEMORY", "1073741824")
	gpu.RecordStacks(false) // the leak check of TestMain turns them on; a library's process has none
	defer gpu.RecordStacks(true)
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			if !pairs(1000, size) { // the device opens, the pool caches the size
				b.Fatal("allocation failed")
			}
			b.ResetTimer()
			if !pairs(b.N, size) {
				b.Fatal("allocation failed")
			}
		})
	}
}
