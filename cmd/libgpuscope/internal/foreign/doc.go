// Package foreign serves memory to programs that are not Go through
// libgpuscope: C libraries that allocate through function pointers
// (PyTorch's pluggable allocator, CuPy's). It is the logic behind the C
// entry points of package clib, in pure Go so that it is tested without
// cgo.
//
// A call finds its device (GPU i opened on first use) and its scope, and
// allocates a gpu.Buffer there: the same pool, cap, Summary and leak check
// as Go code. The scope is the one the call names: clib keeps each
// thread's, and each bound stream's, on the C side, where the thread is
// known, and names the root (0) where there is none; no scope is current
// for the process. What a library allocated belongs to the scope it was
// allocated in; a scope's end passes what the library still holds to the
// enclosing scope, or frees it where the caller says the library is done.
//
// A library frees by address. The table from address to Buffer (table.go)
// is an open-addressed hash in shards, filled in place: no allocation per
// call, nothing for the garbage collector to trace per allocation beyond
// the Buffer itself. A pair that a library repeats, freeing a block and
// allocating its size again, does not reach this package: clib's
// pair cache serves it on the C side (paircache.go says how the figures stay
// exact).
package foreign
