package scope_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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

// A Final that disowns its own resource, as a Free racing the scope's end
// does, is told the scope ends it.
func TestADisownInsideTheScopesEndReportsFalse(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
	require.NoError(t, err)
	var o scope.Owned
	var disownedInFinal bool
	o, err = s.OwnResource(scope.Resource{Kind: "page-locked memory",
		Final: func() error { disownedInFinal = o.Disown(); return nil }})
	require.NoError(t, err)
	_, err = s.End()
	require.NoError(t, err)
	assert.False(t, disownedInFinal, "the scope is ending it")
	assert.False(t, o.Disown(), "nor after")
}

// A disowned resource leaves the scope's listing and its end at once,
// though its record waits on the list for reuse.
func TestADisownedResourceIsNeitherListedNorEnded(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
	require.NoError(t, err)
	var ended []string
	own := func(kind string) scope.Owned {
		o, err := s.OwnResource(scope.Resource{Kind: kind, End: func() error { ended = append(ended, kind); return nil }})
		require.NoError(t, err)
		return o
	}
	a, _, c := own("a"), own("b"), own("c")
	require.True(t, c.Disown())
	require.True(t, a.Disown())
	assert.False(t, a.Disown(), "once")
	info, ok := s.Info()
	require.True(t, ok)
	require.Len(t, info.Resources, 1)
	assert.Equal(t, "b", info.Resources[0].Kind)
	own("d") // reuses c's record in place
	_, err = s.End()
	require.NoError(t, err)
	assert.Equal(t, []string{"d", "b"}, ended, "the owned ones, newest first")
}

// Records disowned in any order are reused: a scope that owns and disowns
// resources without end, first in first out, allocates nothing once warm,
// where records left on its list would need new ones.
func TestResourcesDisownedOutOfOrderAllocateNothing(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
	require.NoError(t, err)
	defer s.End()
	end := func() error { return nil }
	var live []scope.Owned
	step := func() {
		o, err := s.OwnResource(scope.Resource{Kind: "x", End: end})
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, o)
		if len(live) > 8 {
			if !live[0].Disown() {
				t.Fatal("disown refused")
			}
			live = append(live[:0], live[1:]...)
		}
	}
	for range 1000 {
		step()
	}
	assert.Zero(t, testing.AllocsPerRun(1000, step))
}

// Owners disowning while the scope ends: each resource ends exactly once,
// by its owner where Disown said so, else by the scope.
func TestDisownsRacingTheEndEndEachResourceOnce(t *testing.T) {
	for range 50 {
		tr := newTree(t)
		s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
		require.NoError(t, err)
		const n = 64
		var byScope [n]atomic.Int32
		owned := make([]scope.Owned, n)
		for i := range n {
			owned[i], err = s.OwnResource(scope.Resource{Kind: "x", End: func() error { byScope[i].Add(1); return nil }})
			require.NoError(t, err)
		}
		var byOwner [n]bool
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := range n {
				byOwner[i] = owned[i].Disown()
			}
		})
		_, err = s.End()
		require.NoError(t, err)
		wg.Wait()
		for i := range n {
			ends := int(byScope[i].Load())
			if byOwner[i] {
				ends++
			}
			require.Equal(t, 1, ends, "resource %d", i)
		}
	}
}

// A scope takes back a record its owner disowned, without its lock, and
// the resource is owned as before: listed, ended by the scope, disowned
// through the new Owned only.
func TestAScopeReownsWhatItsOwnerDisowned(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
	require.NoError(t, err)
	ends := 0
	o, err := s.OwnResource(scope.Resource{Kind: "page-locked memory", Bytes: 4096, End: func() error { ends++; return nil }})
	require.NoError(t, err)
	_, ok := o.Reown(s)
	assert.False(t, ok, "owned: nothing to take back")
	require.True(t, o.Disown())
	again, ok := o.Reown(s)
	require.True(t, ok)
	_, ok = o.Reown(s)
	assert.False(t, ok, "once")
	assert.False(t, o.Disown(), "the old Owned names a use that ended")
	info, _ := s.Info()
	require.Len(t, info.Resources, 1)
	assert.Equal(t, int64(4096), info.Resources[0].Bytes)
	require.True(t, again.Disown())
	again, ok = again.Reown(s)
	require.True(t, ok)
	_, err = s.End()
	require.NoError(t, err)
	assert.Equal(t, 1, ends, "the scope ends what it took back")
	assert.False(t, again.Disown())
}

// Reown refuses, changing nothing, wherever the record is not the
// disowned one of a scope that can own it.
func TestReownRefusesWhatItCannotTakeBack(t *testing.T) {
	end := func() error { return nil }
	open := func(tr *scope.Tree) scope.Scope {
		s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
		require.NoError(t, err)
		return s
	}
	disowned := func(s scope.Scope) scope.Owned {
		o, err := s.OwnResource(scope.Resource{Kind: "x", End: end})
		require.NoError(t, err)
		require.True(t, o.Disown())
		return o
	}
	t.Run("another scope", func(t *testing.T) {
		tr := newTree(t)
		a, b := open(tr), open(tr)
		_, ok := disowned(a).Reown(b)
		assert.False(t, ok)
		a.End()
		b.End()
	})
	t.Run("a scope that ended", func(t *testing.T) {
		tr := newTree(t)
		a := open(tr)
		o := disowned(a)
		_, err := a.End()
		require.NoError(t, err)
		_, ok := o.Reown(a)
		assert.False(t, ok)
		b := open(tr) // may reuse a's node and its record
		_, ok = o.Reown(b)
		assert.False(t, ok, "nor in a scope that reuses its node")
		b.End()
	})
	t.Run("a record serving another resource", func(t *testing.T) {
		tr := newTree(t)
		a := open(tr)
		o := disowned(a)
		_, err := a.OwnResource(scope.Resource{Kind: "y", End: end}) // reuses the record in place
		require.NoError(t, err)
		_, ok := o.Reown(a)
		assert.False(t, ok)
		info, _ := a.Info()
		require.Len(t, info.Resources, 1)
		assert.Equal(t, "y", info.Resources[0].Kind)
		a.End()
	})
	t.Run("a scope recording stacks", func(t *testing.T) {
		tr := newTree(t)
		tr.RecordStacks(true)
		a := open(tr)
		_, ok := disowned(a).Reown(a)
		assert.False(t, ok, "its record would keep the old stack")
		a.End()
	})
	t.Run("a scope whose context is done", func(t *testing.T) {
		tr := newTree(t)
		ctx, cancel := context.WithCancelCause(context.Background())
		a, err := tr.Open(ctx, scope.Scope{}, scope.Options{})
		require.NoError(t, err)
		o := disowned(a)
		cause := errors.New("request abandoned")
		cancel(cause)
		_, ok := o.Reown(a)
		assert.False(t, ok)
		_, err = a.OwnResource(scope.Resource{Kind: "x", End: end, Allocation: true})
		assert.ErrorIs(t, err, cause, "OwnResource says why")
		info, _ := a.Info()
		assert.Empty(t, info.Resources, "the record went back to dormant")
		a.End()
	})
	t.Run("the zero Owned", func(t *testing.T) {
		tr := newTree(t)
		a := open(tr)
		_, ok := scope.Owned{}.Reown(a)
		assert.False(t, ok)
		a.End()
	})
}

// Owners taking their records back while the scope ends: each resource
// the scope owns at its end, taken back or not, ends exactly once.
func TestReownsRacingTheEndEndEachResourceOnce(t *testing.T) {
	for range 50 {
		tr := newTree(t)
		s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{})
		require.NoError(t, err)
		const n = 64
		var ends [n]atomic.Int32
		owned := make([]scope.Owned, n)
		for i := range n {
			owned[i], err = s.OwnResource(scope.Resource{Kind: "x", End: func() error { ends[i].Add(1); return nil }})
			require.NoError(t, err)
			require.True(t, owned[i].Disown())
		}
		var back [n]bool
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := range n {
				_, back[i] = owned[i].Reown(s)
			}
		})
		_, err = s.End()
		require.NoError(t, err)
		wg.Wait()
		for i := range n {
			want := 0
			if back[i] {
				want = 1
			}
			require.Equal(t, want, int(ends[i].Load()), "resource %d", i)
		}
	}
}
