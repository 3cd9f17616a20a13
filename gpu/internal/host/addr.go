package host

import "unsafe"

// addrOf returns the address of mem's first byte, the device pointer of a
// host allocation. The driver keeps mem referenced until it is freed, and
// Go's collector does not move heap objects, so the address stays valid;
// it is never turned back into a pointer (every access goes through
// Driver.resolve, which bounds-checks it).
func addrOf(mem []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(mem))) }
