// Command train trains a multi-layer perceptron classifier the way a
// PyTorch training loop does, with every byte of device memory in a scope:
// the weights and Adam's moments in a long-lived scope, each step's
// gradients in a step scope, each micro-batch's activations in a child of
// it, a checkpoint every N steps through a child scope of the weights. It
// prints the loss and the accuracy as they improve, and shows that the
// allocated memory is flat after the first step and zero after.
//
//	go run ./examples/train                  # on the host device: gonum's BLAS
//	go run -tags cuda ./examples/train       # on GPU 0: the kernels of kernels/train.cu
//
// The data are points labelled by a fixed random linear rule (see
// teacher): the best accuracy is 100%, chance 1/classes. With -bench, it
// times the step on scopes against the same step allocating once up front
// and, with CUDA, allocating with cuMemAllocAsync directly.
package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/gpuscope/gpuscope/examples/internal/demo"
	"github.com/gpuscope/gpuscope/gpu"
)

// config is what the flags set.
type config struct {
	steps, batch, hidden, layers, in, classes, accum int
	lr                                               float64
	logEvery, checkpointEvery, testSize              int
	checkpoint, trace, ptx                           string
	seed                                             uint64
	bench                                            string
	benchSteps, benchRounds                          int
	capacity                                         int64
}

func defaults() config {
	return config{steps: 200, batch: 256, hidden: 1024, layers: 3, in: 16, classes: 10, accum: 1,
		lr: 1e-3, logEvery: 50, checkpointEvery: 100, testSize: 2048, seed: 1,
		benchSteps: 100, benchRounds: 5, capacity: 1 << 30}
}

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	c := defaults()
	fs.IntVar(&c.steps, "steps", c.steps, "training steps")
	fs.IntVar(&c.batch, "batch", c.batch, "rows per micro-batch")
	fs.IntVar(&c.hidden, "hidden", c.hidden, "width of the hidden layers")
	fs.IntVar(&c.layers, "layers", c.layers, "linear layers (ReLU between them)")
	fs.IntVar(&c.in, "in", c.in, "input features")
	fs.IntVar(&c.classes, "classes", c.classes, "classes")
	fs.IntVar(&c.accum, "accum", c.accum, "micro-batches accumulated per step (gradient accumulation)")
	fs.Float64Var(&c.lr, "lr", c.lr, "Adam's learning rate at the start (it falls linearly to a tenth)")
	fs.IntVar(&c.logEvery, "log-every", c.logEvery, "steps between progress lines")
	fs.IntVar(&c.checkpointEvery, "checkpoint-every", c.checkpointEvery, "steps between checkpoints (0: none)")
	fs.IntVar(&c.testSize, "test", c.testSize, "held-out points the accuracy is measured on")
	fs.StringVar(&c.checkpoint, "checkpoint", "", "file the checkpoints are written to (default: only their hash is printed)")
	fs.StringVar(&c.trace, "trace", "", "file to record the allocation trace to (gpumem replay and plot read it)")
	fs.StringVar(&c.ptx, "ptx", "", "load the kernels from this PTX file instead of the built-in kernels/train.ptx")
	fs.Uint64Var(&c.seed, "seed", c.seed, "seed of the data and the initial weights")
	fs.StringVar(&c.bench, "bench", "", "after training, time the step with these allocators, comma-separated: scopes, upfront, direct")
	fs.IntVar(&c.benchSteps, "bench-steps", c.benchSteps, "steps per timed run")
	fs.IntVar(&c.benchRounds, "bench-rounds", c.benchRounds, "timed runs per allocator")
	fs.Int64Var(&c.capacity, "capacity", c.capacity, "device memory the pool may hold, in bytes")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, v := range []struct {
		name string
		val  int
	}{{"steps", c.steps}, {"batch", c.batch}, {"hidden", c.hidden}, {"in", c.in}, {"accum", c.accum},
		{"log-every", c.logEvery}, {"test", c.testSize}, {"bench-steps", c.benchSteps}, {"bench-rounds", c.benchRounds}} {
		if v.val <= 0 {
			return c, fmt.Errorf("-%s %d: must be positive", v.name, v.val)
		}
	}
	if c.capacity <= 0 {
		return c, fmt.Errorf("-capacity %d: must be positive", c.capacity)
	}
	if c.layers < 2 {
		return c, fmt.Errorf("-layers %d: need at least 2", c.layers)
	}
	if c.classes < 2 {
		return c, fmt.Errorf("-classes %d: need at least 2", c.classes)
	}
	if c.checkpointEvery < 0 {
		return c, fmt.Errorf("-checkpoint-every %d: must not be negative", c.checkpointEvery)
	}
	if !(c.lr > 0) {
		return c, fmt.Errorf("-lr %v: must be positive", c.lr)
	}
	for _, m := range benchModes(c.bench) {
		if m != "scopes" && m != "upfront" && m != "direct" {
			return c, fmt.Errorf("-bench: unknown allocator %q (scopes, upfront, direct)", m)
		}
	}
	return c, nil
}

func benchModes(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func main() {
	cfg, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		os.Exit(2)
	}
	if err := run(os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		os.Exit(1)
	}
}

// trainer is the model and what runs it.
type trainer struct {
	cfg     config
	dev     *gpu.Device
	st      *gpu.Stream // the kernels' stream; nil on the host device
	ops     ops
	layers  []layer
	adamT   int // Adam steps taken
	teacher *teacher
	rng     *rand.Rand
	x, y    []float32 // a micro-batch on the host
}

func run(w io.Writer, cfg config) (err error) {
	// GPU 0 where the build and the machine have one, its pool capped at
	// cfg.capacity; else a host-memory device of that capacity.
	dev, err := gpu.OpenDefault(gpu.MaxReserved(cfg.capacity), gpu.HostMemory(cfg.capacity))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	demo.Opened(w, dev)
	return runOn(w, dev, cfg)
}

// runOn is the example on dev, which run opened.
func runOn(w io.Writer, dev *gpu.Device, cfg config) error {
	var (
		rec   *gpu.Recording
		trace *os.File
		err   error
	)
	if cfg.trace != "" {
		if trace, err = os.Create(cfg.trace); err != nil {
			return err
		}
		defer trace.Close()
		if rec, err = dev.StartRecording(trace); err != nil {
			return err
		}
		defer rec.Stop()
	}
	err = gpu.WithScope(context.Background(), dev, func(top *gpu.Scope) error {
		t := &trainer{cfg: cfg, dev: dev, teacher: newTeacher(cfg.in, cfg.classes, cfg.seed),
			rng: rand.New(rand.NewPCG(cfg.seed, 2)),
			x:   make([]float32, cfg.batch*cfg.in), y: make([]float32, cfg.batch)}
		if err := t.setup(w, top); err != nil {
			return err
		}
		var opts []gpu.ScopeOption
		if t.st != nil {
			opts = append(opts, gpu.OnStream(t.st))
		}
		return gpu.WithScope(top.Context(), dev, func(weights *gpu.Scope) error {
			return t.train(w, weights)
		}, append(opts, gpu.Name("weights"))...)
	}, gpu.Name("train"))
	if err != nil {
		return err
	}
	st := dev.Stats()
	fmt.Fprintf(w, "after the scopes: %d buffers live, allocated %s, %d scopes open\n", st.ActiveBlocks, gpu.Bytes(st.Allocated), st.OpenScopes)
	if rec != nil {
		if err := errors.Join(rec.Stop(), trace.Close()); err != nil {
			return err
		}
		fmt.Fprintf(w, "allocation trace written to %s\n", cfg.trace)
	}
	return nil
}

// setup picks what computes: our kernels where the device runs them, on a
// stream of top's, and gonum's BLAS on the host device.
func (t *trainer) setup(w io.Writer, top *gpu.Scope) error {
	ptx := trainPTX
	if t.cfg.ptx != "" {
		var err error
		if ptx, err = os.ReadFile(t.cfg.ptx); err != nil {
			return err
		}
	}
	st, err := top.NewStream()
	if err != nil {
		return err
	}
	k, err := loadKernels(top, st, ptx)
	switch {
	case errors.Is(err, gpu.ErrNotSupported):
		t.ops = hostOps{}
		fmt.Fprintln(w, "compute: gonum's BLAS and Go loops, in the host device's memory")
	case err != nil:
		return err
	default:
		t.ops, t.st = k, st
		fmt.Fprintln(w, "compute: our kernels (kernels/train.cu) on a stream of the scope's")
	}
	return nil
}

func (t *trainer) sizes() []int {
	s := []int{t.cfg.in}
	for range t.cfg.layers - 1 {
		s = append(s, t.cfg.hidden)
	}
	return append(s, t.cfg.classes)
}

// upload copies v to the start of x, ordered on the trainer's stream.
func (t *trainer) upload(x tensor, v []float32) error {
	if x.raw != 0 {
		return t.dev.Driver().CopyHtoD(x.raw, floatBytes(v), t.st.ID())
	}
	return x.s.CopyFromHost(v)
}

// download copies the first len(v) elements of x to v.
func (t *trainer) download(v []float32, x tensor) error {
	if x.raw != 0 {
		return t.dev.Driver().CopyDtoH(floatBytes(v), x.raw, t.st.ID())
	}
	return x.s.CopyToHost(v)
}

func floatBytes(v []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}

func (t *trainer) train(w io.Writer, weights *gpu.Scope) error {
	cfg := t.cfg
	root := scopeArena{dev: t.dev, s: weights}
	var err error
	if t.layers, err = newLayers(root, t.sizes(), rand.New(rand.NewPCG(cfg.seed, 3)), t.upload); err != nil {
		return err
	}
	weightBytes := weights.Stats().Live
	fmt.Fprintf(w, "model: %v, %d parameters; weights and Adam's moments: %s in scope %q\n",
		t.sizes(), paramCount(t.layers), gpu.Bytes(weightBytes), weights.Path())
	fmt.Fprintf(w, "step: %d micro-batch(es) of %d rows; data: labels from a fixed random linear rule (ceiling 100%%, chance %.0f%%)\n",
		cfg.accum, cfg.batch, 100/float64(cfg.classes))

	testX, testY := make([]float32, cfg.testSize*cfg.in), make([]float32, cfg.testSize)
	t.teacher.sample(rand.New(rand.NewPCG(cfg.seed, 4)), testX, testY)

	var (
		between, stepPeak, cpPeak, evalPeak int64
		flat                                = true
		firstLoss                           = math.NaN()
		loss, acc                           float64
	)
	for step := 1; step <= cfg.steps; step++ {
		logging := step == 1 || step%cfg.logEvery == 0 || step == cfg.steps
		var peak int64
		if loss, acc, peak, err = t.step(root, logging); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		stepPeak = max(stepPeak, peak)
		if step == 1 {
			firstLoss = loss
		}
		if cfg.checkpointEvery > 0 && step%cfg.checkpointEvery == 0 {
			peak, err := t.saveCheckpoint(w, weights, step)
			if err != nil {
				return fmt.Errorf("checkpoint at step %d: %w", step, err)
			}
			cpPeak = max(cpPeak, peak)
		}
		if logging {
			testAcc, peak, err := t.evaluate(root, testX, testY)
			if err != nil {
				return fmt.Errorf("evaluating at step %d: %w", step, err)
			}
			evalPeak = max(evalPeak, peak)
			fmt.Fprintf(w, "step %4d  loss %.4f  train accuracy %5.1f%%  test accuracy %5.1f%%  allocated %s\n",
				step, loss, 100*acc, 100*testAcc, gpu.Bytes(t.dev.Stats().Allocated))
			if step == cfg.steps {
				fmt.Fprintf(w, "test accuracy after %d steps: %.2f%%\n", step, 100*testAcc)
			}
		}
		// Between steps only the weights and the moments are allocated.
		if got := t.dev.Stats().Allocated; step == 1 {
			between = got
		} else if got != between {
			flat = false
		}
	}
	fmt.Fprintf(w, "loss fell from %.4f to %.4f\n", firstLoss, loss)
	fmt.Fprintf(w, "allocated between steps: %s after each of %d steps: flat %v\n", gpu.Bytes(between), cfg.steps, flat)
	largest := max(stepPeak, cpPeak, evalPeak)
	fmt.Fprintf(w, "peak allocated %s = weights and moments %s + the largest scope beside them %s (step %s, checkpoint %s, evaluation %s): %v\n",
		gpu.Bytes(t.dev.Stats().PeakAllocated), gpu.Bytes(weightBytes), gpu.Bytes(largest),
		gpu.Bytes(stepPeak), gpu.Bytes(cpPeak), gpu.Bytes(evalPeak), t.dev.Stats().PeakAllocated == weightBytes+largest)
	if modes := benchModes(cfg.bench); len(modes) > 0 {
		return t.benchmark(w, weights, modes)
	}
	return nil
}

func paramCount(ls []layer) int {
	n := 0
	for _, l := range ls {
		n += l.w.n + l.b.n
	}
	return n
}

// step runs one training step in a scope of root's: the gradients in the
// step's scope, each micro-batch's activations in a child of it, then
// Adam. With metrics it returns the mean loss and accuracy of the step's
// rows (read back from the device), and the step scope's peak.
func (t *trainer) step(root arena, metrics bool) (loss, acc float64, peak int64, err error) {
	cfg := t.cfg
	rows := cfg.batch
	lossH, correctH := make([]float32, rows), make([]float32, rows)
	err = root.scope("step", func(s arena) error {
		g, err := newGrads(s, t.layers)
		if err != nil {
			return err
		}
		for k := range cfg.accum {
			err := s.scope("micro-batch", func(m arena) error {
				x, err := m.alloc(rows * cfg.in)
				if err != nil {
					return err
				}
				labels, err := m.alloc(rows)
				if err != nil {
					return err
				}
				t.teacher.sample(t.rng, t.x, t.y)
				if err := errors.Join(t.upload(x, t.x), t.upload(labels, t.y)); err != nil {
					return err
				}
				acts, err := forward(t.ops, m, t.layers, x, rows)
				if err != nil {
					return err
				}
				dz, lossD, correctD, err := t.lossTensors(m, rows)
				if err != nil {
					return err
				}
				scale := float32(1 / float64(rows*cfg.accum))
				if err := t.ops.softmaxXent(acts[len(acts)-1], labels, dz, lossD, correctD, rows, cfg.classes, scale); err != nil {
					return err
				}
				if metrics {
					if err := errors.Join(t.download(lossH, lossD), t.download(correctH, correctD)); err != nil {
						return err
					}
					for i := range rows {
						loss += float64(lossH[i])
						acc += float64(correctH[i])
					}
				}
				return backward(t.ops, m, t.layers, acts, dz, rows, g, float32(min(k, 1)))
			})
			if err != nil {
				return err
			}
		}
		peak = scopePeak(s)
		return t.adam(g)
	})
	n := float64(rows * cfg.accum)
	return loss / n, acc / n, peak, err
}

// scopePeak is the most a's scope and its children have held so far; 0
// for an arena that is not a scope.
func scopePeak(a arena) int64 {
	if sa, ok := a.(scopeArena); ok {
		return sa.s.Stats().Peak
	}
	return 0
}

// lossTensors allocates the loss's gradient, and the loss and hit of each row.
func (t *trainer) lossTensors(a arena, rows int) (dz, loss, correct tensor, err error) {
	if dz, err = a.alloc(rows * t.cfg.classes); err != nil {
		return
	}
	if loss, err = a.alloc(rows); err != nil {
		return
	}
	correct, err = a.alloc(rows)
	return
}

// adam updates every parameter with its gradient.
func (t *trainer) adam(g grads) error {
	const beta1, beta2 = 0.9, 0.999
	t.adamT++
	// The learning rate falls linearly to a tenth over the run.
	lr := t.cfg.lr * max(0.1, 1-0.9*float64(t.adamT-1)/float64(t.cfg.steps))
	h := adamStep{lr: float32(lr), beta1: beta1, beta2: beta2, eps: 1e-8,
		c1: float32(1 / (1 - math.Pow(beta1, float64(t.adamT)))),
		c2: float32(1 / (1 - math.Pow(beta2, float64(t.adamT))))}
	for i, l := range t.layers {
		if err := errors.Join(t.ops.adam(l.w, g.w[i], l.mw, l.vw, h), t.ops.adam(l.b, g.b[i], l.mb, l.vb, h)); err != nil {
			return err
		}
	}
	return nil
}

// evaluate returns the accuracy on the held-out points, batch by batch, in
// a scope of root's, and that scope's peak.
func (t *trainer) evaluate(root arena, xs, ys []float32) (acc float64, peak int64, err error) {
	rows, in := t.cfg.batch, t.cfg.in
	correctH := make([]float32, rows)
	var hits, n int
	err = root.scope("evaluate", func(s arena) error {
		for lo := 0; lo < len(ys); lo += rows {
			hi := min(lo+rows, len(ys))
			err := s.scope("evaluate batch", func(m arena) error {
				x, err := m.alloc((hi - lo) * in)
				if err != nil {
					return err
				}
				labels, err := m.alloc(hi - lo)
				if err != nil {
					return err
				}
				if err := errors.Join(t.upload(x, xs[lo*in:hi*in]), t.upload(labels, ys[lo:hi])); err != nil {
					return err
				}
				acts, err := forward(t.ops, m, t.layers, x, hi-lo)
				if err != nil {
					return err
				}
				dz, loss, correct, err := t.lossTensors(m, hi-lo)
				if err != nil {
					return err
				}
				if err := t.ops.softmaxXent(acts[len(acts)-1], labels, dz, loss, correct, hi-lo, t.cfg.classes, 1); err != nil {
					return err
				}
				if err := t.download(correctH[:hi-lo], correct); err != nil {
					return err
				}
				for _, c := range correctH[:hi-lo] {
					hits += int(c)
				}
				n += hi - lo
				return nil
			})
			if err != nil {
				return err
			}
		}
		peak = scopePeak(s)
		return nil
	})
	return float64(hits) / float64(n), peak, err
}

// saveCheckpoint copies the weights and moments, on the device, into one
// buffer of a child scope of weights (training could go on while it is
// copied out), copies that to the host and writes it; the child scope ends
// with the function, and the buffer with it. It returns the child scope's peak.
func (t *trainer) saveCheckpoint(w io.Writer, weights *gpu.Scope, step int) (peak int64, err error) {
	ps := params(t.layers)
	total := 0
	for _, p := range ps {
		total += p.n
	}
	host := make([]float32, total)
	err = gpu.WithScope(weights.Context(), t.dev, func(c *gpu.Scope) error {
		snap, err := gpu.Alloc[float32](c, total)
		if err != nil {
			return err
		}
		off := 0
		for _, p := range ps {
			v, err := snap.View(off, off+p.n)
			if err != nil {
				return err
			}
			if err := v.CopyFrom(p.s.Buffer); err != nil {
				return err
			}
			off += p.n
		}
		peak = c.Stats().Peak
		return snap.CopyToHost(host)
	}, gpu.Name("checkpoint"))
	if err != nil {
		return 0, err
	}
	sum := sha256.Sum256(floatBytes(host))
	where := "not written (no -checkpoint file)"
	if t.cfg.checkpoint != "" {
		if err := os.WriteFile(t.cfg.checkpoint, floatBytes(host), 0o644); err != nil {
			return 0, err
		}
		where = "written to " + t.cfg.checkpoint
	}
	fmt.Fprintf(w, "checkpoint at step %d: %s through scope %q, sha256 %x, %s\n",
		step, gpu.Bytes(int64(4*total)), weights.Path()+"/checkpoint", sum[:6], where)
	return peak, nil
}

// benchmark times the training step with each allocator in modes, in
// rounds that alternate between them, after one untimed run of each.
func (t *trainer) benchmark(w io.Writer, weights *gpu.Scope, modes []string) error {
	arenas := map[string]arena{}
	for _, m := range modes {
		switch m {
		case "scopes":
			arenas[m] = scopeArena{dev: t.dev, s: weights}
		case "upfront":
			arenas[m] = upfront(weights)
		case "direct":
			a, err := direct(t.dev, t.st)
			if err != nil {
				return err
			}
			arenas[m] = a
		}
	}
	times := map[string][]time.Duration{}
	for round := -1; round < t.cfg.benchRounds; round++ {
		for _, m := range modes {
			start := time.Now()
			for range t.cfg.benchSteps {
				if _, _, _, err := t.step(arenas[m], false); err != nil {
					return fmt.Errorf("bench %s: %w", m, err)
				}
			}
			if t.st != nil {
				if err := t.st.Synchronize(); err != nil {
					return err
				}
			}
			if round >= 0 {
				times[m] = append(times[m], time.Since(start)/time.Duration(t.cfg.benchSteps))
			}
		}
	}
	allocs := len(t.layers)*2 + t.cfg.accum*(2+len(t.layers)+3+len(t.layers)-1)
	fmt.Fprintf(w, "bench: %d rounds of %d steps per allocator, %d allocations per step\n", t.cfg.benchRounds, t.cfg.benchSteps, allocs)
	med := map[string]time.Duration{}
	for _, m := range modes {
		ts := slices.Clone(times[m])
		slices.SortFunc(ts, cmp.Compare)
		med[m] = ts[len(ts)/2]
		fmt.Fprintf(w, "bench %-8s step %9.1f µs (median; min %.1f, max %.1f)\n", m,
			us(med[m]), us(ts[0]), us(ts[len(ts)-1]))
	}
	if floor, ok := med["upfront"]; ok {
		for _, m := range modes {
			if m != "upfront" {
				d := med[m] - floor
				fmt.Fprintf(w, "bench %-8s costs %+.1f µs per step over allocating up front: %+.2f%% of its step\n",
					m, us(d), 100*float64(d)/float64(med[m]))
			}
		}
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
