package scope

// Resource is something other than memory that a scope owns: a stream, an
// event, a loaded module, page-locked host memory.
type Resource struct {
	Kind  string       // what it is, for leak reports: "stream", "module"; "" for none
	Bytes int64        // its size, where it has one
	End   func() error // if not nil, called as the scope ends, before its memory is released
	Final func() error // if not nil, called once the scope's memory is released
}

// Owned names a resource a scope owns, for Disown.
type Owned struct {
	r     *resource
	scope Scope
}

type resource struct {
	Resource
	id    uint64
	stack []uintptr
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
	if !r.owned {
		return false
	}
	r.owned = false
	n.resources.remove(&r.link)
	return true
}
