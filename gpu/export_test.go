package gpu

// HostClass is the size class of an AllocHost of size bytes and the
// class's size.
func HostClass(size int64) (int, int64) { return hostClass(size) }

// DeviceError is deviceError, for tests of how errors cross into gpu.
func DeviceError(err error) error { return deviceError(err) }

// EvictOne runs one pass of the device's eviction for an allocation of
// size bytes, as an allocation that found no room does, and reports
// whether it evicted a scope.
func EvictOne(d *Device, size int64) bool {
	return d.evict.evictOne(d, func(*Scope, *evictState) bool { return false }, size)
}

// SleeperMaxReserved is the cap of the pool of s, a Sleepable scope.
func SleeperMaxReserved(s *Scope) int64 { return s.dev.sleep.of(s).pool.MaxReserved() }
