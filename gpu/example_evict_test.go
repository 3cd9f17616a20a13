package gpu_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuscope/gpuscope/gpu"
)

// A cache of models on a device that holds one: loading the second evicts
// the first, whose owner sees why and loads it again when it needs it.
func ExampleEvictable() {
	dev, err := gpu.OpenHost(gpu.HostMemory(4 << 20))
	if err != nil {
		panic(err)
	}
	defer dev.Close()

	load := func(name string) *gpu.Scope {
		s, err := dev.NewScope(gpu.Name(name), gpu.Evictable(0))
		if err != nil {
			panic(err)
		}
		if _, err := s.Alloc(3 << 20); err != nil {
			panic(err)
		}
		fmt.Println("loaded", name)
		return s
	}
	a := load("model-a")
	b := load("model-b") // no room for both: model-a, idle, gives way
	if errors.Is(context.Cause(a.Context()), gpu.ErrEvicted) {
		fmt.Println("model-a was evicted")
		a.Close()
		a = load("model-a") // and model-b gives way in turn
	}
	defer a.Close()
	defer b.Close()
	st := dev.Stats()
	fmt.Println("evictions:", st.Evictions)
	// Output:
	// loaded model-a
	// loaded model-b
	// model-a was evicted
	// loaded model-a
	// evictions: 2
}
