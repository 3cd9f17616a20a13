package scope

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/pool"
)

// node is the state of one open scope at a time. Its identity (tree,
// parent, name, limit, flags, context) changes only when it is reused,
// under mu; everything that reads it through a Scope takes mu and checks
// the epoch first. Pointers between nodes (parent, owners, reservations)
// are used only while the node they point to is open.
type node struct {
	epoch            atomic.Uint64 // its use: odd while a scope is open in it, even from the moment it ends
	tree             *Tree
	id               uint64
	parent           *node
	name             string
	path             string // parent's path / name; "" for an unnamed scope until pathName makes it
	limit            int64
	zeroed           bool                        // allocations start zeroed (Options.Zeroed, here or above)
	waits            bool                        // allocations wait for memory (Options.Wait, here or above)
	evictable        bool                        // Options.Evictable: its uses are counted in lastUse
	opened           context.Context             // the context it was opened with
	allocCtx         allocContext                // opened, and the scope's path: what its allocations give the pool
	made             atomic.Pointer[madeContext] // opened with the scope in it, made on first use (Context)
	readers          atomic.Int32                // Context calls reading opened without mu: setUp waits for them
	done             <-chan struct{}
	stack            []uintptr
	region           *pool.Region // the reservation, if any
	reservationBlock *pool.Block  // the memory behind region, from the moment the pool returned it
	reserved         int64        // the bytes of reservationBlock, rounded as the pool charged them
	reserves         bool         // it or an ancestor has a reservation
	stream           uintptr      // the stream its allocations are ordered on
	dom              *domain      // the sleepable domain it is in (Options.Pool, here or above); nil: none
	pool             *pool.Pool   // where its memory comes from: its domain's pool, else the tree's
	// freesAside: its Frees give memory back outside mu (Scope.Free): the
	// tree scrubs, or it is in a domain, whose releases wait for a Sleep
	// or Wake (slot.releaseToDomain). Free tests it, one flag, instead of
	// the tree's Scrub and the slot's dom: an allocation's domain is its
	// owner's (allocLocked gives it n.dom, Keep moves it only to a parent
	// in the same domain), and Free reads the flag under the mu of the
	// owner that detach found, after Scope.lock saw the epoch that setUp
	// published it with, so that it says what slot.dom would. slot.dom
	// stays for readers without the owner's lock (RecordUse, the release
	// outside mu).
	freesAside bool

	live    atomic.Int64 // bytes live here and in descendants
	peak    atomic.Int64
	lastUse atomic.Uint64 // of an evictable scope: the tree's clock at its latest open, allocation or use
	// otherStreams lists the streams besides its own that work on an
	// evictable scope's allocations was queued on (noteStream), replaced
	// whole; nil for none.
	otherStreams atomic.Pointer[[]uintptr]

	siblings links[node] // in the parent's children or the tree's roots, under that one's mu

	mu        sync.Mutex // protects the fields below
	allocs    slotList
	children  scopeList
	spare     []*slot      // slots ready for allocations (see slotTable)
	resources resourceList // what else the scope owns (Scope.OwnResource), ended first
	spareRes  []*resource  // disowned records, for the next OwnResource
	sweepAt   int          // resources' length at which dormant records leave it (sweepResources)
	opening   int          // children opening with a reservation: they charge this scope
	releasing int          // Frees giving memory back outside mu: they may uncharge this scope
	left      sync.Cond    // on mu: a child left, an open or a release finished (End waits for the last)
}

// closed reports whether the scope open in n has ended.
func (n *node) closed() bool { return n.epoch.Load()&1 == 0 }

// handle returns a Scope naming n's current use.
func (n *node) handle() Scope {
	return Scope{n: n, epoch: n.epoch.Load(), zeroed: n.zeroed, waits: n.waits}
}

func (n *node) statsLocked() Stats {
	stats := Stats{Live: n.live.Load(), Peak: n.peak.Load(), Allocations: n.allocs.n, Children: n.children.n, Limit: n.limit}
	if n.region != nil {
		stats.Reserved = n.reserved
	}
	if n.evictable {
		stats.LastUse = n.lastUse.Load()
	}
	stats.Asleep = n.dom != nil && n.dom.asleep.Load()
	return stats
}

func (n *node) allocationsLocked() []allocationInfo {
	out := make([]allocationInfo, 0, n.allocs.n)
	for x := n.allocs.head; x != nil; x = x.next {
		sl := x.elem
		out = append(out, allocationInfo{Ref: sl.Ref(), Ptr: sl.ptr, Size: sl.size, Stack: sl.stack})
	}
	return out
}

func (n *node) allocLocked(size int64) (Ref, error) {
	if err := n.usable(); err != nil {
		return Ref{}, err
	}
	m := memory{size: size}
	for r := n; r != nil && n.reserves; r = r.parent {
		if r.dom != n.dom {
			break // a sleepable domain's memory is all its own pool's
		}
		if r.region == nil || r.stream != n.stream {
			continue // a reservation serves the scopes of its own stream
		}
		if ptr, rounded, ok := r.region.Alloc(size); ok {
			m.ptr, m.charged, m.region, m.reservedIn = ptr, rounded, r.region, r
			break
		}
	}
	if m.region != nil {
		// The memory is new to the scopes below the reservation that
		// served it: charge those.
		if err := n.charge(m.charged, m.reservedIn); err != nil {
			return Ref{}, errors.Join(err, m.region.Free(m.ptr), m.reservedIn.releaseReservationIfEmpty())
		}
	} else {
		// From the pool, the memory is new to every scope up to the root:
		// the pool checks and rounds the size and has them charged before
		// it takes memory. Short of memory, it may wait for other streams'
		// work; it stops when the scope's context is done.
		c := poolCharge{n: n}
		b, err := n.pool.AllocCharged(&n.allocCtx, size, n.stream, c.charge)
		if err != nil {
			if c.refused || errors.Is(err, errdefs.InvalidSize) {
				return Ref{}, err // a limit's refusal says which scope it was; a size is no scope's
			}
			return Ref{}, prefixed.Wrap("scope", err, "allocating in scope %q", n.pathName())
		}
		m.ptr, m.block, m.charged = b.Ptr(), b, c.charged
	}
	n.raisePeaks(m.reservedIn)
	sl := n.spareSlot()
	if sl.tree == nil {
		sl.tree = n.tree
	}
	sl.ptr, sl.size, sl.charged, sl.block, sl.region, sl.reservedIn, sl.dom = m.ptr, m.size, m.charged, m.block, m.region, m.reservedIn, n.dom
	if sl.stream.Load() != n.stream { // the slot's last use was most likely on this stream too
		sl.stream.Store(n.stream)
	}
	gen := nextGen(genOf(sl.word.Load()))
	if sl.touches.Load() != n.evictable {
		sl.touches.Store(n.evictable)
	}
	if n.evictable {
		n.lastUse.Store(n.tree.clock.Add(1))
	}
	sl.word.Store(packWord(gen, live))
	if sl.owner.Load() != n {
		sl.owner.Store(n)
	}
	n.allocs.push(sl, &sl.link)
	return Ref{slot: sl, gen: gen, ptr: sl.ptr}, nil
}

// poolCharge charges, from within the pool's allocation
// (pool.AllocCharged), the scope and every ancestor with the bytes the
// pool takes, before it takes them, and gives them back where it then
// fails.
type poolCharge struct {
	n       *node
	charged int64
	refused bool // a limit refused the charge
}

func (c *poolCharge) charge(bytes int64) error {
	if bytes < 0 {
		c.n.uncharge(-bytes, nil)
		c.charged = 0
		return nil
	}
	if err := c.n.charge(bytes, nil); err != nil {
		c.refused = true
		return err
	}
	c.charged = bytes
	return nil
}

// memory is what an allocation holds, before it has a slot.
type memory struct {
	ptr           uintptr
	size, charged int64
	block         pool.Block
	region        *pool.Region
	reservedIn    *node
}

// spareSlot returns a slot for a new allocation. Called with n.mu held.
func (n *node) spareSlot() *slot {
	if len(n.spare) == 0 {
		n.spare = n.tree.slots.takeBatch(n.spare)
	}
	sl := n.spare[len(n.spare)-1]
	n.spare = n.spare[:len(n.spare)-1]
	return sl
}

// recycle makes the slot of an ended allocation ready for another, keeping
// its word: a stale Ref keeps failing as it did until the slot serves
// again. Called with n.mu held, after its memory went back.
func (n *node) recycle(sl *slot) {
	sl.clear()
	n.spare = append(n.spare, sl)
}

// releaseReservationIfEmpty returns the scope's reservation to the pool once
// the scope has closed and nothing is allocated from it; exactly one caller
// does it. Nodes with a reservation are not reused (see Tree.free), so n
// is still this scope's.
func (n *node) releaseReservationIfEmpty() error {
	if n.region == nil || !n.closed() || !n.region.CloseIfEmpty() {
		return nil
	}
	n.uncharge(n.reserved, nil) // the bytes the pool charged for it
	if err := n.pool.Free(*n.reservationBlock); err != nil {
		return prefixed.Wrap("scope", err, "scope %q: releasing its reservation", n.pathName())
	}
	if n.tree.onRelease != nil {
		n.tree.onRelease()
	}
	return nil
}

// pathName returns the scope's path: its parent's path, a slash and its
// name. An unnamed scope's name (unnamed: the function that opened it, or
// "scope", and its ID) and so its path are made here when asked for, by
// an error or a snapshot, not at every open: opening an unnamed scope
// formats nothing.
func (n *node) pathName() string {
	if n.path != "" {
		return n.path
	}
	name := unnamed(n.id, n.stack)
	if n.parent != nil {
		return n.parent.pathName() + "/" + name
	}
	return name
}

// setUp makes n the node of a new scope of tree t, child of pn (nil: a root), and
// opens it. The node is on no list and no handle names its new use yet:
// handles to its old uses fail their epoch check and read nothing else, so
// it is set up without its lock. pn's lock is held, where pn is not nil.
// stack is where it was opened, when stacks are recorded.
func (n *node) setUp(ctx context.Context, pn *node, o *Options, stack []uintptr) {
	n.parent, n.name, n.limit, n.id = pn, o.Name, o.Limit, nextID.Add(1)
	n.zeroed = o.Zeroed || pn != nil && pn.zeroed
	n.waits = o.Wait || pn != nil && pn.waits
	n.evictable = o.Evictable
	if o.Evictable {
		n.lastUse.Store(n.tree.clock.Add(1))
	}
	if n.otherStreams.Load() != nil {
		n.otherStreams.Store(nil)
	}
	var dom *domain
	if o.Pool != nil {
		dom = &domain{pool: o.Pool, root: n}
	} else if pn != nil {
		dom = pn.dom
	}
	if dom != n.dom || n.pool == nil { // a node reused in the same domain (mostly none) has the rest; a new one, no pool
		n.joinDomain(dom)
	}
	// Only a reservation in its own domain serves a scope (allocLocked).
	n.reserves = o.Reserve > 0 || pn != nil && pn.reserves && pn.dom == dom
	n.stream = o.Stream
	if n.stream == 0 && pn != nil {
		n.stream = pn.stream
	}
	for n.readers.Load() != 0 {
		runtime.Gosched() // a Context of an old use reads opened, and finds its use ended
	}
	if n.made.Load() != nil {
		n.made.Store(nil) // an old use's, which holds on to its context
	}
	n.opened, n.done = ctx, ctx.Done()
	n.allocCtx = allocContext{Context: ctx, n: n}
	n.stack = stack
	n.path = o.Name // an unnamed scope's path is made when asked for: pathName
	if pn != nil && o.Name != "" {
		n.path = pn.pathName() + "/" + o.Name
	}
	if n.peak.Load() != 0 { // live is 0: everything was released
		n.peak.Store(0)
	}
	n.region, n.reservationBlock, n.reserved = nil, nil, 0
	n.epoch.Add(1) // odd: open
}

// joinDomain puts n in domain dom (nil: none) and sets what follows from
// it: where its memory comes from, and whether its Frees give memory back
// outside its lock.
func (n *node) joinDomain(dom *domain) {
	n.dom, n.pool, n.freesAside = dom, n.tree.pool, n.tree.scrub != nil
	if dom != nil {
		n.pool, n.freesAside = dom.pool, true
	}
}

// usable reports why the scope cannot allocate, if it cannot: asleep, or
// cancelled. Called with n.mu held, after Scope.lock found the scope
// open: it stays open while mu is held (end takes it), so that an
// allocation does not test that twice.
func (n *node) usable() error {
	if n.dom != nil && n.dom.asleep.Load() {
		return n.dom.asleepError(n)
	}
	select {
	case <-n.done:
		return prefixed.Wrap("scope", context.Cause(n.opened), "scope %q cancelled", n.pathName())
	default:
		return nil
	}
}

// charge counts size bytes against the scope and every ancestor, failing
// where a limit would be passed.
func (n *node) charge(size int64, stop *node) error {
	for up := n; up != stop; up = up.parent {
		v := up.live.Add(size)
		if up.limit > 0 && v > up.limit {
			for b := n; b != up.parent; b = b.parent {
				b.live.Add(-size)
			}
			return &LimitError{Path: up.pathName(), Scope: up.handle(), Limit: up.limit, Live: v - size, Requested: size}
		}
	}
	return nil
}

// raisePeaks raises the peaks of the scope and its ancestors up to stop to what
// is live now: once a charge's allocation holds, not before, since Peak is
// the most Live has been and a refused allocation never was.
func (n *node) raisePeaks(stop *node) {
	for up := n; up != stop; up = up.parent {
		v := up.live.Load()
		for p := up.peak.Load(); v > p && !up.peak.CompareAndSwap(p, v); p = up.peak.Load() {
		}
	}
}

// uncharge undoes charge(size, stop).
func (n *node) uncharge(size int64, stop *node) {
	for up := n; up != stop; up = up.parent {
		up.live.Add(-size)
	}
}

// detach checks that n owns the allocation r names, live, and takes it off
// the list, marking it with state to. A Free (to freed) takes an
// allocation asleep too: its memory is the domain's pool's, and goes back
// there untouched (slot.releaseToDomain). The state of the allocations on
// n's list changes only under n.mu, so that Close, Free, Keep, Sleep and
// Wake agree on who ends each one. Called with n.mu held.
func (n *node) detach(r Ref, to uint64) error {
	if r.slot == nil {
		return prefixed.Kind("scope", errdefs.WrongScope, "zero buffer")
	}
	if err := r.check(r.slot.word.Load()); err != nil && (err != errRefAsleep || to != freed) {
		return err
	}
	sl := r.slot
	switch o := sl.owner.Load(); {
	case o == nil:
		return prefixed.Kind("scope", errdefs.WrongScope, "it is being kept by a parent scope")
	case o.tree != n.tree:
		return prefixed.Kind("scope", errdefs.WrongScope, "it was allocated on another device")
	case o != n:
		return prefixed.Kind("scope", errdefs.WrongScope, "owned by another scope, freed through %q", n.pathName())
	}
	if to != live && !sl.mark(to) && !sl.markFrom(asleep, to) {
		panic("scope: bug: an allocation on a scope's list is neither live nor asleep")
	}
	n.allocs.remove(&sl.link)
	if to == live {
		sl.owner.Store(nil) // in transit: on no list
	}
	return nil
}

func (n *node) resourcesLocked() []resourceInfo {
	if n.resources.n == 0 {
		return nil
	}
	out := make([]resourceInfo, 0, n.resources.n)
	for x := n.resources.head; x != nil; x = x.next {
		r := x.elem
		if !r.owned() {
			continue // dormant: disowned, kept for reuse
		}
		out = append(out, resourceInfo{ID: r.idOf(), Kind: r.Kind, Bytes: r.Bytes, Stack: r.stack})
	}
	return out
}

// idOf returns the record's id, numbering it on the first call: a
// resource owned and disowned in a loop then takes no shared counter.
// Called with its scope's mu held.
func (r *resource) idOf() uint64 {
	if r.id == 0 {
		r.id = nextID.Add(1)
	}
	return r.id
}

func (n *node) removeChild(c *node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.children.remove(&c.siblings)
	n.left.Broadcast()
}

// openFinished records that a child counted in opening has opened or given
// back all it took: this scope's end no longer waits for it.
func (n *node) openFinished() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.opening--
	n.left.Broadcast()
}

// releaseFinished records that a Free counted in releasing has given its
// memory back: this scope's end no longer waits for it.
func (n *node) releaseFinished() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.releasing--
	n.left.Broadcast()
}

// inFlight reports whether work the scope began outside its lock, which
// still charges or uncharges its counters or its ancestors', has yet to
// finish: a child's open or end, or a Free's release. Called with n.mu held.
func (n *node) inFlight() bool {
	return n.children.n > 0 || n.opening > 0 || n.releasing > 0
}

// endContents ends what the scope holds: its children, its resources and
// its allocations, in that order, and returns their errors. Called with
// n.mu held; returns with it released.
func (n *node) endContents() []error {
	errs := n.closeChildren(nil)
	finals, errs := n.endResources(errs)
	errs = n.releaseAllocations(errs)
	return n.finalResources(finals, errs)
}

// closeChildren closes the scope's open children, last opened first, and
// waits until every child has left and every open and release in flight
// has finished (inFlight), appending their errors to errs. Called with n.mu
// held, which it releases while children close.
func (n *node) closeChildren(errs []error) []error {
	if !n.inFlight() {
		return errs
	}
	kids := handles(&n.children)
	n.mu.Unlock()
	for i := len(kids) - 1; i >= 0; i-- {
		if _, err := kids[i].End(); err != nil {
			errs = append(errs, err)
		}
	}
	// A child whose Close another goroutine began is still releasing
	// into this scope's counters, a child still opening or a Free still
	// releasing may yet charge or uncharge them: wait until each is done.
	n.mu.Lock()
	for n.inFlight() {
		n.left.Wait()
	}
	return errs
}

// endResources ends the resources the scope owns, last owned first, and
// returns those with a Final to call once the memory is released. Streams
// and the like end before the memory: their queued work may still use it.
// Called with n.mu held, which it releases while resources end.
func (n *node) endResources(errs []error) (finals []*resource, _ []error) {
	if n.resources.n == 0 {
		return nil, errs
	}
	// Take every owned record from its owner at once, under mu: no Disown
	// succeeds from now on. Dormant ones go back to the node.
	var last *links[resource] // the records to end, newest first through prev
	for x := n.resources.head; x != nil; {
		next := x.next
		r := x.elem
		for {
			if r.take(true) { // owned: the scope ends it
				x.prev, x.next = last, nil
				last = x
				break
			}
			if r.take(false) { // dormant: no Reown reaches it from now on
				x.prev, x.next = nil, nil
				n.recycleResource(r)
				break
			}
		}
		x = next
	}
	n.resources = resourceList{}
	n.mu.Unlock()
	for x := last; x != nil; x = x.prev {
		r := x.elem
		if r.End != nil {
			if err := r.End(); err != nil {
				errs = append(errs, prefixed.Wrap("scope", err, "scope %q: ending a resource", n.pathName()))
			}
		}
		if r.Final != nil {
			finals = append(finals, r)
		}
	}
	n.mu.Lock()
	return finals, errs
}

// releaseAllocations releases every allocation the scope owns, last
// allocated first. Each is marked released under the lock, then the list,
// taken whole, is released outside it: no Free or Keep can take a released
// allocation off it meanwhile. The slots stay with the node, for its next
// use. Called with n.mu held; returns with it released.
func (n *node) releaseAllocations(errs []error) []error {
	for x := n.allocs.tail; x != nil; x = x.prev {
		if !x.elem.mark(released) && !x.elem.markFrom(asleep, released) && stateOf(x.elem.word.Load()) != evicted {
			panic("scope: bug: an allocation on a scope's list is not live")
		}
	}
	last := n.allocs.tail
	n.allocs = slotList{}
	n.mu.Unlock()
	var ended []*slot
	for x := last; x != nil; {
		prev := x.prev
		x.prev, x.next = nil, nil
		sl := x.elem
		// Uncharged first, as Free does: the release wakes allocations
		// that wait for room (OnRelease), a limit's among them.
		n.uncharge(sl.charged, sl.reservedIn)
		err := sl.releaseMemory(n.tree, false)
		if err != nil {
			errs = append(errs, prefixed.Wrap("scope", err, "scope %q: releasing %d bytes at %#x", n.pathName(), sl.size, sl.ptr))
		}
		sl.clear()
		if ended == nil {
			n.mu.Lock()
			ended = n.spare
			n.spare = nil
			n.mu.Unlock()
		}
		ended = append(ended, sl)
		x = prev
	}
	if ended != nil {
		n.mu.Lock()
		n.spare = ended
		n.mu.Unlock()
	}
	if n.dom != nil && last != nil {
		if err := n.dom.giveBackAsleep(); err != nil {
			errs = append(errs, prefixed.Wrap("scope", err, "scope %q: giving back the memory it released asleep", n.pathName()))
		}
	}
	return errs
}

// finalResources calls Final of each of finals, in order, once the scope's
// memory is released.
func (n *node) finalResources(finals []*resource, errs []error) []error {
	for _, r := range finals {
		if err := r.Final(); err != nil {
			errs = append(errs, prefixed.Wrap("scope", err, "scope %q: ending a resource", n.pathName()))
		}
	}
	return errs
}
