// Package spares keeps objects that are no longer in use for reuse, so
// that a path that needs one (a block split off on the pool's allocation
// path, a node for a scope) allocates nothing in steady state.
package spares

import "iter"

// Stack holds spare objects, the last kept the first reused. Its zero
// value is empty and ready. It is not safe for concurrent use: the lock
// of the structure that holds it guards it.
type Stack[T any] struct {
	items []*T
}

// Push keeps x for reuse.
func (s *Stack[T]) Push(x *T) { s.items = append(s.items, x) }

// Pop returns the object kept last and forgets it, or nil where there is
// none.
func (s *Stack[T]) Pop() *T {
	n := len(s.items)
	if n == 0 {
		return nil
	}
	x := s.items[n-1]
	s.items[n-1] = nil // the stack holds no object it has handed out
	s.items = s.items[:n-1]
	return x
}

// Len returns how many objects the stack holds.
func (s *Stack[T]) Len() int { return len(s.items) }

// All returns the objects the stack holds, the next to be reused first.
func (s *Stack[T]) All() iter.Seq[*T] {
	return func(yield func(*T) bool) {
		for i := len(s.items) - 1; i >= 0; i-- {
			if !yield(s.items[i]) {
				return
			}
		}
	}
}
