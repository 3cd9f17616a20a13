// Package workload generates allocation traces of the shapes a GPU program
// takes: training loops, inference over growing sequences, a KV cache that
// grows in steps, streams taking turns, mixes of them, a language model's
// training and serving, whose largest blocks come and go, and GPT-2's
// training, inference and generation as PyTorch allocates them. Each is
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
	// Seeds is how many seeds, from 1, the comparisons replay: 1 for most,
	// several where the shape's failure depends on the seed's sizes.
	Seeds int
	// Generate returns the shape's trace for seed: alloc and free_requested
	// events only, every alloc freed by the end.
	Generate func(seed uint64) []trace.Event
}

// Shapes returns every shape, in a fixed order.
func Shapes() []Shape {
	return []Shape{
		{"train_long_lived", 1, TrainingLongLived},
		{"infer_growing_sequence", 1, InferenceGrowingSequence},
		{"kv_cache_steps", 1, KVCacheSteps},
		{"streams_taking_turns", 1, StreamsTakingTurns},
		{"mix", 1, Mix},
		{"train_large_vocab", 4, TrainingLargeVocab},
		{"infer_dynamic_logits", 4, InferenceDynamicLogits},
		{"train_held_outputs", 3, GPT2Training},
		{"infer_dynamic_lengths", 2, GPT2Inference},
		{"generate_kv_concat", 2, GPT2Generation},
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

// TrainingLargeVocab is a language model's training loop with a large
// vocabulary, two micro-batches a step: weights and the optimizer's state
// in blocks of up to hundreds of MiB, per layer activations in multiples of
// one micro-batch's hidden state (24 MiB) kept from the forward pass to the
// backward, and at the head four blocks of the logits' size (logits,
// log-probabilities and their gradients, about 1.5 GiB each) allocated and
// freed every micro-batch, when every layer's activations and the first
// micro-batch's gradients are live: about 700 blocks, two fifths of the
// peak in the four. The last layers' weights load while temporaries
// already churn. The backward pass frees each layer's activations in
// reverse, among the gradients of the activations and of the weights, and
// attention's workspace comes and goes between what the forward pass
// keeps: the holes this leaves are what the next micro-batch's forward pass
// and head must fit in, step after step (issue 38).
func TrainingLargeVocab(seed uint64) []trace.Event {
	m := newVocabModel(newBuilder(seed))
	m.load()
	for step := range 8 {
		grads := make([][]uint64, m.layers)
		for micro := range microBatches {
			saved, h := m.forwardPass()
			gh := m.head(h)
			m.backwardPass(saved, gh, grads, micro == 0)
		}
		m.optimizerStep(step == 0, grads)
	}
	return m.b.finish()
}

const (
	actBytes     = 24 * mib // one micro-batch's hidden state in bf16
	microBatches = 2        // a step's, whose gradients accumulate
)

// vocabModel is the model TrainingLargeVocab trains.
type vocabModel struct {
	b      *builder
	layers int
	// A layer's parameters: four matrices of a hidden size near 2048, and
	// its norms' weights and biases.
	mats, vecs []int64
	logits     int64
}

func newVocabModel(b *builder) *vocabModel {
	m := &vocabModel{b: b, layers: 10 + b.r.IntN(4)}
	dim := 1792 + 128*b.r.Int64N(5)
	m.mats = []int64{3 * dim * dim * 2, dim * dim * 2, 4 * dim * dim * 2, 4 * dim * dim * 2}
	m.vecs = []int64{dim * 2, dim * 2, dim * 2, dim * 2, 3 * dim * 2, dim * 2, 4 * dim * 2, dim * 2}
	m.logits = b.between(1400, 1700) * mib
	return m
}

// sizes returns a layer's parameters' sizes, matrices first.
func (m *vocabModel) sizes() []int64 { return append(append([]int64(nil), m.mats...), m.vecs...) }

// load makes the embedding and each layer's weights, each alone; the last
// layers load while warm-up kernels' temporaries already come and go.
func (m *vocabModel) load() {
	m.b.alloc(m.b.between(300, 600) * mib)
	for i := range m.layers {
		for _, n := range m.sizes() {
			m.b.alloc(n)
		}
		if i >= m.layers/2 {
			m.b.temporaries(2, mib, actBytes)
		}
	}
}

// forwardPass runs every layer and returns what each keeps for the
// backward pass and the last output.
func (m *vocabModel) forwardPass() ([][]uint64, uint64) {
	h := m.b.alloc(actBytes)
	saved := make([][]uint64, m.layers)
	for i := range m.layers {
		saved[i], h = m.forward(h)
	}
	return saved, h
}

// forward runs a layer on its input h and returns what it keeps for the
// backward pass (its norms' outputs, q, k, v, attention's output and
// statistics, the MLP's two wide activations, a dropout mask, and h last)
// and its output; its temporaries come and go.
func (m *vocabModel) forward(h uint64) ([]uint64, uint64) {
	b := m.b
	var s []uint64
	s = append(s, b.alloc(actBytes))                                       // norm 1
	s = append(s, b.alloc(actBytes), b.alloc(actBytes), b.alloc(actBytes)) // q, k, v
	b.temporaries(1, 2*mib, 16*mib)
	scores := b.alloc(4*actBytes + b.between(0, actBytes))             // attention's workspace
	s = append(s, b.alloc(actBytes), b.alloc(b.between(256*kib, mib))) // attention out, log-sum-exp
	b.free(scores)
	o := b.alloc(actBytes)
	nh := b.alloc(actBytes)
	b.free(o)
	s = append(s, b.alloc(actBytes))   // norm 2
	s = append(s, b.alloc(4*actBytes)) // fc1
	s = append(s, b.alloc(4*actBytes)) // activation
	f := b.alloc(actBytes)
	s = append(s, b.alloc(actBytes/8)) // dropout mask
	b.free(f)
	return append(s, h), nh
}

// head makes the final norm, the logits and the loss's three blocks of
// their size from h, frees them, and returns the gradient of h.
func (m *vocabModel) head(h uint64) uint64 {
	b := m.b
	nf := b.alloc(actBytes)
	lg := b.alloc(m.logits)
	lp := b.alloc(m.logits)
	b.free(h)
	loss := b.alloc(4 * kib)
	glp := b.alloc(m.logits)
	glg := b.alloc(m.logits)
	b.free(lp)
	b.free(glp)
	b.free(loss)
	gh := b.alloc(actBytes)
	b.free(lg)
	b.free(glg)
	b.free(nf)
	return gh
}

// backwardPass runs the layers from the last, from the gradient gh: the
// gradients of the activations come and go, each kept activation is freed
// once its gradient is made, and, where first, the weights' gradients
// (fp32) are made into grads, to live to the optimizer's step.
func (m *vocabModel) backwardPass(saved [][]uint64, gh uint64, grads [][]uint64, first bool) {
	for i := m.layers - 1; i >= 0; i-- {
		gh = m.backward(saved[i], gh, func(n int64) {
			if first {
				grads[i] = append(grads[i], m.b.alloc(2*n))
			}
		})
	}
	m.b.free(gh)
}

// backward runs one layer back from gh over what it kept, s, and returns
// the gradient of its input; wgrad makes a weight's gradient.
func (m *vocabModel) backward(s []uint64, gh uint64, wgrad func(int64)) uint64 {
	b := m.b
	// s: norm 1, q, k, v, attention out, log-sum-exp, norm 2, fc1,
	// activation, mask, input.
	gGelu := b.alloc(4 * actBytes)
	wgrad(m.mats[3])
	wgrad(m.vecs[7])
	b.free(s[9])
	gFc1 := b.alloc(4 * actBytes)
	b.free(s[8])
	b.free(gGelu)
	wgrad(m.mats[2])
	wgrad(m.vecs[6])
	gLn2 := b.alloc(actBytes)
	b.free(s[7])
	b.free(gFc1)
	wgrad(m.vecs[4])
	wgrad(m.vecs[5])
	gMid := b.alloc(actBytes)
	b.free(s[6])
	b.free(gLn2)
	gAttn := b.alloc(actBytes)
	wgrad(m.mats[1])
	wgrad(m.vecs[3])
	gQKV := b.alloc(3 * actBytes)
	b.free(s[5])
	b.free(s[4])
	b.free(gAttn)
	b.free(s[3])
	b.free(s[2])
	b.free(s[1])
	wgrad(m.mats[0])
	wgrad(m.vecs[2])
	gLn1 := b.alloc(actBytes)
	b.free(gQKV)
	wgrad(m.vecs[0])
	wgrad(m.vecs[1])
	b.free(s[0])
	ngh := b.alloc(actBytes)
	b.free(gLn1)
	b.free(gMid)
	b.free(gh)
	b.free(s[10])
	return ngh
}

// optimizerStep is Adam's step: its moments, made at the first step among
// the live gradients, live to the end; its temporaries come layer by
// layer; then the gradients go, in the order the parameters were made,
// not the one the gradients were.
func (m *vocabModel) optimizerStep(first bool, grads [][]uint64) {
	for range m.layers {
		if first {
			for _, n := range m.sizes() {
				m.b.alloc(n)
				m.b.alloc(n)
			}
		}
		var tmp []uint64
		for _, n := range m.mats {
			tmp = append(tmp, m.b.alloc(2*n))
		}
		m.b.freeAll(tmp)
	}
	for _, gs := range grads {
		for _, g := range gs {
			m.b.free(g)
		}
	}
}

// InferenceDynamicLogits is serving with dynamic lengths and requests in
// flight together: each request's prompt has its own length, so its keys
// and values, its activations and, largest of all, its logits (about two
// thirds of the peak, over 1 GiB for most requests) have a size no request
// before had. A request's keys and values live while it decodes, beside
// those of the requests that came before it and end after it; weights in
// a hundred blocks of up to 150 MiB stay.
func InferenceDynamicLogits(seed uint64) []trace.Event {
	b := newBuilder(seed)
	const layers, inFlight = 16, 3
	for range 60 + b.r.IntN(30) {
		b.alloc(b.between(4*mib, 24*mib))
	}
	for range 3 {
		b.alloc(b.between(100*mib, 150*mib))
	}
	const (
		perToken       = 4096 * 2   // the hidden state, bf16
		kvPerToken     = 1024 * 2   // one layer's keys or values
		logitsPerToken = 128256 * 4 // fp32 over the vocabulary
	)
	longest := 8192 + b.r.Int64N(6144)
	var flight [][]uint64 // the keys and values of the requests decoding
	for range 48 {
		n := 1024 + b.r.Int64N(longest-1024)
		// Prefill: the prompt's keys and values stay, its activations
		// come and go layer by layer, then the logits of every position.
		var kv []uint64
		x := b.alloc(n * perToken)
		for range layers {
			kv = append(kv, b.alloc(n*kvPerToken), b.alloc(n*kvPerToken))
			t := b.alloc(3 * n * perToken)
			y := b.alloc(n * perToken)
			b.free(t)
			b.free(x)
			x = y
		}
		lg := b.alloc(n * logitsPerToken)
		b.free(x)
		b.free(lg)
		flight = append(flight, kv)
		// Decoding: small temporaries; a request ends at random once more
		// than InFlight decode.
		b.temporaries(4, 64*kib, 2*mib)
		for len(flight) > inFlight || len(flight) > 1 && b.r.IntN(4) == 0 {
			i := b.r.IntN(len(flight))
			b.freeAll(flight[i])
			flight = slices.Delete(flight, i, i+1)
		}
	}
	return b.finish()
}
