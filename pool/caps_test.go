package pool_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/internal/trace"
	"github.com/gpuscope/gpuscope/internal/workload"
	"github.com/gpuscope/gpuscope/pool"
)

// shapeOps is the trace of a generated workload shape as replay operations.
func shapeOps(sh workload.Shape, seed uint64) []traceOp {
	var ops []traceOp
	for _, ev := range sh.Generate(seed) {
		ops = append(ops, traceOp{ev.Action == trace.Alloc, ev.Addr, ev.Size, uintptr(ev.Stream)})
	}
	return ops
}

// smallest bisects, as gpumem's smallest-device search does, the fewest
// bytes ops replays in without running out of memory, to 1/10,000 of its
// peak requested: on a simulated device of that size or, with asCap, under
// a cap of that size on a device without a limit.
func smallest(t *testing.T, ops []traceOp, asCap bool) int64 {
	t.Helper()
	fits := func(n int64) bool {
		if asCap {
			return replayOps(t, sim.New(0, 0), ops, false, pool.MaxReserved(n)).ooms == 0
		}
		return replayOps(t, sim.New(n, 0), ops, false).ooms == 0
	}
	peak := peakRequested(ops)
	lo, hi := peak-1, 2*peak
	for hi-lo > peak/10000 {
		mid := (lo + hi) / 2
		if fits(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// capTraces are the workloads the cap's tests run: the shared traces and
// one of each generated shape.
func capTraces(t *testing.T) map[string][]traceOp {
	traces := map[string][]traceOp{}
	for _, tc := range smallestDevices {
		if testing.Short() && tc.trace == "llama_prefill_dynamic" {
			continue // the longest, by far
		}
		traces[tc.trace] = readTraceOps(t, tc.trace)
	}
	for _, sh := range workload.Shapes() {
		traces[sh.Name] = shapeOps(sh, 1)
	}
	return traces
}

func TestTheCapIsUsableToItsLastGranule(t *testing.T) {
	for name, ops := range capTraces(t) {
		t.Run(name, func(t *testing.T) {
			device, capped := smallest(t, ops, false), smallest(t, ops, true)
			assert.Equal(t, device, capped, "the smallest cap (%.4f x the peak) must be the smallest device (%.4f x)",
				float64(capped)/float64(peakRequested(ops)), float64(device)/float64(peakRequested(ops)))
		})
	}
}
