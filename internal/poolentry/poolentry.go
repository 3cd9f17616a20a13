// Package poolentry hands package scope the pool's allocation of a size
// already checked and rounded, so that a size on gpu's path is checked once,
// at gpu's boundary, and rounded once, by the scope that charges it, without
// another name in pool's public surface. Pool's own users call
// pool.AllocContext, which checks and rounds for them.
//
// Package pool sets AllocRounded in its init; scope names its type when it
// takes it, as readers of internal/registry do.
package poolentry

// AllocRounded is pool's allocation of rounded bytes for a request of size
// bytes, with size in (0, pool.MaxSize] and rounded = pool.Rounded(size):
// a func(*pool.Pool, context.Context, int64, int64, uintptr) (pool.Block,
// error) taking the pool, the context, rounded, size and the stream.
var AllocRounded any
