// Package clib is libgpuscope's C side: the entry points that gpuscope.h
// declares and the shared library exports (entry.c), each a call into
// package foreign, the cache of freed blocks they keep on the C side of
// the crossing (paircache.c), and what they keep per thread (scopes.c):
// each thread's scopes, the streams bound to scopes, the thread's last
// failure, and whether the process is a fork's child, which no entry point
// serves. cmd/libgpuscope links it into
// the library, and internal/cthreads into its tests; a Go program that
// imports gpu/capi links none of it.
package clib
