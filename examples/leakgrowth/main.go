// Command leakgrowth tells a cache from a leak. Two loops run side by side:
// one keeps the last few results in a cache of fixed size (memory grows,
// then plateaus), the other appends every result to a scope that never
// frees (memory grows at every step). Both look the same in reserved
// memory; what tells them apart is whether the bytes held by live buffers
// keep growing after a warm-up, which gputest.Steady checks and the
// device's Summary shows per scope.
//
//	go run ./examples/leakgrowth
package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/gpuscope/gpuscope/examples/internal/demo"
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

const (
	resultBytes = 1 << 20
	cacheSlots  = 4
	warmup      = cacheSlots
	iterations  = 8
)

func main() { demo.Main("leakgrowth", run) }

func run(w io.Writer) error {
	return demo.OnDevice(w, 1<<30, runOn)
}

// runOn is the example on dev, which run opened.
func runOn(w io.Writer, dev *gpu.Device) error {
	demo.Report(w, "before", dev)

	cache, err := newCache(dev, "cache", cacheSlots)
	if err != nil {
		return err
	}
	defer cache.scope.Close()
	leak, err := dev.NewScope(gpu.Name("leak"))
	if err != nil {
		return err
	}
	defer leak.Close()

	step := 0
	compute := func(keep func(gpu.Buffer) error, into *gpu.Scope) error {
		// Each step computes a result in a scope of its own and keeps it in
		// the scope that holds results.
		return gpu.WithScope(into.Context(), dev, func(s *gpu.Scope) error {
			r, err := s.Alloc(resultBytes)
			if err != nil {
				return err
			}
			if err := r.Memset(byte(step)); err != nil {
				return err
			}
			if err := s.Keep(r); err != nil {
				return err
			}
			return keep(r)
		}, gpu.Name("step"))
	}
	caching := func() error { step++; return compute(cache.put, cache.scope) }
	leaking := func() error { step++; return compute(func(gpu.Buffer) error { return nil }, leak) }

	for _, loop := range []struct {
		name string
		fn   func() error
		held *gpu.Scope
	}{{"caching loop", caching, cache.scope}, {"leaking loop", leaking, leak}} {
		var sizes []string
		for range warmup + iterations {
			if err := loop.fn(); err != nil {
				return err
			}
			sizes = append(sizes, fmt.Sprint(gpu.Bytes(loop.held.Stats().Live)))
		}
		fmt.Fprintf(w, "%s, held after each step: %s\n", loop.name, strings.Join(sizes, ", "))
		v := &verdict{}
		gputest.Steady(v, warmup, iterations, loop.fn)
		if v.grew == "" {
			fmt.Fprintf(w, "%s: plateau (a cache): gputest.Steady passes\n", loop.name)
		} else {
			fmt.Fprintf(w, "%s: grows at every step (a leak): %s\n", loop.name, v.grew)
		}
	}
	demo.Report(w, "after both loops", dev)
	fmt.Fprint(w, dev.Summary())
	return nil
}

// verdict is the gputest.TestingT the example hands Steady: it keeps the
// report's summary and its first growth, on one line.
type verdict struct{ grew string }

func (v *verdict) Error(args ...any) {
	lines := strings.Split(strings.TrimPrefix(fmt.Sprint(args...), "gputest: "), "\n")
	v.grew = strings.TrimSuffix(lines[0], ":")
	if len(lines) > 1 && strings.TrimSpace(lines[1]) != "" {
		v.grew += " (the first: " + strings.TrimSpace(lines[1]) + ")"
	}
}

// cache keeps the last n results, freeing the oldest.
type cache struct {
	scope *gpu.Scope
	slots []gpu.Buffer
	n     int
}

func newCache(dev *gpu.Device, name string, n int) (*cache, error) {
	s, err := dev.NewScope(gpu.Name(name))
	if err != nil {
		return nil, err
	}
	return &cache{scope: s, n: n}, nil
}

func (c *cache) put(b gpu.Buffer) error {
	c.slots = append(c.slots, b)
	if len(c.slots) <= c.n {
		return nil
	}
	oldest := c.slots[0]
	c.slots = c.slots[1:]
	return c.scope.Free(oldest)
}
