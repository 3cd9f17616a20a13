package main

import (
	"errors"
	"fmt"

	"github.com/gpuscope/gpuscope/gpu"
)

// arena is where a step's tensors come from. The program runs on scopes
// (scopeArena); the benchmark also runs the same step on two baselines:
// allocating with the driver directly, and allocating once up front.
type arena interface {
	// alloc returns n float32 that live until the innermost scope ends.
	alloc(n int) (tensor, error)
	// scope runs fn with an arena whose allocations end when fn returns.
	scope(name string, fn func(a arena) error) error
}

// scopeArena allocates in a gpuscope scope; scope opens a child scope.
type scopeArena struct {
	dev *gpu.Device
	s   *gpu.Scope
}

func (a scopeArena) alloc(n int) (tensor, error) {
	x, err := gpu.Alloc[float32](a.s, n)
	return tensor{s: x, n: n}, err
}

func (a scopeArena) scope(name string, fn func(a arena) error) error {
	return gpu.WithScope(a.s.Context(), a.dev, func(s *gpu.Scope) error {
		return fn(scopeArena{dev: a.dev, s: s})
	}, gpu.Name(name))
}

// stackArena hands out tensors in the order they are asked for and takes
// them back when the scope that asked ends, as a stack. With release nil
// it never gives memory back: the tensors allocated on the first step are
// handed out again, in the same order, on every later one (allocating once
// up front, the floor of what allocation can cost). With release, each
// scope's tensors are released as it ends (the driver's own allocator).
type stackArena struct {
	newTensor func(n int) (tensor, error)
	release   func(t tensor) error

	items  []tensor
	cursor int
}

func (a *stackArena) alloc(n int) (tensor, error) {
	if a.cursor < len(a.items) {
		t := a.items[a.cursor]
		if t.n != n {
			return tensor{}, fmt.Errorf("train: allocation %d of a step is %d elements, was %d: the steps differ", a.cursor, n, t.n)
		}
		a.cursor++
		return t, nil
	}
	t, err := a.newTensor(n)
	if err != nil {
		return tensor{}, err
	}
	a.items = append(a.items, t)
	a.cursor++
	return t, nil
}

func (a *stackArena) scope(_ string, fn func(a arena) error) error {
	mark := a.cursor
	err := fn(a)
	if a.release != nil {
		for i := len(a.items) - 1; i >= mark; i-- {
			err = errors.Join(err, a.release(a.items[i]))
		}
		a.items = a.items[:mark]
	}
	a.cursor = mark
	return err
}

// upfront returns an arena that allocates once, in s, and reuses.
func upfront(s *gpu.Scope) *stackArena {
	return &stackArena{newTensor: scopeArena{s: s}.alloc}
}
