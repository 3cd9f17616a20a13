package scope

// Stats describes a scope.
type Stats struct {
	Live        int64 // bytes live in the scope and its children
	Peak        int64 // the most Live has been
	Allocations int   // live allocations the scope owns itself
	Children    int   // open child scopes
	Reserved    int64 // bytes of its reservation
	Limit       int64 // its limit (0: none)
	// LastUse orders evictable scopes (Options.Evictable) by recency: the
	// tree's count of their opens, allocations and uses (WithPtr,
	// WithPtr) at the scope's latest. 0 for others.
	LastUse uint64
	// Asleep: the memory of the sleepable scope it is (or is inside) is
	// asleep (Scope.Sleep): its allocations are unusable until Wake.
	Asleep bool
}

// Info is a scope as one look saw it.
type Info struct {
	Scope       Scope
	ID          uint64
	Parent      uint64 // the parent's ID; 0 for a root
	Name        string
	Path        string
	Stack       []uintptr // where it was opened, when stacks were recorded
	Stats       Stats
	Allocations []allocationInfo // the live allocations it owns, oldest first
	Resources   []resourceInfo   // what else it owns, oldest first
}

// allocationInfo is an allocation as Allocations saw it.
type allocationInfo struct {
	Ref   Ref
	Ptr   uintptr
	Size  int64
	Stack []uintptr // where it was allocated, when stacks were recorded
}

// resourceInfo is a resource as Info saw it.
type resourceInfo struct {
	ID    uint64 // no other resource of the process has it
	Kind  string
	Bytes int64
	Stack []uintptr // where it was made, when stacks were recorded
}
