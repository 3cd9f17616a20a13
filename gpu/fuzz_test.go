package gpu_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
	"github.com/gpuscope/gpuscope/internal/fuzzops"
	"github.com/gpuscope/gpuscope/pool"
)

// The sizes FuzzWithScope asks for: out of range, the edges of rounding,
// and more than the device holds.
var gpuFuzzSizes = []int64{0, -1, math.MinInt64, pool.MaxSize + 1, pool.MaxSize, 1, 511, 512, 513, 4096, 1 << 20, 3<<20 + 5, 80 << 20}

// The element counts it asks gpu.Alloc for: some overflow any size.
var gpuFuzzCounts = []int{0, -1, math.MinInt, math.MaxInt, math.MaxInt / 4, int(pool.MaxSize / 4), int(pool.MaxSize/4) + 1, 1, 3, 1000, 300_000}

// errFn is what a scope's function returns when the fuzzer says it fails.
var errFn = errors.New("the function failed")

// panicValue is what it panics with.
type panicValue struct{ n int }

type gstate int

const (
	gLive gstate = iota
	gFreed
	gEnded
	gEvicted
	gDeviceClosed
)

// galloc is an allocation and what the fuzzer wrote to it.
type galloc struct {
	b      gpu.Buffer
	x      gpu.Slice[uint8] // where it is a typed slice
	owner  *gscope
	shadow []byte
	state  gstate
}

// gstream is a stream a scope made, and the events recorded on it.
type gstream struct {
	st     *gpu.Stream
	owner  *gscope
	events []*gpu.Event
}

type gscope struct {
	s         *gpu.Scope
	parent    *gscope
	open      bool
	cancel    context.CancelCauseFunc
	cause     error
	long      bool // from Device.NewScope
	limit     int64
	evictable bool
	evicted   bool
}

type gpuFuzz struct {
	t       *testing.T
	dev     *gpu.Device
	closed  bool // the device
	forced  bool // closed with scopes open
	prog    *fuzzops.Program
	allocs  []*galloc
	scopes  []*gscope
	streams []*gstream
	depth   int
	counter int
}

func (z *gpuFuzz) next(n int) int { return z.prog.Next(n) }

// FuzzWithScope runs a program of nested WithScope calls, long-lived
// scopes and buffers, read from the input, on a small host device: bad
// sizes and counts, views and copies in and out of range, frees and keeps
// through the wrong scope, twice or after the end, stale handles, scopes
// whose function fails, panics or sees its context cancelled, caps and
// EmptyCache in the middle, goroutines allocating at once, and the device
// closed under it all. Every buffer reads back what was written to it,
// every refusal matches its sentinel, WithScope returns fn's error or
// panic as it was, and at the end nothing is live and gputest finds no
// leak.
func FuzzWithScope(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{0, 3, 9, 0, 4, 0, 1, 6, 6, 0, 0, 5, 5, 2, 2, 7, 7, 13, 13, 13})
	f.Add([]byte{9, 1, 3, 9, 2, 0, 0, 4, 3, 1, 0, 13, 2, 8, 0, 11, 11, 13, 1})
	f.Add([]byte{10, 0, 0, 5, 0, 12, 9, 0, 0, 4, 13, 1, 13, 0})
	f.Add([]byte{0, 3, 15, 15, 2, 0, 1, 17, 0, 16, 0, 16, 1, 16, 2, 18, 0, 1, 16, 4, 0, 16, 3, 0})
	f.Add([]byte{2, 1, 1, 0, 0, 6, 2, 0, 5, 0, 0, 0, 0, 2, 0, 0, 0, 6, 0, 1, 0, 7, 1, 0, 0, 0})
	for seed := range uint64(4) {
		f.Add(fuzzops.Random(seed, 7, 300))
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		dev, err := gpu.OpenHost(gpu.HostMemory(64 << 20))
		require.NoError(t, err)
		z := &gpuFuzz{t: t, dev: dev, prog: fuzzops.New(ops, 300)}
		t.Cleanup(func() {
			if t.Failed() {
				// Leave nothing for the next input to find.
				_ = dev.Close()
				gputest.VerifyNone(&leakRecorder{}, gputest.Devices(dev.Name()), gputest.MaxSleep(time.Microsecond))
			}
		})
		for !z.prog.Done() {
			z.top()
		}
		z.finish()
	})
}

// top runs one step outside any WithScope.
func (z *gpuFuzz) top() {
	switch z.next(4) {
	case 0, 1:
		z.withScope(context.Background(), nil)
	case 2:
		z.newScope()
	default:
		z.op(nil)
	}
}

// newScope opens a long-lived scope, runs steps in it and leaves it open
// or closes it.
func (z *gpuFuzz) newScope() {
	t := z.t
	evictable := z.next(2) == 0
	opts := []gpu.ScopeOption{gpu.Name("long")}
	if evictable {
		opts = append(opts, gpu.Evictable(z.next(3)))
	}
	s, err := z.dev.NewScope(opts...)
	if z.closed {
		require.ErrorIs(t, err, gpu.ErrDeviceClosed)
		return
	}
	require.NoError(t, err)
	gs := &gscope{s: s, open: true, long: true, evictable: evictable}
	z.scopes = append(z.scopes, gs)
	for range z.next(4) {
		z.op(gs)
	}
	if z.next(2) == 0 {
		z.closeScope(gs)
	}
}

func (z *gpuFuzz) closeScope(gs *gscope) {
	err := gs.s.Close()
	if gs.evicted {
		require.True(z.t, err == nil || errors.Is(err, gpu.ErrEvicted), "%v", err)
	} else if z.closed {
		require.True(z.t, err == nil || errors.Is(err, gpu.ErrDeviceClosed), "%v", err)
	} else {
		require.NoError(z.t, err)
	}
	z.ended(gs)
	require.NoError(z.t, gs.s.Close(), "Close is idempotent")
}

// ended marks gs and its descendants ended.
func (z *gpuFuzz) ended(gs *gscope) {
	for _, c := range z.scopes {
		if c.open && z.below(gs, c) {
			c.open = false
			if c.cancel != nil {
				c.cancel(nil)
			}
		}
	}
	for _, a := range z.allocs {
		if a.state == gLive && !a.owner.open {
			a.state = gEnded
			if a.owner.evicted {
				a.state = gEvicted
			}
			require.Zero(z.t, a.b.Ptr(), "a buffer of an ended scope has no address")
		}
	}
}

// refreshEvicted marks the evictable scopes the device evicted ended.
func (z *gpuFuzz) refreshEvicted() {
	for _, gs := range z.scopes {
		if gs.open && gs.evictable && errors.Is(context.Cause(gs.s.Context()), gpu.ErrEvicted) {
			require.True(z.t, gs.s.Stats() == gpu.ScopeStats{}, "an evicted scope has ended")
			gs.evicted = true
			z.ended(gs)
		}
	}
}

// below reports whether c is gs or inside it.
func (z *gpuFuzz) below(gs, c *gscope) bool {
	for ; c != nil; c = c.parent {
		if c == gs {
			return true
		}
	}
	return false
}

// cancelled returns the cause gs's context was cancelled with: its own or
// an ancestor's.
func (z *gpuFuzz) cancelled(gs *gscope) error {
	for ; gs != nil; gs = gs.parent {
		if gs.cause != nil {
			return gs.cause
		}
	}
	return nil
}

// withScope runs WithScope as a child of parent (nil: a root) with a
// program of steps read from the input, and checks what it returns.
func (z *gpuFuzz) withScope(ctx context.Context, parent *gscope) {
	t := z.t
	if z.depth > 6 {
		return
	}
	z.depth++
	defer func() { z.depth-- }()
	var opts []gpu.ScopeOption
	var limit, reserve int64
	badOption := false
	z.counter++
	opts = append(opts, gpu.Name(fmt.Sprintf("s%d", z.counter)))
	switch z.next(6) {
	case 1:
		limit = []int64{-1, 0, 1, 4096, 1 << 20, 16 << 20}[z.next(6)]
		badOption = limit <= 0
		opts = append(opts, gpu.Limit(limit))
	case 2:
		reserve = []int64{-1, 0, 1, 4096, 2 << 20, 100 << 20, pool.MaxSize + 1}[z.next(7)]
		badOption = reserve <= 0 || reserve > pool.MaxSize
		opts = append(opts, gpu.Reserve(reserve))
	case 3:
		limit, reserve = 4096, []int64{512, 4096, 4097}[z.next(3)]
		badOption = reserve > limit
		opts = append(opts, gpu.Limit(limit), gpu.Reserve(reserve))
	case 4:
		opts = append(opts, gpu.Zeroed())
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if z.next(8) == 0 {
		cause := errors.New("cancelled before the scope opened")
		cancel(cause)
		err := gpu.WithScope(ctx, z.dev, func(*gpu.Scope) error {
			t.Error("fn called with a done context")
			return nil
		}, opts...)
		if parent != nil && z.cancelled(parent) != nil {
			cause = z.cancelled(parent) // the context was done already
		}
		if !z.closed && !badOption && (parent == nil || parent.open) {
			require.ErrorIs(t, err, cause)
		}
		require.Error(t, err)
		return
	}
	ending := z.next(4) // 0, 1: nil; 2: an error; 3: a panic
	pv := &panicValue{n: z.counter}
	var gs *gscope
	called := false
	var err error
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		err = gpu.WithScope(ctx, z.dev, func(s *gpu.Scope) error {
			called = true
			gs = &gscope{s: s, parent: parent, open: true, cancel: cancel, limit: limit}
			z.scopes = append(z.scopes, gs)
			z.refreshEvicted()
			for !z.prog.Done() {
				if z.next(10) == 0 {
					break // the function returns
				}
				z.op(gs)
			}
			switch ending {
			case 2:
				return errFn
			case 3:
				panic(pv)
			}
			return nil
		}, opts...)
	}()
	if !called {
		require.Nil(t, recovered)
		switch {
		case z.closed:
			require.ErrorIs(t, err, gpu.ErrDeviceClosed)
		case badOption:
			require.ErrorIs(t, err, gpu.ErrInvalidSize, "a bad option")
		case parent != nil && !parent.open:
			require.ErrorIs(t, err, gpu.ErrScopeClosed)
		case parent != nil && z.cancelled(parent) != nil:
			require.ErrorIs(t, err, z.cancelled(parent))
		default:
			require.Positive(t, reserve, "only a reservation fails to open: %v", err)
			require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		}
		return
	}
	require.False(t, badOption, "a scope opened with a bad option")
	require.Equal(t, "", gs.s.Path(), "an ended scope has no path")
	require.True(t, gs.s.Context().Err() != nil, "an ended scope's context is done")
	z.ended(gs)
	if ending == 3 {
		require.Same(t, pv, recovered, "the panic goes on with its own value")
		return
	}
	require.Nil(t, recovered)
	if ending == 2 {
		require.ErrorIs(t, err, errFn)
	}
	if c := z.cancelled(gs); c != nil {
		require.ErrorIs(t, err, c)
	}
	if z.closed {
		require.ErrorIs(t, err, gpu.ErrDeviceClosed)
	}
	if ending < 2 && z.cancelled(gs) == nil && !z.closed {
		require.NoError(t, err)
	}
	// The *Scope of an ended WithScope stays ended.
	_, aerr := gs.s.Alloc(512)
	require.ErrorIs(t, aerr, gpu.ErrScopeClosed)
}

// pickAlloc returns an allocation of the run, of any state; nil for none.
func (z *gpuFuzz) pickAlloc() *galloc {
	if len(z.allocs) == 0 {
		return nil
	}
	return z.allocs[z.next(len(z.allocs))]
}

// pickScope returns gs or another scope of the run, maybe ended.
func (z *gpuFuzz) pickScope(gs *gscope) *gscope {
	if len(z.scopes) == 0 || z.next(3) != 0 {
		return gs
	}
	return z.scopes[z.next(len(z.scopes))]
}

// op runs one step in gs (nil: outside any scope).
func (z *gpuFuzz) op(gs *gscope) {
	t := z.t
	z.refreshEvicted()
	switch z.next(19) {
	case 0, 1: // allocate bytes
		if gs != nil {
			z.alloc(gs, gpuFuzzSizes[z.next(len(gpuFuzzSizes))])
		}
	case 2: // allocate elements
		if gs != nil {
			n := gpuFuzzCounts[z.next(len(gpuFuzzCounts))]
			if z.next(2) == 0 {
				z.allocBytes(gs, n)
			} else {
				z.allocElems(gs, n)
			}
		}
	case 3: // free through a scope
		if a := z.pickAlloc(); a != nil {
			if via := z.pickScope(gs); via != nil {
				z.free(a, via)
			}
		}
	case 4: // keep through a scope
		if a := z.pickAlloc(); a != nil {
			if via := z.pickScope(gs); via != nil {
				z.keep(a, via)
			}
		}
	case 5, 6: // write through a view, read it all back
		if a := z.pickAlloc(); a != nil {
			z.view(a)
		}
	case 7: // copy between buffers
		a, b := z.pickAlloc(), z.pickAlloc()
		if a != nil && b != nil && a != b {
			z.copy(a, b)
		}
	case 8: // a child scope
		if gs != nil && gs.open {
			z.withScope(gs.s.Context(), gs)
		}
	case 9: // cancel this scope's context
		if gs != nil && gs.cancel != nil && gs.cause == nil && gs.open {
			gs.cause = fmt.Errorf("cancelled at op %d", z.prog.Pos())
			gs.cancel(gs.cause)
			_, err := gs.s.Alloc(512)
			require.ErrorIs(t, err, gs.cause)
		}
	case 10: // the device's cache and cap
		z.device()
	case 11: // goroutines allocating, copying and freeing at once
		if gs != nil && gs.open {
			z.concurrent(gs, z.next(6)+1)
		}
	case 12: // zero and nil handles
		var s *gpu.Scope
		_, err := s.Alloc(512)
		require.Error(t, err)
		require.ErrorIs(t, gpu.Buffer{}.CopyFromHost([]byte{1}), gpu.ErrWrongScope)
		_, err = gpu.Buffer{}.View(0, 1)
		require.ErrorIs(t, err, gpu.ErrWrongScope)
		if gs != nil && gs.open {
			require.ErrorIs(t, gs.s.Free(gpu.Buffer{}), gpu.ErrWrongScope)
		}
	case 13: // close a long-lived scope
		for _, c := range z.scopes {
			if c.long && c.open && !z.below(c, gs) {
				z.closeScope(c)
				break
			}
		}
	case 14: // close the device, now and then
		if z.next(16) == 0 && !z.closed {
			z.closeDevice()
		}
	case 15: // a stream of this scope
		if gs != nil {
			z.newStream(gs)
		}
	case 16: // events, synchronizing, a use on a stream
		if len(z.streams) > 0 {
			z.streamOp(z.streams[z.next(len(z.streams))])
		}
	case 17: // page-locked memory, copied in and out on a stream
		if a := z.pickAlloc(); a != nil && len(z.streams) > 0 {
			z.asyncCopy(a, z.streams[z.next(len(z.streams))])
		}
	case 18: // a child scope on a stream
		if gs != nil && gs.open && len(z.streams) > 0 {
			gst := z.streams[z.next(len(z.streams))]
			z.withScopeOn(gs, gst)
		}
	}
	z.check()
}

func (z *gpuFuzz) newStream(gs *gscope) {
	st, err := gs.s.NewStream()
	if !gs.open || z.closed {
		require.Error(z.t, err)
		return
	}
	require.NoError(z.t, err)
	z.streams = append(z.streams, &gstream{st: st, owner: gs})
}

// streamErr checks err of a call on gst, whose scope may have ended.
func (z *gpuFuzz) streamErr(gst *gstream, err error) {
	if gst.owner.open {
		require.NoError(z.t, err)
		return
	}
	require.Error(z.t, err, "a stream of an ended scope")
	if !z.closed && !gst.owner.evicted {
		require.ErrorIs(z.t, err, gpu.ErrScopeClosed)
	}
}

func (z *gpuFuzz) streamOp(gst *gstream) {
	t := z.t
	switch z.next(5) {
	case 0:
		ev, err := gst.st.Record()
		z.streamErr(gst, err)
		if err == nil {
			gst.events = append(gst.events, ev)
		}
	case 1:
		z.streamErr(gst, gst.st.Synchronize())
	case 2:
		for _, ev := range gst.events {
			done, err := ev.Done()
			if err == nil {
				require.NoError(t, ev.Wait())
				_ = done
			} else {
				require.ErrorIs(t, err, gpu.ErrScopeClosed)
				require.ErrorIs(t, ev.Wait(), gpu.ErrScopeClosed)
			}
		}
	case 3:
		if len(gst.events) > 0 {
			ev := gst.events[z.next(len(gst.events))]
			err := ev.Release()
			require.True(t, err == nil || errors.Is(err, gpu.ErrScopeClosed), "%v", err)
			require.NoError(t, ev.Release(), "Release is idempotent")
			_, err = ev.Done()
			require.ErrorIs(t, err, gpu.ErrScopeClosed, "an event released")
		}
	default:
		a := z.pickAlloc()
		if a == nil {
			return
		}
		err := a.b.RecordUse(gst.st)
		switch {
		case !gst.owner.open:
			require.Error(t, err, "a use on a stream of an ended scope")
		case a.state != gLive:
			z.stale(a, err)
		case err != nil:
			// Memory of a reservation is used on its own stream only.
			require.ErrorContains(t, err, "reservation")
			z.readBack(a)
		default:
			z.readBack(a)
		}
	}
}

// asyncCopy copies a's bytes through page-locked memory on gst and back.
func (z *gpuFuzz) asyncCopy(a *galloc, gst *gstream) {
	t := z.t
	if a.x.IsZero() {
		return
	}
	s := a.owner
	n := a.x.Len()
	h, err := gpu.AllocHost[uint8](s.s, n)
	if err != nil {
		if a.state == gLive && !z.closed && z.cancelled(s) == nil {
			require.ErrorIs(t, err, gpu.ErrOutOfMemory)
		}
		return
	}
	require.True(t, a.owner.open, "AllocHost in an ended scope")
	defer func() { require.NoError(t, h.Free()) }()
	err = a.x.CopyToHostAsync(h, gst.st)
	switch {
	case !gst.owner.open:
		require.Error(t, err, "a copy on a stream of an ended scope")
		return
	case a.state != gLive:
		z.stale(a, err)
		return
	case err != nil:
		// Memory of a reservation is used on its own stream only.
		require.ErrorContains(t, err, "reservation")
		return
	}
	require.NoError(t, gst.st.Synchronize())
	require.NoError(t, h.Use(func(v []uint8) error {
		if !bytes.Equal(v, a.shadow) {
			t.Fatalf("an asynchronous copy of %d bytes to the host read other bytes", n)
		}
		for k := range v {
			v[k] ^= 0x5a
		}
		return nil
	}))
	require.NoError(t, a.x.CopyFromHostAsync(h, gst.st))
	require.NoError(t, gst.st.Synchronize())
	for k := range a.shadow {
		a.shadow[k] ^= 0x5a
	}
	z.readBack(a)
}

// withScopeOn runs a child of gs on gst's stream: its allocations and
// copies go there.
func (z *gpuFuzz) withScopeOn(gs *gscope, gst *gstream) {
	t := z.t
	var child *gscope
	reserve := z.next(3) == 0
	opts := []gpu.ScopeOption{gpu.OnStream(gst.st)}
	if reserve {
		opts = append(opts, gpu.Reserve(4096))
	}
	err := gpu.WithScope(gs.s.Context(), z.dev, func(s *gpu.Scope) error {
		child = &gscope{s: s, parent: gs, open: true}
		z.scopes = append(z.scopes, child)
		z.alloc(child, []int64{512, 4096, 1 << 20}[z.next(3)])
		if len(z.allocs) > 0 {
			z.view(z.allocs[len(z.allocs)-1])
		}
		return nil
	}, opts...)
	if child == nil {
		switch {
		case z.closed:
			require.ErrorIs(t, err, gpu.ErrDeviceClosed)
		case !gst.owner.open:
			require.Error(t, err, "a scope on the stream of an ended scope")
		case z.cancelled(gs) != nil:
			require.ErrorIs(t, err, z.cancelled(gs))
		default:
			require.True(t, reserve, "%v", err)
			require.ErrorContains(t, err, "cannot reserve")
		}
		return
	}
	require.False(t, reserve, "a scope on a stream reserved memory")
	z.ended(child)
	if z.cancelled(gs) == nil && !z.closed {
		require.NoError(t, err)
	}
}

// expectAllocErr checks an allocation's error in gs of n bytes.
func (z *gpuFuzz) expectAllocErr(gs *gscope, n int64, err error, invalid bool) {
	t := z.t
	switch {
	case !gs.open || z.closed:
		z.closedErr(err)
	case z.cancelled(gs) != nil:
		require.ErrorIs(t, err, z.cancelled(gs))
	case invalid:
		require.ErrorIs(t, err, gpu.ErrInvalidSize, "%d bytes", n)
	default:
		require.ErrorIs(t, err, gpu.ErrOutOfMemory, "%d bytes", n)
	}
}

// add records a new allocation, fills it with a pattern, and reads it back.
func (z *gpuFuzz) add(gs *gscope, b gpu.Buffer) {
	t := z.t
	require.False(t, z.closed || !gs.open || z.cancelled(gs) != nil, "allocated where it must fail")
	require.NotZero(t, b.Ptr())
	require.Zero(t, b.Ptr()%256)
	a := &galloc{b: b, owner: gs, shadow: make([]byte, b.Size())}
	for k := range a.shadow {
		a.shadow[k] = byte(len(z.allocs)*7 + k)
	}
	require.NoError(t, b.CopyFromHost(a.shadow))
	z.allocs = append(z.allocs, a)
	z.readBack(a)
}

func (z *gpuFuzz) alloc(gs *gscope, n int64) {
	b, err := gs.s.Alloc(n)
	if err != nil {
		require.True(z.t, b.IsZero())
		z.expectAllocErr(gs, n, err, n <= 0 || n > pool.MaxSize)
		return
	}
	require.Equal(z.t, n, b.Size())
	z.add(gs, b)
}

func (z *gpuFuzz) allocElems(gs *gscope, n int) {
	x, err := gpu.Alloc[float32](gs.s, n)
	if err != nil {
		require.True(z.t, x.IsZero())
		if n <= 0 || int64(n) > pool.MaxSize/4 {
			require.ErrorIs(z.t, err, gpu.ErrInvalidSize, "%d elements", n)
			return
		}
		z.expectAllocErr(gs, int64(n)*4, err, false)
		return
	}
	require.Equal(z.t, n, x.Len())
	require.Equal(z.t, int64(n)*4, x.Size())
	z.add(gs, x.Buffer)
	// Through the typed slice, on the host device's own memory.
	a := z.allocs[len(z.allocs)-1]
	require.NoError(z.t, x.UseHost(func(v []float32) error {
		require.Len(z.t, v, n)
		v[0] = 1.5
		return nil
	}))
	got := make([]float32, 1)
	require.NoError(z.t, x.CopyToHost(got))
	require.Equal(z.t, float32(1.5), got[0])
	copy(a.shadow, []byte{0, 0, 0xc0, 0x3f}) // 1.5, little-endian
	require.Error(z.t, x.CopyFromHost(make([]float32, n+1)), "more elements than the slice holds")
	z.readBack(a)
}

// allocBytes allocates a typed slice of n bytes, which page-locked memory
// copies in and out.
func (z *gpuFuzz) allocBytes(gs *gscope, n int) {
	x, err := gpu.Alloc[uint8](gs.s, n)
	if err != nil {
		require.True(z.t, x.IsZero())
		if n <= 0 || int64(n) > pool.MaxSize {
			require.ErrorIs(z.t, err, gpu.ErrInvalidSize, "%d elements", n)
			return
		}
		z.expectAllocErr(gs, int64(n), err, false)
		return
	}
	require.Equal(z.t, n, x.Len())
	z.add(gs, x.Buffer)
	z.allocs[len(z.allocs)-1].x = x
}

// readBack checks that a's memory holds what was written to it.
func (z *gpuFuzz) readBack(a *galloc) {
	got := make([]byte, len(a.shadow))
	require.NoError(z.t, a.b.CopyToHost(got))
	if !bytes.Equal(got, a.shadow) {
		z.t.Fatalf("a buffer of %d bytes does not hold what was written to it", len(got))
	}
}

// closedErr checks err of a call through a scope that has ended.
func (z *gpuFuzz) closedErr(err error) {
	if z.closed && errors.Is(err, gpu.ErrDeviceClosed) || errors.Is(err, gpu.ErrEvicted) {
		return
	}
	require.ErrorIs(z.t, err, gpu.ErrScopeClosed)
}

// stale checks that every method of a, which is not live, fails and
// touches nothing.
func (z *gpuFuzz) stale(a *galloc, err error) {
	t := z.t
	switch a.state {
	case gFreed:
		require.ErrorIs(t, err, gpu.ErrFreed)
	case gEvicted:
		require.True(t, errors.Is(err, gpu.ErrEvicted) || errors.Is(err, gpu.ErrScopeClosed) || errors.Is(err, gpu.ErrFreed), "%v", err)
	case gDeviceClosed:
		require.True(t, errors.Is(err, gpu.ErrScopeClosed) || errors.Is(err, gpu.ErrFreed) || errors.Is(err, gpu.ErrDeviceClosed), "%v", err)
	default:
		require.True(t, errors.Is(err, gpu.ErrScopeClosed) || errors.Is(err, gpu.ErrFreed), "%v", err)
	}
}

func (z *gpuFuzz) free(a *galloc, via *gscope) {
	t := z.t
	err := via.s.Free(a.b)
	switch {
	case !via.open:
		z.closedErr(err)
	case a.state != gLive:
		z.stale(a, err)
	case via != a.owner:
		require.ErrorIs(t, err, gpu.ErrWrongScope)
		z.readBack(a)
	default:
		require.NoError(t, err)
		a.state = gFreed
		require.ErrorIs(t, via.s.Free(a.b), gpu.ErrFreed)
		require.Zero(t, a.b.Ptr())
	}
}

func (z *gpuFuzz) keep(a *galloc, via *gscope) {
	t := z.t
	err := via.s.Keep(a.b)
	switch {
	case !via.open:
		z.closedErr(err)
	case a.state != gLive:
		z.stale(a, err)
	case via.parent == nil:
		require.ErrorIs(t, err, gpu.ErrNotKept, "Keep in a root scope")
	case via != a.owner:
		require.ErrorIs(t, err, gpu.ErrWrongScope)
	case err != nil:
		// The scope's own reservation holds it.
		require.ErrorIs(t, err, gpu.ErrNotKept)
	default:
		a.owner = via.parent
		z.readBack(a)
	}
}

// view writes through a view of a at an offset and size from the input,
// in range or not, and reads the whole buffer back.
func (z *gpuFuzz) view(a *galloc) {
	t := z.t
	size := a.b.Size()
	offs := []int64{0, 1, size / 2, size - 1, size, size + 1, -1, math.MaxInt64}
	lens := []int64{1, 0, -1, size, size / 2, math.MaxInt64, math.MinInt64}
	off, n := offs[z.next(len(offs))], lens[z.next(len(lens))]
	v, err := a.b.View(off, n)
	if off < 0 || n <= 0 || off > size || n > size-off {
		require.ErrorIs(t, err, gpu.ErrInvalidSize, "view of %d at %d in %d", n, off, size)
		return
	}
	if a.state != gLive {
		z.stale(a, err)
		return
	}
	require.NoError(t, err)
	require.Equal(t, n, v.Size())
	require.Equal(t, a.b.Ptr()+uintptr(off), v.Ptr())
	_, err = v.View(0, n+1)
	require.ErrorIs(t, err, gpu.ErrInvalidSize, "a view of a view past its end")
	if v.IsView() {
		require.Error(t, a.owner.s.Free(v), "a view cannot be freed")
		require.Error(t, a.owner.s.Keep(v), "nor kept")
	} else {
		require.Equal(t, a.b, v, "a view of all of a buffer is the buffer")
	}
	require.Error(t, v.CopyFromHost(make([]byte, n+1)), "more bytes than the view holds")
	src := make([]byte, n)
	for k := range src {
		src[k] = byte(0xa5 ^ z.prog.Pos() ^ k)
	}
	require.NoError(t, v.CopyFromHost(src))
	copy(a.shadow[off:], src)
	got := make([]byte, n)
	require.NoError(t, v.CopyToHost(got))
	require.Equal(t, src, got)
	z.readBack(a)
}

// copy copies all of src (or a view of it) into dst.
func (z *gpuFuzz) copy(dst, src *galloc) {
	t := z.t
	err := dst.b.CopyFrom(src.b)
	switch {
	case dst.state != gLive:
		z.stale(dst, err)
	case src.b.Size() > dst.b.Size():
		require.Error(t, err)
		z.readBack(dst)
	case src.state != gLive:
		z.stale(src, err)
	default:
		require.NoError(t, err)
		copy(dst.shadow, src.shadow)
		z.readBack(dst)
		z.readBack(src)
	}
}

func (z *gpuFuzz) device() {
	t := z.t
	switch z.next(4) {
	case 0:
		err := z.dev.EmptyCache()
		if z.closed {
			require.ErrorIs(t, err, gpu.ErrDeviceClosed)
		} else {
			require.NoError(t, err)
		}
	case 1:
		c := []int64{-1, 0, 1, 8 << 20, 32 << 20, math.MaxInt64}[z.next(6)]
		before := z.dev.MaxReserved()
		err := z.dev.SetMaxReserved(c)
		switch {
		case z.closed:
			require.Error(t, err)
		case c < 0 || c > 0 && c < 2<<20: // below one page, no allocation could fit
			require.ErrorIs(t, err, gpu.ErrInvalidSize)
			require.Equal(t, before, z.dev.MaxReserved())
		default:
			require.NoError(t, err)
			require.Equal(t, c, z.dev.MaxReserved())
		}
	case 2:
		f := []float64{math.NaN(), -1, 0, 0.5, 1, 2, math.Inf(1)}[z.next(7)]
		err := z.dev.SetMaxReservedFraction(f)
		switch {
		case z.closed:
			require.Error(t, err)
		case !(f > 0 && f <= 1):
			require.ErrorIs(t, err, gpu.ErrInvalidSize, "fraction %v", f)
		default:
			require.NoError(t, err)
		}
	default:
		_ = z.dev.Summary()
		_, err := z.dev.Snapshot()
		if !z.closed {
			require.NoError(t, err)
		}
	}
}

// concurrent runs n goroutines in gs that allocate, write, read back and
// free, two of them freeing one buffer at once.
func (z *gpuFuzz) concurrent(gs *gscope, n int) {
	t := z.t
	var wg sync.WaitGroup
	for k := range n {
		wg.Go(func() {
			b, err := gs.s.Alloc(int64(4096 * (k + 1)))
			if err != nil {
				if !errors.Is(err, gpu.ErrOutOfMemory) && z.cancelled(gs) == nil && !z.closed {
					t.Errorf("a concurrent allocation: %v", err)
				}
				return
			}
			want := bytes.Repeat([]byte{byte(k + 1)}, int(b.Size()))
			if err := b.CopyFromHost(want); err != nil {
				t.Errorf("a concurrent copy: %v", err)
			}
			got := make([]byte, b.Size())
			if err := b.CopyToHost(got); err != nil || !bytes.Equal(got, want) {
				t.Errorf("a concurrent buffer reads back other bytes (%v)", err)
			}
			var frees sync.WaitGroup
			errs := make([]error, 2)
			for j := range 2 {
				frees.Go(func() { errs[j] = gs.s.Free(b) })
			}
			frees.Wait()
			if (errs[0] == nil) == (errs[1] == nil) {
				t.Errorf("two frees of one buffer returned %v and %v", errs[0], errs[1])
			}
		})
	}
	wg.Wait()
}

func (z *gpuFuzz) closeDevice() {
	open := 0
	for _, c := range z.scopes {
		if c.open {
			open++
		}
	}
	err := z.dev.Close()
	if open > 0 {
		require.Error(z.t, err, "closing with %d scopes open", open)
		z.forced = true
	} else {
		require.NoError(z.t, err)
	}
	z.closed = true
	for _, c := range z.scopes {
		c.open = false
	}
	for _, a := range z.allocs {
		if a.state == gLive {
			a.state = gDeviceClosed
		}
	}
	for _, a := range z.allocs {
		err := a.b.CopyToHost(make([]byte, 1))
		if a.state != gLive {
			z.stale(a, err)
		}
	}
}

// check compares what every open scope owns with the run's record.
func (z *gpuFuzz) check() {
	if z.closed {
		return
	}
	z.refreshEvicted()
	own := map[*gscope]int{}
	for _, a := range z.allocs {
		if a.state == gLive {
			own[a.owner]++
		}
	}
	for _, gs := range z.scopes {
		if gs.open {
			st := gs.s.Stats()
			require.Equal(z.t, own[gs], st.Allocations, "scope %q's allocations", gs.s.Path())
			if gs.limit > 0 {
				require.LessOrEqual(z.t, st.Live, gs.limit)
			}
		}
	}
}

// finish closes what is open and checks that the device holds nothing and
// gputest finds no leak.
func (z *gpuFuzz) finish() {
	t := z.t
	for _, gs := range z.scopes {
		if gs.long && gs.open {
			z.closeScope(gs)
		}
	}
	for _, gs := range z.scopes {
		require.False(t, gs.open, "scope left open")
	}
	if !z.closed {
		st := z.dev.Stats()
		require.Zero(t, st.Allocated, "bytes live after every scope ended")
		require.Zero(t, st.ActiveBlocks)
		require.Zero(t, st.OpenScopes)
		gputest.VerifyNone(t, gputest.Devices(z.dev.Name()))
		require.NoError(t, z.dev.Close())
		return
	}
	// A device closed with scopes open is a leak gputest reports once.
	var leaks leakRecorder
	gputest.VerifyNone(&leaks, gputest.Devices(z.dev.Name()), gputest.MaxSleep(time.Microsecond))
	require.Equal(t, z.forced, len(leaks.errs) > 0, "gputest's report: %v", leaks.errs)
	gputest.VerifyNone(t, gputest.Devices(z.dev.Name()))
}

type leakRecorder struct{ errs []any }

func (r *leakRecorder) Error(args ...any) { r.errs = append(r.errs, args...) }
