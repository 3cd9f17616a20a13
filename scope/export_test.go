package scope

// Internals reached by the external tests.

// SetGeneration makes the slot of r's allocation believe it is at
// generation g: a test reaches the end of the 48 bits without 2^48 uses.
// The allocation must be live.
func SetGeneration(r Ref, g uint64) Ref {
	w := r.slot.word.Load()
	r.slot.word.Store(packWord(g, stateOf(w)) | w&usersMask)
	r.gen = g
	return r
}

// MaxGeneration is the last generation before the count wraps.
const MaxGeneration = genMask

// FreeNodes returns how many ended scopes' nodes wait for reuse, and
// whether any waits twice.
func (t *Tree) FreeNodes() (n int, twice bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[*node]bool{}
	for _, x := range t.free {
		twice = twice || seen[x]
		seen[x] = true
	}
	return len(t.free), twice
}

// Gen returns the generation: which use of its slot r names.
func (r Ref) Gen() uint64 { return r.gen }
