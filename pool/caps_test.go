package pool_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/internal/trace"
	"github.com/gpuscope/gpuscope/internal/workload"
	"github.com/gpuscope/gpuscope/pool"
)

// shapeOps is the trace of a generated workload shape as replay operations.
func shapeOps(sh workload.Shape, seed uint64) []traceOp { return eventOps(sh.Generate(seed)) }

// eventOps is a generated trace as replay operations.
func eventOps(evs []trace.Event) []traceOp {
	var ops []traceOp
	for _, ev := range evs {
		ops = append(ops, traceOp{ev.Action == trace.Alloc, ev.Addr, ev.Size, uintptr(ev.Stream)})
	}
	return ops
}

// fitsDevice and fitsCap report whether ops replays without running out of
// memory on a simulated device of n bytes, and under a cap of n bytes on a
// device without a limit.
func fitsDevice(t *testing.T, ops []traceOp, n int64) bool {
	return replayOps(t, sim.New(n, 0), ops, false).ooms == 0
}

func fitsCap(t *testing.T, ops []traceOp, n int64) bool {
	return replayOps(t, sim.New(0, 0), ops, false, pool.MaxReserved(n)).ooms == 0
}

// smallestDevice bisects the smallest simulated device ops replays on, to
// step bytes (stepOf its peak requested), and returns it and the largest
// size found too small.
func smallestDevice(t *testing.T, ops []traceOp, stepOf func(peak int64) int64) (fits, fails, step int64) {
	t.Helper()
	peak := peakRequested(ops)
	step = stepOf(peak)
	lo, hi := peak-1, 2*peak
	for hi-lo > step {
		mid := (lo + hi) / 2
		if fitsDevice(t, ops, mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, lo, step
}

func TestTheCapIsUsableToItsLastGranule(t *testing.T) {
	traces := map[string][]traceOp{}
	for _, tc := range smallestDevices {
		traces[tc.trace] = readTraceOps(t, tc.trace)
	}
	for _, sh := range workload.Shapes() {
		traces[sh.Name] = shapeOps(sh, 1)
	}
	for name, ops := range traces {
		t.Run(name, func(t *testing.T) {
			fits, fails, _ := smallestDevice(t, ops, coarseStep)
			assert.True(t, fitsCap(t, ops, fits), "a cap of the smallest device's bytes (%.4f x the peak) fits",
				float64(fits)/float64(peakRequested(ops)))
			assert.False(t, fitsCap(t, ops, fails), "and a cap of a device too small does not")
		})
	}
}

// At the smallest cap of every generated shape, every invariant holds
// after every operation, and nothing runs out of memory.
func TestModelHoldsAtTheSmallestCapOfEveryGeneratedShape(t *testing.T) {
	for _, sh := range workload.Shapes() {
		t.Run(sh.Name, func(t *testing.T) {
			ops := shapeOps(sh, 2)
			fits, _, _ := smallestDevice(t, ops, coarseStep)
			src := sim.New(0, 0)
			r := replayOps(t, src, ops, true, pool.MaxReserved(fits))
			require.Zero(t, r.ooms)
			assert.LessOrEqual(t, r.st.PeakReserved, fits)
			if sh.Name != "generate_kv_concat" {
				// generate_kv_concat's needs no move: on a budget of its
				// size growths are exact (no room for the next request,
				// see expander.roundToStep), and that alone fits.
				assert.Positive(t, r.st.PagesMoved+r.st.Retries, "the smallest cap must have pressed the pool to move or release memory")
			}
		})
	}
}

var update = flag.Bool("update", false, "rewrite testdata/shapes from the generators")

// shapeFile is one generated trace written out: a shape for one seed.
type shapeFile struct {
	name  string // the file's name less .csv.gz: the shape's, with _sN for seed N > 1
	shape workload.Shape
	seed  uint64
}

// shapeFiles lists the traces testdata/shapes holds: each shape for each
// of its seeds.
func shapeFiles() []shapeFile {
	var fs []shapeFile
	for _, sh := range workload.Shapes() {
		for seed := uint64(1); seed <= uint64(sh.Seeds); seed++ {
			name := sh.Name
			if seed > 1 {
				name += "_s" + strconv.FormatUint(seed, 10)
			}
			fs = append(fs, shapeFile{name, sh, seed})
		}
	}
	return fs
}

// The generated shapes, written out as traces for replays outside Go
// (PyTorch's, on a GPU): each file is its generator's trace for one seed
// (shapeFiles).
// go test ./pool -run TestShapeFilesAreWhatTheGeneratorsMake -update
// rewrites them.
func TestShapeFilesAreWhatTheGeneratorsMake(t *testing.T) {
	for _, f := range shapeFiles() {
		t.Run(f.name, func(t *testing.T) {
			path := filepath.Join("testdata", "shapes", f.name+".csv.gz")
			want := f.shape.Generate(f.seed)
			if *update {
				require.NoError(t, writeTrace(path, want))
			}
			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()
			got, err := trace.ReadAll(f)
			require.NoError(t, err)
			require.Len(t, got, len(want))
			for i := range got {
				got[i].Line = 0
			}
			assert.Equal(t, want, got)
		})
	}
}

// writeTrace writes evs to path as a gzip trace.
func writeTrace(path string, evs []trace.Event) error {
	var buf bytes.Buffer
	z, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	w := trace.NewWriter(z)
	if err := w.WriteHeader(); err != nil {
		return err
	}
	for _, ev := range evs {
		if err := w.Write(ev); err != nil {
			return err
		}
	}
	if err := errors.Join(w.Flush(), z.Close()); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// The smallest cap of each generated shape file (testdata/shapes): the
// bisection of TestTheCapIsUsableToItsLastGranule on the simulated source,
// which makes the same driver calls as the H200 (docs/measurements.md, "The
// model of driver time against the GPU"), and the better of PyTorch's two
// modes at its own smallest cap on the H200
// (docs/data/h200-2026-12-05-pressure-4), in bytes
// (docs/measurements.md, "The smallest cap each side fits in").
var shapeSmallestCaps = []struct {
	shape        string
	cap, pytorch int64
}{
	{"train_long_lived", 3187748760, 3259163127},
	{"infer_growing_sequence", 2298507342, 2311219855},
	{"kv_cache_steps", 2069971350, 2093084373},
	{"streams_taking_turns", 551563761, 580922280},
	{"mix", 2506156224, 2506259658},
	{"train_large_vocab", 20372249700, 20472551270},
	{"train_large_vocab_s2", 14978594540, 15064055558},
	{"train_large_vocab_s3", 16892633610, 17060728338},
	{"train_large_vocab_s4", 18258027793, 18394411025},
	{"infer_dynamic_logits", 10540463143, 10643064793},
	// Seeds 2 and 4 ran out of memory at the caps of the H200 run
	// (8959191209 and 8581806981) once blocks of 20 MiB grew in pages:
	// these are the bisection's on the simulated source, 0.0005 of the
	// peak above on seed 2; on seed 4 the H200's cap lay under caps that
	// failed (the bisection at 0b1a290 found 1.00455 of the peak, now
	// 1.00431).
	{"infer_dynamic_logits_s2", 8963235514, 9037074213},
	{"infer_dynamic_logits_s3", 8128794917, 8176836223},
	{"infer_dynamic_logits_s4", 8608816416, 8625985399},
	// Not yet run on a GPU: the simulated source's cap against the model of
	// PyTorch expandable's (sim.TorchExpandable), both bisected to a
	// millionth of the peak.
	{"train_held_outputs", 17551074065, 17777566361},
	{"train_held_outputs_s2", 15474889679, 15663629941},
	{"train_held_outputs_s3", 12134131041, 12199134240},
	{"infer_dynamic_lengths", 8665439906, 8694797104},
	{"infer_dynamic_lengths_s2", 9284099619, 9370075919},
	// 722 MiB, its peak reserved unconstrained on both sides: the
	// bisection stopped 235 bytes over, within its step.
	{"generate_kv_concat", 757071872, 757071872},
	// Held by a small request taking the large arena's free memory where
	// its arena cannot grow (arenaSet.lend): without it, 1.00940 of the
	// peak since the front cache hands out only the block cached last.
	{"generate_kv_concat_s2", 547356932, 553648128},
}

func TestEveryGeneratedShapeFitsUnderPyTorchsSmallestCap(t *testing.T) {
	files := map[string]shapeFile{}
	for _, f := range shapeFiles() {
		files[f.name] = f
	}
	require.Len(t, shapeSmallestCaps, len(files), "a cap for every shape file")
	for _, tc := range shapeSmallestCaps {
		t.Run(tc.shape, func(t *testing.T) {
			f, ok := files[tc.shape]
			require.True(t, ok)
			ops := shapeOps(f.shape, f.seed)
			assert.True(t, fitsCap(t, ops, tc.cap), "the documented cap fits")
			assert.LessOrEqual(t, tc.cap, tc.pytorch, "at or under the better PyTorch mode")
		})
	}
}
