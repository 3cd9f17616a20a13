package scope

import (
	"sync"
)

// slotTable holds the tree's allocation slots. Slots are made in chunks
// and live as long as the tree, since a stale Ref may point to any of them;
// an ended allocation's slot is reused, with the next generation. Scopes
// take slots in batches and keep spares, so that the table's lock is rare.
type slotTable struct {
	mu    sync.Mutex // protects the fields below
	spare []*slot
	chunk []slot // what is left of the last chunk made
	made  int    // slots made, in all
}

const (
	// slotBatch is how many slots a scope takes from the table at once.
	slotBatch = 32
	// maxChunk is the most slots the table makes at once: chunks grow with
	// the table, from one batch up to this.
	maxChunk = 4096
)

// takeBatch appends up to slotBatch slots to dst.
func (t *slotTable) takeBatch(dst []*slot) []*slot {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := min(len(t.spare), slotBatch); n > 0 {
		dst = append(dst, t.spare[len(t.spare)-n:]...)
		clear(t.spare[len(t.spare)-n:])
		t.spare = t.spare[:len(t.spare)-n]
		return dst
	}
	if len(t.chunk) == 0 {
		t.chunk = make([]slot, min(max(slotBatch, t.made), maxChunk))
		t.made += len(t.chunk)
	}
	n := min(len(t.chunk), slotBatch)
	for i := range n {
		dst = append(dst, &t.chunk[i])
	}
	t.chunk = t.chunk[n:]
	return dst
}

// give returns slots to the table.
func (t *slotTable) give(slots []*slot) {
	if len(slots) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.spare = append(t.spare, slots...)
}
