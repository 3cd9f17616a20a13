package foreign

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/callers"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/units"
)

// record is a scope that libraries allocate in: one begun from C (Begin),
// or a device's root.
type record struct {
	id    int64
	dev   *device // the C device it was begun on
	scope *gpu.Scope

	parent   *record // the enclosing record (Begin); nil for roots
	children int     // open records begun inside it; under dev.mu

	ending atomic.Bool // End has begun: allocations go elsewhere (see alloc)

	sleepable bool // begun with BeginSleepable: its memory sleeps (sleep.go)

	streams sync.Map // a library's stream handle to its *gpu.Stream, owned by this scope (roots)

	// A scope of C's allocates for another stream in a child on it (streams.go).
	byStream  sync.Map  // stream handle to the child on it
	onStreams []*record // those children; under dev.mu
	streamOf  *record   // for such a child, the scope it serves
	onHandle  uintptr   // and the library's stream handle it serves it on

	done   chan struct{} // closed by End: Begin's WithScope returns
	result chan error    // what that WithScope returned
}

// errNoScope is what a call naming a scope that has ended, or never was,
// fails with.
var errNoScope = prefixed.Kind("gpu", gpu.ErrScopeClosed, "no such scope open (it ended, or was never begun)")

// records finds a record by its id, without a lock: ids name a place in
// chunks of records and a sequence number, so that an id of a record that
// ended never names the record that took its place.
var records struct {
	mu     sync.Mutex // protects free, seq and the making of chunks
	chunks [recordChunks]atomic.Pointer[[recordChunk]atomic.Pointer[record]]
	free   []int64 // places no record holds
	used   int64   // places taken from the chunks, in all
	seq    int64
}

const (
	recordChunk  = 1024
	recordChunks = 1024
	placeBits    = 20 // recordChunk * recordChunks places
)

// register gives r an id and makes it findable.
func register(r *record) error {
	records.mu.Lock()
	defer records.mu.Unlock()
	var place int64
	if n := len(records.free); n > 0 {
		place, records.free = records.free[n-1], records.free[:n-1]
	} else {
		if records.used == recordChunk*recordChunks {
			return prefixed.Errorf("gpu", "%d scopes open from C at once: no room for another", records.used)
		}
		place = records.used
		records.used++
		if c := &records.chunks[place/recordChunk]; c.Load() == nil {
			c.Store(new([recordChunk]atomic.Pointer[record]))
		}
	}
	records.seq++
	r.id = records.seq<<placeBits | place
	records.chunks[place/recordChunk].Load()[place%recordChunk].Store(r)
	return nil
}

// unregister makes r's id name nothing.
func unregister(r *record) {
	place := r.id & (1<<placeBits - 1)
	records.mu.Lock()
	defer records.mu.Unlock()
	records.chunks[place/recordChunk].Load()[place%recordChunk].Store(nil)
	records.free = append(records.free, place)
}

// lookup returns the open record with id, or nil.
func lookup(id int64) *record {
	if id <= 0 {
		return nil
	}
	place := id & (1<<placeBits - 1)
	c := records.chunks[place/recordChunk].Load()
	if c == nil {
		return nil
	}
	if r := c[place%recordChunk].Load(); r != nil && r.id == id {
		return r
	}
	return nil
}

// Begin opens a scope named name on device i inside the scope parent (0:
// the device's root), and returns its id, > 0. The parent is the calling
// thread's innermost scope on the device, which clib keeps per thread:
// scopes of different threads are siblings, each ending apart from the
// others. Where parent has ended, Begin fails with ErrEnded.
func Begin(i int, parent int64, name string) (int64, error) {
	return begin(i, parent, name, false)
}

// begin is Begin, for a scope whose memory can sleep where sleepable
// (gpu.Sleepable), which the pair cache keeps none of (sleep.go).
func begin(i int, parent int64, name string, sleepable bool) (int64, error) {
	d, err := deviceAt(i)
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.scopeOf(parent)
	if err != nil {
		return 0, err
	}
	var opts []gpu.ScopeOption
	if sleepable {
		opts = append(opts, gpu.Sleepable())
	}
	r, err := openRecord(d, p, name, opts...)
	if err != nil {
		return 0, err
	}
	r.sleepable = sleepable
	if err := register(r); err != nil {
		close(r.done)
		return 0, errors.Join(err, <-r.result)
	}
	p.children++
	d.opened = append(d.opened, r)
	if pc := cache(); pc != nil {
		pc.Begin(d.index, r.id, pairsWanted() && !r.sleeps())
	}
	return r.id, nil
}

// sleeps reports whether r's memory can sleep: r is sleepable, or begun
// inside a scope that is. The pair cache keeps none of such a scope's
// blocks: it would serve one while the scope sleeps, and keep a free that
// must fail then.
func (r *record) sleeps() bool {
	for s := r; s != nil; s = s.parent {
		if s.sleepable {
			return true
		}
	}
	return false
}

// openRecord opens a scope named name inside parent's, or d's root scope
// where parent is nil. Each is WithScope's, which ends when its function
// returns: the function waits for End. The root's context says what C's
// callers call gpu's calls (callerNames), for the errors of every scope
// inside it. Called with d.mu held.
func openRecord(d *device, parent *record, name string, opts ...gpu.ScopeOption) (*record, error) {
	r := &record{dev: d, parent: parent, done: make(chan struct{}), result: make(chan error, 1)}
	ctx := callers.With(context.Background(), callerNames)
	if parent != nil {
		ctx = parent.scope.Context()
	}
	if name != "" { // NULL from C: the scope is unnamed
		opts = append(opts, gpu.Name(name))
	}
	opened := make(chan *gpu.Scope, 1)
	go func() {
		r.result <- gpu.WithScope(ctx, d.gpu, func(s *gpu.Scope) error {
			opened <- s
			<-r.done
			return nil
		}, opts...)
	}()
	select {
	case r.scope = <-opened:
		return r, nil
	case err := <-r.result:
		return nil, prefixed.Wrap("gpu", err, "opening scope %q", name)
	}
}

// End ends the scope id begun by Begin. What libraries still hold in it
// passes to the enclosing scope, unless freeLive says the libraries are done
// with it: then it is freed. What it found still live is in Stats'
// "last_scope_end". A scope with scopes still open inside it does not end.
// A sleepable scope (BeginSleepable) in which libraries still hold buffers
// passes nothing on: it stays open, no thread's, until an End with
// freeLive (linger).
func End(id int64, freeLive bool) error {
	r := lookup(id)
	if r == nil {
		return prefixed.Wrap("gpu", errNoScope, "scope %d", id)
	}
	d := r.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if lookup(id) != r { // another End took it meanwhile
		return prefixed.Wrap("gpu", errNoScope, "scope %d", id)
	}
	if r.children > 0 {
		return prefixed.Errorf("gpu", "scope %q has %s open inside it: end them first", r.scope.Path(), units.Count(r.children, "scope"))
	}
	if r.sleepable && !freeLive {
		if n, bytes := r.held(); n > 0 {
			r.linger(n, bytes)
			return nil
		}
	}
	d.opened = slices.DeleteFunc(d.opened, func(o *record) bool { return o == r })
	path := r.scope.Path()
	n, bytes, err := r.endLive(freeLive)
	report := fmt.Sprintf("scope %q ended with no buffer live", path)
	err = errors.Join(err, r.endLocked(freeLive))
	if n > 0 {
		verb := "passed to " + fmt.Sprintf("%q", r.parent.scope.Path())
		if freeLive {
			verb = "freed"
		}
		report = fmt.Sprintf("scope %q ended with %s (%s) that libraries still held: %s", path, units.Count(n, "buffer"), units.FormatBytes(bytes), verb)
	}
	d.lastEnd.Store(&report)
	return err
}

// endLive stops allocations into r and its children on streams, and
// settles what libraries hold in them: passed to r's parent, or, where
// free or r has no parent, left for the scopes' ends to free. It returns
// how many buffers and bytes were live.
func (r *record) endLive(free bool) (n int, bytes int64, err error) {
	r.ending.Store(true)
	for _, c := range r.onStreams {
		c.ending.Store(true)
	}
	var errs []error
	r.pairsEnd(free || r.parent == nil)
	tbl.each(func(e *entry) bool {
		owner := e.rec
		if owner != r && owner.streamOf != r {
			return false
		}
		n++
		bytes += e.buf.Size()
		if free || r.parent == nil {
			return true // the scopes' ends free it
		}
		err := error(nil)
		if owner != r {
			err = owner.scope.Keep(e.buf) // to r, from its child on the stream
		}
		if err == nil {
			err = r.scope.Keep(e.buf)
		}
		if err != nil {
			errs = append(errs, prefixed.Wrap("gpu", err, "passing a buffer of %d bytes to %q", e.buf.Size(), r.parent.scope.Path()))
			return true // and the scopes' ends free it
		}
		e.rec = r.parent
		return false
	})
	return n, bytes, errors.Join(errs...)
}

// endLocked ends r's scope, after endLive, and forgets r. Called with
// r.dev.mu held.
func (r *record) endLocked(free bool) error {
	var err error
	if !r.ending.Load() {
		_, _, err = r.endLive(free)
	}
	for _, c := range r.onStreams {
		err = errors.Join(err, c.endLocked(free))
	}
	r.onStreams = nil
	if r.done != nil {
		close(r.done)
		err = errors.Join(err, <-r.result)
	} else {
		err = errors.Join(err, r.scope.Close())
	}
	if r.parent != nil && r.streamOf == nil {
		r.parent.children--
	}
	if r.id != 0 {
		unregister(r)
	}
	return err
}
