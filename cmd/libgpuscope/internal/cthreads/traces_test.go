package cthreads_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/cthreads"
	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/foreign"
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/internal/trace"
	"github.com/gpuscope/gpuscope/pool"
)

// simDriver is internal/sim's simulated device as a gpu driver: addresses
// and pages, no memory, so that the shared traces, which hold up to 17 GB
// at once, replay on this machine. Nothing reads or writes its memory.
type simDriver struct {
	*sim.Source
	streams atomic.Uintptr
}

var errNoMemory = errors.New("sim: no memory to copy")

func (*simDriver) Name() string                                    { return "simulated" }
func (*simDriver) CopyHtoD(uintptr, []byte, uintptr) error         { return errNoMemory }
func (*simDriver) CopyDtoH([]byte, uintptr, uintptr) error         { return errNoMemory }
func (*simDriver) CopyDtoD(uintptr, uintptr, int64, uintptr) error { return errNoMemory }
func (*simDriver) Memset(uintptr, byte, int64, uintptr) error      { return nil }
func (d *simDriver) NewStream() (uintptr, error)                   { return 1<<40 + d.streams.Add(1), nil }
func (*simDriver) DestroyStream(uintptr) error                     { return nil }
func (*simDriver) Synchronize(uintptr) error                       { return nil }
func (*simDriver) Close() error                                    { return nil }

// sharedTraces are the PyTorch traces of pool/testdata/traces, recorded on
// an H200 (docs/pool.md).
var sharedTraces = []string{"mlp_train", "resnet50_train", "vit_infer_dynamic", "llama_prefill_dynamic", "gpt2_train"}

// reservedAllowed is the most each trace's peak reserved may be, with the
// pair cache, over the cache off's: 1%, but for vit_infer_dynamic, where
// the cache's later frees alone lay the pool out otherwise (the rule
// before, which emptied the cache at every allocation it did not serve,
// gives the same 1.1599: docs/data/dev-2026-12-06-paircache).
var reservedAllowed = map[string]float64{
	"mlp_train": 1.01, "resnet50_train": 1.01, "vit_infer_dynamic": 1.16, "llama_prefill_dynamic": 1.01, "gpt2_train": 1.01,
}

// TestThePairCacheOnTheSharedTraces replays each shared PyTorch trace
// through gpuscope_alloc and gpuscope_free, as PyTorch's pluggable
// allocator calls them, on a simulated device, and checks the pair cache's
// promises there: the device's peak is the most the trace held at once (to
// the byte, in the pool's 512-byte rounding), its peak reserved is the
// cache off's (reservedAllowed), and it serves at least the allocations
// the rule it replaced did (oldRuleHits). With -v it logs each trace's line of the
// hit-rate table that docs/interop.md cites.
func TestThePairCacheOnTheSharedTraces(t *testing.T) {
	cthreads.Failures() // a first call of the entry points puts the pair cache in front of the devices
	for _, name := range sharedTraces {
		t.Run(name, func(t *testing.T) {
			ops := traceOps(t, name)
			peak, st := replayOnSim(t, ops)
			assert.Equal(t, peak, st.Peak, "the device's peak is the most the trace held at once")
			old := oldRuleHits(ops)
			assert.GreaterOrEqual(t, st.Hits, old, "fewer hits than the rule it replaced")
			t.Setenv("GPUSCOPE_PAIR_CACHE", "0")
			_, off := replayOnSim(t, ops)
			assert.LessOrEqual(t, float64(st.Reserved), reservedAllowed[name]*float64(off.Reserved), "peak reserved, against the cache off's")
			t.Logf("hit-rate: %-22s %6d allocations, served %6d (%5.1f%%), the old rule %6d (%5.1f%%); peak reserved %.4f of the cache off's",
				name, st.Allocs, st.Hits, 100*float64(st.Hits)/float64(st.Allocs), old, 100*float64(old)/float64(st.Allocs),
				float64(st.Reserved)/float64(off.Reserved))
		})
	}
}

// simStats are the figures of gpuscope_stats the replay reads.
type simStats struct {
	Hits     int64 `json:"c_pair_hits"`
	Allocs   int64 `json:"c_pair_allocs"`
	Peak     int64 `json:"peak_allocated"`
	Reserved int64 `json:"peak_reserved"`
}

// replayOnSim replays ops on a simulated device 0, opened for it, and
// returns the most bytes the trace held at once and the device's figures.
func replayOnSim(t *testing.T, ops []trace.Event) (int64, simStats) {
	t.Helper()
	require.NoError(t, foreign.Shutdown())
	g, err := gpu.OpenDriver(&simDriver{Source: sim.New(0, sim.DefaultPageSize)}, "sim")
	require.NoError(t, err)
	require.NoError(t, foreign.Adopt(0, g))
	defer func() { require.NoError(t, foreign.Shutdown()) }()
	peak := replay(t, ops)
	var st simStats
	require.NoError(t, json.Unmarshal(cthreads.Stats(0), &st))
	return peak, st
}

// traceOps reads the allocations and frees of a trace of
// pool/testdata/traces.
func traceOps(t *testing.T, name string) []trace.Event {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "..", "..", "pool", "testdata", "traces", name+".csv.gz"))
	require.NoError(t, err)
	defer f.Close()
	evs, err := trace.ReadAll(f)
	require.NoError(t, err)
	var ops []trace.Event
	for _, ev := range evs {
		if ev.Action == trace.Alloc || ev.Action == trace.Free {
			ops = append(ops, ev)
		}
	}
	return ops
}

// replay makes ops's calls through the PyTorch entry points, and returns
// the most bytes the trace held at once, each allocation rounded as the
// pool rounds it. A free of an address the trace never allocated (one made
// before the recording began) is left out.
func replay(t *testing.T, ops []trace.Event) int64 {
	t.Helper()
	type held struct {
		ptr  uintptr
		size int64
	}
	live := map[uint64]held{}
	var now, peak int64
	for _, op := range ops {
		stream := uintptr(op.Stream)
		if op.Action == trace.Alloc {
			p := cthreads.TorchAlloc(op.Size, stream)
			require.NotZero(t, p, "line %d: %d bytes", op.Line, op.Size)
			live[op.Addr] = held{p, op.Size}
			now += pool.Rounded(op.Size)
			peak = max(peak, now)
		} else if h, ok := live[op.Addr]; ok {
			cthreads.TorchFree(h.ptr, h.size, stream)
			delete(live, op.Addr)
			now -= pool.Rounded(h.size)
		}
	}
	for _, h := range live {
		cthreads.TorchFree(h.ptr, h.size, 0)
	}
	return peak
}

// oldRuleHits counts the allocations the rule before this cache's served:
// it kept up to 32 freed blocks and gave them all back at every allocation
// it did not serve.
func oldRuleHits(ops []trace.Event) int64 {
	type key struct {
		size   int64
		stream uint64
	}
	var cached []key
	live := map[uint64]key{}
	var hits int64
	for _, op := range ops {
		k := key{op.Size, op.Stream}
		if op.Action == trace.Alloc {
			live[op.Addr] = k
			served := false
			for i := len(cached) - 1; i >= 0 && !served; i-- {
				if cached[i] == k {
					cached, served = append(cached[:i], cached[i+1:]...), true
				}
			}
			if served {
				hits++
			} else {
				cached = cached[:0]
			}
		} else if k, ok := live[op.Addr]; ok {
			delete(live, op.Addr)
			if len(cached) < 32 {
				cached = append(cached, k)
			}
		}
	}
	return hits
}
