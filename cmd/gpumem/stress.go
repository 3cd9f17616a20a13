package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuscope/gpuscope/gpu"
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

// stressOptions are the flags of stress.
type stressOptions struct {
	driver     string
	seconds    float64
	goroutines int
}

func (o *stressOptions) declare(fs *flag.FlagSet) {
	fs.StringVar(&o.driver, "driver", "host", "host, or cuda (GPU 0, in a build with -tags cuda)")
	fs.Float64Var(&o.seconds, "seconds", 5, "how long to run")
	fs.IntVar(&o.goroutines, "goroutines", 16, "goroutines opening scopes at once")
}

// run opens and closes nested scopes from many goroutines until the time
// is up, allocating, writing, keeping and freeing buffers in them; then it
// checks that nothing is left. It is the workload compute-sanitizer runs.
func (o *stressOptions) run(extra []string, stdout, _ io.Writer) error {
	if len(extra) > 0 {
		return usageErrorf("stress takes no FILE, only flags: %q", extra)
	}

	if o.seconds <= 0 || o.goroutines <= 0 {
		return errors.New("--seconds and --goroutines must be positive")
	}
	dev, err := openStressDevice(o.driver)
	if err != nil {
		return err
	}
	res := stressResult{Driver: o.driver, Goroutines: o.goroutines}
	var c stressCounts
	deadline := time.Now().Add(time.Duration(o.seconds * float64(time.Second)))
	var wg sync.WaitGroup
	errs := make(chan error, o.goroutines)
	start := time.Now()
	for g := range o.goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for time.Now().Before(deadline) {
				if err := c.nest(context.Background(), dev, r, 0); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	res.Seconds = time.Since(start).Seconds()
	res.Scopes, res.Allocations, res.Kept, res.Freed = c.scopes.Load(), c.allocs.Load(), c.kept.Load(), c.freed.Load()
	st := dev.Stats()
	res.AllocatedAfter, res.OpenScopes = st.Allocated, st.OpenScopes
	var runErr error
	for err := range errs {
		runErr = errors.Join(runErr, err)
	}
	runErr = errors.Join(runErr, dev.Close())
	if res.AllocatedAfter != 0 || res.OpenScopes != 0 {
		runErr = errors.Join(runErr, fmt.Errorf("left behind: %d bytes, %d scopes", res.AllocatedAfter, res.OpenScopes))
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return errors.Join(runErr, enc.Encode(res))
}

// openStressDevice opens the device --driver names.
func openStressDevice(driver string) (*gpu.Device, error) {
	switch driver {
	case "host":
		return gpu.OpenHost(gpu.HostMemory(4 << 30))
	case "cuda":
		return gpu.Open(0)
	}
	return nil, fmt.Errorf("--driver %q: want host or cuda", driver)
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
