// Package workload generates allocation traces of the shapes a GPU program
// takes: training loops, inference over growing sequences, a KV cache that
// grows in steps, streams taking turns, and mixes of them. Each is
// deterministic for its seed, so a test or a GPU run can replay the same
// trace anywhere; pool's tests run them at their smallest caps, and
// pool/testdata/shapes holds them written out for PyTorch's replay.
package workload

import (
	"math/rand/v2"
	"slices"

	"github.com/gpuscope/gpuscope/internal/trace"
)

// Shape is one kind of workload.
type Shape struct {
	Name string
	// Generate returns the shape's trace for seed: alloc and free_requested
	// events only, every alloc freed by the end.
	Generate func(seed uint64) []trace.Event
}

// Shapes returns every shape, in a fixed order.
func Shapes() []Shape {
	return []Shape{
		{"train_long_lived", TrainingLongLived},
		{"infer_growing_sequence", InferenceGrowingSequence},
		{"kv_cache_steps", KVCacheSteps},
		{"streams_taking_turns", StreamsTakingTurns},
		{"mix", Mix},
	}
}

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
)

// builder writes a trace: each alloc gets a fresh address, each free names
// one and repeats its size and stream.
type builder struct {
	r      *rand.Rand
	evs    []trace.Event
	next   uint64
	stream uint64 // the stream allocations are made on
	live   map[uint64]trace.Event
}

func newBuilder(seed uint64) *builder {
	return &builder{r: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), next: 1 << 20, live: map[uint64]trace.Event{}}
}

// alloc allocates size bytes on the builder's stream and returns the address.
func (b *builder) alloc(size int64) uint64 {
	b.next += uint64(size) + 512
	ev := trace.Event{Action: trace.Alloc, Addr: b.next, Size: size, Stream: b.stream}
	b.evs = append(b.evs, ev)
	b.live[ev.Addr] = ev
	return ev.Addr
}

// free frees addr.
func (b *builder) free(addr uint64) {
	ev := b.live[addr]
	delete(b.live, addr)
	ev.Action = trace.Free
	b.evs = append(b.evs, ev)
}

// freeAll frees addrs, last first.
func (b *builder) freeAll(addrs []uint64) {
	for i := len(addrs) - 1; i >= 0; i-- {
		b.free(addrs[i])
	}
}

// between returns a size in [lo, hi), to the byte, as tensors' sizes are.
func (b *builder) between(lo, hi int64) int64 { return lo + b.r.Int64N(hi-lo) }

// temporaries allocates and frees n short-lived blocks of lo to hi bytes,
// two at a time, as elementwise kernels do.
func (b *builder) temporaries(n int, lo, hi int64) {
	for range n {
		x := b.alloc(b.between(lo, hi))
		y := b.alloc(b.between(lo, hi))
		b.free(x)
		b.free(y)
	}
}

// finish frees what is still live, in address order, and returns the trace.
func (b *builder) finish() []trace.Event {
	addrs := make([]uint64, 0, len(b.live))
	for a := range b.live {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	for _, a := range addrs {
		b.free(a)
	}
	return b.evs
}

// TrainingLongLived is a training loop whose largest tensors live long:
// weights made first, optimizer state made at the end of the first step,
// among the freed activations and gradients of that step, and many
// mid-size temporaries in every step. The first step's layout decides
// where the long-lived tensors sit for the rest of the run.
func TrainingLongLived(seed uint64) []trace.Event {
	b := newBuilder(seed)
	layers := 12 + b.r.IntN(8)
	weights := make([]int64, layers)
	for i := range weights {
		weights[i] = b.between(8*mib, 64*mib)
		b.alloc(weights[i])
	}
	b.alloc(b.between(128*mib, 256*mib)) // the embedding
	batch := b.between(16*mib, 40*mib)
	for step := range 12 {
		var acts []uint64
		for i := range layers {
			acts = append(acts, b.alloc(batch+int64(i)*kib), b.alloc(batch/4))
			b.temporaries(4, mib, 16*mib)
		}
		var grads []uint64
		for i := layers - 1; i >= 0; i-- {
			b.temporaries(3, mib, 24*mib)
			grads = append(grads, b.alloc(weights[i]))
			b.free(acts[2*i+1])
			b.free(acts[2*i])
		}
		if step == 0 {
			for i := range layers { // Adam's two moments, live to the end
				b.alloc(weights[i])
				b.alloc(weights[i])
			}
		}
		b.temporaries(layers, weights[0]/2, weights[0])
		b.freeAll(grads)
	}
	return b.finish() // the weights and the optimizer's state

}

// InferenceGrowingSequence is inference whose sequence length grows from
// request to request, as a serving system's prompts may: each request's
// activations and attention scores scale with its length, and its keys and
// values live until it ends. Each request needs more than the one before,
// so memory freed by one request is too small for the next unless its
// pieces join.
func InferenceGrowingSequence(seed uint64) []trace.Event {
	b := newBuilder(seed)
	for range 32 {
		b.alloc(b.between(16*mib, 48*mib)) // weights
	}
	const layers, hidden = 16, 4096
	seq := int64(128)
	for range 60 {
		seq = min(seq+seq/8+b.r.Int64N(64), 6144)
		n := seq + b.r.Int64N(seq/8+1)
		var kv []uint64
		for range layers {
			x := b.alloc(n * hidden * 2)
			kv = append(kv, b.alloc(n*hidden), b.alloc(n*hidden))
			scores := b.alloc(n * n * 4)
			b.temporaries(2, n*hidden, 3*n*hidden)
			b.free(scores)
			b.free(x)
		}
		logits := b.alloc(n * 32000 / 4)
		b.freeAll(kv)
		b.free(logits)
	}
	return b.finish()
}

// KVCacheSteps is decoding with a KV cache that grows in steps: several
// sequences decode side by side, each layer's cache of a sequence is
// replaced by one a step larger when it fills (allocated before the old
// one is freed, as a concatenation does), small temporaries come with
// every token, and sequences end and new ones start at random.
func KVCacheSteps(seed uint64) []trace.Event {
	b := newBuilder(seed)
	for range 24 {
		b.alloc(b.between(8*mib, 32*mib)) // weights
	}
	const layers, perToken, step = 8, 64 * kib, 256
	type seq struct {
		tokens, cap, left int64
		cache             []uint64
	}
	newSeq := func() *seq {
		s := &seq{cap: step, left: 200 + b.r.Int64N(1800)}
		for range layers {
			s.cache = append(s.cache, b.alloc(s.cap*perToken))
		}
		return s
	}
	seqs := []*seq{newSeq(), newSeq(), newSeq(), newSeq()}
	for range 2400 {
		s := seqs[b.r.IntN(len(seqs))]
		s.tokens++
		s.left--
		if s.tokens == s.cap {
			s.cap += step
			for i, old := range s.cache {
				s.cache[i] = b.alloc(s.cap * perToken)
				b.free(old)
			}
		}
		if s.tokens%16 == 0 {
			b.temporaries(1, 256*kib, 4*mib)
		}
		if s.left == 0 {
			b.freeAll(s.cache)
			*s = *newSeq()
		}
	}
	return b.finish()
}

// StreamsTakingTurns is several streams that take turns: each in its turn
// allocates a working set of its own sizes on its stream and frees it, and
// hands an output to the next stream, which frees it on its own turn. A
// stream's freed memory serves another only once the pool gives it back.
func StreamsTakingTurns(seed uint64) []trace.Event {
	b := newBuilder(seed)
	b.alloc(b.between(64*mib, 128*mib)) // shared weights, on the default stream
	streams := []uint64{1, 2, 3}
	scale := []int64{b.between(2*mib, 8*mib), b.between(4*mib, 16*mib), b.between(8*mib, 24*mib)}
	var handoff []uint64
	for turn := range 30 {
		i := turn % len(streams)
		b.stream = streams[i]
		var work []uint64
		for range 10 + b.r.IntN(10) {
			work = append(work, b.alloc(scale[i]+b.between(0, scale[i])))
			b.temporaries(1, mib, scale[i])
		}
		for _, h := range handoff {
			b.free(h)
		}
		handoff = []uint64{b.alloc(scale[i] * 2)}
		b.freeAll(work)
	}
	b.stream = 0
	return b.finish()
}

// Mix runs the other shapes one after another, on one device, with a
// little of each kept live into the next, as a program that trains, then
// serves, then decodes would.
func Mix(seed uint64) []trace.Event {
	var evs []trace.Event
	var keep []trace.Event
	addr := uint64(0)
	for i, gen := range []func(uint64) []trace.Event{TrainingLongLived, KVCacheSteps, InferenceGrowingSequence, StreamsTakingTurns} {
		part := gen(seed*8 + uint64(i))
		var top uint64
		for _, ev := range part {
			ev.Addr += addr
			top = max(top, ev.Addr+uint64(ev.Size))
			evs = append(evs, ev)
		}
		// The first allocation of each part outlives it: its frees move to
		// the end of the whole trace.
		first := part[0]
		first.Addr += addr
		for j := len(evs) - 1; j >= 0; j-- {
			if evs[j].Action == trace.Free && evs[j].Addr == first.Addr {
				keep = append(keep, evs[j])
				evs = slices.Delete(evs, j, j+1)
				break
			}
		}
		addr = top + 1<<20
	}
	return append(evs, keep...)
}
