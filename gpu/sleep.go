package gpu

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/eventwait"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/units"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

// Sleepable opens a scope whose memory can sleep ([Scope.Sleep]): give its
// device memory back to the driver while its buffers keep their addresses,
// and take new memory at the same addresses when it wakes ([Scope.Wake]).
// Two workloads take turns on one device this way (a trainer and an
// inference server), each holding all the device while it runs, and the
// addresses that kernels, captured graphs and other libraries hold stay
// valid across a cycle.
//
// The buffers of the scope and of the scopes inside it live in memory no
// other scope shares: a pool of the scope's own, whose pages the device's
// cap (MaxReserved) covers with the device's pool while they hold memory,
// and which cuts its handles under the cap as the device's pool does.
// A buffer cannot be kept out of the scope ([Scope.Keep] stops there with
// ErrNotKept), nor does a reservation outside it serve its allocations; a
// Sleepable scope inside another is refused. It needs a device that maps
// pages (a GPU, and the host device on Linux): elsewhere the open fails
// with ErrNotSupported. docs/sleep.md says how it works.
func Sleepable() ScopeOption {
	return scopeOptionFunc(func(o scopeOptions) scopeOptions { o.once(givenSleepable, "Sleepable"); o.sleepable = true; return o })
}

// Contents says what [Scope.Sleep] does with what the scope's buffers hold.
type Contents int

const (
	// DiscardContents drops what the buffers hold: nothing is copied, and
	// after Wake every buffer reads zeros. For what will be overwritten
	// (a KV cache, activations, gradients).
	DiscardContents Contents = iota
	// KeepContents copies what the buffers hold to host memory
	// (page-locked where the driver has it, from the device's cache of
	// it) and Wake copies it back: the buffers hold what they held. For
	// weights and optimizer state.
	KeepContents
)

// Sleep gives the device memory under the buffers of a [Sleepable] scope,
// and of the scopes inside it, back to the driver, and keeps their
// addresses reserved. Until [Scope.Wake], every use of them fails with
// ErrAsleep and touches no memory: copies, views, Use, kernel launches and
// Keep; so do allocations in the scopes, and Ptr returns 0. The scopes
// stay open: one that ends asleep releases its buffers without waking.
// [Scope.Free] of a buffer asleep succeeds, and touches no memory either:
// its memory goes back to the scope's own pool as free, a page that then
// holds no buffer is no longer the scope's (Wake neither maps it again
// nor copies into it), and it is scrubbed at Wake on a [ScrubFreed]
// device.
//
// Sleep first waits for the Use calls and copies running on the buffers
// to return (it must not be called from inside one), then for the work
// queued on the streams that used them: the scopes' own and those that
// RecordUse and kernel launches named (work queued on another stream
// without either is the caller's to wait for), until ctx is done. Then,
// with contents KeepContents, it copies what the buffers' memory holds to
// host memory, and gives every page back: the scope's own pool keeps no
// cache while asleep. Stats counts it apart (Sleeping, SleepingReleased,
// SleepingKept).
//
// Sleep fails whole: where ctx is done, a copy or a driver call fails, the
// scope is awake and its buffers hold what they held; but a page the
// driver would not release stays held until Wake, and that error goes to
// OnReleaseError (or gputest), the scope asleep all the same; so does
// one it could not unmap where mapping back the pages it had unmapped
// failed too. A scope
// asleep already fails with ErrAsleep; one not opened Sleepable with
// ErrNotSupported. Safe for concurrent use: Sleep, Wake and the scope's
// end take turns.
func (s *Scope) Sleep(ctx context.Context, contents Contents) error {
	sl, err := s.sleeper(ctx, "Sleep")
	if err != nil {
		return err
	}
	if contents != DiscardContents && contents != KeepContents {
		return prefixed.Errorf("gpu", "Sleep: unknown Contents %d", contents)
	}
	sl.mu.Lock()
	defer sl.unlock()
	if sl.ended {
		return prefixed.Kind("gpu", ErrScopeClosed, "Sleep: scope %q has ended", s.Path())
	}
	var stalled error
	err = s.s.Sleep(func(streams []uintptr) error {
		var err error
		stalled, err = sl.sleep(ctx, streams, contents)
		return err
	})
	if err != nil {
		return deviceError(err)
	}
	if stalled != nil {
		s.dev.dropped(stalled)
	}
	s.dev.waiters.released() // the memory it gave back is room for allocations waiting
	return nil
}

// Wake maps new device memory under the buffers of a [Sleepable] scope
// that sleeps, at the addresses they had, and copies back what Sleep kept
// (KeepContents); buffers whose contents were discarded read zeros. Their
// uses work again once it returns. What buffers freed asleep held is not
// copied back. A scope that is awake is left as it is.
//
// Wake takes the memory as an allocation would: under the device's cap,
// after the cache in front of the pool and the caches of the device's
// pools give back what they hold, and after evicting idle [Evictable]
// scopes. Where that leaves too little, it fails with an *OOMError
// (ErrOutOfMemory), or, in a scope opened with [WaitForMemory] (or inside
// one), waits for memory released on the device until ctx is done. It
// cannot half-fail: where memory is short or a driver call or a copy
// fails, it gives back what it took and the scope stays asleep with what
// it kept, for a later Wake. One that has ended fails with
// ErrScopeClosed; one not opened Sleepable with ErrNotSupported.
func (s *Scope) Wake(ctx context.Context) error {
	sl, err := s.sleeper(ctx, "Wake")
	if err != nil {
		return err
	}
	sl.mu.Lock()
	defer sl.unlock()
	if sl.ended {
		return prefixed.Kind("gpu", ErrScopeClosed, "Wake: scope %q has ended", s.Path())
	}
	if !sl.sleeping.Load() {
		return nil
	}
	return sl.wake(ctx, s)
}

// sleeper returns the state of s, a Sleepable scope, for its method op,
// once ctx allows it to begin.
func (s *Scope) sleeper(ctx context.Context, op string) (*sleeper, error) {
	if !s.valid() {
		return nil, errNilScope
	}
	if ctx == nil {
		return nil, prefixed.Errorf("gpu", "%s: nil Context", op)
	}
	sl := s.dev.sleep.of(s)
	if sl == nil {
		if s.s.Closed() {
			return nil, prefixed.Kind("gpu", ErrScopeClosed, "%s: the scope has ended", op)
		}
		return nil, prefixed.Kind("gpu", ErrNotSupported, "%s: scope %q was not opened Sleepable", op, s.Path())
	}
	if err := context.Cause(ctx); err != nil {
		return nil, prefixed.Wrap("gpu", err, "%s of scope %q", op, s.Path())
	}
	return sl, nil
}

// sleeper is what a Sleepable scope holds beyond a Scope's: its pool, the
// pages under it, and what it kept while it sleeps. It lives beside the
// scope, in the device's list: a Scope that is not Sleepable stays as
// small as it was.
type sleeper struct {
	dev   *Device
	pool  *pool.Pool
	pages *pageSource

	sleeping atomic.Bool  // asleep: changed under mu, read without it by Stats
	kept     atomic.Int64 // the bytes backup holds
	// capStale is set where the device's cap changed and the pool may not
	// have it yet (see capChanged).
	capStale atomic.Bool
	// ending is done once the scope's end has begun: a Wake waiting for
	// memory stops then.
	ending    context.Context
	endingNow context.CancelCauseFunc

	mu     sync.Mutex // serializes Sleep, Wake, the scope's end and the device's calls on the pool; protects the fields below. Let go of by unlock
	ended  bool       // the scope is ending: Sleep and Wake refuse
	backup *backup    // what Sleep kept; nil while awake, or where it discarded
}

// newSleeper makes the state of a Sleepable scope of d: its pool, over
// pages of its own.
func newSleeper(d *Device) (*sleeper, error) {
	m, ok := d.drv.(driver.PageMapper)
	if !ok {
		return nil, prefixed.Kind("gpu", ErrNotSupported, "Sleepable: device %s maps no pages", d.name)
	}
	src := newPageSource(d.drv, m, d.pool)
	opts := []pool.Option{pool.Expand(pool.ExpandAlways)}
	if c := capOf(d, src); c > 0 {
		opts = append(opts, pool.MaxReserved(c)) // the device's: see followCap
	}
	p, err := pool.New(src, opts...)
	if err != nil {
		return nil, deviceError(err)
	}
	if r := d.recording.Load(); r != nil {
		p.Observe(r.note)
	}
	sl := &sleeper{dev: d, pool: p, pages: src}
	sl.ending, sl.endingNow = context.WithCancelCause(context.Background())
	return sl, nil
}

// openSleepable opens a Sleepable scope of d with options o, over a pool
// of its own.
func openSleepable(ctx context.Context, d *Device, o scopeOptions) (*Scope, error) {
	sl, err := newSleeper(d)
	if err != nil {
		return nil, err
	}
	s, err := openScopeWith(ctx, d, o, sl)
	if err == nil {
		if err = sl.attach(s); err != nil {
			_, eerr := s.s.End()
			err = errors.Join(deviceError(err), deviceError(eerr))
		}
	}
	if err != nil {
		return nil, errors.Join(err, deviceError(sl.pool.Close()))
	}
	return s, nil
}

// attach makes sl the state of s, which opened over its pool: the device
// lists it, and s ends it when it ends.
func (sl *sleeper) attach(s *Scope) error {
	_, err := s.s.OwnResource(scope.Resource{End: sl.end, Final: func() error { return sl.final(s) }})
	if err != nil {
		return err
	}
	sl.dev.sleep.add(s, sl)
	sl.capChanged() // where the device's cap changed since newSleeper read it
	return nil
}

// end is the scope's end, before its buffers are released: a Sleep or
// Wake under way finishes first (a Wake waiting for memory stops), and
// none comes after.
func (sl *sleeper) end() error {
	sl.endingNow(errScopeEnding)
	sl.mu.Lock()
	defer sl.unlock()
	sl.ended = true
	return nil
}

// final closes the scope's pool once its buffers are released (a pool
// asleep gives back its address space only: its pages hold nothing), and
// what it kept goes back to the device's cache.
func (sl *sleeper) final(s *Scope) error {
	sl.dev.sleep.remove(s)
	sl.mu.Lock()
	defer sl.unlock()
	var err error
	if sl.backup != nil {
		err = sl.backup.free()
		sl.backup = nil
		sl.kept.Store(0)
	}
	return errors.Join(err, sl.pool.Close())
}

// sleep is Sleep's work once the scope's buffers are unusable: it waits
// for their streams, gives back what the pool caches, keeps the contents
// (KeepContents), unmaps the pages and releases them. It returns what
// releasing failed with apart (the pages stay held, the scope asleep):
// every other failure leaves the memory as it was. Called with mu held.
func (sl *sleeper) sleep(ctx context.Context, streams []uintptr, contents Contents) (stalled, err error) {
	d := sl.dev
	if err := waitStreams(ctx, d, streams); err != nil {
		return nil, err
	}
	// What the pool caches is free: nothing to keep of it.
	if err := sl.pool.EmptyCache(); err != nil {
		return nil, err
	}
	pages, ranges := sl.pages.mapped()
	var bk *backup
	if contents == KeepContents {
		if bk, err = saveContents(d, ranges); err != nil {
			return nil, err
		}
	}
	half, err := sl.pages.unmapAll(pages)
	if err != nil && !half {
		if bk != nil {
			err = errors.Join(err, bk.free())
		}
		return nil, err
	}
	// Where the pages it had unmapped could not be mapped again, the
	// memory is no longer whole: the scope sleeps on (what its buffers
	// held is in bk, or not wanted), the pages still mapped held until
	// Wake, and the error goes where a release's does.
	_, stalled = sl.pages.giveBack()
	stalled = errors.Join(err, stalled)
	sl.backup = bk
	if bk != nil {
		sl.kept.Store(bk.bytes)
	}
	sl.sleeping.Store(true)
	d.sleep.sleeps.Add(1)
	return stalled, nil
}

// wake is Wake's work: it takes the scope's memory back, and where memory
// is short makes room as an allocation does, or waits in a WaitForMemory
// scope. Called with mu held, which it lets go of while it evicts or waits.
func (sl *sleeper) wake(ctx context.Context, s *Scope) error {
	d := sl.dev
	q := &d.waiters
	waits := s.s.Inherited().Wait
	if waits {
		q.active.Add(1) // before the first attempt: no release goes uncounted after it
		defer q.active.Add(-1)
		var stop context.CancelCauseFunc
		ctx, stop = context.WithCancelCause(ctx)
		defer stop(nil)
		defer context.AfterFunc(sl.ending, func() { stop(context.Cause(sl.ending)) })()
	}
	cachesGone, front := false, false
	for {
		seen := q.frees.Load()
		err := s.s.Wake(sl.takeBack)
		if err == nil {
			sl.sleeping.Store(false)
			d.sleep.wakes.Add(1)
			sl.followCap() // a cap set while it slept
			return nil
		}
		if !isOutOfMemory(err) {
			return deviceError(err)
		}
		need := sl.pages.asleepBytes()
		if !cachesGone && d.giveBackCaches(sl) {
			cachesGone = true // once an attempt, or it would spin
			continue
		}
		cachesGone = false
		if d.evict.has.Load() {
			// The scope evicted ends its streams, which retires them in
			// this scope's pool too, under mu: not held meanwhile.
			var evicted bool
			if over, err := sl.unlocked(s, func() {
				evicted = d.evict.evictOne(d, func(*Scope, *evictState) bool { return false }, need)
			}); over || err != nil {
				return err
			}
			if evicted {
				continue
			}
		}
		oom := wakeOutOfMemory(s, need, err)
		if !waits || neverFits(oom, need) {
			return oom
		}
		// Not holding mu while it waits: the device's calls on the pool
		// (a stream retired, EmptyCache) and the scope's end go on.
		var werr error
		if over, err := sl.unlocked(s, func() { werr = q.wait(ctx, seen, front, 0) }); werr != nil {
			return &waitError{scope: s.Path(), size: need, ctx: werr, oom: oom}
		} else if over || err != nil {
			return err
		}
		front = true
	}
}

// unlocked runs fn, a step of the Wake of s that may wait for the device's
// calls on the pool (a stream retired) or the scope's end, without mu,
// and reports, holding mu again, whether the Wake is over: the scope
// ended (err) or another Wake woke it. Called with mu held.
func (sl *sleeper) unlocked(s *Scope, fn func()) (over bool, err error) {
	sl.unlock()
	fn()
	sl.mu.Lock()
	switch {
	case sl.ended:
		return true, prefixed.Kind("gpu", ErrScopeClosed, "Wake: scope %q has ended", s.Path())
	case !sl.sleeping.Load():
		return true, nil // another Wake woke it meanwhile
	}
	return false, nil
}

// giveBackCaches gives back to the driver what the cache in front of the
// device's pool, the pool and the pools of the Sleepable scopes but
// except's cache, as an allocation short of memory does, and reports
// whether that gave back any memory.
func (d *Device) giveBackCaches(except *sleeper) bool {
	flushed := d.flushExternal()
	before := d.pool.Stats().Reserved
	err := d.pool.EmptyCache()
	freed, serr := d.sleep.emptyCaches(except)
	if err = errors.Join(err, serr); err != nil {
		d.dropped(err)
	}
	return flushed || freed || d.pool.Stats().Reserved < before
}

// errScopeEnding is the cause that ends the wait of a Wake for memory
// when its scope ends.
var errScopeEnding = prefixed.Kind("gpu", ErrScopeClosed, "the scope is ending")

// takeBack maps memory under the scope's pages again and gives back its
// contents: a copy of what Sleep kept, or zeros. Where a step fails it
// undoes the others: the scope stays asleep, its backup intact. Called
// with mu held, by the scope's Wake.
func (sl *sleeper) takeBack() error {
	undo, err := sl.pages.takeBack()
	if err != nil {
		return err
	}
	if sl.backup != nil {
		_, mapped := sl.pages.mapped()
		err = sl.backup.restore(sl.dev, sl.live(mapped))
		if err == nil && sl.dev.sleep.scrubs {
			err = sl.scrubFreed(mapped)
		}
	} else {
		err = sl.zero()
	}
	if err != nil {
		return errors.Join(err, undo())
	}
	if sl.backup != nil {
		if ferr := sl.backup.free(); ferr != nil {
			sl.dev.dropped(ferr)
		}
		sl.backup = nil
		sl.kept.Store(0)
	}
	return nil
}

// live returns the parts of the ranges mapped (sorted by address) that
// the scope's buffers hold, by address, neighbours joined: what a Wake
// copies back. A buffer freed asleep is not there: its memory is free, and
// what it held is nobody's (zeroed where the device scrubs, scrubFreed).
// Never nil: nil would be every range whole (clip).
func (sl *sleeper) live(mapped []span) []span {
	var held []span
	for _, seg := range sl.pool.Snapshot().Segments {
		for _, b := range seg.Blocks {
			if b.State == pool.BlockAllocated {
				held = append(held, span{b.Address, b.Size})
			}
		}
	}
	slices.SortFunc(held, func(a, b span) int { return cmp.Compare(a.ptr, b.ptr) })
	out := []span{}
	for _, h := range held {
		for _, p := range clip(h, mapped) {
			if n := len(out); n > 0 && out[n-1].ptr+uintptr(out[n-1].size) == p.ptr {
				out[n-1].size += p.size
				continue
			}
			out = append(out, p)
		}
	}
	return out
}

// zero writes zeros over the memory mapped under the scope's pool, on the
// default stream, and waits for them.
func (sl *sleeper) zero() error {
	_, ranges := sl.pages.mapped()
	for _, r := range ranges {
		if err := sl.dev.drv.Memset(r.ptr, 0, r.size, 0); err != nil {
			return errors.Join(prefixed.Wrap("gpu", err, "zeroing %s", units.FormatBytes(r.size)), sl.dev.drv.Synchronize(0))
		}
	}
	return sl.dev.drv.Synchronize(0)
}

// scrubFreed writes zeros over the free memory of the scope's pool, mapped
// in the ranges mapped, on the default stream, and waits for them: where
// the device scrubs what is freed (ScrubFreed), a buffer freed while the
// scope slept (a scope inside it ended) was not, nothing being mapped
// under it, and the copy back of its pages brought back what it held.
func (sl *sleeper) scrubFreed(mapped []span) error {
	for _, seg := range sl.pool.Snapshot().Segments {
		for _, b := range seg.Blocks {
			if b.State != pool.BlockFree && b.State != pool.BlockCached && b.State != pool.BlockPending {
				continue
			}
			for _, p := range clip(span{b.Address, b.Size}, mapped) {
				if err := sl.dev.drv.Memset(p.ptr, 0, p.size, 0); err != nil {
					return errors.Join(prefixed.Wrap("gpu", err, "scrubbing %s freed asleep", units.FormatBytes(p.size)), sl.dev.drv.Synchronize(0))
				}
			}
		}
	}
	return sl.dev.drv.Synchronize(0)
}

// wakeOutOfMemory is the error of a Wake of s that found no room for the
// need bytes it takes back: err, the cap's refusal, or the driver's with
// the device's figures.
func wakeOutOfMemory(s *Scope, need int64, err error) error {
	d := s.dev
	var po *pool.OOMError
	if !errors.As(err, &po) {
		free, total, merr := d.drv.MemInfo()
		if merr != nil {
			free, total = -1, -1
		}
		st := d.Stats()
		err = &pool.OOMError{Requested: need, Allocated: st.Allocated, Reserved: st.Reserved,
			Limit: d.pool.MaxReserved(), DeviceFree: free, DeviceTotal: total, Err: err}
	}
	return outOfMemory(s.s.Context(), d, s.Path(), need, err)
}

// waitStreams waits until the work queued on streams so far has completed,
// or ctx is done.
func waitStreams(ctx context.Context, d *Device, streams []uintptr) error {
	for _, st := range streams {
		ev, err := d.drv.RecordEvent(st)
		if errdefs.IsStreamGone(err) {
			continue // destroyed: its work is done
		}
		if err != nil {
			return prefixed.Wrap("gpu", err, "waiting for stream %#x", st)
		}
		err = eventwait.Wait(ctx, d.drv, ev)
		if derr := d.destroyEvent(ev); derr != nil {
			d.dropped(derr)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
