package pool

import "sync"

// cacheKey names a front-cache bin: blocks freed on one stream for one
// rounded size.
type cacheKey struct {
	stream uintptr
	size   int64
}

// shard is one front cache. Each P tends to get the same shard back (see
// Pool.getShard), so a hit takes an uncontended lock.
type shard struct {
	mu     sync.Mutex // protects the fields below
	bins   map[cacheKey][]*block
	bytes  int64 // bytes of the blocks in bins
	allocs int64 // allocations served from this shard
	frees  int64 // frees into this shard
	_      [64]byte
}

func (s *shard) pop(k cacheKey) *block {
	bin := s.bins[k]
	if len(bin) == 0 {
		return nil
	}
	b := bin[len(bin)-1]
	bin[len(bin)-1] = nil
	s.bins[k] = bin[:len(bin)-1]
	s.bytes -= b.size
	s.allocs++
	return b
}

func (s *shard) push(k cacheKey, b *block) {
	s.bins[k] = append(s.bins[k], b)
	s.bytes += b.size
	s.frees++
}

// getShard returns the shard of the calling P: sync.Pool keeps one per P,
// and a shard it drops is only a pointer into p.shards, so nothing is lost.
func (p *Pool) getShard() *shard {
	if s, ok := p.shardOfP.Get().(*shard); ok {
		return s
	}
	i := p.nextShard.Add(1)
	return &p.shards[int(i)%len(p.shards)]
}

func (p *Pool) putShard(s *shard) { p.shardOfP.Put(s) }

// drainShards moves every front-cached block back to its arena, where it can
// coalesce with its neighbours. Called with p.mu held.
func (p *Pool) drainShards() {
	for i := range p.shards {
		s := &p.shards[i]
		s.mu.Lock()
		for _, bin := range s.bins {
			for _, b := range bin {
				b.seg.arena.release(b)
			}
		}
		clear(s.bins)
		s.bytes = 0
		s.mu.Unlock()
	}
}
