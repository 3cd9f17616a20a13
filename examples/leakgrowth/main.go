// Command leakgrowth tells a cache from a leak. Two loops run one after the
// other, each once, under gputest.Steady: one appends every result to a
// scope that never frees it (memory grows at every step), the other keeps
// the last few results in a cache of fixed size (memory grows, then
// plateaus). Both look the same in reserved memory; what tells them apart
// is whether the bytes held by live buffers keep growing after a warm-up,
// which Steady checks and the device's Summary shows per scope.
//
//	go run ./examples/leakgrowth
package main

import (
	"errors"
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

func run(w io.Writer) (err error) {
	// GPU 0 where the build and the machine have one, its pool capped at
	// 1 GiB; else a host-memory device of 1 GiB.
	dev, err := gpu.OpenDefault(gpu.MaxReserved(1<<30), gpu.HostMemory(1<<30))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	demo.Opened(w, dev)
	return runOn(w, dev)
}

// runOn is the example on dev, which run opened.
func runOn(w io.Writer, dev *gpu.Device) error {
	leak, err := dev.NewScope(gpu.Name("leak"))
	if err != nil {
		return err
	}
	defer leak.Close()
	demo.Report(w, "before", dev)
	cache, err := newCache(dev, "cache", cacheSlots)
	if err != nil {
		return err
	}
	defer cache.scope.Close()

	fmt.Fprintf(w, "Each step computes a %s result in a scope of its own and hands it to the scope that holds results.\n", gpu.Bytes(resultBytes))
	fmt.Fprintf(w, "gputest.Steady runs each loop for %d warm-up steps, then %d measured steps.\n", warmup, iterations)
	// The leak runs first, while the cache holds nothing: Steady counts the
	// buffers of every open scope, so its figures are the leak's own.
	if err := loop(w, dev, "leaking loop", leak, func(gpu.Buffer) error { return nil }); err != nil {
		return err
	}
	if err := loop(w, dev, "caching loop", cache.scope, cache.put, cache.evict); err != nil {
		return err
	}
	demo.Report(w, "after both loops", dev)
	l, c := leak.Stats(), cache.scope.Stats()
	fmt.Fprintf(w, "allocated at the end: the leak's %d results (%s) and the cache's %d (%s), %s in all\n",
		l.Allocations, gpu.Bytes(l.Live), c.Allocations, gpu.Bytes(c.Live), gpu.Bytes(l.Live+c.Live))
	fmt.Fprint(w, dev.Summary())
	explainCache(w, dev.Stats())
	return nil
}

// explainCache says why the Summary's "served from the cache" and
// "cached" differ: one counts allocations since the device opened, the
// other is free memory now.
func explainCache(w io.Writer, st gpu.Stats) {
	fmt.Fprintf(w, "%d served from the cache beside cached %s: served counts allocations since the device opened, cached is free memory now.\n",
		st.ServedFromCache, gpu.Bytes(st.Cached))
	fmt.Fprintf(w, "%d of the %d allocations found free memory the pool held (a result the cache had freed, or room left in memory reserved for an earlier one) and made no driver call; the other %d made the pool reserve more.\n",
		st.ServedFromCache, st.Allocs, st.Allocs-st.ServedFromCache)
	fmt.Fprintf(w, "Now %s of the %s reserved is in live results, so %s is cached.\n",
		gpu.Bytes(st.Allocated), gpu.Bytes(st.Reserved), gpu.Bytes(st.Cached))
}

// loop runs one loop under gputest.Steady: before each step it calls the
// prepare functions, then computes a result in a child of held and hands it
// to keep. It prints what held holds after each step and Steady's verdict.
func loop(w io.Writer, dev *gpu.Device, name string, held *gpu.Scope, keep func(gpu.Buffer) error, prepare ...func() error) error {
	var sizes []string
	var stepErr error
	step := func() error {
		for _, p := range prepare {
			if err := p(); err != nil {
				return err
			}
		}
		err := gpu.WithScope(held.Context(), dev, func(s *gpu.Scope) error {
			r, err := s.Alloc(resultBytes)
			if err != nil {
				return err
			}
			if err := r.Memset(byte(len(sizes))); err != nil {
				return err
			}
			if err := s.Keep(r); err != nil {
				return err
			}
			return keep(r)
		}, gpu.Name("step"))
		sizes = append(sizes, gpu.Bytes(held.Stats().Live).String())
		stepErr = err
		return err
	}
	v := &verdict{}
	gputest.Steady(v, warmup, iterations, step)
	if stepErr != nil {
		return stepErr
	}
	fmt.Fprintf(w, "%s, bytes its scope holds after each step: warm-up %s; measured %s\n", name,
		strings.Join(sizes[:warmup], ", "), strings.Join(sizes[warmup:], ", "))
	if v.grew == "" {
		fmt.Fprintf(w, "%s: a cache, it stops growing: gputest.Steady passes\n", name)
	} else {
		fmt.Fprintf(w, "%s: a leak, it grows at every measured step: gputest.Steady fails: %s\n", name, v.grew)
	}
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

// cache keeps the last n results: evict frees the oldest when the cache is
// full, to make room before the next result is computed.
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

func (c *cache) evict() error {
	if len(c.slots) < c.n {
		return nil
	}
	oldest := c.slots[0]
	c.slots = c.slots[1:]
	return c.scope.Free(oldest)
}

func (c *cache) put(b gpu.Buffer) error {
	c.slots = append(c.slots, b)
	return nil
}
