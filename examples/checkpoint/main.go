// Command checkpoint saves device buffers to a file every few steps of a
// training-like loop, "crashes" by cancelling the loop's context (the next
// allocation fails, and the scope frees everything), and restores the last
// checkpoint into a fresh scope. The restored bytes equal the saved ones,
// and nothing is left allocated.
//
//	go run ./examples/checkpoint
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/gpuscope/gpuscope/examples/internal/demo"
	"github.com/gpuscope/gpuscope/gpu"
)

const (
	params    = 256 << 10 // float32 parameters: 1 MiB
	every     = 5         // steps between checkpoints
	crashAt   = 12        // the step during which the context is cancelled
	lastStep  = 20
	chkptName = "params.ckpt"
)

var errCrash = errors.New("simulated crash")

func main() {
	demo.Main("checkpoint", func(w io.Writer) error {
		dir, err := os.MkdirTemp("", "checkpoint")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		return run(w, dir)
	})
}

func run(w io.Writer, dir string) (err error) {
	// GPU 0 where the build and the machine have one, its pool capped at
	// 1 GiB; else a host-memory device of 1 GiB.
	dev, err := gpu.OpenDefault(gpu.MaxReserved(1<<30), gpu.HostMemory(1<<30))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	demo.Opened(w, dev)
	return runOn(w, dev, dir)
}

// runOn is the example on dev, which run opened.
func runOn(w io.Writer, dev *gpu.Device, dir string) error {
	path := filepath.Join(dir, chkptName)
	demo.Report(w, "before", dev)

	// First run: trains from scratch until the crash.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	err := train(ctx, dev, w, path, 0, func(step int) {
		if step == crashAt {
			cancel(errCrash)
		}
	})
	fmt.Fprintf(w, "first run ended: %v (the crash: %v)\n", err, errors.Is(err, errCrash))
	if !errors.Is(err, errCrash) {
		return fmt.Errorf("expected the simulated crash, got %w", err)
	}
	demo.Report(w, "after the crash", dev)

	// Second run: restores the last checkpoint and goes on.
	step, _, err := readCheckpoint(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "restoring the checkpoint of step %d\n", step)
	if err := train(context.Background(), dev, w, path, step, nil); err != nil {
		return err
	}
	demo.Report(w, "after the second run", dev)

	// Every step added its number: a run without the crash ends at 1+...+20.
	step, final, err := readCheckpoint(path)
	if err != nil {
		return err
	}
	want := float32(lastStep * (lastStep + 1) / 2)
	same := true
	for _, v := range final {
		same = same && v == want
	}
	fmt.Fprintf(w, "parameters at step %d: %v, as a run without the crash would have them: %v\n", step, final[0], same)
	return nil
}

// train runs steps from start (restoring the checkpoint when start > 0)
// to lastStep, saving a checkpoint every few steps. hook runs before each
// step.
func train(ctx context.Context, dev *gpu.Device, w io.Writer, path string, start int, hook func(step int)) error {
	return gpu.WithScope(ctx, dev, func(s *gpu.Scope) error {
		p, err := gpu.Alloc[float32](s, params)
		if err != nil {
			return err
		}
		if start == 0 {
			if err := p.Memset(0); err != nil {
				return err
			}
		} else {
			_, saved, err := readCheckpoint(path)
			if err != nil {
				return err
			}
			if err := p.CopyFromHost(saved); err != nil {
				return err
			}
			back, err := demo.ToHost(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "restored %s into a fresh scope: equal to the saved bytes: %v\n",
				gpu.Bytes(p.Size()), bytes.Equal(floatBytes(back), floatBytes(saved)))
		}
		for step := start + 1; step <= lastStep; step++ {
			if hook != nil {
				hook(step)
			}
			if err := update(s, p, step); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			if step%every == 0 {
				if err := save(p, path, step); err != nil {
					return err
				}
				demo.Report(w, fmt.Sprintf("inside, at step %d", step), s.Device())
				fmt.Fprintf(w, "step %d: checkpoint saved\n", step)
			}
		}
		return nil
	}, gpu.Name("training"))
}

// update adds step to every parameter, through a gradient buffer in a
// scope of the step's own: once the context is cancelled, its allocation
// fails.
func update(s *gpu.Scope, p gpu.Slice[float32], step int) error {
	return gpu.WithScope(s.Context(), s.Device(), func(st *gpu.Scope) error {
		host, err := demo.ToHost(p)
		if err != nil {
			return err
		}
		for i := range host {
			host[i] += float32(step)
		}
		grad, err := gpu.Alloc[float32](st, params)
		if err != nil {
			return err
		}
		if err := grad.CopyFromHost(host); err != nil {
			return err
		}
		return p.CopyFrom(grad.Buffer)
	}, gpu.Name("step"))
}

func save(p gpu.Slice[float32], path string, step int) error {
	host, err := demo.ToHost(p)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, int64(step)); err != nil {
		return err
	}
	b.Write(floatBytes(host))
	return os.WriteFile(path, b.Bytes(), 0o600)
}

func readCheckpoint(path string) (step int, values []float32, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, nil, err
	}
	var s int64
	r := bytes.NewReader(data)
	if err := binary.Read(r, binary.LittleEndian, &s); err != nil {
		return 0, nil, err
	}
	values = make([]float32, params)
	if err := binary.Read(r, binary.LittleEndian, values); err != nil {
		return 0, nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return int(s), values, nil
}

func floatBytes(v []float32) []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, v)
	return b.Bytes()
}
