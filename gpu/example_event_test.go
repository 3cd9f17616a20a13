package gpu_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpuscope/gpuscope/gpu"
)

// A model scope owns a stream; each request records an event on it and
// waits. An event seen done gives its driver event back and leaves the
// model's scope, so the loop needs no Release: after a thousand requests
// the model's scope owns its stream and nothing else.
func ExampleStream_Record() {
	dev, err := gpu.OpenHost(gpu.HostMemory(64 << 20))
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	model, err := dev.NewScope(gpu.Name("model"))
	if err != nil {
		panic(err)
	}
	defer model.Close()
	st, err := model.NewStream()
	if err != nil {
		panic(err)
	}
	request := func(*gpu.Scope) error {
		// The request's work is queued on st here.
		ev, err := st.Record()
		if err != nil {
			return err
		}
		return ev.Wait()
	}
	for range 1000 {
		if err := gpu.WithScope(context.Background(), dev, request, gpu.Name("request")); err != nil {
			panic(err)
		}
	}
	snap, err := dev.Snapshot()
	if err != nil {
		panic(err)
	}
	for _, s := range snap.Scopes {
		var kinds []string
		for _, r := range s.Resources {
			kinds = append(kinds, r.Kind)
		}
		fmt.Printf("%s owns: %s\n", s.Name, strings.Join(kinds, ", "))
	}
	// Output:
	// model owns: stream
}
