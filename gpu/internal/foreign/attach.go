package foreign

import (
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// Attach makes s a scope that libraries allocate in through its id
// (AllocIn), for the context form of gpu/capi. What they allocate belongs
// to s and ends with it.
func Attach(s *gpu.Scope) (int64, error) {
	if s.Device() == nil {
		return 0, prefixed.Kind("gpu", gpu.ErrScopeClosed, "nil or zero Scope")
	}
	r := &record{gdev: s.Device(), scope: s, name: s.Path()}
	if err := register(r); err != nil {
		return 0, err
	}
	return r.id, nil
}

// Detach stops the scope id of Attach from serving libraries and forgets
// what they still hold in it, which stays the scope's: its end frees it.
func Detach(id int64) error {
	r := lookup(id)
	if r == nil || r.dev != nil || r.ending.Swap(true) {
		return prefixed.Wrap("gpu", errNoScope, "scope %d (Detach)", id)
	}
	tbl.each(func(e *entry) bool { return e.rec == r })
	unregister(r)
	return nil
}
