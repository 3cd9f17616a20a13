package gputest

// The host driver maps pages on Linux only; so does its faulty form.

func (d *faultDriver) ReserveAddress(size int64) (uintptr, error) {
	return failOr(d, OpReserve, "ReserveAddress", size, func() (uintptr, error) { return d.Driver.ReserveAddress(size) })
}

func (d *faultDriver) ReleaseAddress(ptr uintptr, size int64) error {
	return d.failOr(OpReserve, "ReleaseAddress", size, func() error { return d.Driver.ReleaseAddress(ptr, size) })
}

func (d *faultDriver) Create(size int64) (uint64, error) {
	return failOr(d, OpAlloc, "Create", size, func() (uint64, error) { return d.Driver.Create(size) })
}

func (d *faultDriver) Release(h uint64) error {
	return d.failOr(OpFree, "Release", 0, func() error { return d.Driver.Release(h) })
}

func (d *faultDriver) Map(ptr uintptr, size int64, h uint64) error {
	return d.failOr(OpMap, "Map", size, func() error { return d.Driver.Map(ptr, size, h) })
}

func (d *faultDriver) SetAccess(ptr uintptr, size int64) error {
	return d.failOr(OpAccess, "SetAccess", size, func() error { return d.Driver.SetAccess(ptr, size) })
}

func (d *faultDriver) Unmap(ptr uintptr, size int64) error {
	return d.failOr(OpUnmap, "Unmap", size, func() error { return d.Driver.Unmap(ptr, size) })
}
