package pool

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
