package foreign

import (
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// Attach makes s a scope that libraries allocate in through its id
// (AllocIn), for the context form of gpu/capi, for as long as s is open:
// what they allocate belongs to s and ends with it at the latest. Its
// place among the records is taken back once s has ended (sweep).
func Attach(s *gpu.Scope) (int64, error) {
	if s.Device() == nil {
		return 0, prefixed.Kind("gpu", gpu.ErrScopeClosed, "nil or zero Scope")
	}
	r := &record{gdev: s.Device(), scope: s}
	if err := register(r); err != nil {
		return 0, err
	}
	return r.id, nil
}

// sweepLocked takes back the places of the records of Go scopes that have
// ended, or can allocate no more: their ids name nothing from now on.
// What libraries still hold in them stays in the table, and its frees find
// the scope through it. Called with records.mu held, when the places run
// out of a chunk, so that a program that hands out a scope per request
// keeps a bounded set.
func sweepLocked() {
	for c := range records.chunks {
		chunk := records.chunks[c].Load()
		if chunk == nil {
			break
		}
		for i := range chunk {
			r := chunk[i].Load()
			if r == nil || r.dev != nil || r.scope.Context().Err() == nil {
				continue
			}
			r.ending.Store(true)
			chunk[i].Store(nil)
			records.free = append(records.free, int64(c*recordChunk+i))
		}
	}
}
