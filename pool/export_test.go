package pool

import "context"

// Internals reached by the external tests.

func (p *Pool) CheckInvariants(mapped func(ptr uintptr, n int64) bool) error {
	return p.checkInvariants(mapped)
}

func (p *Pool) CheckTrimmed() error { return p.checkTrimmed() }

// ShardOf returns the index of the shard that b's block is cached in or
// was handed out by; -1 for none.
func (p *Pool) ShardOf(b Block) int {
	mu := b.blk.owner.Load()
	for i := range p.front.shards {
		if &p.front.shards[i].mu == mu {
			return i
		}
	}
	return -1
}

// AllocOn allocates size bytes for use on stream, as AllocContext does
// with a context that never ends.
func (p *Pool) AllocOn(size int64, stream uintptr) (Block, error) {
	return p.AllocContext(context.Background(), size, stream)
}

// IsZero reports whether b is the zero Block.
func (b Block) IsZero() bool { return b.blk == nil }

// Used returns the bytes allocated from the region.
func (r *Region) Used() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used
}

// BinCapacity sums the capacity, in blocks, of the bins of every shard's
// table, those in use and those a drain kept for reuse.
func (p *Pool) BinCapacity() int {
	var n int
	for i := range p.front.shards {
		t := &p.front.shards[i].bins
		t.each(func(b *bin) { n += cap(b.blocks) })
		for _, b := range t.spare {
			n += cap(b.blocks)
		}
	}
	return n
}
