package workload

import (
	"github.com/gpuscope/gpuscope/internal/trace"
)

// gpt2 is Hugging Face's GPT2LMHeadModel, GPT-2 small (12 layers, 768
// wide, a vocabulary of 50,257, fp32), as its allocations come in the
// trace PyTorch recorded of its training (cmd/gpumem/testdata/
// gpt2_train.csv.gz). A pass runs batch sequences of seq tokens; h is one
// hidden state of the pass, batch x seq x 768 x 4 bytes.
type gpt2 struct {
	b          *builder
	batch, seq int64
	// What the program holds of the last forward pass (its logits, and
	// each layer's keys and values, which use_cache returns) until the next
	// forward pass returns and its outputs replace them.
	held []uint64
}

// gpt2Runs are GPT2Training's batch and length, by seed from 1: the
// recorded run first, then three that the pool before pages for blocks of
// a handle or more needed more than PyTorch expandable for.
var gpt2Runs = [][2]int64{{8, 1024}, {7, 1024}, {6, 896}, {8, 640}}

const (
	gpt2Layers = 12
	gpt2Width  = 768
	gpt2Vocab  = 50257
	gpt2Ctx    = 1024
)

func (m *gpt2) h() int64      { return m.batch * m.seq * gpt2Width * 4 }
func (m *gpt2) logits() int64 { return m.batch * m.seq * gpt2Vocab * 4 }

// gpt2Params returns the model's parameters' sizes in the order PyTorch
// makes them: the token and position embeddings, each layer's norms,
// attention and MLP, and the final norm.
func gpt2Params() []int64 {
	const w = gpt2Width * 4
	ps := []int64{gpt2Vocab * w, gpt2Ctx * w}
	for range gpt2Layers {
		ps = append(ps, w, w, 3*gpt2Width*w, 3*w, gpt2Width*w, w, w, w, 4*gpt2Width*w, 4*w, 4*gpt2Width*w, w)
	}
	return append(ps, w, w)
}

// load makes the weights; they stay.
func (m *gpt2) load() {
	for _, n := range gpt2Params() {
		m.b.alloc(n)
	}
}

// embed makes the pass's input, the token and position embeddings summed,
// and returns it with what stays until the head: the embeddings and the
// dropout's mask.
func (m *gpt2) embed() (keep []uint64, x uint64) {
	b, h := m.b, m.h()
	tok := b.alloc(h)
	pos := b.alloc(m.seq * gpt2Width * 4)
	sum := b.alloc(h)
	keep = []uint64{tok, pos, b.alloc(h / 4)}
	x = b.alloc(h)
	b.free(sum)
	return keep, x
}

// forward runs one layer on its input x as training does, and returns what
// the layer keeps for the backward pass (x last), its keys and values (which
// the outputs hold) and its output.
func (m *gpt2) forward(x uint64) (saved, kv []uint64, out uint64) {
	b, h := m.b, m.h()
	ln, qkv := b.alloc(h), b.alloc(3*h)
	k, v, q := b.alloc(h), b.alloc(h), b.alloc(h)
	t := b.alloc(h)
	saved = append(saved, ln, qkv, q, b.alloc(h/4)) // the attention's dropout mask
	ao := b.alloc(h)
	b.free(t)
	saved = append(saved, b.alloc(h), b.alloc(h)) // heads merged, projected
	// The MLP's wide activation and GELU's pieces (its tanh form): some
	// kept, some passing.
	saved = append(saved, b.alloc(4*h), b.alloc(4*h))
	p := b.alloc(4 * h)
	for range 3 {
		n := b.alloc(4 * h)
		b.free(p)
		p = n
	}
	saved = append(saved, p, b.alloc(4*h), b.alloc(4*h))
	t = b.alloc(h)
	saved = append(saved, b.alloc(h/4))
	o := b.alloc(h)
	b.free(t)
	out = b.alloc(h)
	b.free(ao)
	b.free(o)
	return append(saved, x), []uint64{k, v}, out
}

// head makes the final norm and the logits from x at the end of the forward
// pass; the outputs now replace the last pass's, which go. With the loss it
// makes the logits shifted, their log-probabilities and gradient, and the
// gradient of the tied embedding (into grads), and returns the gradient of
// x.
func (m *gpt2) head(x uint64, keep, kv []uint64, grads *[]uint64) uint64 {
	b, h := m.b, m.h()
	nf := b.alloc(h)
	b.free(keep[0])
	b.free(keep[1])
	lg := b.alloc(m.logits())
	shift := b.alloc(m.logits())
	m.replaceHeld(append([]uint64{lg}, kv...))
	lsm := b.alloc(m.logits())
	glsm := b.alloc(m.logits())
	b.free(lsm)
	b.free(shift)
	*grads = append(*grads, b.alloc(gpt2Vocab*gpt2Width*4))
	gh := b.alloc(h)
	b.freeAll([]uint64{keep[2], x, nf, glsm}) // glsm first
	return gh
}

// backward runs one layer back from the gradient gh over what it kept, s
// (as forward returns it), making its weights' gradients into grads, and
// returns the gradient of its input.
func (m *gpt2) backward(s []uint64, gh uint64, grads *[]uint64) uint64 {
	b, h := m.b, m.h()
	const w = gpt2Width * 4
	wgrad := func(n int64) { *grads = append(*grads, b.alloc(n)) }
	t := b.alloc(h)
	b.free(s[11]) // the MLP's dropout mask
	g4 := b.alloc(4 * h)
	wgrad(4 * gpt2Width * w)
	b.transient(2 * h)
	b.free(t)
	for _, i := range []int{10, 9, 8, 7, 6} { // the MLP's kept pieces
		n := b.alloc(4 * h)
		b.free(s[i])
		b.free(g4)
		g4 = n
	}
	b.transient(4 * h)
	gm := b.alloc(h)
	wgrad(4 * gpt2Width * w)
	b.transient(h * 11 / 2)
	b.free(g4)
	b.free(s[5])
	b.free(s[4])
	t = b.alloc(h)
	b.free(s[3]) // the attention's dropout mask
	ga := b.alloc(h)
	wgrad(gpt2Width * w)
	b.transient(2 * h)
	b.free(t)
	gq, gk, gv := b.alloc(h), b.alloc(h), b.alloc(h)
	b.transient(h + 4*kib)
	b.free(ga)
	b.free(s[1])
	b.free(s[2])
	gqkv := b.alloc(3 * h)
	b.free(gq)
	b.free(gk)
	b.free(gv)
	g := b.alloc(h)
	wgrad(3 * gpt2Width * w)
	b.transient(h*11/2 + 3*mib/4)
	b.free(gqkv)
	b.free(s[0])
	b.free(gm)
	b.free(gh)
	ng := b.alloc(h)
	b.free(g)
	b.free(s[12])
	return ng
}

// transient allocates n bytes and frees them.
func (b *builder) transient(n int64) { b.free(b.alloc(n)) }

// step is one optimizer step of AdamW (its foreach form): at the first,
// each parameter's two moments, made in pairs, which stay; then one
// temporary for each parameter, all made, then all freed; then zero_grad
// frees the gradients.
func (m *gpt2) step(first bool, grads []uint64) {
	b := m.b
	if first {
		for _, n := range gpt2Params() {
			b.alloc(n)
			b.alloc(n)
		}
	}
	var tmp []uint64
	for _, n := range gpt2Params() {
		tmp = append(tmp, b.alloc(n))
	}
	b.freeAll(tmp)
	b.freeAll(grads)
}

// GPT2Training is Hugging Face's GPT-2 small trained with AdamW for three
// steps, as gpt2_train.csv.gz recorded it (seed 1: 8 sequences of 1,024
// tokens) and at other batches and lengths (gpt2Runs): each step's forward
// pass keeps every layer's activations for the backward pass while the last
// step's outputs, its logits (a third of the peak in four blocks of their
// size) and every layer's keys and values, are still held; they go once the
// new logits are made. Those held blocks lie among the activations, and
// the memory they leave is what the head of the next step, where the peak
// is, must fit around (docs/pool.md, "Under a memory cap").
func GPT2Training(seed uint64) []trace.Event {
	run := gpt2Runs[(seed+uint64(len(gpt2Runs))-1)%uint64(len(gpt2Runs))]
	return GPT2TrainingAt(run[0], run[1])
}

// GPT2TrainingAt is GPT2Training at a batch of batch sequences of seq
// tokens: nothing in it is random.
func GPT2TrainingAt(batch, seq int64) []trace.Event {
	m := &gpt2{b: newBuilder(1), batch: batch, seq: seq}
	m.load()
	for step := range 3 {
		keep, x := m.embed()
		var saved [][]uint64
		var kv []uint64
		for range gpt2Layers {
			s, lkv, out := m.forward(x)
			saved, kv, x = append(saved, s), append(kv, lkv...), out
		}
		var grads []uint64
		gh := m.head(x, keep, kv, &grads)
		for i := gpt2Layers - 1; i >= 0; i-- {
			gh = m.backward(saved[i], gh, &grads)
		}
		m.b.free(gh)
		m.step(step == 0, grads)
	}
	return m.b.finish()
}

// infer runs one layer on x without gradients, and returns its keys and
// values (which the outputs hold) and its output.
func (m *gpt2) infer(x uint64) (kv []uint64, out uint64) {
	b, h := m.b, m.h()
	ln := b.alloc(h)
	qkv := b.alloc(3 * h)
	b.free(ln)
	k, v, q := b.alloc(h), b.alloc(h), b.alloc(h)
	b.free(qkv)
	ao := b.alloc(h)
	b.free(q)
	merged := b.alloc(h)
	b.free(ao)
	proj := b.alloc(h)
	b.free(merged)
	r := b.alloc(h)
	b.free(proj)
	ln2 := b.alloc(h)
	fc := b.alloc(4 * h)
	b.free(ln2)
	g := b.alloc(4 * h)
	b.free(fc)
	o := b.alloc(h)
	b.free(g)
	out = b.alloc(h)
	b.free(o)
	b.free(r)
	b.free(x)
	return []uint64{k, v}, out
}

// GPT2Inference is GPT-2 small serving requests of dynamic lengths
// without gradients: each request is 16 sequences of a length of its own
// (64 to 1,024 tokens), whose logits (over every position, about two
// thirds of a request's bytes) and every layer's keys and values the
// program holds until the next request's forward pass returns, as a loop
// that keeps the model's outputs does. What a request frees is always a
// little too small or too large for the next.
func GPT2Inference(seed uint64) []trace.Event {
	m := &gpt2{b: newBuilder(seed), batch: 16}
	m.load()
	for range 24 {
		m.seq = 64 + m.b.r.Int64N(gpt2Ctx-63)
		kv, x := m.inferPass()
		nf := m.b.alloc(m.h())
		m.b.free(x)
		lg := m.b.alloc(m.logits())
		m.b.free(nf)
		m.replaceHeld(append([]uint64{lg}, kv...))
	}
	return m.b.finish()
}

// inferPass runs the forward pass without gradients up to the final norm:
// it returns every layer's keys and values and the last layer's output.
func (m *gpt2) inferPass() (kv []uint64, x uint64) {
	b := m.b
	tok := b.alloc(m.h())
	pos := b.alloc(m.seq * gpt2Width * 4)
	x = b.alloc(m.h())
	b.free(tok)
	b.free(pos)
	for range gpt2Layers {
		lkv, out := m.infer(x)
		kv, x = append(kv, lkv...), out
	}
	return kv, x
}

// replaceHeld frees what the program held of the last pass and holds
// outs instead.
func (m *gpt2) replaceHeld(outs []uint64) {
	for _, a := range m.held {
		m.b.free(a)
	}
	m.held = outs
}

// GPT2Generation is GPT-2 small generating text greedily with its cache of
// keys and values as tuples: a prompt's forward pass (as inference runs it)
// makes every layer's keys and values, then each decoding step makes every
// layer's one token longer (a concatenation into new tensors) and frees the
// old ones once the step's outputs replace them; one position's logits come
// and go. Requests come one after another, each a batch of 1-4 sequences
// with a prompt and an output length of its own. A layer's keys pass from
// the small blocks (up to 1 MiB) to the large ones as they grow.
func GPT2Generation(seed uint64) []trace.Event {
	m := &gpt2{b: newBuilder(seed)}
	m.load()
	for range 2 {
		m.batch = 1 + m.b.r.Int64N(4)
		m.seq = 16 + m.b.r.Int64N(240)
		past, x := m.inferPass()
		m.b.free(x)
		m.b.transient(m.batch * gpt2Vocab * 4)
		n := m.seq
		for range 100 + m.b.r.Int64N(150) {
			x := m.b.alloc(m.batch * gpt2Width * 4)
			var next []uint64
			for range gpt2Layers {
				lkv, out := m.decode(x, n)
				next, x = append(next, lkv...), out
			}
			m.b.transient(m.batch * gpt2Vocab * 4)
			m.b.free(x)
			m.b.freeAll(past)
			past = next
			n++
		}
		m.b.freeAll(past)
	}
	return m.b.finish()
}

// decode runs one layer on the hidden state x of one new token per
// sequence, given pastLen tokens of cached keys and values: it makes the
// layer's keys and values one token longer, as new tensors (a
// concatenation), and returns them with its output. The old ones stay until
// the step's end.
func (m *gpt2) decode(x uint64, pastLen int64) (kv []uint64, out uint64) {
	b := m.b
	t := m.batch * gpt2Width * 4 // one token's hidden state
	qkv := b.alloc(3 * t)
	k := b.alloc((pastLen + 1) * t)
	v := b.alloc((pastLen + 1) * t)
	w := b.alloc(m.batch * 12 * (pastLen + 1) * 4) // attention's weights
	ao := b.alloc(t)
	b.free(w)
	b.free(qkv)
	fc := b.alloc(4 * t)
	out = b.alloc(t)
	b.free(fc)
	b.free(ao)
	b.free(x)
	return []uint64{k, v}, out
}
