package scope_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

func TestAllocationsComeFromTheNearestReservationThenThePool(t *testing.T) {
	tr := newTree(t)
	p := tr.Pool()
	root, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "root", Reserve: 1 << 20})
	require.NoError(t, err)
	defer root.Close()
	assert.Equal(t, int64(1<<20), root.Stats().Reserved)
	fromPool := p.Stats().Allocated // the reservation is one pool block

	child, err := tr.Open(root.Context(), scope.Scope{}, scope.Options{Name: "child"})
	require.NoError(t, err)
	a, err := child.Alloc(64 << 10)
	require.NoError(t, err)
	assert.Equal(t, fromPool, p.Stats().Allocated, "the child drew on its parent's reservation")
	assert.Equal(t, int64(64<<10), child.Stats().Live)

	big, err := child.Alloc(2 << 20)
	require.NoError(t, err, "past the reservation the pool serves it")
	assert.Equal(t, fromPool+2<<20, p.Stats().Allocated)
	assert.Equal(t, int64(1<<20+2<<20), root.Stats().Live,
		"the root counts its reservation (which the 64 KiB lie in) and what its children took from the pool")

	require.NoError(t, child.Close())
	assert.Equal(t, fromPool, p.Stats().Allocated, "the pool's block went back; the reservation stays")
	assert.Equal(t, int64(1<<20), root.Stats().Live, "only the reservation is left")
	assert.ErrorIs(t, a.Use(func(uintptr) error { return nil }), errdefs.ScopeClosed)
	assert.ErrorIs(t, big.Use(func(uintptr) error { return nil }), errdefs.ScopeClosed)

	require.NoError(t, root.Close())
	assert.Zero(t, p.Stats().Allocated, "closing the root gave its reservation back")
}

// Sizes are checked where users give them (package gpu): a reservation
// out of range, or over the scope's own limit, reaching a tree is a bug of
// its caller, and panics before anything is opened or taken.
func TestAReservationNoCallerCheckedPanicsWithNothingHeld(t *testing.T) {
	tr := newTree(t)
	for _, o := range []scope.Options{{Reserve: pool.MaxSize + 1}, {Reserve: -1}, {Reserve: 1 << 20, Limit: 1 << 10}, {Limit: -1}} {
		assert.PanicsWithValue(t, fmt.Sprintf("scope: bug: Open with Reserve %d and Limit %d: sizes are checked where users give them (package gpu)", o.Reserve, o.Limit),
			func() { _, _ = tr.Open(context.Background(), scope.Scope{}, o) })
	}
	assert.Empty(t, tr.Scopes())
	assert.Zero(t, tr.Pool().Stats().Allocated)
}

func TestAReservationWhoseRegionFailsGivesBackTheMemoryAndTheCharge(t *testing.T) {
	tr := newTree(t)
	root, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "root"})
	require.NoError(t, err)
	defer root.Close()
	spare, _ := tr.FreeNodes()

	failed := errors.New("no region")
	restore := scope.ReplaceNewRegion(func(uintptr, int64) (*pool.Region, error) { return nil, failed })
	_, err = tr.Open(root.Context(), scope.Scope{}, scope.Options{Name: "reserved", Reserve: 1 << 20})
	restore()
	require.ErrorIs(t, err, failed)

	assert.Zero(t, tr.Pool().Stats().Allocated, "the reservation's block went back to the pool")
	assert.Zero(t, root.Stats().Live, "the charge against the parent was undone")
	assert.Empty(t, root.Children())
	n, twice := tr.FreeNodes()
	assert.Equal(t, spare+1, n, "the node waits for reuse")
	assert.False(t, twice)
}

func TestAReservingChildWhoseParentEndsMeanwhileGivesEverythingBack(t *testing.T) {
	tr := newTree(t)
	parent, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "parent"})
	require.NoError(t, err)

	// The pool's allocation is taken outside the parent's lock, after the
	// reservation is charged to the parent: the parent can begin to end
	// before the child is listed. Its end waits for the open to finish, so
	// that a scope opened meanwhile cannot reuse the parent's node and
	// find the child's charge in it.
	parentEnded := make(chan struct{})
	var parentErr error
	var other scope.Scope
	restore := scope.ReplaceNewRegion(func(ptr uintptr, size int64) (*pool.Region, error) {
		go func() { parentErr = parent.Close(); close(parentEnded) }()
		for !parent.Closed() {
			runtime.Gosched()
		}
		select {
		case <-parentEnded:
			t.Error("the parent ended while its child was still opening")
		case <-time.After(20 * time.Millisecond):
		}
		var err error
		other, err = tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "other"})
		require.NoError(t, err)
		assert.Zero(t, other.Stats().Live, "a scope opened meanwhile holds nothing")
		return pool.NewRegion(ptr, size)
	})
	_, err = tr.Open(context.Background(), parent, scope.Options{Name: "child", Reserve: 1 << 20})
	restore()
	require.ErrorIs(t, err, errdefs.ScopeClosed)
	<-parentEnded
	require.NoError(t, parentErr)

	assert.Zero(t, other.Stats().Live)
	require.NoError(t, other.Close())
	assert.Empty(t, tr.Scopes())
	assert.Zero(t, tr.Pool().Stats().Allocated, "the reservation went back to the pool")
	_, twice := tr.FreeNodes()
	assert.False(t, twice)
}

// A Free of reservation memory that waits for a holder gives the
// reservation back outside the scope's lock, which uncharges the scopes
// above it: their ends wait for it, so that a scope opened meanwhile
// cannot reuse an ancestor's node and find those bytes in it.
func TestAReleaseInFlightFromAReservationHoldsItsAncestorsEnd(t *testing.T) {
	tr := newTree(t)
	parent, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "parent"})
	require.NoError(t, err)
	r, err := tr.Open(context.Background(), parent, scope.Options{Name: "r", Reserve: 1 << 20})
	require.NoError(t, err)
	a, err := r.Alloc(4096)
	require.NoError(t, err)
	holding, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() { held <- a.WithPtr(0, func(_, _ uintptr) error { close(holding); <-release; return nil }) }()
	<-holding
	freed := make(chan error, 1)
	go func() { freed <- r.Free(a) }()
	for len(r.Allocations()) != 0 {
		runtime.Gosched() // until Free has taken a and waits for the holder
	}
	parentEnded := make(chan error, 1)
	go func() { parentEnded <- parent.Close() }()
	for !parent.Closed() {
		runtime.Gosched()
	}
	other, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "other", Limit: 1 << 20})
	require.NoError(t, err)
	assert.Zero(t, other.Stats().Live, "a scope opened while the release is in flight holds nothing")
	_, err = other.Alloc(512 << 10)
	assert.NoError(t, err, "and its limit is its own")

	close(release)
	require.NoError(t, <-held)
	require.NoError(t, <-freed)
	require.NoError(t, <-parentEnded)
	assert.Equal(t, pool.Rounded(512<<10), other.Stats().Live, "the release uncharged nothing of other's")
	require.NoError(t, other.Close())
	assert.Empty(t, tr.Scopes())
	assert.Zero(t, tr.Pool().Stats().Allocated, "the reservation went back to the pool")
}
