package pool_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

func TestOptionsAreChecked(t *testing.T) {
	src := sim.New(0, 0)
	for name, opt := range map[string]pool.Option{
		"negative limit":             pool.MaxReserved(-1),
		"fraction above one":         pool.MaxReservedFraction(1.5),
		"negative release threshold": pool.ReleaseThreshold(-1),
		"tiny max split":             pool.MaxSplitSize(1 << 20),
		"unknown expansion":          pool.Expand(9),
		"no shards":                  pool.Shards(0),
		"nil":                        nil,
	} {
		_, err := pool.New(src, opt)
		assert.Error(t, err, name)
	}
	_, err := pool.New(src, pool.MaxSplitSize(64<<20))
	assert.Error(t, err, "MaxSplitSize means nothing for expandable arenas")
	_, err = pool.New(src.Plain(), pool.Expand(pool.ExpandAlways))
	assert.Error(t, err, "ExpandAlways needs a page mapper")
	_, err = pool.New(nil)
	assert.Error(t, err)
}

// An option given twice is refused, with both calls named: which one
// would the pool keep?
func TestAnOptionGivenTwiceIsRefused(t *testing.T) {
	src := sim.New(0, 0)
	_, err := pool.New(src, pool.MaxReserved(8<<20), pool.ReleaseThreshold(0), pool.MaxReserved(4<<20))
	assert.EqualError(t, err, "pool: MaxReserved(8388608), then MaxReserved(4194304): an option given twice; give it once")
	for name, opts := range map[string][]pool.Option{
		"MaxReservedFraction": {pool.MaxReservedFraction(0.5), pool.MaxReservedFraction(0.5)},
		"ReleaseThreshold":    {pool.ReleaseThreshold(0), pool.ReleaseThreshold(1)},
		"Expand":              {pool.Expand(pool.ExpandNever), pool.Expand(pool.ExpandNever)},
		"Shards":              {pool.Shards(1), pool.Shards(2)},
		"GrowthStep":          {pool.GrowthStep(0), pool.GrowthStep(0)},
		"MaxSplitSize":        {pool.Expand(pool.ExpandNever), pool.MaxSplitSize(64 << 20), pool.MaxSplitSize(64 << 20)},
	} {
		_, err := pool.New(src, opts...)
		assert.ErrorContains(t, err, "an option given twice", name)
	}
}

// FuzzOptions makes pools with arbitrary option values: New must refuse a
// bad value with an error, and a pool it makes must allocate, free and
// close cleanly.
func FuzzOptions(f *testing.F) {
	f.Add(int64(0), 0.0, int64(-1), int64(0), int64(10<<20), 0, uint8(0), false)
	f.Add(int64(64<<20), 0.5, int64(0), int64(30<<20), int64(0), 3, uint8(1), true)
	f.Add(int64(-1), 1.5, int64(4<<20), int64(1<<20), int64(-7), 2000, uint8(9), false)
	f.Fuzz(func(t *testing.T, maxReserved int64, fraction float64, threshold, maxSplit, step int64, shards int, expand uint8, plain bool) {
		var opts []pool.Option
		if maxReserved != 0 {
			opts = append(opts, pool.MaxReserved(maxReserved))
		}
		if fraction != 0 {
			opts = append(opts, pool.MaxReservedFraction(fraction))
		}
		if threshold >= 0 {
			opts = append(opts, pool.ReleaseThreshold(threshold))
		}
		if maxSplit != 0 {
			opts = append(opts, pool.MaxSplitSize(maxSplit))
		}
		if step != 10<<20 {
			opts = append(opts, pool.GrowthStep(step))
		}
		if shards != 0 {
			opts = append(opts, pool.Shards(shards))
		}
		if expand != 0 {
			opts = append(opts, pool.Expand(pool.Expansion(expand%4)))
		}
		src := sim.New(256<<20, 0)
		var s pool.Source = src
		if plain {
			s = src.Plain()
		}
		p, err := pool.New(s, opts...)
		if err != nil {
			return
		}
		var live []pool.Block
		for _, n := range []int64{1, 4096, 3 << 20, 40 << 20} {
			b, err := p.Alloc(n)
			if err != nil {
				if n == 1 {
					t.Fatalf("Alloc(1) under options New took: %v", err) // a cap New takes holds a page
				}
				if !errors.Is(err, pool.ErrOutOfMemory) {
					t.Fatalf("Alloc(%d): %v", n, err)
				}
				continue
			}
			live = append(live, b)
		}
		for _, b := range live {
			if err := p.Free(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.CheckInvariants(src.Accessible); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if allocs, handles, reserves, _ := src.Live(); allocs+handles+reserves != 0 {
			t.Fatalf("closed pool left %d allocations, %d handles, %d reservations", allocs, handles, reserves)
		}
	})
}
