package pool

// Stats is a snapshot of a pool's memory. Byte counts are of rounded blocks
// except Requested, which counts the sizes callers asked for.
type Stats struct {
	// Now.
	Allocated    int64 // bytes in live blocks
	Requested    int64 // bytes callers asked for, over live blocks
	Reserved     int64 // bytes held from the source (mapped or idle pages, segments)
	Cached       int64 // Reserved - Allocated: free bytes kept for reuse
	ActiveBlocks int64 // live blocks
	CachedBlocks int64 // freed blocks the pool keeps: in the front cache and free in arenas
	Segments     int64 // segments (expandable arenas count one each)

	// Peaks, since the pool was made or ResetPeaks was called. PeakReserved
	// is exact. PeakAllocated is exact while allocations come from one
	// goroutine, also across garbage collections; under concurrent
	// allocation, or for a goroutine the scheduler moves to another P, it
	// may fall short of the true peak, because each P counts its own bytes
	// (see docs/pool.md).
	PeakAllocated    int64
	PeakReserved     int64
	PeakActiveBlocks int64 // the most live blocks at once, exact as PeakAllocated is

	// Totals, since the pool was made.
	Allocs         int64 // successful allocations
	Frees          int64 // frees
	AllocatedBytes int64 // bytes of all allocations, rounded as blocks are
	FreedBytes     int64 // bytes of all frees, likewise
	CacheHits      int64 // allocations served by the front cache
	SourceAllocs   int64 // calls that obtained new memory: segment allocations or page creations
	SourceFrees    int64 // calls that returned memory: segment frees or handle releases
	Growths        int64 // times an expandable arena mapped more memory
	PagesMapped    int64 // granules mapped into an arena (new or moved)
	PagesMoved     int64 // granules unmapped from under free blocks to be mapped elsewhere
	OOMs           int64 // allocations that failed with ErrOutOfMemory
	Retries        int64 // allocations retried after the cache was released
}
