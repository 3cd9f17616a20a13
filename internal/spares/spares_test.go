package spares_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/spares"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStackReusesTheLastKeptFirst(t *testing.T) {
	var s spares.Stack[int]
	assert.Nil(t, s.Pop(), "the zero stack is empty")
	a, b := new(int), new(int)
	s.Push(a)
	s.Push(b)
	assert.Equal(t, 2, s.Len())
	assert.Equal(t, []*int{b, a}, slices.Collect(s.All()), "All lists the next to be reused first")
	assert.Same(t, b, s.Pop())
	assert.Same(t, a, s.Pop())
	assert.Nil(t, s.Pop())
	assert.Equal(t, 0, s.Len())
}

func TestPopAllocatesNothing(t *testing.T) {
	var s spares.Stack[int]
	x := new(int)
	s.Push(x)
	allocs := testing.AllocsPerRun(100, func() { s.Push(s.Pop()) })
	assert.Zero(t, allocs, "a popped object pushed back reuses the stack's room")
}
