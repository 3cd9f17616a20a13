package workload_test

import (
	"cmp"
	"slices"
	"strconv"
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
			assert.Less(t, peak, int64(24<<30), "and that fits any GPU the comparisons run on, with room")
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

// atPeak returns the sizes of the blocks live at a trace's peak, largest
// first, and the peak.
func atPeak(evs []trace.Event) ([]int64, int64) {
	live := map[uint64]int64{}
	var now, peak int64
	var sizes []int64
	for _, ev := range evs {
		if ev.Action == trace.Free {
			now -= live[ev.Addr]
			delete(live, ev.Addr)
			continue
		}
		live[ev.Addr] = ev.Size
		if now += ev.Size; now > peak {
			peak, sizes = now, sizes[:0]
			for _, n := range live {
				sizes = append(sizes, n)
			}
		}
	}
	slices.SortFunc(sizes, func(a, b int64) int { return cmp.Compare(b, a) })
	return sizes, peak
}

// The shapes of issue 38, as it describes them.
func TestTheLanguageModelShapesHaveTheirPeaks(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run("training, seed "+strconv.FormatUint(seed, 10), func(t *testing.T) {
			sizes, peak := atPeak(workload.TrainingLargeVocab(seed))
			assert.InDelta(t, 700, len(sizes), 150, "about 700 blocks live at the peak")
			assert.Equal(t, sizes[0], sizes[3], "four equal largest blocks")
			assert.Greater(t, sizes[0], int64(1400<<20))
			assert.InDelta(t, 0.4, float64(4*sizes[0])/float64(peak), 0.07, "nearly two fifths of the peak")
			assert.Less(t, sizes[4], int64(600<<20), "the rest in blocks of at most hundreds of MiB")
		})
		t.Run("inference, seed "+strconv.FormatUint(seed, 10), func(t *testing.T) {
			evs := workload.InferenceDynamicLogits(seed)
			sizes, peak := atPeak(evs)
			assert.InDelta(t, 0.65, float64(sizes[0])/float64(peak), 0.08, "the logits, about two thirds of the peak")
			assert.InDelta(t, 175, len(sizes), 75, "beside a hundred or two blocks")
			assert.LessOrEqual(t, sizes[1], int64(150<<20), "of up to 150 MiB")
			large := map[int64]bool{}
			for _, ev := range evs {
				if ev.Action == trace.Alloc && ev.Size > 1<<30 {
					large[ev.Size] = true
				}
			}
			assert.GreaterOrEqual(t, len(large), 20, "tens of distinct sizes above 1 GiB")
		})
	}
}

// The GPT-2 shapes are GPT-2 small as PyTorch allocates it: training at
// the recorded run's batch and length (seed 1) reaches the peak that
// gpt2_train.csv.gz recorded to within 0.1%, with the held outputs (the
// last step's logits and keys and values) gone and four blocks of the
// logits' size live; inference and generation stay in the model's context
// of 1,024 tokens.
func TestTheGPT2ShapesAreGPT2(t *testing.T) {
	const recordedPeak = 17354308616 // cmd/gpumem/testdata/pytorch.json
	sizes, peak := atPeak(workload.GPT2Training(1))
	assert.InDelta(t, recordedPeak, peak, recordedPeak/1000)
	logits := int64(8 * 1024 * 50257 * 4)
	assert.Equal(t, []int64{logits, logits, logits, logits}, sizes[:4], "the logits, shifted, their log-probabilities and gradient")
	assert.Less(t, sizes[4], logits, "and no fifth: the last step's went when the new logits came")
	for seed := uint64(1); seed <= 3; seed++ {
		for _, evs := range [][]trace.Event{workload.GPT2Inference(seed), workload.GPT2Generation(seed)} {
			for _, ev := range evs {
				require.LessOrEqual(t, ev.Size, int64(16*1024*50257*4), "at most 16 x 1,024 tokens' logits")
			}
		}
	}
}
