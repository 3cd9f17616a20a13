// Command libgpuscope is gpuscope's C allocator as a shared library, for
// PyTorch, CuPy and any C caller:
//
//	go build -buildmode=c-shared -o libgpuscope.so ./cmd/libgpuscope
//
// serves the host-memory device (device 0, for tests and CI); with
// -tags cuda, GPU i through gpu.Open(i), opened on first use. gpuscope.h
// declares what it exports, and exports.so keeps the library's dynamic
// symbols to those (TestExportsMatchTheHeader). The entry points and what
// they keep live in internal/clib, over the logic of internal/foreign. Not on linux/arm64: Go
// links there with gold where the system's ld is older than 2.36, and gold
// takes no version script as an input file, so the library exports cgo's
// and the runtime's helpers beside gpuscope.h's functions.
package main

/*
#cgo linux,!arm64 LDFLAGS: ${SRCDIR}/exports.so
*/
import "C"

import _ "github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/clib" // the exported functions

func main() {}
