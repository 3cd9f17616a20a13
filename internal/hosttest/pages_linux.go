package hosttest

import "github.com/gpuscope/gpuscope/gpu/host"

// The host driver maps pages on Linux only; so does its wrapper.

// ReserveAddress fails as OpReserve, else reserves.
func (d *Driver) ReserveAddress(size int64) (uintptr, error) {
	return failOr(d, OpReserve, size, func() (uintptr, error) { return d.Driver.ReserveAddress(size) })
}

// ReleaseAddress fails as OpReserve, else releases.
func (d *Driver) ReleaseAddress(ptr uintptr, size int64) error {
	return d.failOr(OpReserve, size, func() error { return d.Driver.ReleaseAddress(ptr, size) })
}

// Create fails as OpAlloc, else creates a handle.
func (d *Driver) Create(size int64) (uint64, error) {
	return failOr(d, OpAlloc, size, func() (uint64, error) { return d.Driver.Create(size) })
}

// Release fails as OpFree (of a page's size), else releases the handle.
func (d *Driver) Release(h uint64) error {
	return d.failOr(OpFree, host.PageSize, func() error { return d.Driver.Release(h) })
}

// Map fails as OpMap, else maps.
func (d *Driver) Map(ptr uintptr, size int64, h uint64) error {
	return d.failOr(OpMap, size, func() error { return d.Driver.Map(ptr, size, h) })
}

// SetAccess fails as OpAccess, else sets access.
func (d *Driver) SetAccess(ptr uintptr, size int64) error {
	return d.failOr(OpAccess, size, func() error { return d.Driver.SetAccess(ptr, size) })
}

// Unmap fails as OpUnmap, else unmaps.
func (d *Driver) Unmap(ptr uintptr, size int64) error {
	return d.failOr(OpUnmap, size, func() error { return d.Driver.Unmap(ptr, size) })
}
