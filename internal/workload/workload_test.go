package workload_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/trace"
	"github.com/gpuscope/gpuscope/internal/workload"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEveryShapeIsAWellFormedTrace(t *testing.T) {
	for _, sh := range workload.Shapes() {
		t.Run(sh.Name, func(t *testing.T) {
			evs := sh.Generate(1)
			require.NotEmpty(t, evs)
			live := map[uint64]trace.Event{}
			var now, peak int64
			for i, ev := range evs {
				switch ev.Action {
				case trace.Alloc:
					_, dup := live[ev.Addr]
					require.False(t, dup, "event %d: address %d allocated twice", i, ev.Addr)
					require.Positive(t, ev.Size, "event %d", i)
					live[ev.Addr] = ev
					now += ev.Size
					peak = max(peak, now)
				case trace.Free:
					a, ok := live[ev.Addr]
					require.True(t, ok, "event %d frees %d, which is not live", i, ev.Addr)
					require.Equal(t, a.Size, ev.Size, "event %d: a free repeats its size", i)
					require.Equal(t, a.Stream, ev.Stream, "event %d: and its stream", i)
					delete(live, ev.Addr)
					now -= ev.Size
				default:
					t.Fatalf("event %d: action %q", i, ev.Action)
				}
			}
			assert.Empty(t, live, "every allocation is freed by the end")
			assert.Greater(t, peak, int64(256<<20), "a peak that a GPU run measures above noise")
			assert.Less(t, peak, int64(8<<30), "and that fits any GPU the comparisons run on")
		})
	}
}

func TestAShapeIsTheSameForASeedAndDiffersBetweenSeeds(t *testing.T) {
	for _, sh := range workload.Shapes() {
		t.Run(sh.Name, func(t *testing.T) {
			assert.Equal(t, sh.Generate(3), sh.Generate(3))
			assert.NotEqual(t, sh.Generate(3), sh.Generate(4))
		})
	}
}

func TestStreamsTakingTurnsUsesSeveralStreams(t *testing.T) {
	streams := map[uint64]bool{}
	for _, ev := range workload.StreamsTakingTurns(1) {
		streams[ev.Stream] = true
	}
	assert.Len(t, streams, 4, "the default stream and three that take turns")
}
