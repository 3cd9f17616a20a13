package scope_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/fuzzops"
	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

// The sizes, reservations and limits FuzzScopeAPI uses. Reservations and
// limits stay in range: package gpu checks them, and scope panics on a bad
// one as a caller's bug.
var (
	scopeFuzzSizes    = []int64{0, -1, math.MinInt64, pool.MaxSize + 1, pool.MaxSize, 1, 511, 512, 513, 4096, 1 << 20, 3 << 20, 40 << 20, 200 << 20}
	scopeFuzzReserves = []int64{0, 0, 0, 1, 512, 4097, 2 << 20, 200 << 20}
	scopeFuzzLimits   = []int64{0, 0, 1, 4096, 1 << 20, 8 << 20}
)

// errEvicted is what a use of an evicted scope's allocation fails with.
var errEvicted = errors.New("evicted")

type fscope struct {
	s         scope.Scope
	parent    int // -1: a root
	open      bool
	cancel    context.CancelCauseFunc
	cause     error // the cause it was cancelled with, where it was
	derived   bool  // its context is its parent's Context(), so it sees the parent's cancellation
	stream    uintptr
	limit     int64
	reserved  int64 // the rounded bytes of its reservation
	resLo     uintptr
	evictable bool
}

type fref struct {
	r     scope.Ref
	owner int
	size  int64
	in    int // the scope whose reservation holds it; -1 for the pool
	state int // refLive, refFreed, refEnded
}

const (
	refLive = iota
	refFreed
	refEnded
	refEvicted
)

type fresource struct {
	o          scope.Owned
	owner      int
	disowned   bool
	ended      bool // its scope ended it
	end, final atomic.Int32
}

type scopeFuzz struct {
	t      *testing.T
	src    *sim.Source
	p      *pool.Pool
	tree   *scope.Tree
	scopes []*fscope
	refs   []*fref
	res    []*fresource
	closed bool

	lastBlock atomic.Pointer[pool.Block] // the pool's last allocation: a reservation's block, after an Open
}

// FuzzScopeAPI drives a tree of scopes through its public API with hostile
// orders mixed in: allocations of bad sizes, in ended or cancelled scopes,
// frees and keeps through the wrong scope, twice, or after the end, uses of
// stale handles, reservations and limits on the way, resources owned,
// disowned and owned again, evictions, ends racing allocations, and the
// tree's Close. After every step each scope's Live is what its subtree
// holds, no limit is passed, every refusal matches its sentinel, and at the
// end the pool holds nothing and every resource ended exactly once.
func FuzzScopeAPI(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
	f.Add([]byte{0x20, 0x31, 0x40, 0x51, 0x01, 0x12, 0x03, 0x14, 0x05, 0x06, 0x07, 0x28, 0x09, 0x0a, 0x0b})
	f.Add([]byte{0x70, 0x81, 0x90, 0x71, 0x81, 0x83, 0x84, 0x85, 0x0c, 0x0d, 0x0e})
	f.Add([]byte{0x00, 0x70, 0x00, 0x61, 0x62, 0x63, 0x64, 0x65, 0x04, 0x0b, 0x01, 0x08})
	for seed := range uint64(4) {
		f.Add(fuzzops.Random(seed, 11, 300))
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		prog := fuzzops.New(ops, 300)
		src := sim.New(128<<20, 0)
		p, err := pool.New(src, pool.Shards(2))
		require.NoError(t, err)
		z := &scopeFuzz{t: t, src: src, p: p}
		z.tree = scope.NewTree(p, "sim", scope.TreeOptions{Evicted: errEvicted})
		p.Observe(func(_ context.Context, alloc bool, b pool.Block) {
			if alloc {
				z.lastBlock.Store(&b)
			}
		})
		for step := 0; !prog.Done(); step++ {
			z.step(step, prog.Next)
			z.check(step)
		}
		z.finish()
	})
}

// pick returns a scope of the run, open or not; -1 for none.
func (z *scopeFuzz) pick(next func(int) int) int {
	if len(z.scopes) == 0 {
		return -1
	}
	return next(len(z.scopes))
}

// ancestor reports whether a is b or an ancestor of b.
func (z *scopeFuzz) ancestor(a, b int) bool {
	for ; b >= 0; b = z.scopes[b].parent {
		if a == b {
			return true
		}
	}
	return false
}

// cancelledBy returns the cause scope i's context was cancelled with, its
// own or, where it derives, an ancestor's; nil where it is not.
func (z *scopeFuzz) cancelledBy(i int) error {
	for ; i >= 0; i = z.scopes[i].parent {
		if c := z.scopes[i].cause; c != nil {
			return c
		}
		if !z.scopes[i].derived {
			return nil
		}
	}
	return nil
}

func (z *scopeFuzz) step(step int, next func(int) int) {
	t := z.t
	switch op := next(15); op {
	case 0, 1: // open a scope
		z.open(step, next)
	case 2, 3, 4: // allocate
		i := z.pick(next)
		if i < 0 {
			return
		}
		n := scopeFuzzSizes[next(len(scopeFuzzSizes))]
		if next(3) == 0 {
			n = int64(next(1<<12)*131 + next(512))
		}
		z.alloc(step, i, n)
	case 5, 6: // free, through its owner or another scope
		if len(z.refs) == 0 {
			return
		}
		x := z.refs[next(len(z.refs))]
		via := x.owner
		if next(3) == 0 {
			via = z.pick(next)
		}
		z.free(step, x, via)
	case 7: // keep, through its owner or another scope
		if len(z.refs) == 0 {
			return
		}
		x := z.refs[next(len(z.refs))]
		via := x.owner
		if next(4) == 0 {
			via = z.pick(next)
		}
		z.keep(step, x, via)
	case 8: // end a scope
		if i := z.pick(next); i >= 0 {
			z.end(step, i)
		}
	case 9: // cancel a scope's context
		if i := z.pick(next); i >= 0 && z.scopes[i].cause == nil {
			if c := z.cancelledBy(i); c != nil {
				z.scopes[i].cause = c // done already: the cause stays an ancestor's
				return
			}
			cause := errors.New("cancelled by the fuzzer")
			z.scopes[i].cancel(cause)
			z.scopes[i].cause = cause
		}
	case 10: // own, disown, own again a resource
		z.resource(step, next)
	case 11: // use a handle, live or stale
		if len(z.refs) == 0 {
			return
		}
		z.use(step, z.refs[next(len(z.refs))], next)
	case 12: // try to evict
		if i := z.pick(next); i >= 0 {
			z.evict(step, i)
		}
	case 13: // end a scope while goroutines allocate and free in it
		if i := z.pick(next); i >= 0 {
			z.race(step, i, next(4)+1)
		}
	case 14: // zero handles
		s := z.scopes
		if len(s) > 0 {
			sc := s[next(len(s))].s
			require.ErrorIs(t, sc.Free(scope.Ref{}), z.closedOr(sc, errdefs.WrongScope))
			require.ErrorIs(t, sc.Keep(scope.Ref{}), z.closedOr(sc, errdefs.Freed))
		}
		_, err := scope.Scope{}.Alloc(512)
		require.ErrorIs(t, err, errdefs.ScopeClosed)
		require.ErrorIs(t, scope.Ref{}.WithPtr(0, func(uintptr, uintptr) error { return nil }), errdefs.Freed)
		require.Zero(t, scope.Ref{}.Ptr())
		if next(8) == 0 && !z.closed {
			z.closeTree(step)
		}
	}
}

// closedOr is ErrScopeClosed where s has ended, else err.
func (z *scopeFuzz) closedOr(s scope.Scope, err error) error {
	if s.Closed() {
		return errdefs.ScopeClosed
	}
	return err
}

func (z *scopeFuzz) open(step int, next func(int) int) {
	t := z.t
	parent := -1
	if len(z.scopes) > 0 && next(3) != 0 {
		parent = z.pick(next)
	}
	o := scope.Options{
		Reserve:   scopeFuzzReserves[next(len(scopeFuzzReserves))],
		Limit:     scopeFuzzLimits[next(len(scopeFuzzLimits))],
		Stream:    []uintptr{0, 0, 7}[next(3)],
		Evictable: next(4) == 0,
	}
	if o.Limit > 0 && o.Reserve > o.Limit {
		o.Reserve = 0
	}
	base := context.Background()
	derived := false
	var ps scope.Scope
	if parent >= 0 {
		ps = z.scopes[parent].s
		switch next(3) {
		case 0: // the parent named, from a context of its own
		case 1: // the parent carried by its context
			base, derived, ps = ps.Context(), true, scope.Scope{}
		default:
			base, derived = ps.Context(), true
		}
	}
	ctx, cancel := context.WithCancelCause(base)
	z.lastBlock.Store(nil)
	s, err := z.tree.Open(ctx, ps, o)
	stream := o.Stream
	if stream == 0 && parent >= 0 {
		stream = z.scopes[parent].stream
	}
	if err != nil {
		// Open checks, in order, its context, the options, the parent, the
		// reservation and the tree.
		cancel(nil)
		switch {
		case derived && !z.scopes[parent].open:
			require.ErrorIs(t, err, errdefs.ScopeClosed, "step %d: opening from an ended scope's context", step)
		case derived && z.cancelledBy(parent) != nil:
			require.ErrorIs(t, err, z.cancelledBy(parent), "step %d", step)
		case o.Reserve > 0 && o.Stream != 0:
			require.ErrorContains(t, err, "cannot reserve", "step %d", step)
		case parent >= 0 && !z.scopes[parent].open:
			require.ErrorIs(t, err, errdefs.ScopeClosed, "step %d: opening in an ended scope", step)
		case o.Reserve > 0 && stream != 0:
			require.ErrorContains(t, err, "cannot reserve", "step %d", step)
		case o.Reserve > 0 && errors.Is(err, errdefs.OutOfMemory):
		default:
			require.True(t, parent < 0 && z.closed, "step %d: %v", step, err)
			require.ErrorIs(t, err, errdefs.ScopeClosed, "step %d: opening in a closed tree", step)
		}
		return
	}
	require.False(t, parent >= 0 && !z.scopes[parent].open, "step %d: opened in an ended scope", step)
	require.False(t, parent < 0 && z.closed, "step %d: opened in a closed tree", step)
	require.False(t, derived && z.cancelledBy(parent) != nil, "step %d: opened in a cancelled context", step)
	require.False(t, o.Reserve > 0 && stream != 0, "step %d: reserved on a stream", step)
	fs := &fscope{s: s, parent: parent, open: true, cancel: cancel, derived: derived, stream: stream, limit: o.Limit, evictable: o.Evictable}
	if o.Reserve > 0 {
		b := z.lastBlock.Load()
		require.NotNil(t, b, "step %d: a reservation took no block", step)
		fs.reserved, fs.resLo = pool.Rounded(o.Reserve), b.Ptr()
	}
	z.scopes = append(z.scopes, fs)
	require.Equal(t, fs.reserved, s.Stats().Reserved, "step %d", step)
}

func (z *scopeFuzz) alloc(step, i int, n int64) {
	t := z.t
	fs := z.scopes[i]
	r, err := fs.s.Alloc(n)
	if err != nil {
		require.True(t, r.IsZero(), "step %d: a failed allocation returns the zero Ref", step)
		switch {
		case !fs.open:
			require.ErrorIs(t, err, errdefs.ScopeClosed, "step %d", step)
		case z.cancelledBy(i) != nil:
			require.ErrorIs(t, err, z.cancelledBy(i), "step %d", step)
		case n <= 0 || n > pool.MaxSize:
			require.ErrorIs(t, err, errdefs.InvalidSize, "step %d: %d bytes", step, n)
		default:
			require.ErrorIs(t, err, errdefs.OutOfMemory, "step %d: %d bytes", step, n)
		}
		return
	}
	require.True(t, fs.open && z.cancelledBy(i) == nil && n > 0 && n <= pool.MaxSize,
		"step %d: allocated %d bytes in scope %d (open %v, cancelled %v)", step, n, i, fs.open, z.cancelledBy(i))
	ptr := r.Ptr()
	require.NotZero(t, ptr)
	require.Zero(t, ptr%pool.Alignment, "step %d", step)
	x := &fref{r: r, owner: i, size: n, in: -1}
	for j, rs := range z.scopes {
		if rs.open && rs.reserved > 0 && ptr >= rs.resLo && ptr < rs.resLo+uintptr(rs.reserved) {
			require.True(t, z.ancestor(j, i), "step %d: served by the reservation of scope %d, not an ancestor of %d", step, j, i)
			require.LessOrEqual(t, ptr+uintptr(pool.Rounded(n)), rs.resLo+uintptr(rs.reserved), "step %d: past the reservation", step)
			x.in = j
		}
	}
	for _, y := range z.refs {
		if y.state == refLive {
			yp := y.r.Ptr()
			require.False(t, ptr < yp+uintptr(y.size) && yp < ptr+uintptr(n), "step %d: overlaps a live allocation", step)
		}
	}
	z.refs = append(z.refs, x)
}

// staleErr is what a use of x, not live, fails with.
func (z *scopeFuzz) staleErr(x *fref, err error) {
	switch x.state {
	case refFreed:
		require.ErrorIs(z.t, err, errdefs.Freed)
	case refEvicted:
		if !errors.Is(err, errdefs.Freed) {
			require.ErrorIs(z.t, err, errEvicted)
		}
	default:
		if !errors.Is(err, errdefs.Freed) {
			require.ErrorIs(z.t, err, errdefs.ScopeClosed)
		}
	}
}

func (z *scopeFuzz) free(step int, x *fref, via int) {
	t := z.t
	fv := z.scopes[via]
	err := fv.s.Free(x.r)
	switch {
	case !fv.open:
		require.ErrorIs(t, err, errdefs.ScopeClosed, "step %d: Free through an ended scope", step)
	case x.state != refLive:
		z.staleErr(x, err)
	case via != x.owner:
		require.ErrorIs(t, err, errdefs.WrongScope, "step %d: Free through another scope", step)
	default:
		require.NoError(t, err, "step %d", step)
		x.state = refFreed
		require.ErrorIs(t, fv.s.Free(x.r), errdefs.Freed, "step %d: a second Free", step)
		require.Zero(t, x.r.Ptr())
	}
}

func (z *scopeFuzz) keep(step int, x *fref, via int) {
	t := z.t
	fv := z.scopes[via]
	err := fv.s.Keep(x.r)
	switch {
	case !fv.open:
		require.ErrorIs(t, err, errdefs.ScopeClosed, "step %d: Keep through an ended scope", step)
	case x.state != refLive:
		z.staleErr(x, err)
	case fv.parent < 0:
		require.ErrorIs(t, err, errdefs.NotKept, "step %d: Keep in a root", step)
	case via != x.owner:
		require.ErrorIs(t, err, errdefs.WrongScope, "step %d: Keep through another scope", step)
	case x.in == via:
		require.ErrorIs(t, err, errdefs.NotKept, "step %d: Keep of memory of the scope's own reservation", step)
	default:
		require.NoError(t, err, "step %d", step)
		x.owner = fv.parent
	}
}

// end ends scope i and, first, its open descendants.
func (z *scopeFuzz) end(step, i int) {
	t := z.t
	_, err := z.scopes[i].s.End()
	require.NoError(t, err, "step %d", step)
	z.ended(i, refEnded)
	z.checkResources(step)
	_, err = z.scopes[i].s.End()
	require.NoError(t, err, "step %d: End is idempotent", step)
}

// ended marks scope i and its descendants ended, their allocations with
// state, and their resources ended.
func (z *scopeFuzz) ended(i, state int) {
	t := z.t
	for j, fs := range z.scopes {
		if !fs.open || !z.ancestor(i, j) {
			continue
		}
		fs.open = false
		fs.cancel(nil)
		require.True(t, fs.s.Closed())
		require.Equal(t, scope.Stats{}, fs.s.Stats())
		require.Empty(t, fs.s.Path())
		require.Error(t, context.Cause(fs.s.Context()))
		for _, x := range z.refs {
			if x.owner == j && x.state == refLive {
				x.state = state
				require.Zero(t, x.r.Ptr(), "a handle of an ended scope has no address")
			}
		}
		for _, rs := range z.res {
			if rs.owner == j && !rs.disowned && !rs.ended {
				rs.ended = true
			}
		}
	}
}

// checkResources checks that every resource whose scope ended was ended
// once, and no other.
func (z *scopeFuzz) checkResources(step int) {
	for k, rs := range z.res {
		want := int32(0)
		if rs.ended {
			want = 1
		}
		require.Equal(z.t, want, rs.end.Load(), "step %d: resource %d's End", step, k)
		require.Equal(z.t, want, rs.final.Load(), "step %d: resource %d's Final", step, k)
	}
}

func (z *scopeFuzz) resource(step int, next func(int) int) {
	t := z.t
	if len(z.res) > 0 && next(2) == 0 {
		rs := z.res[next(len(z.res))]
		if !rs.disowned {
			ok := rs.o.Disown()
			require.Equal(t, !rs.ended, ok, "step %d: Disown of an owned resource", step)
			if ok {
				rs.disowned = true
			} else {
				require.False(t, rs.o.Disown())
			}
			return
		}
		o, ok := rs.o.Reown(z.scopes[rs.owner].s)
		if !z.scopes[rs.owner].open || z.cancelledBy(rs.owner) != nil {
			require.False(t, ok, "step %d: owned again by an ended or cancelled scope", step)
		}
		if ok {
			rs.o, rs.disowned = o, false
		}
		return
	}
	i := z.pick(next)
	if i < 0 {
		return
	}
	rs := &fresource{owner: i}
	alloc := next(2) == 0
	o, err := z.scopes[i].s.OwnResource(scope.Resource{
		Kind:       "fuzz",
		End:        func() error { rs.end.Add(1); return nil },
		Final:      func() error { rs.final.Add(1); return nil },
		Allocation: alloc,
	})
	switch {
	case !z.scopes[i].open:
		require.ErrorIs(t, err, errdefs.ScopeClosed, "step %d", step)
	case alloc && z.cancelledBy(i) != nil:
		require.ErrorIs(t, err, z.cancelledBy(i), "step %d", step)
	default:
		require.NoError(t, err, "step %d", step)
		rs.o = o
		z.res = append(z.res, rs)
	}
}

func (z *scopeFuzz) use(step int, x *fref, next func(int) int) {
	t := z.t
	called := false
	err := x.r.WithPtr(uintptr(next(int(max(x.size, 1)))), func(ptr, stream uintptr) error {
		called = true
		return nil
	})
	if x.state == refLive {
		require.NoError(t, err, "step %d", step)
		require.True(t, called)
		if next(2) == 0 {
			err := x.r.RecordUse([]uintptr{0, 7, 9}[next(3)])
			if err != nil {
				require.GreaterOrEqual(t, x.in, 0, "step %d: %v", step, err)
			}
		}
		return
	}
	require.False(t, called, "step %d: a stale handle reached its memory", step)
	z.staleErr(x, err)
	z.staleErr(x, x.r.RecordUse(7))
	require.Zero(t, x.r.Ptr())
}

func (z *scopeFuzz) evict(step, i int) {
	t := z.t
	fs := z.scopes[i]
	evicting := ""
	bytes, ok, err := fs.s.TryEvict(nil, func(path string) { evicting = path })
	require.NoError(t, err, "step %d", step)
	if !ok {
		require.Zero(t, bytes)
		return
	}
	require.True(t, fs.open && fs.evictable, "step %d: evicted a scope that is ended or not evictable", step)
	for j, c := range z.scopes {
		require.False(t, c.open && c.parent == i, "step %d: evicted a scope with child %d open", step, j)
	}
	require.Equal(t, bytes, z.live(i), "step %d: the bytes an eviction reports", step)
	_ = evicting
	z.ended(i, refEvicted)
	z.checkResources(step)
}

// race ends scope i while goroutines allocate and free in it.
func (z *scopeFuzz) race(step, i, workers int) {
	t := z.t
	fs := z.scopes[i]
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range workers {
		wg.Go(func() {
			<-start
			for range 8 {
				r, err := fs.s.Alloc(4096)
				if err != nil {
					if !errors.Is(err, errdefs.ScopeClosed) && !errors.Is(err, errdefs.OutOfMemory) && z.cancelledBy(i) == nil {
						t.Errorf("step %d: an allocation racing the end: %v", step, err)
					}
					return
				}
				if err := fs.s.Free(r); err != nil && !errors.Is(err, errdefs.ScopeClosed) && !errors.Is(err, errdefs.Freed) {
					t.Errorf("step %d: a free racing the end: %v", step, err)
				}
			}
		})
	}
	close(start)
	_, err := fs.s.End()
	wg.Wait()
	require.NoError(t, err, "step %d", step)
	z.ended(i, refEnded)
	z.checkResources(step)
}

func (z *scopeFuzz) closeTree(step int) {
	_, err := z.tree.Close()
	require.NoError(z.t, err, "step %d", step)
	z.closed = true
	for i, fs := range z.scopes {
		if fs.parent < 0 && fs.open {
			z.ended(i, refEnded)
		}
	}
	z.checkResources(step)
	_, err = z.tree.Open(context.Background(), scope.Scope{}, scope.Options{})
	require.ErrorIs(z.t, err, errdefs.ScopeClosed, "step %d", step)
}

// live is what scope i's Live must be: its subtree's reservations, and the
// allocations its subtree owns that no reservation of it or an ancestor
// serves.
func (z *scopeFuzz) live(i int) int64 {
	var sum int64
	for j, fs := range z.scopes {
		if fs.open && z.ancestor(i, j) {
			sum += fs.reserved
		}
	}
	for _, x := range z.refs {
		if x.state == refLive && z.ancestor(i, x.owner) && (x.in < 0 || x.in != i && z.ancestor(x.in, i)) {
			sum += pool.Rounded(x.size)
		}
	}
	return sum
}

func (z *scopeFuzz) check(step int) {
	t := z.t
	allocs := make([]int, len(z.scopes))
	for _, x := range z.refs {
		if x.state == refLive {
			allocs[x.owner]++
		}
	}
	for i, fs := range z.scopes {
		if !fs.open {
			continue
		}
		st := fs.s.Stats()
		require.Equal(t, z.live(i), st.Live, "step %d: scope %d's Live", step, i)
		require.Equal(t, allocs[i], st.Allocations, "step %d: scope %d's allocations", step, i)
		require.GreaterOrEqual(t, st.Peak, st.Live, "step %d", step)
		if fs.limit > 0 {
			require.LessOrEqual(t, st.Live, fs.limit, "step %d: scope %d past its limit", step, i)
		}
	}
	var requested int64
	for _, x := range z.refs {
		if x.state == refLive && x.in < 0 {
			requested += x.size
		}
	}
	for _, fs := range z.scopes {
		if fs.open && fs.reserved > 0 {
			requested += fs.reserved
		}
	}
	// A reservation asks the pool for its size unrounded; Rounded's slack
	// is at most 511 bytes a reservation.
	st := z.p.Stats()
	require.LessOrEqual(t, st.Requested, requested, "step %d", step)
	require.GreaterOrEqual(t, st.Requested+512*int64(len(z.scopes)), requested, "step %d", step)
}

// finish closes the tree and checks that nothing is left.
func (z *scopeFuzz) finish() {
	t := z.t
	_, err := z.tree.Close()
	require.NoError(t, err)
	for i, fs := range z.scopes {
		if fs.open && fs.parent < 0 {
			z.ended(i, refEnded)
		}
	}
	z.checkResources(-1)
	for _, fs := range z.scopes {
		require.False(t, fs.open)
	}
	for _, x := range z.refs {
		require.Zero(t, x.r.Ptr())
	}
	require.Zero(t, z.p.Stats().Allocated, "the pool's bytes after the tree closed")
	require.NoError(t, z.p.Close())
	allocs, handles, reserves, events := z.src.Live()
	require.Zero(t, allocs+handles+reserves+events, "left at the source")
	for _, rs := range z.res {
		if rs.disowned {
			require.Zero(t, rs.end.Load()+rs.final.Load(), "a disowned resource was ended by its scope")
		}
	}
}
