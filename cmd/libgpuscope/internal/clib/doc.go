// Package clib is libgpuscope's C side: the entry points that gpuscope.h
// declares and the shared library exports (entry.c), each a call into
// package foreign, and the cache of freed blocks they keep on
// the C side of the crossing (paircache.c). cmd/libgpuscope links it into
// the library, and internal/cthreads into its tests; a Go program that
// imports gpu/capi links none of it.
package clib
