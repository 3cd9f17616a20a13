package scope

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
	// Into, if not nil, receives the Owned under the scope's lock, before
	// End or Final can run: they may read it without a lock of their own.
	Into *Owned
}

// Owned names a resource a scope owns, for Disown.
type Owned struct {
	r     *resource
	gen   uint64 // r's use that o names: a record is reused once disowned
	scope Scope
}

type resource struct {
	Resource
	id    uint64
	stack []uintptr
	gen   uint64          // counts its uses, under its scope's mu: it stays with its node
	owned bool            // on its scope's list, under the scope's mu
	link  links[resource] // on its scope's list
}

// Disown takes the resource o names from its scope, which will not end it:
// its owner ends it now. It reports false where the scope has ended, or
// ends it now, or o was disowned already: the scope ends it then.
func (o Owned) Disown() bool {
	if o.r == nil || !o.scope.lock() {
		return false
	}
	n := o.scope.n
	defer n.mu.Unlock()
	r := o.r
	if r.gen != o.gen || !r.owned {
		return false
	}
	r.owned = false
	n.resources.remove(&r.link)
	n.recycleResource(r)
	return true
}

// maxSpareResources bounds the disowned records a node keeps for reuse.
const maxSpareResources = 64

// newResource returns a record of r for its scope's list: a disowned one
// the node kept, or a new one. Reusing records keeps a resource owned and
// disowned in a loop (page-locked memory's AllocHost and Free) free of
// allocations. Called with n.mu held.
func (n *node) newResource(r Resource) *resource {
	var res *resource
	if k := len(n.spareRes); k > 0 {
		res = n.spareRes[k-1]
		n.spareRes[k-1] = nil
		n.spareRes = n.spareRes[:k-1]
	} else {
		res = &resource{}
	}
	*res = resource{Resource: r, id: nextID.Add(1), gen: res.gen + 1, owned: true}
	return res
}

// recycleResource keeps a record its owner disowned for newResource; the
// Owned that named it fails from then on, by its gen. Called with n.mu held.
func (n *node) recycleResource(r *resource) {
	if len(n.spareRes) < maxSpareResources {
		r.Resource = Resource{} // drops the owner's functions
		n.spareRes = append(n.spareRes, r)
	}
}
