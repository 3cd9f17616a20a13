// Package fuzzops reads a fuzz input as a program of small choices, for
// the fuzz tests of the public API (pool, scope, gpu): each choice takes
// one byte of the input, and a spent input chooses 0 from then on.
package fuzzops

import "math/rand/v2"

// Program is a fuzz input being read, choice by choice.
type Program struct {
	ops []byte
	i   int
}

// New returns the program of ops, cut to at most max bytes: a fuzzer's
// inputs grow, and a longer program only takes longer to run.
func New(ops []byte, max int) *Program {
	return &Program{ops: ops[:min(len(ops), max)]}
}

// Next returns the next choice among n, 0 to n-1: the next byte modulo n.
// With one choice or none (n <= 1), or once the input is spent, it
// returns 0 and takes no byte. A byte chooses among at most 256.
func (p *Program) Next(n int) int {
	if p.i >= len(p.ops) || n <= 1 {
		return 0
	}
	v := int(p.ops[p.i])
	p.i++
	return v % n
}

// Pos returns how many bytes the choices so far took.
func (p *Program) Pos() int { return p.i }

// Done reports whether the input is spent.
func (p *Program) Done() bool { return p.i >= len(p.ops) }

// Random returns n random bytes from the seed and stream given: a long
// program for a fuzzer's seeds, which reaches deep states from the start.
func Random(seed, stream uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, stream))
	ops := make([]byte, n)
	for k := range ops {
		ops[k] = byte(r.Uint32())
	}
	return ops
}
