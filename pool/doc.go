// Package pool is a caching allocator for device memory, of the class of
// PyTorch's CUDA caching allocator, in pure Go.
//
// A [Pool] takes raw memory from a [Source] (a device driver, or the
// simulated source of package internal/sim) and hands out [Block]s. Freed blocks
// are kept and reused without calling the source again: a cached allocation
// and free never leave Go.
//
// How it works, in layers:
//
//   - A front cache, in shards that goroutines find from their stacks,
//     keeps freed blocks by (stream, rounded size). A hit costs two short
//     uncontended critical sections.
//   - Behind it, one arena per stream and size class (small: up to 1 MiB,
//     large: the rest) does best-fit allocation with splitting and coalescing
//     of free neighbours.
//   - Arenas grow from the source. Where the source can reserve address space
//     and map pages into it ([PageMapper]), an arena is one expandable segment
//     and physical pages move to where they are needed: whole pages under
//     free blocks are unmapped and mapped again at the growing end before a
//     new page is created. Otherwise segments are allocated whole.
//   - When the source is out of memory, the pool releases what it caches and
//     retries once before it fails with an [*OOMError].
//
// Every block's address is a multiple of [Alignment] (256 bytes, as
// cudaMalloc guarantees): blocks are multiples of 512 bytes from the start of
// a segment, address reservations are aligned to the page granularity, and a
// source allocation that is not aligned is refused with an error.
//
// All methods of a Pool are safe for concurrent use. The design is in
// docs/pool.md, the measured results in docs/measurements.md.
package pool
