package gpu

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

// sleepers is a device's list of Sleepable scopes, whose pools the device
// asks beside its own: for its figures, to empty their caches, to retire
// a stream, to record.
type sleepers struct {
	has           atomic.Bool // a Sleepable scope was opened: the device looks here
	sleeps, wakes atomic.Int64
	scrubs        bool // the device scrubs what is freed (ScrubFreed): so does Wake (sleeper.scrubFreed)

	mu      sync.Mutex // protects byScope
	byScope map[*Scope]*sleeper
}

// add lists sl, the state of s.
func (ss *sleepers) add(s *Scope, sl *sleeper) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.byScope == nil {
		ss.byScope = map[*Scope]*sleeper{}
	}
	ss.byScope[s] = sl
	ss.has.Store(true)
}

// remove forgets s, which ended.
func (ss *sleepers) remove(s *Scope) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.byScope, s)
}

// of returns the state of s; nil where s is not a listed Sleepable scope.
func (ss *sleepers) of(s *Scope) *sleeper {
	if !ss.has.Load() {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.byScope[s]
}

// holds reports whether h is a listed Sleepable scope's.
func (ss *sleepers) holds(h scope.Scope) bool {
	if !ss.has.Load() {
		return false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for s := range ss.byScope {
		if s.s == h {
			return true
		}
	}
	return false
}

// all returns the listed states.
func (ss *sleepers) all() []*sleeper {
	if !ss.has.Load() {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make([]*sleeper, 0, len(ss.byScope))
	for _, sl := range ss.byScope {
		out = append(out, sl)
	}
	return out
}

// emptyCaches gives back what the pools of the Sleepable scopes awake
// cache, but except's, and reports whether that gave back any memory.
// A scope whose Sleep or Wake is under way is passed over: the device
// never waits for one.
func (ss *sleepers) emptyCaches(except *sleeper) (bool, error) {
	var errs []error
	freed := false
	for _, sl := range ss.all() {
		if sl == except || !sl.mu.TryLock() {
			continue
		}
		if !sl.sleeping.Load() && !sl.ended {
			before := sl.pool.Stats().Reserved
			errs = append(errs, sl.pool.EmptyCache())
			freed = freed || sl.pool.Stats().Reserved < before
		}
		sl.unlock()
	}
	return freed, errors.Join(errs...)
}

// retryAfterSleepersGiveBack is an allocation's retry, of size bytes in
// s, that failed with err for want of memory (its attempts left left
// out-of-memory counts): once the pools of the device's Sleepable scopes
// have given back what they cache, where they had any. It returns the
// retry's result, or what it was given.
func (s *Scope) retryAfterSleepersGiveBack(size int64, ref scope.Ref, left int64, err error) (scope.Ref, int64, error) {
	freed, gerr := s.dev.sleep.emptyCaches(nil)
	if gerr != nil {
		s.dev.dropped(gerr)
	}
	if !freed {
		return ref, left, err
	}
	s.dev.evict.absorbed.Add(left) // one allocation, one count: the retry's
	ref, err = s.s.Alloc(size)
	return ref, poolOOMs(err), err
}

// retireStream tells the Sleepable scopes' pools that stream is about to
// be destroyed, as the device's pool is told (pool.Pool.RetireStream).
func (ss *sleepers) retireStream(stream uintptr) error {
	var errs []error
	for _, sl := range ss.all() {
		sl.mu.Lock()
		errs = append(errs, sl.pool.RetireStream(stream))
		sl.unlock()
	}
	return errors.Join(errs...)
}

// observe makes the Sleepable scopes' pools call fn as the device's pool
// does (a recording); nil stops it.
func (ss *sleepers) observe(fn func(ctx context.Context, alloc bool, b pool.Block)) {
	for _, sl := range ss.all() {
		sl.pool.Observe(fn)
	}
}

// sleepingFigures are what Stats shows of the Sleepable scopes asleep.
type sleepingFigures struct {
	scopes            int
	allocated, blocks int64
	released, kept    int64
}

// addTo adds the figures of the Sleepable scopes' pools to p, the device
// pool's, and returns what Stats shows of those asleep: the buffers of a
// scope asleep hold no memory, and are not in Allocated.
func (ss *sleepers) addTo(p *pool.Stats) sleepingFigures {
	var f sleepingFigures
	for _, sl := range ss.all() {
		q := sl.pool.Stats()
		if sl.sleeping.Load() {
			f.scopes++
			f.allocated += q.Allocated
			f.blocks += q.ActiveBlocks
			f.released += sl.pages.asleepBytes()
			f.kept += sl.kept.Load()
		} else {
			p.Allocated += q.Allocated
			p.Requested += q.Requested
			p.ActiveBlocks += q.ActiveBlocks
			p.CachedBlocks += q.CachedBlocks
			p.Segments += q.Segments
		}
		// Each pool knows its own peak: the largest is a lower bound.
		p.PeakAllocated = max(p.PeakAllocated, q.PeakAllocated)
		p.PeakActiveBlocks = max(p.PeakActiveBlocks, q.PeakActiveBlocks)
		p.Allocs += q.Allocs
		p.Frees += q.Frees
		p.AllocatedBytes += q.AllocatedBytes
		p.FreedBytes += q.FreedBytes
		p.CacheHits += q.CacheHits
		p.SourceAllocs += q.SourceAllocs
		p.SourceFrees += q.SourceFrees
		p.Growths += q.Growths
		p.PagesMapped += q.PagesMapped
		p.PagesMoved += q.PagesMoved
		p.OOMs += q.OOMs
		p.Retries += q.Retries
	}
	// The device's pool counts in Reserved the pages of the awake scopes'
	// pools (pool.Pool.Charge): what is not allocated of it is cached.
	p.Cached = p.Reserved - p.Allocated
	p.PeakAllocated = max(p.PeakAllocated, p.Allocated)
	p.PeakActiveBlocks = max(p.PeakActiveBlocks, p.ActiveBlocks)
	return f
}

// deviceFigures returns e, a refusal of a pool of d, with the device's
// Reserved and Allocated (figures), where the device has Sleepable scopes:
// one's pool, which has the device's cap as its own, may meet it before
// the device's pool (which counts its pages) does, and what it holds is
// only its part of what the cap covers; and where the driver refused, the
// device's pool's own Allocated leaves out the buffers of the Sleepable
// scopes whose pages its Reserved counts.
func (d *Device) deviceFigures(e *pool.OOMError) *pool.OOMError {
	if e == nil || !d.sleep.has.Load() {
		return e
	}
	p := d.figures()
	c := *e
	c.Reserved, c.Allocated = max(c.Reserved, p.Reserved), max(c.Allocated, p.Allocated)
	return &c
}

// figures returns the device's pool's figures with those of the Sleepable
// scopes' pools, as Stats shows them: Allocated counts the buffers of
// those awake, and Cached is what all the pools keep free.
func (d *Device) figures() pool.Stats {
	p := d.pool.Stats()
	d.sleep.addTo(&p)
	return p
}
