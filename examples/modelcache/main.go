// Command modelcache serves requests for six models on a device that holds
// three. Each model lives in a scope opened with gpu.Evictable: when a load
// finds the device full, the device evicts the idle model with the lowest
// priority, the least recently used among equals, and the cache loads it
// again the next time a request needs it. A model serving a request is in
// use, and never evicted under it.
//
//	go run ./examples/modelcache
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gpuscope/gpuscope/examples/internal/demo"
	"github.com/gpuscope/gpuscope/gpu"
)

// models are what the cache serves; "a" is the popular one, kept longest.
var models = []string{"a", "b", "c", "d", "e", "f"}

// requests are the models asked for, in order.
var requests = []string{"a", "b", "c", "d", "a", "e", "f", "b", "a", "c"}

const (
	capacity   = 64 << 20 // the device, small on purpose
	modelElems = 5 << 20  // float32s per model: 20 MiB, three fit
)

func main() { demo.Main("modelcache", run) }

func run(w io.Writer) (err error) {
	// GPU 0 where the build and the machine have one, its pool capped at
	// capacity; else a host-memory device of that capacity.
	dev, err := gpu.OpenDefault(gpu.MaxReserved(capacity), gpu.HostMemory(capacity))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	demo.Opened(w, dev)
	return runOn(w, dev)
}

// runOn is the example on dev, which run opened.
func runOn(w io.Writer, dev *gpu.Device) (err error) {
	fmt.Fprintf(w, "%d models of %s on a device of %s\n", len(models), gpu.Bytes(modelElems*4), gpu.Bytes(capacity))
	var priorities []string
	for _, name := range models {
		priorities = append(priorities, fmt.Sprintf("%s %d", name, priorityOf(name)))
	}
	fmt.Fprintf(w, "priorities: %s; a full device evicts the idle model of the lowest priority, the least recently used among equals\n",
		strings.Join(priorities, ", "))
	c := &cache{dev: dev, loaded: map[string]*model{}}
	defer func() { err = errors.Join(err, c.close()) }()
	for i, name := range requests {
		m, how, err := c.get(name)
		if err != nil {
			return err
		}
		sum, err := m.infer()
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "request %2d: model %s, %-8s sum %.0f%s\n", i+1, name, how, sum, c.evictedSince())
	}
	st := dev.Stats()
	fmt.Fprintf(w, "loads %d (reloads %d), evictions %d (%s)\n", c.loads, c.reloads, st.Evictions, gpu.Bytes(st.EvictedBytes))
	return nil
}

// cache holds the models loaded on the device.
type cache struct {
	dev     *gpu.Device
	loaded  map[string]*model
	ever    map[string]bool // models loaded once at least
	loads   int
	reloads int
}

// model is one model's weights, in a scope of its own.
type model struct {
	name    string
	s       *gpu.Scope
	weights gpu.Slice[float32]
}

// evicted reports whether the device evicted m to make room.
func (m *model) evicted() bool { return errors.Is(context.Cause(m.s.Context()), gpu.ErrEvicted) }

// priorityOf is the eviction priority of model name: "a", the popular
// one, is evicted last.
func priorityOf(name string) int {
	if name == "a" {
		return 1
	}
	return 0
}

// get returns the model name, loading it if it is not on the device, and
// says how: "hit", "load" or "reload".
func (c *cache) get(name string) (*model, string, error) {
	if m := c.loaded[name]; m != nil && !m.evicted() {
		return m, "hit", nil
	}
	how := "load"
	if c.ever[name] {
		how = "reload"
		c.reloads++
	}
	s, err := c.dev.NewScope(gpu.Name(name), gpu.Evictable(priorityOf(name)))
	if err != nil {
		return nil, "", err
	}
	m := &model{name: name, s: s}
	if m.weights, err = gpu.Alloc[float32](s, modelElems); err == nil {
		err = m.weights.CopyFromHost(weightsOf(name))
	}
	if err != nil {
		return nil, "", errors.Join(err, s.Close())
	}
	if c.ever == nil {
		c.ever = map[string]bool{}
	}
	c.ever[name] = true
	c.loads++
	c.loaded[name] = m
	return m, how, nil
}

// evictedSince says which models the device evicted since it was last
// asked, and forgets them.
func (c *cache) evictedSince() string {
	var gone []string
	for name, m := range c.loaded {
		if m.evicted() {
			gone = append(gone, fmt.Sprintf("%s, priority %d", name, priorityOf(name)))
			m.s.Close() // ended already: Close forgets it
			delete(c.loaded, name)
		}
	}
	if len(gone) == 0 {
		return ""
	}
	slices.Sort(gone)
	return fmt.Sprintf("   (evicted %s)", strings.Join(gone, "; "))
}

// close closes the scopes of the models loaded, ending them.
func (c *cache) close() error {
	var errs []error
	for _, m := range c.loaded {
		errs = append(errs, m.s.Close())
	}
	return errors.Join(errs...)
}

// infer stands for a forward pass: it reads the weights inside Use, where
// the device cannot evict them, and sums them on the host.
func (m *model) infer() (float64, error) {
	host := make([]float32, modelElems)
	err := m.weights.Buffer.Use(func(uintptr) error { return m.weights.CopyToHost(host) })
	sum := 0.0
	for _, v := range host {
		sum += float64(v)
	}
	return sum, err
}

// weightsOf makes the weights of model name: every element is its index
// in models, plus one, so that a request's sum tells which model served it.
func weightsOf(name string) []float32 {
	w := make([]float32, modelElems)
	v := float32(slices.Index(models, name) + 1)
	for i := range w {
		w[i] = v
	}
	return w
}
