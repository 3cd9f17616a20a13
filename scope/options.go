package scope

// Options configure a scope when it opens.
type Options struct {
	Name    string  // for diagnostics; its path is its ancestors' names and its own, joined by "/"
	Reserve int64   // bytes to set aside for the scope and its children (0: none)
	Limit   int64   // most bytes live in the scope and its children (0: none)
	Zeroed  bool    // its allocations, and its children's, are to start zeroed (see Scope.Zeroed)
	Wait    bool    // its allocations, and its children's, wait for memory (see Scope.WaitsForMemory)
	Stream  uintptr // its allocations, and its children's, are ordered on this stream (0: the parent's, or the default stream)
}
