package pool_test

import (
	"fmt"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

// A pool over the simulated device: the second allocation of a size is
// served from the cache, with no call to the source.
func ExampleNew() {
	src := sim.New(1<<30, 0) // 1 GiB, 2 MiB pages
	p, err := pool.New(src)
	if err != nil {
		panic(err)
	}
	defer p.Close()
	for range 2 {
		b, err := p.Alloc(1000)
		if err != nil {
			panic(err)
		}
		if err := p.Free(b); err != nil {
			panic(err)
		}
	}
	st := p.Stats()
	fmt.Println(st.Allocs, "allocations,", st.CacheHits, "from the cache")
	fmt.Println("reserved", st.Reserved, "bytes for a peak of", st.PeakAllocated)
	fmt.Println("source calls to allocate:", src.Counts().Allocs+src.Counts().Creates)
	// Output:
	// 2 allocations, 1 from the cache
	// reserved 2097152 bytes for a peak of 1024
	// source calls to allocate: 1
}
