package pool_test

import (
	"fmt"
	"testing"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/internal/units"
	"github.com/gpuscope/gpuscope/pool"
)

var benchSizes = []int64{256, 1 << 20, 64 << 20}

// BenchmarkCachedAllocFree measures an allocation and free that the cache
// serves: the pool's hot path, with no call to the source.
func BenchmarkCachedAllocFree(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%s", units.FormatBytes(size)), func(b *testing.B) {
			p, err := pool.New(sim.New(0, 0))
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			warm, _ := p.Alloc(size)
			_ = p.Free(warm)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				blk, err := p.Alloc(size)
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Free(blk); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			checkCacheServed(b, p, size)
		})
	}
}

// BenchmarkCachedAllocFreeOnStream is the same pair on a stream other than
// the default, whose arenas the pool finds by stream.
func BenchmarkCachedAllocFreeOnStream(b *testing.B) {
	const stream = 7
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%s", units.FormatBytes(size)), func(b *testing.B) {
			p, err := pool.New(sim.New(0, 0))
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			warm, _ := p.AllocOn(size, stream)
			_ = p.Free(warm)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				blk, err := p.AllocOn(size, stream)
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Free(blk); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			checkCacheServed(b, p, size)
		})
	}
}

// checkCacheServed fails b where the pool went to its source for more than
// the first pairs of size bytes: the cache did not serve the loop.
func checkCacheServed(b *testing.B, p *pool.Pool, size int64) {
	if st := p.Stats(); st.SourceAllocs*sim.DefaultPageSize > 2*size+sim.DefaultPageSize*2 {
		b.Fatalf("the cache did not serve the loop: %d source allocations", st.SourceAllocs)
	}
}

// BenchmarkCachedAllocFreeParallel is the same pair from every P at once;
// run it with -cpu 1,2,... to see throughput grow with cores.
func BenchmarkCachedAllocFreeParallel(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%s", units.FormatBytes(size)), func(b *testing.B) {
			p, err := pool.New(sim.New(0, 0))
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					blk, err := p.Alloc(size)
					if err != nil {
						b.Error(err)
						return
					}
					if err := p.Free(blk); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkTwoLiveAllocFree allocates two small blocks of different sizes
// and frees them in the order allocated, as a step that holds two
// temporaries does: since 1792b6f the front cache hands out only the
// block its shard cached last, so the first allocation of each step
// misses, and a miss drains the cache (the cost issue 45's placement
// pays; docs/measurements.md).
func BenchmarkTwoLiveAllocFree(b *testing.B) {
	p, err := pool.New(sim.New(0, 0))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	b.ReportAllocs()
	for b.Loop() {
		x, err := p.Alloc(4 << 10)
		if err != nil {
			b.Fatal(err)
		}
		y, err := p.Alloc(8 << 10)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Free(x); err != nil {
			b.Fatal(err)
		}
		if err := p.Free(y); err != nil {
			b.Fatal(err)
		}
	}
}
