package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/units"
)

// stressResult is what a stress run prints.
type stressResult struct {
	Driver      string  `json:"driver"`
	Seconds     float64 `json:"seconds"`
	Goroutines  int     `json:"goroutines"`
	Scopes      int64   `json:"scopes"`
	Allocations int64   `json:"allocations"`
	Kept        int64   `json:"kept"`
	Freed       int64   `json:"freed"`
	// What is left when every scope has ended: both must be zero.
	AllocatedAfter int64 `json:"allocated_after"`
	OpenScopes     int   `json:"open_scopes_after"`
}

const stressUsage = `usage: gpumem stress [flags]

stress opens and ends nested scopes, four deep, from many goroutines for a
while, allocating, writing, keeping and freeing buffers in them; then it
checks that no memory and no scope is left, and prints what it did as
JSON. It is the workload compute-sanitizer runs on a GPU. Exit status: 0;
1 for an error, or for anything left behind.
`

// stressOptions are the flags of stress.
type stressOptions struct {
	driver     string
	seconds    float64
	goroutines int
}

// maxStressSeconds is the longest a stress run may be asked to last.
const maxStressSeconds = 24 * 60 * 60

// stressMemory is the memory of stress's host device: room for
// maxStressGoroutines at once, each holding at most 16 buffers of 3 MiB
// four scopes deep. Tests lower it.
var stressMemory int64 = 4 << 30

// maxStressGoroutines is the most goroutines a stress run takes.
const maxStressGoroutines = 64

func (o *stressOptions) declare(fs *flag.FlagSet) {
	driverVar(fs, &o.driver, "host", "host", "cuda")
	secondsVar(fs, &o.seconds, "seconds", 5, 0.001, maxStressSeconds, "how long to run, in `seconds`")
	intVar(fs, &o.goroutines, "goroutines", 16, 1, maxStressGoroutines, "`goroutines` opening scopes at once")
}

// run opens and closes nested scopes from many goroutines until the time
// is up, or the run's context ends, allocating, writing, keeping and
// freeing buffers in them (each goroutine at least once, so that a run
// always does something); then it checks that nothing is left.
func (o *stressOptions) run(c *call) error {
	if err := checkDriver(o.driver); err != nil {
		return err
	}
	if len(c.args) > 0 {
		return usageErrorf("stress", "stress takes no FILE, only flags: %q", c.args)
	}
	dev, err := openStressDevice(o.driver)
	if err != nil {
		return err
	}
	res := stressResult{Driver: o.driver, Goroutines: o.goroutines}
	var counts stressCounts
	deadline := time.Now().Add(time.Duration(o.seconds * float64(time.Second)))
	var wg sync.WaitGroup
	errs := make(chan error, o.goroutines)
	start := time.Now()
	for g := range o.goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for more := true; more; more = time.Now().Before(deadline) && c.ctx.Err() == nil {
				if err := counts.nest(context.Background(), dev, r, 0); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	res.Seconds = time.Since(start).Seconds()
	res.Scopes, res.Allocations, res.Kept, res.Freed = counts.scopes.Load(), counts.allocs.Load(), counts.kept.Load(), counts.freed.Load()
	st := dev.Stats()
	res.AllocatedAfter, res.OpenScopes = st.Allocated, st.OpenScopes
	runErr := c.ctx.Err()
	if runErr != nil {
		runErr = stopped(runErr)
	}
	for err := range errs {
		runErr = errors.Join(runErr, err)
	}
	runErr = errors.Join(runErr, dev.Close())
	if res.AllocatedAfter != 0 || res.OpenScopes != 0 {
		runErr = errors.Join(runErr, fmt.Errorf("left behind: %s in %d scopes", units.WithBytes(res.AllocatedAfter), res.OpenScopes))
	}
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return errors.Join(runErr, enc.Encode(res))
}

// openStressDevice opens the device --driver names.
func openStressDevice(driver string) (*gpu.Device, error) {
	if driver == "cuda" {
		return openCUDADevice()
	}
	return gpu.OpenHost(gpu.HostMemory(stressMemory))
}

// stressCounts counts what the goroutines of a stress run did.
type stressCounts struct {
	scopes, allocs, kept, freed atomic.Int64
}

// nest runs a scope at depth, its buffers written and some freed or kept,
// with a scope nested in it down to depth 3.
func (c *stressCounts) nest(ctx context.Context, dev *gpu.Device, r *rand.Rand, depth int) error {
	return gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
		c.scopes.Add(1)
		var last gpu.Buffer
		for range 1 + r.IntN(4) {
			b, err := s.Alloc(int64(1 + r.IntN(3<<20)))
			if err != nil {
				return err
			}
			c.allocs.Add(1)
			if err := b.Memset(byte(depth)); err != nil {
				return err
			}
			last = b
		}
		if r.IntN(3) == 0 {
			if err := s.Free(last); err != nil {
				return err
			}
			c.freed.Add(1)
		} else if depth > 0 && r.IntN(2) == 0 {
			if err := s.Keep(last); err != nil {
				return err
			}
			c.kept.Add(1)
		}
		if depth < 3 {
			return c.nest(s.Context(), dev, r, depth+1)
		}
		return nil
	}, gpu.Name(fmt.Sprint("d", depth)))
}
