package scope_test

import (
	"context"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

func TestReleaseIsLastAllocatedFirst(t *testing.T) {
	tr := newTree(t, pool.Shards(1))
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "lifo"})
	require.NoError(t, err)
	var ptrs []uintptr
	for range 4 {
		a, err := s.Alloc(512)
		require.NoError(t, err)
		ptrs = append(ptrs, a.Ptr())
	}
	require.NoError(t, s.Close())
	// With one shard the pool's front cache is a stack per size: the block
	// released last comes back first. Released last-allocated-first, the
	// first allocation is on top.
	s2, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
	require.NoError(t, err)
	defer s2.Close()
	a, err := s2.Alloc(512)
	require.NoError(t, err)
	assert.Equal(t, ptrs[0], a.Ptr())
}

func BenchmarkEmptyScope(b *testing.B) {
	tr := newTree(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, err := tr.Open(ctx, scope.Scope{}, scope.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEmptyScopeInAParent opens and closes a child scope, with no
// reservation, of an open scope.
func BenchmarkEmptyScopeInAParent(b *testing.B) {
	tr := newTree(b)
	parent, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
	require.NoError(b, err)
	defer parent.Close()
	ctx := parent.Context()
	b.ReportAllocs()
	for b.Loop() {
		s, err := tr.Open(ctx, parent, scope.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllocFree is an allocation and free through a scope; compare
// with the pool's BenchmarkCachedAllocFree for the scope's own cost (gpu's
// BenchmarkBarePoolAllocFree is the same pair through a device).
func BenchmarkAllocFree(b *testing.B) { benchAllocFree(b, false) }

// BenchmarkAllocFreeRecordingStacks is the same with allocation stacks
// recorded, as under gputest.VerifyTestMain.
func BenchmarkAllocFreeRecordingStacks(b *testing.B) { benchAllocFree(b, true) }

func benchAllocFree(b *testing.B, stacks bool) {
	tr := newTree(b)
	tr.RecordStacks(stacks)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
	require.NoError(b, err)
	defer s.Close()
	b.ReportAllocs()
	for b.Loop() {
		a, err := s.Alloc(4096)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Free(a); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRacingFreesKeepsAndClose races every ownership operation on the same
// allocations: each must end exactly once, and the bytes must add up.
func TestRacingFreesKeepsAndClose(t *testing.T) {
	tr := newTree(t)
	for range 50 {
		parent, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
		require.NoError(t, err)
		child, err := tr.Open(parent.Context(), parent, scope.Options{})
		require.NoError(t, err)
		var allocs []scope.Ref
		for range 16 {
			a, err := child.Alloc(1000)
			require.NoError(t, err)
			allocs = append(allocs, a)
		}
		var wg sync.WaitGroup
		for i, a := range allocs {
			wg.Add(2)
			go func() { defer wg.Done(); _ = child.Free(a) }()
			go func() {
				defer wg.Done()
				if i%2 == 0 {
					_ = child.Keep(a)
				} else {
					_ = a.Use(func(uintptr) error { return nil })
				}
			}()
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = child.Close() }()
		wg.Wait()
		require.NoError(t, child.Close())
		assert.Zero(t, child.Stats().Allocations)
		kept := parent.Stats().Allocations
		assert.Equal(t, int64(kept)*pool.Rounded(1000), parent.Stats().Live, "the parent's bytes are exactly what it kept, as the pool rounds them")
		require.NoError(t, parent.Close())
		assert.Zero(t, parent.Stats().Live)
		assert.Zero(t, tr.Pool().Stats().Allocated, "every allocation ended exactly once")
	}
}

// A size is checked once, by the pool where it rounds it: one outside
// (0, pool.MaxSize] fails with ErrInvalidSize, in a scope with a
// reservation too, before anything is charged or taken.
func TestAllocOfAnInvalidSizeTakesNothing(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "sizes", Limit: 1 << 20, Reserve: 64 << 10})
	require.NoError(t, err)
	for _, n := range []int64{0, -1, pool.MaxSize + 1, math.MaxInt64} {
		_, err := s.Alloc(n)
		assert.ErrorIs(t, err, pool.ErrInvalidSize, "%d bytes", n)
	}
	assert.Equal(t, pool.Rounded(64<<10), s.Stats().Live, "nothing charged past the reservation")
	assert.Zero(t, s.Stats().Allocations)
	assert.Equal(t, pool.Rounded(64<<10), tr.Pool().Stats().Allocated, "nothing taken past the reservation")
	_, err = s.End()
	require.NoError(t, err)
}
