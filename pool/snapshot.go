package pool

import "slices"

// Snapshot is the layout of a pool's memory at one moment: every segment
// with the blocks that tile it, and the handles held unmapped. It marshals
// to JSON. The sizes of the blocks that are not unmapped, plus IdleBytes,
// add up to Stats.Reserved.
type Snapshot struct {
	Stats     Stats         `json:"stats"`
	Segments  []SegmentInfo `json:"segments"`
	IdleBytes int64         `json:"idle_bytes"` // handles created and mapped nowhere
}

// SegmentInfo is one segment: a classic one allocated whole, or the address
// range of an expandable arena.
type SegmentInfo struct {
	Stream     uintptr     `json:"stream"`
	Small      bool        `json:"small"` // the arena of blocks up to 1 MiB
	Expandable bool        `json:"expandable"`
	Address    uintptr     `json:"address"`
	Size       int64       `json:"size"`
	Blocks     []BlockInfo `json:"blocks"`
}

// BlockInfo is a range of a segment.
type BlockInfo struct {
	Address   uintptr `json:"address"`
	Size      int64   `json:"size"`
	State     string  `json:"state"`               // allocated, cached, free, pending, unmapped or moving
	Requested int64   `json:"requested,omitempty"` // bytes asked for, where allocated
}

// The states of BlockInfo.State.
const (
	BlockAllocated = "allocated" // handed out
	BlockCached    = "cached"    // freed, kept in the front cache for its size
	BlockFree      = "free"      // freed, in its arena
	BlockPending   = "pending"   // freed, waiting for another stream's work
	BlockUnmapped  = "unmapped"  // address space with no memory behind it
	BlockMoving    = "moving"    // being unmapped or released right now
)

// snapshotOf returns the layout of the memory of arenas and of the idle
// handles, with the counters st. Called with the arenas' guard and every
// shard's lock held.
func snapshotOf(st Stats, arenas *arenaSet, idle []*handle) Snapshot {
	snap := Snapshot{Stats: st}
	for _, hd := range idle {
		snap.IdleBytes += hd.size
	}
	for _, k := range arenas.sortedKeys() {
		a := arenas.byKey[k]
		for _, s := range a.segments {
			si := SegmentInfo{Stream: k.stream, Small: k.small, Expandable: a.expandable, Address: s.ptr, Size: s.size}
			for b := s.first; b != nil; b = b.next {
				bi := BlockInfo{Address: b.ptr, Size: b.size, State: stateName(b)}
				if bi.State == BlockAllocated {
					bi.Requested = b.requested
				}
				si.Blocks = append(si.Blocks, bi)
			}
			snap.Segments = append(snap.Segments, si)
		}
	}
	slices.SortStableFunc(snap.Segments, func(x, y SegmentInfo) int {
		switch {
		case x.Stream != y.Stream || x.Small != y.Small:
			return 0 // arena order, above
		case x.Address < y.Address:
			return -1
		case x.Address > y.Address:
			return 1
		}
		return 0
	})
	return snap
}

// stateName names a block's state for a Snapshot. Called with the pool's
// mu and every shard's mu held.
func stateName(b *block) string {
	switch b.state {
	case stateInUse:
		if b.live != 0 {
			return BlockAllocated
		}
		return BlockCached
	case stateFree:
		return BlockFree
	case statePending:
		return BlockPending
	case stateHole:
		return BlockUnmapped
	default:
		return BlockMoving
	}
}
