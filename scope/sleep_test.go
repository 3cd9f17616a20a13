package scope_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

// newDomainPool returns a pool of its own for a sleepable scope, closed
// when the test ends (after the scopes that use it).
func newDomainPool(t *testing.T) *pool.Pool {
	t.Helper()
	p, err := pool.New(sim.New(0, 0))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })
	return p
}

// openDomain opens in tr a sleepable scope with a pool of its own, and a
// scope inside it.
func openDomain(t *testing.T, tr *scope.Tree) (s, child scope.Scope, dp *pool.Pool) {
	t.Helper()
	dp = newDomainPool(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Pool: dp})
	require.NoError(t, err)
	child, err = tr.Open(s.Context(), scope.Scope{}, scope.Options{})
	require.NoError(t, err)
	return s, child, dp
}

// scrubbingTree returns a tree that scrubs what its scopes release,
// closed when the test ends, with the count of its scrubs.
func scrubbingTree(t *testing.T) (*scope.Tree, *atomic.Int32) {
	t.Helper()
	scrubs := new(atomic.Int32)
	p, err := pool.New(sim.New(0, 0))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })
	return scope.NewTree(p, "sim", scope.TreeOptions{Scrub: func(uintptr, int64, uintptr) error { scrubs.Add(1); return nil }}), scrubs
}

func TestASleepingDomainRefusesEveryUseUntilItWakes(t *testing.T) {
	tr := newTree(t)
	dp := newDomainPool(t)
	ctx := context.Background()
	s, err := tr.Open(ctx, scope.Scope{}, scope.Options{Name: "trainer", Pool: dp})
	require.NoError(t, err)
	defer s.End()
	child, err := tr.Open(s.Context(), scope.Scope{}, scope.Options{Name: "step", Stream: 7})
	require.NoError(t, err)
	a, err := s.Alloc(4 << 20)
	require.NoError(t, err)
	b, err := child.Alloc(1000)
	require.NoError(t, err)
	ptrA, ptrB := a.Ptr(), b.Ptr()
	assert.Equal(t, int64(2), dp.Stats().ActiveBlocks, "the domain's memory comes from its own pool")
	assert.Zero(t, tr.Pool().Stats().ActiveBlocks)
	require.NoError(t, b.RecordUse(9))

	var got []uintptr
	require.NoError(t, s.Sleep(func(streams []uintptr) error { got = streams; return nil }))
	assert.ElementsMatch(t, []uintptr{0, 7, 9}, got, "its scopes' streams and those a RecordUse named")

	asleep := func(err error, what string) {
		t.Helper()
		assert.ErrorIs(t, err, errdefs.Asleep, what)
	}
	asleep(a.WithPtr(0, func(uintptr, uintptr) error { t.Error("a use ran while asleep"); return nil }), "a use")
	assert.Zero(t, a.Ptr(), "no address while asleep")
	asleep(b.RecordUse(3), "RecordUse")
	asleep(child.Keep(b), "Keep")
	_, err = s.Alloc(512)
	asleep(err, "an allocation in the sleeping scope")
	_, err = child.Alloc(512)
	asleep(err, "an allocation in a scope inside it")
	_, err = tr.Open(s.Context(), scope.Scope{}, scope.Options{Reserve: 1 << 20})
	asleep(err, "a reservation inside it")
	asleep(s.Sleep(func([]uintptr) error { t.Error("slept twice"); return nil }), "a second Sleep")
	st := s.Stats()
	assert.True(t, st.Asleep)
	assert.True(t, child.Stats().Asleep)
	assert.Equal(t, int64(4<<20+1024), st.Live, "its buffers still count: they come back")

	woke := false
	require.NoError(t, s.Wake(func() error { woke = true; return nil }))
	assert.True(t, woke)
	require.NoError(t, s.Wake(func() error { t.Error("woke an awake scope"); return nil }), "Wake of an awake scope does nothing")
	assert.Equal(t, ptrA, a.Ptr(), "the same address after a cycle")
	assert.Equal(t, ptrB, b.Ptr())
	assert.False(t, s.Stats().Asleep)
	require.NoError(t, child.Keep(b), "within the domain, Keep works")
	require.NoError(t, s.Free(b))
	_, err = child.End()
	require.NoError(t, err)
}

func TestAFreeAsleepGivesTheMemoryBackToTheDomainUntouched(t *testing.T) {
	tr, scrubs := scrubbingTree(t)
	s, child, dp := openDomain(t, tr)
	defer s.End()
	a, err := s.Alloc(4 << 20)
	require.NoError(t, err)
	b, err := child.Alloc(24 << 20) // a segment of its own
	require.NoError(t, err)
	c, err := child.Alloc(1000)
	require.NoError(t, err)
	require.NoError(t, s.Sleep(func([]uintptr) error { return nil }))
	held := dp.Stats().Reserved

	require.NoError(t, child.Free(b), "a free asleep")
	assert.Zero(t, scrubs.Load(), "nothing is mapped under it: nothing to scrub")
	assert.Equal(t, int64(1024), child.Stats().Live)
	assert.Equal(t, int64(4<<20+1024), s.Stats().Live)
	assert.Equal(t, int64(2), dp.Stats().ActiveBlocks)
	assert.Less(t, dp.Stats().Reserved, held, "the pool gave back what the free left holding nothing")
	assert.ErrorIs(t, child.Free(b), errdefs.Freed, "freed once")
	assert.ErrorIs(t, b.WithPtr(0, func(uintptr, uintptr) error { return nil }), errdefs.Freed)
	assert.ErrorIs(t, c.WithPtr(0, func(uintptr, uintptr) error { return nil }), errdefs.Asleep, "the others still sleep")
	held = dp.Stats().Reserved
	_, err = child.End()
	require.NoError(t, err)
	assert.Less(t, dp.Stats().Reserved, held, "a scope's end asleep gives back what it held too")

	require.NoError(t, s.Wake(func() error { return nil }))
	assert.NotZero(t, a.Ptr())
	require.NoError(t, s.Free(a), "awake")
	assert.Equal(t, int32(1), scrubs.Load(), "an awake domain's memory is scrubbed as any")
	assert.Zero(t, dp.Stats().ActiveBlocks)
}

func TestFreesRacingSleepAndWakeEachFreeOnce(t *testing.T) {
	tr := newTree(t)
	dp := newDomainPool(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Pool: dp})
	require.NoError(t, err)
	defer s.End()
	const n = 200
	refs := make(chan scope.Ref, n)
	for range n {
		r, err := s.Alloc(64 << 10)
		require.NoError(t, err)
		refs <- r
	}
	close(refs)
	start, done := make(chan struct{}), make(chan error, 4)
	for range 4 {
		go func() {
			<-start // from the first Sleep on: the first frees find it asleep
			var err error
			for r := range refs {
				if err = s.Free(r); err != nil {
					break
				}
			}
			done <- err
		}()
	}
	for i := range 20 {
		require.NoError(t, s.Sleep(func([]uintptr) error {
			if i == 0 {
				close(start)
			}
			return nil
		}))
		require.NoError(t, s.Wake(func() error { return nil }))
	}
	for range 4 {
		require.NoError(t, <-done, "a free awake, asleep, or while the memory changed")
	}
	assert.Zero(t, s.Stats().Live)
	assert.Zero(t, dp.Stats().ActiveBlocks)
}

func TestASleepThatFailsLeavesEverythingUsable(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Pool: newDomainPool(t)})
	require.NoError(t, err)
	defer s.End()
	a, err := s.Alloc(512)
	require.NoError(t, err)
	boom := errors.New("the driver said no")
	require.ErrorIs(t, s.Sleep(func([]uintptr) error {
		assert.Zero(t, a.Ptr(), "asleep while fn runs")
		return boom
	}), boom)
	assert.NotZero(t, a.Ptr())
	assert.False(t, s.Stats().Asleep)
	_, err = s.Alloc(512)
	require.NoError(t, err)
	require.NoError(t, s.Wake(func() error { return boom }), "awake: Wake calls nothing")

	require.NoError(t, s.Sleep(func([]uintptr) error { return nil }))
	require.ErrorIs(t, s.Wake(func() error { return boom }), boom)
	assert.True(t, s.Stats().Asleep, "a Wake that fails leaves it asleep")
	assert.Zero(t, a.Ptr())
}

func TestAScopeThatEndsAsleepReleasesWithoutTouchingItsMemory(t *testing.T) {
	tr, scrubs := scrubbingTree(t)
	dp := newDomainPool(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Pool: dp})
	require.NoError(t, err)
	child, err := tr.Open(s.Context(), scope.Scope{}, scope.Options{})
	require.NoError(t, err)
	_, err = s.Alloc(1 << 20)
	require.NoError(t, err)
	_, err = child.Alloc(3 << 20)
	require.NoError(t, err)
	require.NoError(t, s.Sleep(func([]uintptr) error { return nil }))
	_, err = s.End()
	require.NoError(t, err)
	assert.Zero(t, scrubs.Load(), "nothing is mapped under a sleeping scope: nothing to scrub")
	assert.Zero(t, dp.Stats().ActiveBlocks, "its blocks went back to its pool")
	assert.ErrorIs(t, s.Wake(func() error { return nil }), errdefs.ScopeClosed)

	awake, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Pool: dp})
	require.NoError(t, err)
	_, err = awake.Alloc(512)
	require.NoError(t, err)
	_, err = awake.End()
	require.NoError(t, err)
	assert.Equal(t, int32(1), scrubs.Load(), "an awake domain's memory is scrubbed as any")
}

func TestADomainKeepsItsMemoryToItself(t *testing.T) {
	tr := newTree(t)
	ctx := context.Background()
	outer, err := tr.Open(ctx, scope.Scope{}, scope.Options{Name: "outer", Reserve: 8 << 20})
	require.NoError(t, err)
	defer outer.End()
	dp := newDomainPool(t)
	s, err := tr.Open(outer.Context(), scope.Scope{}, scope.Options{Name: "sleeper", Pool: dp})
	require.NoError(t, err)
	a, err := s.Alloc(1 << 20)
	require.NoError(t, err)
	assert.Equal(t, int64(1), dp.Stats().ActiveBlocks, "not from the reservation outside the domain")
	assert.ErrorIs(t, s.Keep(a), errdefs.NotKept, "a buffer cannot leave the memory that sleeps")
	require.NoError(t, a.WithPtr(0, func(uintptr, uintptr) error { return nil }), "and stays the scope's")

	_, err = tr.Open(s.Context(), scope.Scope{}, scope.Options{Pool: newDomainPool(t)})
	require.Error(t, err, "a domain inside another")

	inner, err := tr.Open(s.Context(), scope.Scope{}, scope.Options{Reserve: 2 << 20})
	require.NoError(t, err, "a reservation inside the domain comes from its pool")
	b, err := inner.Alloc(4096)
	require.NoError(t, err)
	assert.Equal(t, int64(2), dp.Stats().ActiveBlocks, "the buffer and the reservation")
	require.NoError(t, s.Sleep(func([]uintptr) error { return nil }))
	assert.ErrorIs(t, b.WithPtr(0, func(uintptr, uintptr) error { return nil }), errdefs.Asleep)
	require.NoError(t, s.Wake(func() error { return nil }))
	_, err = inner.End()
	require.NoError(t, err)
	_, err = s.End()
	require.NoError(t, err)
	assert.Zero(t, dp.Stats().ActiveBlocks)
}

func TestSleepWaitsForTheUsesRunning(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Pool: newDomainPool(t)})
	require.NoError(t, err)
	defer s.End()
	a, err := s.Alloc(512)
	require.NoError(t, err)
	var slept atomic.Bool
	entered, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- a.WithPtr(0, func(uintptr, uintptr) error {
			close(entered)
			for a.Ptr() != 0 {
				runtime.Gosched() // until Sleep has marked it
			}
			for range 1000 {
				runtime.Gosched() // Sleep's fn would run now, were it not waiting for this use
			}
			if slept.Load() {
				return errors.New("the memory went to sleep under a running use")
			}
			return nil
		})
	}()
	<-entered
	require.NoError(t, s.Sleep(func([]uintptr) error { slept.Store(true); return nil }))
	require.NoError(t, <-done)
}

// slowSource is a source whose growths take a while: a reservation that
// began before a Sleep is still taking memory when the Sleep goes on.
type slowSource struct{ *sim.Source }

func (s slowSource) Create(size int64) (uint64, error) {
	for range 200 {
		runtime.Gosched()
	}
	return s.Source.Create(size)
}

func TestNothingTakesADomainsMemoryWhileItSleepsOrWakes(t *testing.T) {
	tr := newTree(t)
	// Every free gives its memory back: every reservation grows the pool.
	dp, err := pool.New(slowSource{sim.New(0, 0)}, pool.ReleaseThreshold(0))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dp.Close()) })
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Pool: dp})
	require.NoError(t, err)
	defer s.End()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			// Reservations are taken outside every scope's lock; allocations
			// under their own scope's.
			c, err := tr.Open(s.Context(), scope.Scope{}, scope.Options{Reserve: 4 << 20})
			if err == nil {
				_, _ = c.Alloc(4096)
				_, _ = c.End()
			}
			if a, err := s.Alloc(8192); err == nil {
				_ = s.Free(a)
			}
		}
	}()
	unchanged := func() error {
		before := dp.Stats()
		for range 100 {
			runtime.Gosched()
		}
		if after := dp.Stats(); after.Allocs != before.Allocs {
			return errors.New("the domain's pool allocated while its memory was changing")
		}
		return nil
	}
	for range 300 {
		require.NoError(t, s.Sleep(func([]uintptr) error { return unchanged() }))
		require.NoError(t, s.Wake(unchanged))
	}
	close(stop)
	<-done
}

// A Free of a domain's allocation never takes the common path of the
// tree's pool (Scope.Free's, under the scope's lock), even where the tree
// does not scrub, which alone sends the others' Frees off it: asleep, it
// has the domain's pool give back what it left free, and it waits for a
// Sleep that is changing the domain's memory; in a scope inside the
// domain too.
func TestAFreeInADomainTakesTheDomainsWayWhereTheTreeDoesNotScrub(t *testing.T) {
	tr := newTree(t) // no Scrub
	s, child, dp := openDomain(t, tr)
	defer s.End()
	defer child.End()
	a, err := s.Alloc(24 << 20) // pages of their own, b's last
	require.NoError(t, err)
	b, err := child.Alloc(24 << 20)
	require.NoError(t, err)
	c, err := child.Alloc(1000)
	require.NoError(t, err)
	require.NoError(t, s.Sleep(func([]uintptr) error { return nil }))
	for _, f := range []struct {
		s scope.Scope
		r scope.Ref
	}{{child, b}, {s, a}} {
		held := dp.Stats().Reserved
		require.NoError(t, f.s.Free(f.r), "a free asleep")
		assert.Less(t, dp.Stats().Reserved, held, "the domain's pool gave back what the free left holding nothing")
	}
	assert.Zero(t, tr.Pool().Stats().Allocs, "the tree's pool saw none of it")
	require.NoError(t, s.Wake(func() error { return nil }))

	// A free that comes while Sleep's fn runs waits for it.
	freeing, freed := make(chan struct{}), make(chan error, 1)
	require.NoError(t, s.Sleep(func([]uintptr) error {
		go func() {
			close(freeing)
			freed <- child.Free(c)
		}()
		<-freeing
		for range 1000 {
			runtime.Gosched() // the free would end now, were it not waiting for the memory to settle
			if dp.Stats().ActiveBlocks == 0 {
				return errors.New("a free changed the domain's pool while its memory was changing")
			}
		}
		return nil
	}))
	require.NoError(t, <-freed)
	assert.Zero(t, dp.Stats().ActiveBlocks)
}

// A Sleep or Wake changes the allocations of the scope it was called on,
// and of no scope that opens on its node after it ended: where the scope
// ends while fn runs (all its memory freed, its end waits for nothing) and
// another sleepable scope opens on the node and sleeps, the walk after fn
// must not wake that one's allocations, whose memory is gone.
func TestASleepOrWakeWhoseScopeEndsMeanwhileLeavesTheNextScopeOnItsNodeAlone(t *testing.T) {
	tr := newTree(t)
	for _, wakes := range []bool{true, false} {
		d1, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Pool: newDomainPool(t)})
		require.NoError(t, err)
		var d2 scope.Scope
		var a scope.Ref
		fn := func() error {
			_, err := d1.End()
			require.NoError(t, err)
			d2, err = tr.Open(context.Background(), scope.Scope{}, scope.Options{Pool: newDomainPool(t)}) // on d1's node
			require.NoError(t, err)
			a, err = d2.Alloc(1000)
			require.NoError(t, err)
			require.NoError(t, d2.Sleep(func([]uintptr) error { return nil }))
			if wakes {
				return nil
			}
			return errors.New("fn failed: Sleep puts back what it marked")
		}
		if wakes {
			require.NoError(t, d1.Sleep(func([]uintptr) error { return nil }))
			require.NoError(t, d1.Wake(fn))
		} else {
			require.Error(t, d1.Sleep(func([]uintptr) error { return fn() }))
		}
		assert.ErrorIs(t, a.WithPtr(0, func(uintptr, uintptr) error { t.Error("a use ran while its scope slept"); return nil }),
			errdefs.Asleep, "d2's allocation sleeps with d2 (wakes=%v)", wakes)
		assert.Zero(t, a.Ptr(), "no address while asleep")
		require.NoError(t, d2.Wake(func() error { return nil }))
		require.NoError(t, d2.Free(a))
		_, err = d2.End()
		require.NoError(t, err)
	}
}

// A node that served a sleepable scope leaves its domain when a scope
// outside every domain opens on it: that one's memory comes from the
// tree's pool, awake, and its Frees give back there (setUp's joinDomain,
// which a reused node skips only where its domain stays the same).
func TestAScopeOnTheNodeOfAnEndedSleepableScopeIsInNoDomain(t *testing.T) {
	tr := newTree(t)
	dp := newDomainPool(t)
	d, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Pool: dp})
	require.NoError(t, err)
	require.NoError(t, d.Sleep(func([]uintptr) error { return nil }))
	_, err = d.End() // asleep
	require.NoError(t, err)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{}) // on d's node
	require.NoError(t, err)
	defer s.End()
	a, err := s.Alloc(1000)
	require.NoError(t, err, "not asleep with the domain its node was in")
	assert.False(t, s.Stats().Asleep)
	assert.Equal(t, int64(1), tr.Pool().Stats().ActiveBlocks, "from the tree's pool")
	assert.Zero(t, dp.Stats().ActiveBlocks)
	require.NoError(t, s.Free(a))
	assert.Zero(t, tr.Pool().Stats().ActiveBlocks)
}

// A RecordUse that holds the allocation as Sleep marks it, and returns nil,
// has its stream among those Sleep's fn gets: Sleep reads the streams
// RecordUse named after its holders left, not before.
func TestSleepGetsTheStreamOfARecordUseItWaitedFor(t *testing.T) {
	tr := newTree(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Pool: newDomainPool(t)})
	require.NoError(t, err)
	defer s.End()
	a, err := s.Alloc(1000)
	require.NoError(t, err)
	holding, goOn := make(chan struct{}), make(chan struct{})
	tr.SetRecordingUse(func() { close(holding); <-goOn })
	recorded := make(chan error, 1)
	go func() { recorded <- a.RecordUse(9) }()
	<-holding
	slept := make(chan []uintptr, 1)
	go func() {
		assert.NoError(t, s.Sleep(func(streams []uintptr) error { slept <- streams; return nil }))
	}()
	for a.Ptr() != 0 {
		runtime.Gosched() // until Sleep has marked the allocation: it waits for the RecordUse now
	}
	close(goOn)
	require.NoError(t, <-recorded, "RecordUse took the allocation before Sleep marked it")
	assert.Contains(t, <-slept, uintptr(9), "fn gets the stream the RecordUse it waited for named")
	require.NoError(t, s.Wake(func() error { return nil }))
}

// A reservation in a domain goes back at its scope's end as an
// allocation's memory does: while no Sleep or Wake changes the domain's
// memory, and given back to the pool's source where the domain is asleep.
func TestAReservationInADomainGoesBackAsItsAllocationsDo(t *testing.T) {
	tr := newTree(t)
	dp := newDomainPool(t)
	s, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Pool: dp})
	require.NoError(t, err)
	defer s.End()
	r, err := tr.Open(s.Context(), scope.Scope{}, scope.Options{Reserve: 24 << 20})
	require.NoError(t, err)
	require.NoError(t, s.Sleep(func([]uintptr) error { return nil }))
	_, err = r.End() // asleep
	require.NoError(t, err)
	assert.Zero(t, dp.Stats().Reserved, "the domain's pool gave back the reservation's pages, asleep")
	require.NoError(t, s.Wake(func() error { return nil }))

	r, err = tr.Open(s.Context(), scope.Scope{}, scope.Options{Reserve: 24 << 20})
	require.NoError(t, err)
	ending, ended := make(chan struct{}), make(chan error, 1)
	require.NoError(t, s.Sleep(func([]uintptr) error {
		go func() {
			close(ending)
			_, err := r.End()
			ended <- err
		}()
		<-ending
		for range 1000 {
			runtime.Gosched() // the end would be over now, were it not waiting for the memory to settle
			if dp.Stats().ActiveBlocks == 0 {
				return errors.New("a reservation's end changed the domain's pool while its memory was changing")
			}
		}
		return nil
	}))
	require.NoError(t, <-ended)
	assert.Zero(t, dp.Stats().ActiveBlocks)
}
