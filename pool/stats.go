package pool

// Stats is a snapshot of a pool's memory. Byte counts are of rounded blocks
// except Requested, which counts the sizes callers asked for.
type Stats struct {
	// Now.
	Allocated    int64 `json:"allocated"`     // bytes in live blocks
	Requested    int64 `json:"requested"`     // bytes callers asked for, over live blocks
	Reserved     int64 `json:"reserved"`      // bytes held from the source (mapped or idle pages, segments)
	Cached       int64 `json:"cached"`        // Reserved - Allocated: free bytes kept for reuse
	ActiveBlocks int64 `json:"active_blocks"` // live blocks
	CachedBlocks int64 `json:"cached_blocks"` // freed blocks the pool keeps: in the front cache and free in arenas
	Segments     int64 `json:"segments"`      // segments holding memory (an expandable arena's reserved address space counts once memory is mapped in it)

	// Peaks, since the pool was made or ResetPeaks was called. PeakReserved
	// is exact. PeakAllocated is exact while allocations come from one
	// goroutine, whichever shard serves it, also across garbage
	// collections; under concurrent allocation it may fall short of the
	// true peak, because each shard counts its own bytes (see
	// frontCache.notePeak and docs/pool.md).
	PeakAllocated    int64 `json:"peak_allocated"`
	PeakReserved     int64 `json:"peak_reserved"`
	PeakActiveBlocks int64 `json:"peak_active_blocks"` // the most live blocks at once, exact as PeakAllocated is

	// Totals, since the pool was made.
	Allocs         int64 `json:"allocs"`          // successful allocations
	Frees          int64 `json:"frees"`           // frees
	AllocatedBytes int64 `json:"allocated_bytes"` // bytes of all allocations, rounded as blocks are
	FreedBytes     int64 `json:"freed_bytes"`     // bytes of all frees, likewise
	CacheHits      int64 `json:"cache_hits"`      // allocations served by the front cache
	SourceAllocs   int64 `json:"source_allocs"`   // calls that obtained new memory: segment allocations or page creations
	SourceFrees    int64 `json:"source_frees"`    // calls that returned memory: segment frees or handle releases
	Growths        int64 `json:"growths"`         // times an expandable arena mapped more memory
	PagesMapped    int64 `json:"pages_mapped"`    // granules mapped into an arena (new or moved)
	PagesMoved     int64 `json:"pages_moved"`     // granules unmapped from under free blocks to be mapped elsewhere
	OOMs           int64 `json:"ooms"`            // allocations that failed with ErrOutOfMemory
	Retries        int64 `json:"retries"`         // allocations retried after the cache was released
}
