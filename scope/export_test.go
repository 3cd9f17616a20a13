package scope

import (
	"context"

	"github.com/gpuscope/gpuscope/pool"
)

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
	for x := range t.free.All() {
		twice = twice || seen[x]
		seen[x] = true
	}
	return t.free.Len(), twice
}

// Gen returns the generation: which use of its slot r names.
func (r Ref) Gen() uint64 { return r.gen }

// Pool returns the tree's pool.
func (t *Tree) Pool() *pool.Pool { return t.pool }

// FromContext returns the scope that ctx was made by ([Scope.Context]).
func FromContext(ctx context.Context) (Scope, bool) {
	e, ok := ctx.Value(scopeKey{}).(*ctxScope)
	if !ok {
		return Scope{}, false
	}
	return e.s, true
}

// ID returns the scope's ID; 0 once it ended.
func (s Scope) ID() uint64 {
	if !s.lock() {
		return 0
	}
	defer s.n.mu.Unlock()
	return s.n.id
}

// IsZero reports whether r is the zero Ref.
func (r Ref) IsZero() bool { return r.slot == nil }

// Owner returns the scope that owns the allocation now; the zero Scope
// where it has ended.
func (r Ref) Owner() Scope {
	if r.slot == nil || r.err() != nil {
		return Scope{}
	}
	if o := r.slot.owner.Load(); o != nil {
		return o.handle()
	}
	return Scope{}
}

// Use is WithPtr at offset 0.
func (r Ref) Use(fn func(ptr uintptr) error) error {
	return r.WithPtr(0, func(p, _ uintptr) error { return fn(p) })
}

// ReplaceNewRegion makes reservations' regions with fn instead of
// pool.NewRegion until restore is called: a test fails that step, or acts
// between the pool's allocation and the region, when the open holds no lock.
func ReplaceNewRegion(fn func(ptr uintptr, size int64) (*pool.Region, error)) (restore func()) {
	newRegion = fn
	return func() { newRegion = pool.NewRegion }
}

// Close is End without the path, for the tests' defers.
func (s Scope) Close() error {
	_, err := s.End()
	return err
}

// Allocations returns the live allocations the scope owns, oldest first.
func (s Scope) Allocations() []allocationInfo {
	info, _ := s.Info()
	return info.Allocations
}

// Children returns the open child scopes, oldest first.
func (s Scope) Children() []Scope { return s.children() }

// HoldLock locks the scope's node, as an allocation waiting for memory
// holds it, until unlock is called.
func (s Scope) HoldLock() (unlock func()) {
	s.n.mu.Lock()
	return s.n.mu.Unlock
}

// SetRecordingUse makes RecordUse of t's allocations call f after taking
// the allocation, before noting the stream; nil: nothing. Set it while no
// RecordUse runs.
func (t *Tree) SetRecordingUse(f func()) { t.recordingUse = f }
