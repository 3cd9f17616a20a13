package scope_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/scope"
)

// A disowned resource's record is reused by the scope's next OwnResource;
// the Owned that named it must fail from then on, or a stale Disown would
// take the next owner's resource from the scope, which would never end it.
func TestADisownedRecordServesTheNextOwnerAlone(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "owner"})
	require.NoError(t, err)
	var firstEnded, nextEnded int
	first, err := s.OwnResource(scope.Resource{Kind: "first", Final: func() error { firstEnded++; return nil }})
	require.NoError(t, err)
	require.True(t, first.Disown(), "the first Disown takes the resource")
	require.False(t, first.Disown(), "a second Disown finds it gone")

	next, err := s.OwnResource(scope.Resource{Kind: "next", Bytes: 4096, Final: func() error { nextEnded++; return nil }})
	require.NoError(t, err)
	assert.False(t, first.Disown(), "the first Owned does not name the next resource")
	info, ok := s.Info()
	require.True(t, ok)
	require.Len(t, info.Resources, 1, "the next resource is still owned")
	assert.Equal(t, "next", info.Resources[0].Kind)
	assert.Equal(t, int64(4096), info.Resources[0].Bytes)

	_, err = s.End()
	require.NoError(t, err)
	assert.Equal(t, 1, nextEnded, "the scope ends the next resource")
	assert.Zero(t, firstEnded, "nor the disowned one")
	assert.False(t, next.Disown(), "a resource the scope ended cannot be disowned")
}

// Owning and disowning in a loop, as page-locked memory's AllocHost and
// Free do, reuses one record: no allocation.
func TestOwningAndDisowningAllocatesNothing(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
	require.NoError(t, err)
	defer s.Close()
	final := func() error { return nil }
	r := scope.Resource{Kind: "page-locked memory", Bytes: 4096, Final: final}
	o, err := s.OwnResource(r)
	require.NoError(t, err)
	require.True(t, o.Disown())
	assert.Zero(t, testing.AllocsPerRun(200, func() {
		o, _ := s.OwnResource(r)
		o.Disown()
	}))
}

// A resource marked Allocation is refused, as Alloc is, once the scope's
// context is done, with its cause; another is still owned.
func TestAnAllocationResourceIsRefusedOnceTheContextIsDone(t *testing.T) {
	tr := newTree(t)
	cause := errors.New("request abandoned")
	ctx, cancel := context.WithCancelCause(context.Background())
	s, err := tr.Open(ctx, scope.Scope{}, scope.Options{})
	require.NoError(t, err)
	defer s.Close()
	cancel(cause)
	final := func() error { return nil }
	_, err = s.OwnResource(scope.Resource{Kind: "page-locked memory", Final: final, Allocation: true})
	assert.ErrorIs(t, err, cause)
	_, err = s.Alloc(64)
	assert.ErrorIs(t, err, cause, "as Alloc is")
	_, err = s.OwnResource(scope.Resource{Kind: "stream", Final: final})
	assert.NoError(t, err)
}

// Into receives the Owned before a Final can run: a Final that reads it
// finds the resource it ends.
func TestIntoHoldsTheOwnedBeforeTheFinalRuns(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
	require.NoError(t, err)
	var into scope.Owned
	var disownedInFinal bool
	o, err := s.OwnResource(scope.Resource{Kind: "page-locked memory", Into: &into,
		Final: func() error { disownedInFinal = into.Disown(); return nil }})
	require.NoError(t, err)
	assert.Equal(t, o, into)
	_, err = s.End()
	require.NoError(t, err)
	assert.False(t, disownedInFinal, "the scope is ending it: Disown through Into reports false")
	_, err = s.OwnResource(scope.Resource{Kind: "after", Into: &into, Final: func() error { return nil }})
	assert.ErrorIs(t, err, scope.ErrClosed)
	assert.Equal(t, o, into, "a refused OwnResource leaves Into alone")
}
