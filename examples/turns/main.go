// Command turns runs a trainer and an inference server on one device that
// holds either, not both, as reinforcement-learning post-training does:
// each lives in scopes opened with gpu.Sleepable, and while one runs the
// other sleeps, its memory given back to the driver and its addresses
// kept. The trainer keeps its weights and optimizer state across a sleep
// (gpu.KeepContents) and drops its gradients (gpu.DiscardContents); the
// server drops everything, since each turn it takes the trainer's new
// weights and builds its KV cache again.
//
//	go run ./examples/turns
package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/gpuscope/gpuscope/examples/internal/demo"
	"github.com/gpuscope/gpuscope/gpu"
)

const (
	capacity   = 48 << 20 // the device, small on purpose
	weightSize = 4 << 20  // float32s of weights, in both: 16 MiB
	stateSize  = 2 << 20  // float32s of the trainer's optimizer state: 8 MiB
	gradSize   = 2 << 20  // float32s of gradients: 8 MiB
	kvSize     = 4 << 20  // float32s of the server's KV cache: 16 MiB
	turns      = 3
)

func main() { demo.Main("turns", run) }

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
	ctx := context.Background()
	fmt.Fprintf(w, "trainer %s (weights and optimizer state kept asleep, gradients dropped), server %s (dropped asleep), device %s: not both at once\n",
		gpu.Bytes(4*(weightSize+stateSize+gradSize)), gpu.Bytes(4*(weightSize+kvSize)), gpu.Bytes(capacity))
	t, err := newTrainer(dev)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, t.close()) }()
	s := &server{}
	defer func() { err = errors.Join(err, s.close()) }()
	for turn := 1; turn <= turns; turn++ {
		if err := t.train(ctx, turn); err != nil {
			return err
		}
		report(w, fmt.Sprintf("turn %d, trainer", turn), dev)
		if s.s != nil {
			err := s.s.Wake(ctx) // fails whole: the server sleeps on, and the trainer keeps all
			fmt.Fprintf(w, "  the server cannot wake beside it: %v\n", errors.Is(err, gpu.ErrOutOfMemory))
		}
		pushed, err := t.handOver(ctx)
		if err != nil {
			return err
		}
		if turn == 1 {
			err := t.weights.CopyToHost(t.weightsOnHost)
			fmt.Fprintf(w, "  the trainer asleep refuses its buffers: %v\n", errors.Is(err, gpu.ErrAsleep))
		}
		version, err := s.serve(ctx, dev, pushed)
		if err != nil {
			return err
		}
		report(w, fmt.Sprintf("turn %d, server", turn), dev)
		fmt.Fprintf(w, "  served with weights of version %.0f\n", version)
		if err := s.s.Sleep(ctx, gpu.DiscardContents); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "the trainer's buffers kept their addresses across %d wakes: %v\n", turns-1, t.moved == 0)
	return nil
}

// report prints the device's memory: what is allocated, and what sleeps.
func report(w io.Writer, when string, dev *gpu.Device) {
	st := dev.Stats()
	fmt.Fprintf(w, "%-18s allocated %-10s asleep %-10s (scopes asleep: %d)\n", when+":",
		gpu.Bytes(st.Allocated), gpu.Bytes(st.Sleeping), st.SleepingScopes)
}

// trainer is the training side: its weights and optimizer state in one
// Sleepable scope, its gradients in another, so that each sleeps its own
// way.
type trainer struct {
	state, grads  *gpu.Scope
	weights, adam gpu.Slice[float32]
	gradient      gpu.Slice[float32]
	version       float32
	weightsOnHost []float32
	at            [3]uintptr // the buffers' addresses at the first step
	moved         int        // steps that found one elsewhere
}

func newTrainer(dev *gpu.Device) (*trainer, error) {
	t := &trainer{weightsOnHost: make([]float32, weightSize)}
	var err error
	if t.state, err = dev.NewScope(gpu.Name("trainer-state"), gpu.Sleepable()); err != nil {
		return nil, err
	}
	if t.grads, err = dev.NewScope(gpu.Name("trainer-gradients"), gpu.Sleepable()); err != nil {
		return nil, errors.Join(err, t.state.Close())
	}
	if t.weights, err = gpu.Alloc[float32](t.state, weightSize); err == nil {
		if t.adam, err = gpu.Alloc[float32](t.state, stateSize); err == nil {
			t.gradient, err = gpu.Alloc[float32](t.grads, gradSize)
		}
	}
	if err == nil {
		err = t.weights.CopyFromHost(t.weightsOnHost) // version 0
	}
	if err != nil {
		return nil, errors.Join(err, t.close())
	}
	return t, nil
}

// train wakes the trainer (after the first turn) and takes one step: the
// weights, read back from the device, go up by one, which shows that what
// they held survived the trainer's sleep.
func (t *trainer) train(ctx context.Context, turn int) error {
	if turn > 1 {
		if err := errors.Join(t.state.Wake(ctx), t.grads.Wake(ctx)); err != nil {
			return err
		}
	}
	if err := t.weights.CopyToHost(t.weightsOnHost); err != nil {
		return err
	}
	if t.weightsOnHost[0] != t.version {
		return fmt.Errorf("turn %d: the weights hold version %v, not %v", turn, t.weightsOnHost[0], t.version)
	}
	at := [3]uintptr{t.weights.Ptr(), t.adam.Ptr(), t.gradient.Ptr()}
	if turn == 1 {
		t.at = at
	} else if at != t.at {
		t.moved++
	}
	t.version++
	for i := range t.weightsOnHost {
		t.weightsOnHost[i] = t.version
	}
	if err := t.gradient.Memset(1); err != nil {
		return err
	}
	return t.weights.CopyFromHost(t.weightsOnHost)
}

// handOver puts the trainer to sleep and returns the weights it pushes to
// the server: what a weight sync between the two sends.
func (t *trainer) handOver(ctx context.Context) ([]float32, error) {
	err := errors.Join(t.state.Sleep(ctx, gpu.KeepContents), t.grads.Sleep(ctx, gpu.DiscardContents))
	return t.weightsOnHost, err
}

func (t *trainer) close() error {
	var errs []error
	for _, s := range []*gpu.Scope{t.grads, t.state} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

// server is the inference side: its weights and KV cache in one Sleepable
// scope, opened on its first turn, which sleeps dropping all.
type server struct {
	s       *gpu.Scope
	weights gpu.Slice[float32]
	kv      gpu.Slice[float32]
}

// serve wakes the server (or loads it, the first time), takes the pushed
// weights, fills its KV cache as requests would, and returns the version
// of the weights it holds, which their sum says.
func (s *server) serve(ctx context.Context, dev *gpu.Device, pushed []float32) (float64, error) {
	var err error
	if s.s == nil {
		if s.s, err = dev.NewScope(gpu.Name("server"), gpu.Sleepable()); err != nil {
			return 0, err
		}
		if s.weights, err = gpu.Alloc[float32](s.s, weightSize); err == nil {
			s.kv, err = gpu.Alloc[float32](s.s, kvSize)
		}
	} else {
		err = s.s.Wake(ctx)
	}
	if err == nil {
		err = s.weights.CopyFromHost(pushed)
	}
	if err == nil {
		err = s.kv.Memset(0x3f) // the requests' keys and values
	}
	if err != nil {
		return 0, err
	}
	w, err := demo.ToHost(s.weights)
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, v := range w {
		sum += float64(v)
	}
	return sum / weightSize, nil
}

func (s *server) close() error {
	if s.s == nil {
		return nil
	}
	return s.s.Close()
}
