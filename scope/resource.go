package scope

import "sync/atomic"

// Resource is something other than memory that a scope owns: a stream, an
// event, a loaded module, page-locked host memory.
type Resource struct {
	Kind  string       // what it is, for leak reports: "stream", "module"; "" for none
	Bytes int64        // its size, where it has one
	End   func() error // if not nil, called as the scope ends, before its memory is released
	Final func() error // if not nil, called once the scope's memory is released
	// Allocation makes owning fail, as Alloc does, once the scope's
	// context is done, with its cause (page-locked memory).
	Allocation bool
}

// Owned names a resource a scope owns, for Disown.
type Owned struct {
	r   *resource
	gen uint64 // r's use that o names: a record is reused once disowned
}

type resource struct {
	Resource
	id    uint64 // 0 until a listing reads it (idOf): most records are never listed
	stack []uintptr
	// state is the record's use (gen) and whether it is owned, as
	// gen<<1|1: Disown and the scope's end each clear the owned bit with
	// one compare-and-swap, and whichever does ends the resource. A record
	// disowned stays on its scope's list, dormant, for the next
	// OwnResource to reuse in place (see newResource); listings and the
	// end skip it.
	state atomic.Uint64
	node  *node           // the node whose list and spares it belongs to, for life
	done  <-chan struct{} // the node's context's Done when the record was owned: Reown reads it
	link  links[resource] // on its scope's list, under the scope's mu
}

// owned reports whether the record is owned, not dormant.
func (r *resource) owned() bool { return r.state.Load()&1 == 1 }

// Disown takes the resource o names from its scope, which will not end it:
// its owner ends it now. It reports false where the scope has ended, or
// ends it now, or o was disowned already: the scope ends it then. It takes
// no lock: a resource owned and disowned in a loop (page-locked memory's
// AllocHost and Free) costs its scope one lock, in OwnResource.
func (o Owned) Disown() bool {
	return o.r != nil && o.r.state.CompareAndSwap(o.gen<<1|1, o.gen<<1)
}

// Reown owns again, in s, the resource that o named when its owner
// disowned it, reusing its record without taking the scope's lock: a
// resource disowned and owned again in a loop (page-locked memory's Free
// and the next AllocHost of its block) then costs one compare-and-swap
// each way. It reports false, changing nothing, where the record is not
// s's, or serves another resource by now, or s has ended, or its context
// is done (OwnResource says why), or s records stacks (the record keeps
// its old stack): the caller owns through OwnResource then. The record
// keeps its Resource, and its place on the list for the order of the end.
func (o Owned) Reown(s Scope) (Owned, bool) {
	r := o.r
	if r == nil || s.n == nil || r.node != s.n || s.n.tree.recordStacks.Load() || s.Closed() {
		return Owned{}, false
	}
	g := o.gen + 1
	if !r.state.CompareAndSwap(o.gen<<1, g<<1|1) {
		return Owned{}, false
	}
	// Owned again, the record is s's until s's end takes it: its fields
	// stay as they are.
	select {
	case <-r.done:
		if r.state.CompareAndSwap(g<<1|1, g<<1) {
			return Owned{}, false // dormant again
		}
		// The scope's end took it meanwhile, and ends it: as an allocation
		// made just before the end.
	default:
	}
	return Owned{r: r, gen: g}, true
}

// A record's state moves on, gen first, for every use: owned (gen<<1|1),
// then dormant (gen<<1) once disowned, where Reown may take it back; a
// record the end or a sweep takes, or newResource reuses, starts a new gen,
// so that no Owned of an older one reaches it.
func nextUse(state uint64, owned bool) uint64 {
	if owned {
		return (state>>1+1)<<1 | 1
	}
	return (state>>1 + 1) << 1
}

// maxSpareResources bounds the disowned records a node keeps for reuse.
const maxSpareResources = 64

// newResource puts a record of r on n's list and returns it: the newest
// record on the list where it is dormant, else one the node kept, else a
// new one. Reusing records keeps a resource owned and disowned in a loop
// free of allocations, and reusing the newest in place keeps the list
// newest last without a walk. Called with n.mu held.
func (n *node) newResource(r Resource) *resource {
	if t := n.resources.tail; t != nil {
		res := t.elem
		if g := res.state.Load(); g&1 == 0 && res.state.CompareAndSwap(g, nextUse(g, true)) {
			res.Resource, res.id, res.stack, res.done = r, 0, nil, n.done
			return res
		}
	}
	if n.resources.n >= n.sweepAt {
		n.sweepResources()
	}
	var res *resource
	if k := len(n.spareRes); k > 0 {
		res = n.spareRes[k-1]
		n.spareRes[k-1] = nil
		n.spareRes = n.spareRes[:k-1]
	} else {
		res = &resource{node: n}
	}
	res.Resource, res.id, res.stack, res.done = r, 0, nil, n.done // its id is given when read
	res.state.Store(nextUse(res.state.Load(), true))              // off every list: no Reown reaches it
	n.resources.push(res, &res.link)
	return res
}

// sweepResources takes the dormant records off n's list, for reuse, so
// that a scope whose resources are disowned out of order keeps a list
// about as long as what it owns; the next sweep comes when the list has
// doubled. Called with n.mu held.
func (n *node) sweepResources() {
	for x := n.resources.head; x != nil; {
		next := x.next
		if r := x.elem; r.take(false) {
			n.resources.remove(x)
			n.recycleResource(r)
		}
		x = next
	}
	n.sweepAt = 2*n.resources.n + minSweep
}

// take moves the record on to a new gen, from owned where owned, else
// from dormant, and reports whether it did: a record Disown or Reown
// changed meanwhile is left as it is.
func (r *resource) take(owned bool) bool {
	g := r.state.Load()
	return g&1 == 1 == owned && r.state.CompareAndSwap(g, nextUse(g, false))
}

// minSweep is the list length below which dormant records are left alone.
const minSweep = 16

// recycleResource keeps a dormant record, off its list, for newResource;
// the Owned that named it fails from then on, by its gen. Called with n.mu
// held.
func (n *node) recycleResource(r *resource) {
	if len(n.spareRes) < maxSpareResources {
		r.Resource = Resource{} // drops the owner's functions
		n.spareRes = append(n.spareRes, r)
	}
}
